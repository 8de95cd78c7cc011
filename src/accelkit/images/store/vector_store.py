"""`VectorStore`: one class over the store's operations (`admin`, `writes`, `search`), which
share the connection and caches of `client.StoreClient`."""

from __future__ import annotations

from accelkit.images.store.admin import CollectionAdmin
from accelkit.images.store.search import ItemSearch
from accelkit.images.store.writes import ItemWrites


class VectorStore(CollectionAdmin, ItemWrites, ItemSearch):
    """Collections of (string id, vector, JSON metadata) in Milvus Lite or a Milvus server.

    ```python
    with VectorStore(StoreConfig(uri="./photos.db")) as store:
        store.create_collection("photos", dim=1280)
        store.upsert("photos", ["a", "b"], vectors, [{"tag": "cat"}, {"tag": "dog"}])
        hits = store.search("photos", query, topk=10, filter_expr='metadata["tag"] == "cat"')[0]
    ```
    Thread-safe: the pymilvus client is, and the caches have a lock.
    """
