"""`accelkit images insert --ray`: the Ray pipeline's sink into a Milvus server's collection.

The actors of `embedding/ray.py` store their batches here through `LocalIndex.insert`, the local
run's own insert (ids, metadata, the model record, thumbnails), with the vectors they embedded;
each image's id is its content id, computed in the decode task (`content_id`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from accelkit.images.embedding.batching import ItemResult
from accelkit.images.embedding.ray import Writer
from accelkit.images.index.base import ImageInput, content_id
from accelkit.images.index.local import LocalIndex
from accelkit.images.store import VectorStore


@dataclass(frozen=True)
class CollectionSink:
    """Upserts into `collection` of the config's store (a Milvus server), one actor's client each."""

    collection: str
    identify = staticmethod(content_id)

    def open(self, config, endpoint_url: str | None) -> Writer:
        store = VectorStore(config.store)
        return partial(_insert, store, self.collection, config.model.embedding_dim)


def _insert(
    store, collection: str, dim: int, batch: dict, ok: list[int], vectors: np.ndarray, ids, errors
):
    """Store one batch's embedded rows `ok`: (ids, errors) per row of the batch, an empty id for
    a row not stored."""
    found = dict(zip(ok, vectors, strict=True))
    index = LocalIndex(
        store,
        lambda rows: [ItemResult(found[row]) for row in rows],  # embedded by the actor
        collection,
        dim,
    )
    items = [
        ImageInput(i, ids[i], None, str(batch["name"][i]), str(batch["source"][i])) for i in ok
    ]
    result = index.insert(items, collection)
    stored = set()
    for k, item_id in zip(result.indices, result.ids, strict=True):
        ids[ok[k]] = item_id
        stored.add(ok[k])
    for k, reason in result.failures.items():
        errors[ok[k]] = reason
    for i in ok:
        if i not in stored and not errors[i]:
            errors[i] = f"{batch['source'][i]}: not stored"
    return [ids[i] if i in stored else "" for i in range(len(ids))], errors
