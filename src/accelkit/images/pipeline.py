"""`ImageEmbeddingPipeline`: decode → preprocess → inference, overlapped, with per-item results.

Three stages run at once: decoding in the preprocessor's thread pool, resizing on the JAX device
(asynchronous dispatch), and inference in one worker thread (ONNX Runtime and tritonclient release
the GIL). A bad image fails only itself: its position and reason land in `EmbeddingResult.failures`.
On top of `embed`, the vector-store API of EmbeddingTrident: `create_collection`,
`insert_images` (idempotent upserts; ids given or derived from the image bytes), `search_images`,
`delete`, `list_collections`, `collection_stats`. The store opens on first use.
"""

from __future__ import annotations

import functools
import logging
import os
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from accelkit.errors import DataError, InputError
from accelkit.images.config import ServiceConfig
from accelkit.images.index import ImageInput, InsertResult, LocalIndex, content_id
from accelkit.runtime.storage import ObjectPath

__all__ = ["EmbeddingResult", "ImageEmbeddingPipeline", "InsertResult", "content_id"]

log = logging.getLogger(__name__)


@dataclass
class EmbeddingResult:
    """`embeddings[i]` (L2-normalized unless the config says otherwise) belongs to input
    `indices[i]`; `failures` maps input positions to a one-line reason. Rows are in input order."""

    embeddings: np.ndarray
    indices: list[int]
    failures: dict[int, str] = field(default_factory=dict)

    def dense(self, total: int) -> np.ndarray:
        """[total, D] with NaN rows where an input failed."""
        out = np.full((total, self.embeddings.shape[1]), np.nan, np.float32)
        out[self.indices] = self.embeddings
        return out


def open_local_index(config: ServiceConfig) -> LocalIndex:
    """The `LocalIndex` of a config: its store now, its model on the first embedding (so
    collection commands never load the model). It lives here, above the index, so that the index
    never imports the pipeline."""
    from accelkit.images.batching import ItemResult
    from accelkit.images.store import VectorStore
    from accelkit.images.thumbnails import open_thumbnails

    store = VectorStore(config.store)
    loaded: list[ImageEmbeddingPipeline] = []

    def embed(items: list[Any]) -> list[ItemResult]:
        if not loaded:
            loaded.append(ImageEmbeddingPipeline(config, store=store))
        return loaded[0].embed_items(items)

    index = LocalIndex(
        store,
        embed,
        config.store.collection_name,
        config.model.embedding_dim,
        thumbnails=open_thumbnails(config.store.uri, config.store.thumbnails),
        max_pixels=config.preprocess.max_pixels,
    )
    index.model_info = {"name": config.model.name, "backend": config.model.backend}
    index._on_close.append(lambda: loaded and loaded[0].close())
    index._on_close.append(store.close)
    return index


def is_query_vector(item: Any) -> bool:
    """A 1-D float array is a query vector; anything else is an image input."""
    return (
        isinstance(item, np.ndarray) and item.ndim == 1 and np.issubdtype(item.dtype, np.floating)
    )


def source_name(item: Any) -> str | None:
    """What an input is called in metadata["source"]: a path's file name; None for bytes/arrays."""
    if isinstance(item, (str, os.PathLike)):
        return os.path.basename(os.fspath(item)) or None
    if isinstance(item, ObjectPath):
        return item.name or None
    return None


class ImageEmbeddingPipeline:
    """Embed images with the configured preprocessing and model backend.

    ```python
    with ImageEmbeddingPipeline(ServiceConfig.from_yaml("configs/images.yaml")) as pipeline:
        vectors = pipeline.embed_images(["a.jpg", "b.png"])   # [2, 1280], L2-normalized
    ```
    """

    def __init__(
        self,
        config: ServiceConfig | None = None,
        *,
        preprocessor: Any = None,
        backend: Any = None,
        store: Any = None,
    ):
        from accelkit.images.models import make_backend
        from accelkit.images.preprocess import make_preprocessor

        self.config = config or ServiceConfig()
        self.preprocessor = preprocessor or make_preprocessor(
            self.config.preprocess.engine, **self.config.preprocess.preprocessor_kwargs()
        )
        self.backend = backend or make_backend(self.config.model)
        self._inference = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelkit-infer")
        self._store = store
        self._owns_store = store is None
        self._closed = False

    @property
    def device(self):
        return self.preprocessor.device

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._inference.shutdown(wait=True, cancel_futures=True)
        self.preprocessor.close()
        self.backend.close()
        if self._store is not None and self._owns_store:
            self._store.close()

    def __enter__(self) -> ImageEmbeddingPipeline:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _infer(self, positions: list[int], array: Any) -> tuple[list[int], np.ndarray]:
        batch = np.asarray(array, np.float32)[
            : len(positions)
        ]  # waits for the device; drops padding rows
        vectors = self.backend.embed(batch)
        if self.config.model.normalize:
            from accelkit.images.models import l2_normalize

            vectors = l2_normalize(vectors)
        return positions, vectors.astype(np.float32, copy=False)

    def embed(
        self, inputs: Iterable[Any], progress: Callable[[int], None] | None = None
    ) -> EmbeddingResult:
        """Per-item embeddings; `progress(n)` is called with the number of inputs finished so far."""
        if self._closed:
            raise RuntimeError("this ImageEmbeddingPipeline is closed")
        from accelkit.images.decode import describe_input

        items = list(inputs)
        failures = {}
        in_flight: deque[Future] = deque()
        positions: list[int] = []
        parts: list[np.ndarray] = []
        reported = 0

        def collect(future: Future) -> None:
            nonlocal reported
            done_positions, vectors = future.result()
            positions.extend(done_positions)
            parts.append(vectors)
            if progress:
                finished = len(positions) + len(failures)
                progress(finished - reported)
                reported = finished

        for group_positions, array in self.preprocessor.iter_groups(items, failures):
            in_flight.append(self._inference.submit(self._infer, group_positions, array))
            while len(in_flight) > 2:  # bound memory: at most two batches wait for the model
                collect(in_flight.popleft())
        while in_flight:
            collect(in_flight.popleft())
        if progress and len(positions) + len(failures) > reported:
            progress(len(positions) + len(failures) - reported)
        reasons = {
            i: str(exc) if str(exc) else f"{describe_input(items[i])}: failed"
            for i, exc in failures.items()
        }
        if not parts:
            dim = self.config.model.embedding_dim
            return EmbeddingResult(
                np.zeros((0, dim), np.float32), [], dict(sorted(reasons.items()))
            )
        order = np.argsort(np.asarray(positions), kind="stable")
        return EmbeddingResult(
            np.concatenate(parts)[order],
            [positions[i] for i in order],
            dict(sorted(reasons.items())),
        )

    def embed_images(
        self, inputs: Sequence[Any], errors: Literal["raise", "nan"] = "raise"
    ) -> np.ndarray:
        """[N, D] embeddings in input order. A bad input raises `DataError` naming every failure
        (errors="raise") or leaves a NaN row (errors="nan")."""
        items = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        result = self.embed(items)
        if result.failures and errors == "raise":
            lines = "; ".join(f"#{i}: {reason}" for i, reason in result.failures.items())
            raise DataError(f"{len(result.failures)} of {len(items)} images failed: {lines}")
        return result.dense(len(items))

    def embed_items(self, items: list[Any]) -> list[Any]:
        """One `ItemResult` (a vector, or the reason it failed) per input, in order."""
        from accelkit.images.batching import split_result

        result = self.embed(items)
        return split_result(result.embeddings, result.indices, result.failures, [len(items)])[0]

    # vector store: a facade over `LocalIndex`, with EmbeddingTrident's method names ------

    @property
    def store(self):
        """The `VectorStore` of `config.store`, opened on first use."""
        if self._store is None:
            if self._closed:
                raise RuntimeError("this ImageEmbeddingPipeline is closed")
            from accelkit.images.store import VectorStore

            self._store = VectorStore(self.config.store)
        return self._store

    @functools.cached_property
    def index(self) -> LocalIndex:
        """The application layer over this pipeline's model and store."""
        from accelkit.images.thumbnails import open_thumbnails

        return LocalIndex(
            self.store,
            self.embed_items,
            self.config.store.collection_name,
            self.config.model.embedding_dim,
            thumbnails=open_thumbnails(self.config.store.uri, self.config.store.thumbnails),
            max_pixels=self.config.preprocess.max_pixels,
        )

    def create_collection(
        self, name: str | None = None, dim: int | None = None, description: str = "", **index: Any
    ) -> dict[str, Any]:
        """Create a collection (default name `store.collection_name`, default dim the model's);
        `index` may hold index_type, metric_type, index_params, exist_ok. Returns its stats."""
        return self.index.create_collection(name, dim, description, **index)

    def list_collections(self) -> list[str]:
        return self.index.list_collections()

    def collection_stats(self, collection_name: str | None = None) -> dict[str, Any]:
        return self.index.describe(collection_name)

    def drop_collection(self, collection_name: str | None = None) -> None:
        self.index.drop_collection(collection_name)

    def insert_images(
        self,
        inputs: Sequence[Any],
        ids: Sequence[str] | None = None,
        metadata: Sequence[dict | None] | None = None,
        collection_name: str | None = None,
        create_collection: bool = False,
    ) -> InsertResult:
        """Embed and store images. A bad image, id or metadata entry is reported in `failures` and
        the rest are stored; the call returns only after the store has accepted every stored item.
        A path's file name is recorded in metadata["source"] unless the metadata has one."""
        items = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        for what, values in (("ids", ids), ("metadata entries", metadata)):
            if values is not None and len(values) != len(items):
                raise InputError(
                    f"got {len(items)} images but {len(values)} {what}; give one per image or none"
                )
        from accelkit.images.index import insert_in_chunks

        return insert_in_chunks(
            self.index,
            [
                ImageInput(
                    item,
                    ids[i] if ids is not None else None,
                    metadata[i] if metadata is not None else None,
                    source_name(item),
                )
                for i, item in enumerate(items)
            ],
            collection_name,
            create_collection,
            flush_after_rows=self.config.store.flush_after_rows,
        )

    def search_images(
        self,
        query_input: Any,
        topk: int = 10,
        filter_expr: str | None = None,
        collection_name: str | None = None,
    ) -> list:
        """The `topk` nearest stored items (`Hit`: id, score, metadata) to an image or a query vector."""
        query = (
            np.asarray(query_input, np.float32)
            if is_query_vector(query_input)
            else ImageInput(query_input)
        )
        return self.index.search(query, topk, filter_expr, collection_name)

    def delete(self, ids: Sequence[str], collection_name: str | None = None) -> int:
        """Delete items by id; returns how many existed."""
        return self.index.delete(list(ids), collection=collection_name)
