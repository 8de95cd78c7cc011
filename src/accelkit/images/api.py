"""The library API of `accelkit images`: what a user runs, as plain functions that open the
model, the store or the service, do one operation and return a result object
(`accelkit.images.results`). The command line calls exactly these (one each) and only renders
what they return, so a notebook gets the same behaviour, checks and messages:

```python
from accelkit import images

images.embed(["photos/"], "embeddings.npy", config="images.yaml")          # EmbedReport
images.insert(["photos/"], "pics", create_collection=True, config="images.yaml")
report = images.search("query.jpg", topk=5, collection="pics", config="images.yaml")
[(hit.id, hit.score, hit.metadata["source"]) for hit in report.hits]
```

`config` is a YAML path, a `ServiceConfig`, or None (defaults and the environment); `server`
(a URL) works through a running `accelkit images serve` instead of the local store. The keyword
arguments are the command's options (`topk` is `--topk`, `ray_actors` is `--ray-actors`), and
messages about them name the option. For many operations on one store, open it once:
`with images.open_index(config) as index: index.insert(...); index.search(...)`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from accelkit.errors import AccelkitError, ConfigError, DataError, InputError
from accelkit.images.config import ServiceConfig, load_service_config
from accelkit.images.index.base import ImageIndex, ImageInput, TextQuery, insert_in_chunks
from accelkit.images.inputs import (
    check_image_header,
    expand_named,
    missing_inputs,
    open_items,
    parse_metadata,
    sidecar_paths,
)
from accelkit.images.results import EmbedReport, HealthReport, InsertReport, SearchReport
from accelkit.images.schema import check_collection_name, check_filter, check_text
from accelkit.images.store.records import ignored_warnings
from accelkit.runtime import storage

log = logging.getLogger(__name__)
ConfigLike = str | os.PathLike | ServiceConfig | None
DEFAULT_OUTPUT = "embeddings.npy"
DEFAULT_RAY_OUTPUT = "embeddings"  # with Ray: a folder of Parquet shards


def load_settings(config: ConfigLike = None, **sections: Any) -> ServiceConfig:
    """A `ServiceConfig` from a YAML path (or None: defaults and the environment), with
    `sections` (e.g. `preprocess={"fit": "letterbox"}`) over it; a `ServiceConfig` as it is."""
    if not isinstance(config, ServiceConfig):
        return load_service_config(config, **sections)
    for section, values in sections.items():
        current = getattr(config, section)
        updated = type(current)(**{**current.model_dump(), **(values or {})})  # validated
        config = config.model_copy(update={section: updated})
    return config


def open_index(
    config: ConfigLike = None, server: str | None = None, api_key: str | None = None
) -> ImageIndex:
    """The `ImageIndex` to work on: the service at `server` (its key: `api_key`, else
    `ACCELKIT_SERVER_API_KEY`, else `server.api_key`), else the config's own store and model."""
    return _open(config, server, api_key)[1]


def _open(
    config: ConfigLike, server: str | None, api_key: str | None = None
) -> tuple[ServiceConfig, ImageIndex]:
    settings = load_settings(config)
    if server:
        from accelkit.images.index.remote import RemoteIndex

        key = api_key or os.environ.get("ACCELKIT_SERVER_API_KEY") or settings.server.api_key
        return settings, RemoteIndex(server, key)
    from accelkit.images.index.local import open_local_index
    from accelkit.runtime.progress import phase

    phase("opening the store and loading the model")
    return settings, open_local_index(settings)


def _warn(lines: Sequence[str]) -> None:
    """Settings the backend does not apply: one warning line each (in `--json`'s warnings)."""
    for line in lines:
        log.warning(line)


def _named_inputs(paths: Sequence[str], endpoint_url: str | None) -> list[tuple[str, str]]:
    named = expand_named(list(paths), endpoint_url)
    if not named:
        raise DataError("no inputs given; pass image files, folders or globs")
    return named


def _some_readable(items: list[str]) -> dict[int, str]:
    """The unreadable inputs; all of them unreadable fails at once, before a model loads."""
    missing = missing_inputs(items)
    if len(missing) == len(items):
        raise DataError(
            f"none of the {len(items)} inputs can be read (first: {next(iter(missing.values()))})"
        )
    return missing


def _check_ray(ray: str | None, actors: int | None, num_gpus: float) -> None:
    if not ray and (actors is not None or num_gpus):
        flag = "--ray-actors" if actors is not None else "--num-gpus"
        raise ConfigError(f"{flag} sets up Ray actors; add --ray ADDRESS|auto|local or drop it")
    if actors is not None and actors < 1:
        raise ConfigError(f"--ray-actors {actors} must be at least 1")
    if not num_gpus >= 0:
        raise ConfigError(f"--num-gpus {num_gpus} must be 0 or more")


# embed -------------------------------------------------------------------------------------------


def embed(
    inputs: Sequence[str],
    output: str | None = None,
    *,
    config: ConfigLike = None,
    batch_size: int | None = None,
    fit: str | None = None,
    platform: str | None = None,
    endpoint_url: str | None = None,
    ray: str | None = None,
    ray_actors: int | None = None,
    num_gpus: float = 0,
    progress: bool = False,
) -> EmbedReport:
    """Embed image files, folders, globs or s3:// URIs into `output` (an [N, D] float32 .npy,
    rows in the order of its `.inputs.txt`, failures in its `.failures.json`; with `ray`, Parquet
    shards in a folder). Raises `DataError` when no input could be embedded."""
    if batch_size is not None and batch_size < 1:
        raise ConfigError(f"--batch-size {batch_size} must be at least 1")
    _check_ray(ray, ray_actors, num_gpus)
    named = _named_inputs(inputs, endpoint_url)
    items = [path for path, _ in named]
    _some_readable(items)  # before the model loads: a typo fails in well under a second
    overrides = {
        k: v
        for k, v in {"batch_size": batch_size, "fit": fit, "platform": platform}.items()
        if v is not None
    }
    if ray:
        if output is not None and output.endswith(".npy"):
            raise ConfigError(
                f"-o {output}: with --ray the embeddings are Parquet shards in a folder; give a"
                " folder or URI (e.g. -o embeddings/)"
            )
        settings = load_settings(config, preprocess=overrides)
        return _embed_on_ray(
            named,
            output or DEFAULT_RAY_OUTPUT,
            settings,
            endpoint_url,
            ray,
            ray_actors,
            num_gpus,
            progress,
        )
    settings = load_settings(config, preprocess=overrides)
    return _embed_here(
        open_items(items, endpoint_url), output or DEFAULT_OUTPUT, settings, endpoint_url, progress
    )


def _embed_here(items, output: str, settings, endpoint_url, progress: bool) -> EmbedReport:
    import numpy as np

    from accelkit.images.embedding.pipeline import EmbeddingPipeline
    from accelkit.runtime.files import atomic_open, temporary_folder, write_json_atomic
    from accelkit.runtime.progress import phase, rows_progress

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
        local = Path(folder) / target.name if remote else target  # uploaded whole below
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
                f"none of the {len(items)} inputs could be embedded (first: {first}); details in"
                f" {shown.get(failures_path, failures_path)}"
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


def _upload(remote, paths: list[Path]) -> None:
    """Local files written by a run, each uploaded whole beside `remote` (the output's URI)."""
    if remote is not None:
        for path in paths:
            (remote.parent / path.name).write_bytes(path.read_bytes())


def _embed_on_ray(
    named, output, settings, endpoint_url, address, actors, num_gpus, progress
) -> EmbedReport:
    import json

    from accelkit.images.embedding import ray as cluster

    cluster.prepare_folder(output, endpoint_url)
    sink = cluster.Sink(folder=output)
    outcome = _run_on_ray(named, settings, address, sink, endpoint_url, actors, num_gpus, progress)
    failures = {named[p][0]: reason for p, (_, reason) in sorted(outcome.items()) if reason}
    failures_file = output.rstrip("/") + ".failures.json"
    cluster.write_file(
        str(storage.as_path(failures_file, endpoint_url).parent),
        storage.as_path(failures_file, endpoint_url).name,
        json.dumps(failures, indent=2).encode(),
        endpoint_url,
    )
    dim = settings.model.embedding_dim
    manifest = cluster.write_manifest(output, len(named), outcome, dim, endpoint_url)
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


def _run_on_ray(
    named, settings, address, sink, endpoint_url, actors, num_gpus, progress: bool
) -> dict[int, tuple[str, str]]:
    """`cluster.run` with a progress bar: position → (id, reason) per input."""
    from accelkit.images.embedding import ray as cluster
    from accelkit.runtime.progress import rows_progress

    what = "embedding" if sink.folder is not None else "inserting on Ray"
    with rows_progress(progress, "images") as bar:
        task = bar.add_task(what, total=len(named))
        return cluster.run(
            named,
            settings,
            address,
            sink,
            endpoint_url=endpoint_url,
            actors=actors,
            num_gpus=num_gpus,
            progress=lambda n: bar.advance(task, n),
        )


# insert and search -------------------------------------------------------------------------------


def insert(
    inputs: Sequence[str],
    collection: str | None = None,
    *,
    ids: Sequence[str] | None = None,
    metadata: str | dict | list | None = None,
    create_collection: bool = False,
    config: ConfigLike = None,
    server: str | None = None,
    endpoint_url: str | None = None,
    ray: str | None = None,
    ray_actors: int | None = None,
    num_gpus: float = 0,
    progress: bool = False,
) -> InsertReport:
    """Embed and store image files, folders, globs or s3:// URIs (an existing id is replaced).
    `ids`: one per image (default: from the image bytes); `metadata`: one object for every image,
    a list (one per image), or that as JSON text or a file. Bad images are reported in the
    result's `failures` and the rest stored; `report.ok` is False when nothing was stored."""
    _check_ray(ray, ray_actors, num_gpus)
    named = _named_inputs(inputs, endpoint_url)
    items = [path for path, _ in named]
    if ray:
        if ids or metadata or server:
            flag = "--ids" if ids else "--metadata" if metadata else "--server"
            raise ConfigError(
                f"{flag} is not taken with --ray (ids come from the image bytes and the actors"
                " write to store.uri); drop one of them"
            )
        return _insert_on_ray(
            named,
            collection,
            create_collection,
            config,
            endpoint_url,
            ray,
            ray_actors,
            num_gpus,
            progress,
        )
    id_list = list(ids) if ids is not None else None
    if id_list is not None and len(id_list) != len(items):
        raise InputError(
            f"got {len(items)} images but {len(id_list)} ids; give one id per image or none"
        )
    meta = parse_metadata(metadata, len(items))
    missing = _some_readable(items)  # before the model or the store is opened
    keep = [i for i in range(len(items)) if i not in missing]
    data = open_items(items, endpoint_url)
    images = [
        ImageInput(data[i], id_list[i] if id_list else None, meta[i] if meta else None, named[i][1])
        for i in keep
    ]
    from accelkit.runtime.progress import rows_progress

    settings, index = _open(config, server)
    with closing(index):
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
            _warn(index.ignored(result.collection))
    stored = [(keep[i], id_) for i, id_ in zip(result.indices, result.ids, strict=True)]
    failures = {**missing, **{keep[i]: reason for i, reason in result.failures.items()}}
    return InsertReport(result.collection, named, stored, dict(sorted(failures.items())))


def _insert_on_ray(
    named, collection, create_collection, config, endpoint_url, address, actors, num_gpus, progress
) -> InsertReport:
    from accelkit.images.embedding import ray as cluster
    from accelkit.images.index.local import open_local_index
    from accelkit.images.store import is_local_uri

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
        sink = cluster.Sink(collection=name)
        outcome = _run_on_ray(
            named,
            settings,
            address,
            sink,
            endpoint_url,
            actors,
            num_gpus,
            progress and len(named) > 1,
        )
        stored = [(p, item_id) for p, (item_id, reason) in sorted(outcome.items()) if not reason]
        if (
            settings.store.flush_after_rows is not None
            and len(stored) >= settings.store.flush_after_rows
        ):
            index.flush(name)
    failures = {p: reason for p, (_, reason) in sorted(outcome.items()) if reason}
    return InsertReport(name, named, stored, failures)


def search(
    query: str | None = None,
    topk: int = 10,
    *,
    text: str | None = None,
    filter: str | None = None,
    collection: str | None = None,
    config: ConfigLike = None,
    server: str | None = None,
) -> SearchReport:
    """The stored images nearest to the image file `query`, or to `text` (words, for a
    two-tower model), best first; `filter`: a metadata filter such as
    `metadata["album"] == "2026"`."""
    if (query is None) == (text is None):
        raise InputError("give a query image or --text (one of the two)")
    if topk < 1:
        raise InputError(f"--topk {topk} must be at least 1")
    check_filter(filter, "--filter")
    if text is not None:
        asked: Any = TextQuery(check_text(text, "--text"))
    else:
        missing = missing_inputs([query])
        if missing:
            raise DataError(missing[0])
        check_image_header(query)
        asked = ImageInput(query)
    settings, index = _open(config, server)
    with closing(index):
        hits = index.search(asked, topk, filter, collection)
    _warn(hits.warnings)
    name = hits.collection or collection or settings.store.collection_name
    return SearchReport(name, query, topk, hits, text=text, warnings=hits.warnings)


# collections -------------------------------------------------------------------------------------


def list_collections(config: ConfigLike = None, server: str | None = None) -> list[dict[str, Any]]:
    """Every collection's description (name, count, dim, index, metric, description)."""
    _, index = _open(config, server)
    with closing(index):
        return [index.describe(name) for name in index.list_collections()]


def create_collection(
    name: str,
    dim: int | None = None,
    description: str = "",
    *,
    index_type: str | None = None,
    metric_type: str | None = None,
    config: ConfigLike = None,
    server: str | None = None,
) -> dict[str, Any]:
    """Create a collection for the model's vectors; returns its description."""
    _, index = _open(config, server)
    with closing(index):
        info = index.create_collection(
            name, dim, description, index_type=index_type, metric_type=metric_type
        )
    _warn(ignored_warnings(info))
    return info


def describe_collection(
    name: str, config: ConfigLike = None, server: str | None = None
) -> dict[str, Any]:
    """Size, dimension, index and metric of a collection."""
    _, index = _open(config, server)
    with closing(index):
        return index.describe(name)


def flush_collection(
    name: str, config: ConfigLike = None, server: str | None = None
) -> dict[str, Any]:
    """Seal inserted rows so a server's index covers them; returns the index progress."""
    _, index = _open(config, server)
    with closing(index):
        return index.flush(name)


def index_collection(
    name: str,
    *,
    wait: bool = False,
    index_type: str | None = None,
    metric_type: str | None = None,
    params: dict[str, Any] | None = None,
    config: ConfigLike = None,
    server: str | None = None,
) -> dict[str, Any]:
    """Index progress (indexed / total rows); `wait` waits for the build; `index_type` (with
    `metric_type`, `params`) first replaces the index (a Milvus server)."""
    if params is not None and not isinstance(params, dict):
        raise InputError('--params must be a JSON object such as {"nlist": 128}')
    if (metric_type or params) and not index_type:
        raise InputError("--metric and --params go with --index-type (which rebuilds the index)")
    _, index = _open(config, server)
    with closing(index):
        if index_type:
            index.rebuild_index(
                name, index_type=index_type, metric_type=metric_type, index_params=params
            )
        return index.index_progress(name, wait=wait)


def set_model(
    name: str,
    *,
    roots: Sequence[str] | None = None,
    sample: int | None = None,
    seed: int = 0,
    min_cosine: float | None = None,
    force: bool = False,
    config: ConfigLike = None,
) -> dict[str, Any]:
    """Record the configured model as the one that made collection `name` (after a change the
    user has checked: a tokenizer saved again, a setting that leaves vectors as they were, a
    legacy record). Up to `sample` stored items whose `source` is a readable file (absolute,
    or below one of `roots`, default the working directory) are embedded again and must match
    their stored vectors (cosine at least `min_cosine`, default 0.999, and the same length
    within 1%), else `ModelMismatchError` and nothing changes; with no such item, refused
    unless `force`. Works on the config's store (not through a service). Returns what was
    checked and the record kept (`LocalIndex.set_model`)."""
    from accelkit.images.index.local import SET_MODEL_MIN_COSINE, SET_MODEL_SAMPLE, open_local_index

    settings = load_settings(config)
    with closing(open_local_index(settings)) as index:
        return index.set_model(
            name,
            roots=list(roots) if roots else None,
            sample=SET_MODEL_SAMPLE if sample is None else sample,
            seed=seed,
            min_cosine=SET_MODEL_MIN_COSINE if min_cosine is None else min_cosine,
            force=force,
        )


def delete_collection(name: str, config: ConfigLike = None, server: str | None = None) -> None:
    """Delete a collection and everything in it."""
    _, index = _open(config, server)
    with closing(index):
        index.drop_collection(name)


def migrate(
    source: str,
    target: str,
    collections: Sequence[str] | None = None,
    *,
    config: ConfigLike = None,
    source_token: str | None = None,
    target_token: str | None = None,
    source_db: str | None = None,
    target_db: str | None = None,
    **options: Any,
):
    """Copy collections (default: all) from the store `source` to the store `target` (a Milvus
    Lite file or a server URI each): ids, vectors, metadata, thumbnails and the model record, in
    batches, resumable, verified. `options`: those of `accelkit.images.store.migrate.migrate`
    (batch_size, index_type, sample, source_thumbnails, target_thumbnails, restart, progress).
    Settings not given (timeout, batch sizes, consistency) come from the config's `store`."""
    from accelkit.images.config import StoreConfig
    from accelkit.images.store.migrate import migrate as copy

    base = load_settings(config).store.model_dump()

    def store(uri: str, token: str | None, db: str | None) -> StoreConfig:
        return StoreConfig(**{**base, "uri": uri, "token": token, "db_name": db or ""})

    return copy(
        store(source, source_token, source_db),
        store(target, target_token, target_db),
        collections,
        **options,
    )


# health and the service --------------------------------------------------------------------------


def health(config: ConfigLike = None, server: str | None = None) -> HealthReport:
    """Whether the model embeds a test image and the store answers (locally or at `server`);
    a store that cannot be opened is an unhealthy report, not an error."""
    try:
        _, index = _open(config, server)
    except AccelkitError as exc:  # the store cannot be opened: that is the answer
        return HealthReport({"status": "unhealthy", "store": {"ok": False, "error": str(exc)}})
    with closing(index):
        return HealthReport(index.health())


def serve(
    config: ConfigLike = None,
    host: str | None = None,
    port: int | None = None,
    on_ready: Callable[[str, ServiceConfig], None] | None = None,
) -> None:
    """Run the HTTP service until SIGINT/SIGTERM (in-flight requests finish first);
    `on_ready(url, settings)` is called once it listens."""
    from accelkit.images.service import serve as run_service

    settings = load_settings(config)
    ready = None if on_ready is None else (lambda url: on_ready(url, settings))
    run_service(settings, host, port, on_ready=ready)
