"""`accelkit images embed|insert --ray`: the local pipeline's stages as a Ray Data pipeline.

    list (the driver) → decode + preprocess (Ray tasks: our JAX preprocessor)
    → embed (an actor pool: one ONNX session per actor, `num_gpus` each)
    → sink, from the actors: Parquet shards (position, source, vector) into a folder on a shared
      path or object storage (`ShardSink`, here), or upserts into a Milvus server in batches
      (`index/ray.py`'s `CollectionSink`, through `LocalIndex.insert`)

Each stage runs the code of the local run (the preprocessor's `preprocess`, the model backend,
the sink's own writes), so vectors equal the local run's and ids are the same content ids. A bad image
fails itself in the decode task and travels on as a reason; the driver receives only (position, id,
reason) per image, never pixels or vectors. Memory is bounded by Ray Data's streaming executor:
it stops launching decode tasks while their outputs wait in the object store (backpressure), so a
million images need no more memory than a few batches per worker.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import numpy as np

from accelkit.errors import ConfigError
from accelkit.images.embedding.decode import describe_input
from accelkit.images.embedding.models import l2_normalize, make_backend
from accelkit.images.embedding.preprocess import ImagePreprocessor, make_preprocessor
from accelkit.runtime import storage
from accelkit.runtime.files import atomic_open
from accelkit.runtime.logs import quiet_after_import
from accelkit.runtime.ray_cluster import connect, task_error

log = logging.getLogger(__name__)

SHARD = "part-{:09d}.parquet"  # named by the first position it holds: a retried batch rewrites it
MANIFEST = "manifest.json"  # written last: a folder without it is an unfinished run


Writer = Callable[[dict, list[int], np.ndarray, list[str], list[str]], tuple[list, list]]


class Sink(Protocol):
    """Where the actors put vectors. `identify` (or None) gives an image its id in the decode task;
    `open(config, endpoint_url)`, once per actor, gives the writer of a batch's embedded rows
    `(batch, ok, vectors, ids, errors) -> (ids, errors)`."""

    identify: Callable[[Any], str] | None

    def open(self, config, endpoint_url: str | None) -> Writer: ...


@dataclass(frozen=True)
class ShardSink:
    """Parquet shards (position, source, vector) into `folder`, named by their first position."""

    folder: str
    identify = None  # shards keep no ids

    def open(self, config, endpoint_url: str | None) -> Writer:
        return partial(_write_shard, self.folder, endpoint_url)


def _item(source: str, endpoint_url: str | None):
    """A local path as it is; an object-storage URI as an `ObjectPath` (read by the decoder)."""
    return storage.as_path(source, endpoint_url) if storage.is_uri(source) else source


# one per worker process and settings: compiled once
_preprocessors: dict[str, ImagePreprocessor] = {}


def _preprocessor(config):
    key = config.preprocess.model_dump_json()
    if key not in _preprocessors:
        _preprocessors[key] = make_preprocessor(config=config.preprocess)
    return _preprocessors[key]


def preprocess_batch(batch: dict, *, config, endpoint_url, identify) -> dict:
    """A decode task: pixels of each image in the batch, or the reason it failed (and, with
    `identify`, for an insert, its content id)."""
    items = [_item(str(s), endpoint_url) for s in batch["source"]]
    pre = _preprocessor(config)
    result = pre.preprocess(items)
    size = tuple(pre.image_size)
    shape = (3, *size) if pre.data_format == "NCHW" else (*size, 3)
    pixels = np.zeros((len(items), *shape), np.float32)
    if result.indices:
        pixels[result.indices] = np.asarray(result.array, np.float32)
    errors = [
        (str(result.failures[i]) or f"{describe_input(item)}: failed")
        if i in result.failures
        else ""
        for i, item in enumerate(items)
    ]
    ids = [""] * len(items)
    if identify is not None:
        for i, item in enumerate(items):
            if not errors[i]:
                try:
                    ids[i] = identify(item)
                except (OSError, ConfigError) as exc:  # changed or gone since it was decoded
                    errors[i] = f"{describe_input(item)}: cannot read ({exc})"
    return {**batch, "pixels": pixels, "error": np.asarray(errors, object), "id": np.asarray(ids)}


class EmbedActor:
    """One model session per actor; writes its batches' vectors to the sink itself."""

    def __init__(self, config, sink: Sink, endpoint_url: str | None):
        self.config, self.sink, self.endpoint_url = config, sink, endpoint_url
        if config.model.intra_op_threads is None:  # one CPU per actor: no oversubscription
            config = config.model_copy(
                update={"model": config.model.model_copy(update={"intra_op_threads": 1})}
            )
        self.backend = make_backend(config.model)
        self.write = sink.open(self.config, endpoint_url)

    def _embed(self, pixels: np.ndarray) -> np.ndarray:
        vectors = self.backend.embed(pixels)
        if self.config.model.normalize:
            vectors = l2_normalize(vectors)
        return vectors.astype(np.float32, copy=False)

    def __call__(self, batch: dict) -> dict:
        errors = [str(e) for e in batch["error"]]
        ok = [i for i, e in enumerate(errors) if not e]
        ids = [str(i) for i in batch["id"]]
        if ok:
            vectors = self._embed(batch["pixels"][ok])
            ids, errors = self.write(batch, ok, vectors, ids, errors)
        return {"position": batch["position"], "id": np.asarray(ids), "error": np.asarray(errors)}


def _write_shard(folder, endpoint_url, batch: dict, ok: list[int], vectors, ids, errors):
    """One batch's embedded rows as a Parquet shard in `folder`; ids and errors as they were."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dim = vectors.shape[1]
    table = pa.table(
        {
            "position": pa.array(batch["position"][ok].astype(np.int64)),
            "source": pa.array([str(batch["source"][i]) for i in ok]),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim),
        }
    )
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    write_file(
        folder,
        SHARD.format(int(batch["position"][ok[0]])),
        sink.getvalue().to_pybytes(),
        endpoint_url,
    )
    return ids, errors


def write_file(folder: str, name: str, data: bytes, endpoint_url: str | None) -> None:
    """`folder/name` whole or not at all: one upload on object storage, a rename locally."""
    target = storage.as_path(folder, endpoint_url)
    if isinstance(target, storage.ObjectPath):
        (target / name).write_bytes(data)
        return

    target.mkdir(parents=True, exist_ok=True)
    with atomic_open(target / name, "wb") as handle:
        handle.write(data)


def prepare_folder(folder: str, endpoint_url: str | None) -> None:
    """Remove an earlier run's shards and manifest from `folder` (as -o replaces a .npy)."""
    target = storage.as_path(folder, endpoint_url)
    if isinstance(target, storage.ObjectPath):
        if not target.is_dir():  # nothing under that prefix yet
            return
        old = [p for p in target.rglob("*") if p.name == MANIFEST or p.name.startswith("part-")]
        for path in old:
            target.fs.delete_file(path.key)
        return
    if target.exists() and not target.is_dir():
        raise ConfigError(f"-o {folder} is a file; with --ray give a folder for the Parquet shards")
    for path in [*target.glob("part-*.parquet"), target / MANIFEST] if target.exists() else []:
        path.unlink(missing_ok=True)


def run(
    named: list[tuple[str, str]],
    config,
    address: str,
    sink: Sink,
    *,
    endpoint_url: str | None = None,
    actors: int | None = None,
    num_gpus: float = 0,
    batch_size: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[int, tuple[str, str]]:
    """Run the pipeline over `named` ((path or URI, name) per image): position → (id, reason),
    with an empty reason for a stored image (and an empty id for Parquet shards)."""
    connect(address)
    import ray
    import ray.data
    import ray.exceptions

    quiet_after_import("ray", "ray.data")  # ray.data configures its loggers on import
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False  # ours: rows done on the driver
    context.print_on_execution_start = False
    batch = batch_size or config.preprocess.batch_size
    resources = ray.cluster_resources()
    if num_gpus:
        actors = actors or max(1, int(resources.get("GPU", 0) // num_gpus))
    else:  # decoding fused into the actors: one per CPU
        actors = actors or max(1, int(resources.get("CPU", 1)))
    rows = [{"position": i, "source": s, "name": n} for i, (s, n) in enumerate(named)]
    dataset = ray.data.from_items(rows, override_num_blocks=max(1, min(len(rows) // batch, 1000)))
    dataset = dataset.map_batches(
        # ray types a batch function over its DataBatch union; batch_format="numpy" gives a dict
        preprocess_batch,  # pyright: ignore[reportArgumentType]
        fn_kwargs={"config": config, "endpoint_url": endpoint_url, "identify": sink.identify},
        batch_size=batch,
        batch_format="numpy",
        num_cpus=1,
    )
    dataset = dataset.map_batches(
        EmbedActor,
        fn_constructor_kwargs={"config": config, "sink": sink, "endpoint_url": endpoint_url},
        batch_size=batch,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=1,
        num_gpus=num_gpus or None,
    )
    outcome: dict[int, tuple[str, str]] = {}
    try:
        for done in dataset.iter_batches(batch_format="numpy", batch_size=None):
            for position, item_id, reason in zip(
                done["position"], done["id"], done["error"], strict=True
            ):
                outcome[int(position)] = (str(item_id), str(reason))
            if progress:
                progress(len(done["position"]))
    except ray.exceptions.RayError as exc:  # a bad image fails alone: this is the pipeline
        log.debug("the Ray pipeline failed", exc_info=exc)  # its traceback: --debug
        raise task_error(exc, "images") from None
    return outcome


def write_manifest(folder: str, inputs: int, outcome, dim: int, endpoint_url) -> dict:
    """The run's summary, written last into `folder`; returns it."""
    shards = storage.files_under(storage.as_path(folder, endpoint_url), "part-*.parquet")
    manifest = {
        "format": "Parquet shards: position int64 (the input's place in the run's sorted "
        f"inputs), source string, vector float32[{dim}]",
        "dim": dim,
        "inputs": inputs,
        "embedded": sum(1 for _, reason in outcome.values() if not reason),
        "failed": sum(1 for _, reason in outcome.values() if reason),
        "shards": [path.name for path in shards],
    }
    write_file(folder, MANIFEST, json.dumps(manifest, indent=2).encode(), endpoint_url)
    return manifest


def read_shards(folder: str, endpoint_url: str | None = None) -> tuple[np.ndarray, list[str]]:
    """(vectors [N, D] in input order, their sources) from a finished run's folder."""
    import pyarrow.parquet as pq

    target = storage.as_path(folder, endpoint_url)
    if not (target / MANIFEST).exists():
        raise ConfigError(f"{folder} has no {MANIFEST}: the run that writes it did not finish")
    parts = sorted(storage.files_under(target, "part-*.parquet"))
    tables = []
    for part in parts:
        source, fs = storage.arrow_source(part)
        tables.append(pq.read_table(source, filesystem=fs))
    import pyarrow as pa

    table = pa.concat_tables(tables).sort_by("position")
    dim = table.schema.field("vector").type.list_size
    vectors = table["vector"].combine_chunks().flatten().to_numpy().reshape(-1, dim)
    return vectors.astype(np.float32, copy=False), table["source"].to_pylist()
