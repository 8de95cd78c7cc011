"""`ImageEmbeddingPipeline`: EmbeddingTrident's all-in-one object — embedding plus
`create_collection`, `insert_images`, `search_images`, `delete`, `list_collections`,
`collection_stats` — kept for code written against it.

A facade above the layers it joins: the embedding is `EmbeddingPipeline`'s, every store
operation is the application layer's (`LocalIndex` over this pipeline's model and the config's
store), so it behaves exactly as the CLI, the service and `accelkit.images.api` do. The store
opens on first use.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from accelkit.errors import InputError
from accelkit.images.embedding.pipeline import EmbeddingPipeline
from accelkit.images.index.base import ImageInput, InsertResult, insert_in_chunks, is_query_vector
from accelkit.images.index.local import LocalIndex, open_local_index
from accelkit.runtime.storage import ObjectPath

__all__ = ["ImageEmbeddingPipeline", "source_name"]


def source_name(item: Any) -> str | None:
    """What an input is called in metadata["source"]: a path's file name; None for bytes/arrays."""
    if isinstance(item, (str, os.PathLike)):
        return os.path.basename(os.fspath(item)) or None
    if isinstance(item, ObjectPath):
        return item.name or None
    return None


class ImageEmbeddingPipeline(EmbeddingPipeline):
    """Embed images, and store and search them (EmbeddingTrident's method names).

    ```python
    with ImageEmbeddingPipeline(ServiceConfig.from_yaml("configs/images.yaml")) as pipeline:
        vectors = pipeline.embed_images(["a.jpg", "b.png"])   # [2, 1280], L2-normalized
        pipeline.insert_images(["a.jpg", "b.png"], create_collection=True)
        hits = pipeline.search_images("query.jpg", topk=5)
    ```
    """

    def close(self) -> None:
        if "index" in self.__dict__:  # opened: its store goes with it
            self.__dict__.pop("index").close()
        super().close()

    @functools.cached_property
    def index(self) -> LocalIndex:
        """The application layer over this pipeline's model and the config's store."""
        if self._closed:
            raise RuntimeError("this ImageEmbeddingPipeline is closed")
        return open_local_index(self.config, embed=self.embed_items)

    @property
    def store(self):
        """The `VectorStore` of `config.store`, opened on first use."""
        return self.index.store

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
