"""Where `embed` and `insert` run: this process (`LocalRunner`) or a Ray cluster (`RayRunner`),
behind one interface (`Runner`) chosen once by `open_runner`, so the library API above never
forks per backend.

    LocalRunner   the embedding pipeline here: a .npy with its .inputs.txt and .failures.json;
                  inserts through the chosen `ImageIndex` (this store, or a service)
    RayRunner     the Ray pipeline (`embedding/ray.py`): Parquet shards in a folder, or inserts
                  from the actors into a Milvus server (`index/ray.py`)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any, Protocol

from accelkit.errors import ConfigError, DataError, InputError
from accelkit.images.embedding import ray as ray_pipeline
from accelkit.images.embedding.pipeline import EmbeddingPipeline
from accelkit.images.index import ray as ray_sink
from accelkit.images.index.base import ImageInput, insert_in_chunks
from accelkit.images.index.local import open_local_index
from accelkit.images.index.opener import open_index
from accelkit.images.operations.inputs import (
    missing_inputs,
    open_items,
    parse_metadata,
    sidecar_paths,
)
from accelkit.images.operations.results import EmbedReport, InsertReport
from accelkit.images.settings.config import ConfigLike, load_settings
from accelkit.images.settings.schema import check_collection_name
from accelkit.images.store import is_local_uri
from accelkit.runtime import storage
from accelkit.runtime.files import atomic_open, temporary_folder, write_json_atomic
from accelkit.runtime.progress import phase, rows_progress

log = logging.getLogger(__name__)
DEFAULT_OUTPUT = "embeddings.npy"
DEFAULT_RAY_OUTPUT = "embeddings"  # with Ray: a folder of Parquet shards


class Runner(Protocol):
    """Embeds or inserts `named` ((path or URI, name) per image, already checked non-empty)."""

    def embed(
        self,
        named: list[tuple[str, str]],
        output: str | None,
        *,
        config: ConfigLike,
        overrides: dict[str, Any],
        endpoint_url: str | None,
        progress: bool,
    ) -> EmbedReport: ...

    def insert(
        self,
        named: list[tuple[str, str]],
        collection: str | None,
        *,
        ids: Sequence[str] | None,
        metadata: str | dict | list | None,
        create_collection: bool,
        config: ConfigLike,
        server: str | None,
        endpoint_url: str | None,
        progress: bool,
    ) -> InsertReport: ...


def open_runner(ray: str | None, actors: int | None = None, num_gpus: float = 0) -> Runner:
    """A `RayRunner` on the cluster at `ray` (an address, `auto` or `local`), else a `LocalRunner`;
    Ray's own options without `ray` are refused."""
    if not ray and (actors is not None or num_gpus):
        flag = "--ray-actors" if actors is not None else "--num-gpus"
        raise ConfigError(f"{flag} sets up Ray actors; add --ray ADDRESS|auto|local or drop it")
    if actors is not None and actors < 1:
        raise ConfigError(f"--ray-actors {actors} must be at least 1")
    if not num_gpus >= 0:
        raise ConfigError(f"--num-gpus {num_gpus} must be 0 or more")
    return RayRunner(ray, actors, num_gpus) if ray else LocalRunner()


def unreadable(items: list[str]) -> dict[int, str]:
    """The unreadable inputs; all of them unreadable fails at once, before a model loads."""
    missing = missing_inputs(items)
    if len(missing) == len(items):
        raise DataError(
            f"none of the {len(items)} inputs can be read (first: {next(iter(missing.values()))})"
        )
    return missing


class LocalRunner:
    """Embeds and inserts in this process (an insert may store through a service: `server`)."""

    def embed(self, named, output, *, config, overrides, endpoint_url, progress) -> EmbedReport:
        import numpy as np

        settings = load_settings(config, preprocess=overrides)
        items = open_items([path for path, _ in named], endpoint_url)
        output = output or DEFAULT_OUTPUT
        target = storage.as_path(output, endpoint_url)
        remote = target if isinstance(target, storage.ObjectPath) else None
        names = [str(item) for item in items]
        phase("loading the model and starting JAX")
        pipeline = EmbeddingPipeline(settings)
        bar = rows_progress(progress, "images")
        with pipeline, bar:
            task = bar.add_task("embedding", total=len(items))
            result = pipeline.embed(items, progress=lambda n: bar.advance(task, n))
        failures = {names[i]: reason for i, reason in result.failures.items()}
        with temporary_folder("accelkit-embed-") as folder:
            # an object-storage output is written here first and uploaded whole below
            local = Path(folder) / target.name if isinstance(target, storage.ObjectPath) else target
            inputs_path, failures_path = sidecar_paths(local)
            shown = {local: output}
            if remote:
                for path in (inputs_path, failures_path):
                    shown[path] = str(remote.parent / path.name)
            if not result.indices:
                write_json_atomic(failures_path, failures)
                _upload(remote, [failures_path])
                first = next(iter(result.failures.values()), "no inputs")
                raise DataError(
                    f"none of the {len(items)} inputs could be embedded (first: {first}); details"
                    f" in {shown.get(failures_path, failures_path)}"
                )
            with atomic_open(local, "wb") as handle:
                np.save(handle, result.embeddings)
            with atomic_open(inputs_path, "w") as handle:
                handle.write("".join(names[i] + "\n" for i in result.indices))
            write_json_atomic(failures_path, failures)
            _upload(remote, [local, inputs_path, failures_path])
        return EmbedReport(
            output,
            str(shown.get(inputs_path, inputs_path)),
            str(shown.get(failures_path, failures_path)),
            len(result.indices),
            len(failures),
            int(result.embeddings.shape[1]),
            failures,
        )

    def insert(
        self,
        named,
        collection,
        *,
        ids,
        metadata,
        create_collection,
        config,
        server,
        endpoint_url,
        progress,
    ) -> InsertReport:
        items = [path for path, _ in named]
        id_list = list(ids) if ids is not None else None
        if id_list is not None and len(id_list) != len(items):
            raise InputError(
                f"got {len(items)} images but {len(id_list)} ids; give one id per image or none"
            )
        meta = parse_metadata(metadata, len(items))
        missing = unreadable(items)  # before the model or the store is opened
        keep = [i for i in range(len(items)) if i not in missing]
        data = open_items(items, endpoint_url)
        images = [
            ImageInput(
                data[i],
                id_list[i] if id_list else None,
                meta[i] if meta else None,
                named[i][1],
                label=items[i],  # a failure names the input, not its place in a chunk
            )
            for i in keep
        ]
        settings = load_settings(config)
        with closing(open_index(settings, server)) as index:
            with rows_progress(progress and len(images) > 1, "images") as bar:
                task = bar.add_task("inserting", total=len(images))
                result = insert_in_chunks(
                    index,
                    images,
                    collection,
                    create_collection,
                    flush_after_rows=settings.store.flush_after_rows,
                    progress=lambda n: bar.advance(task, n),
                )
            if result.ids:
                warn(index.ignored(result.collection))
        stored = [(keep[i], id_) for i, id_ in zip(result.indices, result.ids, strict=True)]
        failures = {**missing, **{keep[i]: reason for i, reason in result.failures.items()}}
        return InsertReport(result.collection, named, stored, dict(sorted(failures.items())))


def _upload(remote, paths: list[Path]) -> None:
    """Local files written by a run, each uploaded whole beside `remote` (the output's URI)."""
    if remote is not None:
        for path in paths:
            (remote.parent / path.name).write_bytes(path.read_bytes())


def warn(lines: Sequence[str]) -> None:
    """Settings the backend does not apply: one warning line each (in `--json`'s warnings)."""
    for line in lines:
        log.warning(line)


class RayRunner:
    """Embeds or inserts on the Ray cluster at `address`: decode tasks, then `actors` model actors
    (`num_gpus` each) that write Parquet shards or upsert into a Milvus server themselves."""

    def __init__(self, address: str, actors: int | None = None, num_gpus: float = 0):
        self.address, self.actors, self.num_gpus = address, actors, num_gpus

    def embed(self, named, output, *, config, overrides, endpoint_url, progress) -> EmbedReport:
        if output is not None and output.endswith(".npy"):
            raise ConfigError(
                f"-o {output}: with --ray the embeddings are Parquet shards in a folder; give a"
                " folder or URI (e.g. -o embeddings/)"
            )
        settings = load_settings(config, preprocess=overrides)
        output = output or DEFAULT_RAY_OUTPUT
        ray_pipeline.prepare_folder(output, endpoint_url)
        sink = ray_pipeline.ShardSink(output)
        outcome = self._run(named, settings, sink, endpoint_url, "embedding", progress)
        failures = {named[p][0]: reason for p, (_, reason) in sorted(outcome.items()) if reason}
        failures_file = output.rstrip("/") + ".failures.json"
        ray_pipeline.write_file(
            str(storage.as_path(failures_file, endpoint_url).parent),
            storage.as_path(failures_file, endpoint_url).name,
            json.dumps(failures, indent=2).encode(),
            endpoint_url,
        )
        dim = settings.model.embedding_dim
        manifest = ray_pipeline.write_manifest(output, len(named), outcome, dim, endpoint_url)
        if not manifest["embedded"]:
            first = next(iter(failures.values()), "no inputs")
            raise DataError(
                f"none of the {len(named)} inputs could be embedded (first: {first}); details in"
                f" {failures_file}"
            )
        return EmbedReport(
            output,
            None,
            failures_file,
            manifest["embedded"],
            manifest["failed"],
            dim,
            failures,
            shards=len(manifest["shards"]),
        )

    def insert(
        self,
        named,
        collection,
        *,
        ids,
        metadata,
        create_collection,
        config,
        server,
        endpoint_url,
        progress,
    ) -> InsertReport:
        if ids or metadata or server:
            flag = "--ids" if ids else "--metadata" if metadata else "--server"
            raise ConfigError(
                f"{flag} is not taken with --ray (ids come from the image bytes and the actors"
                " write to store.uri); drop one of them"
            )
        settings = load_settings(config)
        if is_local_uri(settings.store.uri):
            raise ConfigError(
                f"store.uri {settings.store.uri!r} is a Milvus Lite file, which one process opens;"
                " with --ray the actors write to a Milvus server: set store.uri to http://HOST:19530"
            )
        with closing(open_local_index(settings)) as index:  # the collection, checked or made first
            name = check_collection_name(collection or settings.store.collection_name)
            if not index.fillable(name, create_collection):  # another model's collection: refused
                index.create_for_insert(name)
            sink = ray_sink.CollectionSink(name)
            what = "inserting on Ray"
            outcome = self._run(
                named, settings, sink, endpoint_url, what, progress and len(named) > 1
            )
            stored = [(p, item) for p, (item, reason) in sorted(outcome.items()) if not reason]
            if (
                settings.store.flush_after_rows is not None
                and len(stored) >= settings.store.flush_after_rows
            ):
                index.flush(name)
        failures = {p: reason for p, (_, reason) in sorted(outcome.items()) if reason}
        return InsertReport(name, named, stored, failures)

    def _run(self, named, settings, sink, endpoint_url, what: str, progress: bool):
        """`embedding/ray.py`'s `run` with a progress bar: position → (id, reason) per input."""
        with rows_progress(progress, "images") as bar:
            task = bar.add_task(what, total=len(named))
            return ray_pipeline.run(
                named,
                settings,
                self.address,
                sink,
                endpoint_url=endpoint_url,
                actors=self.actors,
                num_gpus=self.num_gpus,
                progress=lambda n: bar.advance(task, n),
            )
