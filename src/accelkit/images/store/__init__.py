"""The vector store (`VectorStore`): image vectors with string ids and JSON metadata in Milvus, through `pymilvus`.

One client serves both deployments: a Milvus Lite database file (`./accelkit_images.db`,
embedded in this process, the default) or a Milvus server/cluster (`http://host:19530` + token).
A collection has three fields: `id` (VARCHAR primary key, user-given or generated), `vector`
(FLOAT_VECTOR) and `metadata` (JSON, filterable as `metadata["category"] == "nature"`).

Why the details below exist:
* **No user string changes what an operation means.** Ids and collection names are checked
  against strict rules (`accelkit.images.settings.schema`) before they reach Milvus, and the primary-key
  expressions for get/delete are built here with escaped string literals, never by pymilvus'
  `get(ids=)`/`delete(ids=)`, which paste ids between quotes unescaped. Milvus Lite pastes ids
  into SQL on upsert, so the id alphabet has no quote at all.
* **Every call is bounded** by `store.timeout` (a filter over 20,000 terms once ran 573 s).
* **Consistency per call.** Collections are created Strong; reads ask for `store.consistency`
  (default Session: this client's own writes are visible at once, which is what an insert followed
  by a search from the same process or service needs, far sooner than Strong on a server). Any
  read may ask for another level.
* **Flush and index.** On a server, inserted rows sit in growing segments that no HNSW/IVF index
  covers until they are sealed; `flush` seals them and `wait_for_index` waits until the index
  covers every row. Bulk inserts call `flush` at the end (`store.flush_after_rows`).
* A collection that was released, or reopened from disk, must be loaded before search/get/query;
  `_ensure_loaded` does it once per collection and again if Milvus says it is not loaded.
* Inserts are upserts (idempotent by id), sent in `insert_batch_size` rows; duplicate ids within
  one call keep the last row, as a sequence of single upserts would.
* pymilvus logs every failed RPC with a traceback; each failure becomes one `AccelkitError` line
  without engine internals, so its logger is quieted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.runtime.exports import lazy_exports

if TYPE_CHECKING:  # the public names, listed once (runtime/exports.py reads them)
    from accelkit.images.settings.config import StoreConfig as StoreConfig
    from accelkit.images.store.errors import (
        CollectionExistsError as CollectionExistsError,
    )
    from accelkit.images.store.errors import (
        CollectionNotFoundError as CollectionNotFoundError,
    )
    from accelkit.images.store.errors import (
        FilterError as FilterError,
    )
    from accelkit.images.store.errors import (
        ForeignCollectionError as ForeignCollectionError,
    )
    from accelkit.images.store.errors import (
        StoreError as StoreError,
    )
    from accelkit.images.store.errors import (
        StoreFullError as StoreFullError,
    )
    from accelkit.images.store.errors import (
        StoreTimeoutError as StoreTimeoutError,
    )
    from accelkit.images.store.errors import (
        StoreUnavailableError as StoreUnavailableError,
    )
    from accelkit.images.store.lite import (
        ORPHAN_WAIT_S as ORPHAN_WAIT_S,
    )
    from accelkit.images.store.lite import (
        check_lite_free as check_lite_free,
    )
    from accelkit.images.store.lite import (
        lite_lock_holder as lite_lock_holder,
    )
    from accelkit.images.store.records import (
        ID_BATCH as ID_BATCH,
    )
    from accelkit.images.store.records import (
        ID_FIELD as ID_FIELD,
    )
    from accelkit.images.store.records import (
        METADATA_FIELD as METADATA_FIELD,
    )
    from accelkit.images.store.records import (
        VECTOR_FIELD as VECTOR_FIELD,
    )
    from accelkit.images.store.records import (
        Hit as Hit,
    )
    from accelkit.images.store.records import (
        IndexSpec as IndexSpec,
    )
    from accelkit.images.store.records import (
        ids_filter as ids_filter,
    )
    from accelkit.images.store.records import (
        is_local_uri as is_local_uri,
    )
    from accelkit.images.store.records import (
        literal as literal,
    )
    from accelkit.images.store.records import (
        redact_uri as redact_uri,
    )
    from accelkit.images.store.vector_store import VectorStore as VectorStore

__getattr__, __dir__, __all__ = lazy_exports(__name__)
