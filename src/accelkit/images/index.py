"""`ImageIndex`: the one application layer of `accelkit images` — insert, search, get, delete and
collections — between the faces (CLI, HTTP service, Python API) and the parts (model, store).

Two implementations: `LocalIndex` embeds with a model and stores in a `VectorStore` (Milvus Lite
or a server); `accelkit.images.remote.RemoteIndex` is an HTTP client of our own service. A face
opens one of them and calls the same methods, so an operation exists once and every input is
checked once, here: ids, metadata, collection names and filters (`accelkit.images.schema`).

An insert is all-or-nothing per item, never per request: a bad id, oversize metadata or an image
that cannot be decoded fails that item with a reason, and the rest are stored. Duplicate ids in
one call store the last item; the earlier ones are reported as replaced.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from accelkit.errors import AccelkitError, DataError, InputError
from accelkit.images.batching import ItemResult
from accelkit.images.schema import (
    GRAMMAR_ONLY,
    SOURCE_KEY,
    check_collection_name,
    check_filter,
    check_id,
    check_ids,
    check_metadata,
)
from accelkit.images.store import CollectionNotFoundError, Hit
from accelkit.runtime.files import record_kept
from accelkit.runtime.storage import ObjectPath

log = logging.getLogger(__name__)


class ItemNotFoundError(InputError):
    """No stored item has the id given."""


@dataclass(frozen=True)
class ImageInput:
    """One image: `data` is bytes, a local path, an H×W×C array or a PIL image; `source` (a file
    name, upload name or URL) is recorded in metadata under `source` unless the metadata has one."""

    data: Any
    id: str | None = None
    metadata: dict[str, Any] | None = None
    source: str | None = None
    label: str | None = None  # how messages name the item (default "item #<position>")


@dataclass
class InsertResult:
    """`ids[k]` was stored for input `indices[k]`; `failures` maps input positions to a reason."""

    collection: str
    ids: list[str]
    indices: list[int]
    failures: dict[int, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "collection": self.collection,
            "inserted": len(self.ids),
            "ids": self.ids,
            "indices": self.indices,
            "failures": [{"index": i, "error": reason} for i, reason in self.failures.items()],
        }


def with_source(metadata: Any, source: str | None) -> Any:
    """The one rule for `source`, local and remote alike: where an image came from (`ImageInput.
    source`: a file's path inside the folder given, a file name, an upload's name, a URL) is
    recorded in its metadata under `source`, unless the metadata names one already. Metadata that
    is not an object is returned as it is, for `check_metadata` to refuse."""
    if not source or not (metadata is None or isinstance(metadata, dict)):
        return metadata
    if metadata and SOURCE_KEY in metadata:
        return metadata
    return {**(metadata or {}), SOURCE_KEY: source}


def content_id(item: Any) -> str:
    """A generated id: the first 32 hex digits of the SHA-256 of the image's bytes (file content,
    encoded bytes, or array shape + pixels), so inserting the same image twice stores it once."""
    digest = hashlib.sha256()
    if isinstance(item, (str, os.PathLike)):
        with open(item, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    elif isinstance(item, (bytes, bytearray, memoryview)):
        digest.update(bytes(item))
    elif isinstance(item, ObjectPath):  # an object on S3/GCS: the same id as its local copy
        digest.update(item.read_bytes())
    elif isinstance(item, np.ndarray):
        digest.update(f"{item.shape}{item.dtype}".encode())
        digest.update(np.ascontiguousarray(item).tobytes())
    else:  # PIL image
        digest.update(f"{item.mode}{item.size}".encode())
        digest.update(item.tobytes())
    return digest.hexdigest()[:32]


@runtime_checkable
class ImageIndex(Protocol):
    """What every face calls. `collection=None` means the configured default collection."""

    def insert(
        self,
        items: Sequence[ImageInput],
        collection: str | None = None,
        create_collection: bool = False,
    ) -> InsertResult: ...

    def search(
        self,
        query: ImageInput | np.ndarray,
        topk: int = 10,
        filter: str | None = None,
        collection: str | None = None,
        consistency: str | None = None,
    ) -> list[Hit]: ...

    def get(self, ids: Sequence[str], collection: str | None = None) -> list[dict[str, Any]]: ...

    def delete(
        self,
        ids: Sequence[str] | None = None,
        filter: str | None = None,
        collection: str | None = None,
    ) -> int: ...

    def list_collections(self) -> list[str]: ...

    def describe(self, collection: str | None = None) -> dict[str, Any]: ...

    def create_collection(
        self,
        name: str | None = None,
        dim: int | None = None,
        description: str = "",
        *,
        index_type: str | None = None,
        metric_type: str | None = None,
        index_params: dict[str, int] | None = None,
        exist_ok: bool = False,
    ) -> dict[str, Any]: ...

    def drop_collection(self, name: str | None = None) -> None: ...

    def flush(self, name: str | None = None) -> dict[str, Any]: ...

    def index_progress(self, name: str | None = None, wait: bool = False) -> dict[str, Any]: ...

    def health(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


EmbedFn = Callable[[list[Any]], list[ItemResult]]


class LocalIndex:
    """The model (through `embed`) and a `VectorStore`, in this process.

    `embed(items)` returns one `ItemResult` (a vector or a reason) per item: the pipeline's
    `embed_items`, or in the service the dynamic batcher, which merges concurrent requests.
    `thumbnails` (a `ThumbnailStore`, optional) receives a small JPEG of every stored image.
    """

    def __init__(
        self,
        store: Any,
        embed: EmbedFn,
        default_collection: str,
        dim: int,
        thumbnails: Any = None,
        max_pixels: int | None = None,
    ):
        self.store = store
        self.embed = embed
        self.default_collection = default_collection
        self.dim = dim
        self.thumbnails = thumbnails
        self.max_pixels = max_pixels
        self.model_info: dict[str, Any] = {}
        self._on_close: list[Callable[[], None]] = []

    def _name(self, collection: str | None) -> str:
        return check_collection_name(collection or self.default_collection)

    # items -----------------------------------------------------------------------------------

    def insert(
        self,
        items: Sequence[ImageInput],
        collection: str | None = None,
        create_collection: bool = False,
    ) -> InsertResult:
        """Embed and store images. A bad item is reported in `failures` and the rest are stored;
        the call returns only after the store has accepted every stored item."""
        name = self._name(collection)
        items = list(items)
        try:  # cached after the first call: no round trip per insert
            self.store.describe_dim(name)
            exists = True
        except CollectionNotFoundError:
            if not create_collection:
                raise  # before any embedding
            exists = False
        failures: dict[int, str] = {}
        checked: list[tuple[int, str | None, dict[str, Any]]] = []
        labels = [item.label or f"item #{i}" for i, item in enumerate(items)]
        for i, item in enumerate(items):  # ids and metadata first: a bad one costs no embedding
            try:
                item_id = None if item.id is None else check_id(item.id, f"{labels[i]}: id")
                metadata = with_source(item.metadata, item.source)
                checked.append(
                    (i, item_id, dict(check_metadata(metadata, f"{labels[i]}: metadata")))
                )
            except AccelkitError as exc:
                failures[i] = str(exc)
        results = self.embed([items[i].data for i, _, _ in checked]) if checked else []
        rows: dict[str, tuple[int, np.ndarray, dict[str, Any]]] = {}
        for (i, item_id, metadata), result in zip(checked, results, strict=True):
            if result.error is not None:
                failures[i] = f"{labels[i]}: {result.error}"
                continue
            if item_id is None:
                try:
                    item_id = content_id(items[i].data)
                except OSError as exc:  # the file changed between embedding and hashing
                    failures[i] = f"{labels[i]}: cannot read ({exc.strerror})"
                    continue
            if item_id in rows:  # the last item with an id wins, as consecutive upserts would
                earlier = rows[item_id][0]
                failures[earlier] = (
                    f"{labels[earlier]}: replaced by {labels[i]}, which has the same id {item_id!r}"
                )
            rows[item_id] = (i, result.vector, metadata)
        stored = sorted(rows.items(), key=lambda kv: kv[1][0])
        ids = [item_id for item_id, _ in stored]
        if ids:
            if not exists:  # created only when something is stored: a refused batch leaves nothing
                self.store.create_collection(name, self.dim, exist_ok=True)
            vectors = np.stack([vector for _, (_, vector, _) in stored])
            self.store.upsert(name, ids, vectors, [meta for _, (_, _, meta) in stored])
            self._store_thumbnails(
                name, [(item_id, items[i].data) for item_id, (i, _, _) in stored]
            )
        return InsertResult(
            name, ids, [i for _, (i, _, _) in stored], dict(sorted(failures.items()))
        )

    def _store_thumbnails(self, name: str, items: list[tuple[str, Any]]) -> None:
        """A thumbnail per stored item, after the store accepted them; one that cannot be made
        or kept costs the page its picture, never the insert."""
        if self.thumbnails is None:
            return
        from accelkit.images.thumbnails import make_thumbnail

        made = []
        for item_id, data in items:
            try:
                made.append((item_id, make_thumbnail(data, max_pixels=self.max_pixels)))
            except (AccelkitError, OSError, ValueError) as exc:
                log.warning("no thumbnail for %r in %r: %s", item_id, name, exc)
        try:
            self.thumbnails.put(name, made)
        except Exception as exc:  # sqlite3.Error, a full disk: the items are stored regardless
            log.warning("thumbnails of %d items in %r not kept: %s", len(made), name, exc)

    def thumbnail(self, item_id: str, collection: str | None = None) -> bytes | None:
        """The JPEG thumbnail of a stored item, or None (no such item, or no thumbnail of it).
        Only items the store holds have one: a thumbnail a delete by filter left is not shown."""
        name = self._name(collection)
        item_id = check_id(item_id)
        if self.thumbnails is None:
            self.store.describe_dim(name)  # a missing collection is still a 404 of its own
            return None
        if not self.store.get(name, [item_id]):
            return None
        return self.thumbnails.get(name, item_id)

    def stored_vector(self, item_id: str, collection: str | None = None) -> np.ndarray:
        """The stored vector of an item ("search by this result"); `InputError` if there is none."""
        name = self._name(collection)
        rows = self.store.get(name, [check_id(item_id)], with_vectors=True)
        if not rows:
            raise ItemNotFoundError(f"id {item_id!r}: no such item in collection {name!r}")
        return rows[0]["vector"]

    def query_vector(self, query: ImageInput | np.ndarray) -> np.ndarray:
        if (
            isinstance(query, np.ndarray)
            and query.ndim == 1
            and np.issubdtype(query.dtype, np.floating)
        ):
            return query.astype(np.float32)
        data = query.data if isinstance(query, ImageInput) else query
        (result,) = self.embed([data])
        if result.error is not None:
            raise DataError(f"query: {result.error}")
        return result.vector

    def search(
        self,
        query: ImageInput | np.ndarray,
        topk: int = 10,
        filter: str | None = None,
        collection: str | None = None,
        consistency: str | None = None,
    ) -> list[Hit]:
        """The `topk` nearest stored items to an image or a query vector, best first."""
        name = self._name(collection)
        filter = check_filter(filter, max_values=GRAMMAR_ONLY)
        if not isinstance(topk, int) or isinstance(topk, bool) or topk < 1:
            raise InputError(f"topk {topk!r} must be a whole number of at least 1")
        self.store.describe_dim(name)  # a missing collection fails before the model runs
        vector = self.query_vector(query)
        return self.store.search(name, vector, topk, filter, consistency=consistency)[0]

    def get(self, ids: Sequence[str], collection: str | None = None) -> list[dict[str, Any]]:
        return self.store.get(self._name(collection), check_ids(list(ids)))

    def delete(
        self,
        ids: Sequence[str] | None = None,
        filter: str | None = None,
        collection: str | None = None,
    ) -> int:
        """Delete by ids, or every item matching a filter (exactly one of the two); returns how many."""
        name = self._name(collection)
        filter = check_filter(filter, max_values=GRAMMAR_ONLY)
        if (ids is None) == (filter is None):
            raise InputError("give either ids or a filter to delete by (not both)")
        if ids is not None:
            ids = check_ids(list(ids))
            deleted = self.store.delete(name, ids)
            self._forget_thumbnails(name, ids)
            return deleted
        return self.store.delete_matching(name, filter)  # its thumbnails stay, never shown

    # collections -----------------------------------------------------------------------------

    def list_collections(self) -> list[str]:
        return self.store.list_collections()

    def describe(self, collection: str | None = None) -> dict[str, Any]:
        return self.store.describe(self._name(collection))

    def create_collection(
        self,
        name: str | None = None,
        dim: int | None = None,
        description: str = "",
        *,
        index_type: str | None = None,
        metric_type: str | None = None,
        index_params: dict[str, int] | None = None,
        exist_ok: bool = False,
    ) -> dict[str, Any]:
        """A collection for this index's embeddings: `dim`, when given, must be the model's."""
        if dim is not None and dim != self.dim:
            model = self.model_info.get("name") or "the model"
            raise DataError(
                f"dim {dim!r}: {model} makes {self.dim}-d embeddings, so every insert into a"
                f" {dim!r}-d collection would be refused; leave dim out (or give {self.dim})"
            )
        return self.store.create_collection(
            self._name(name),
            self.dim if dim is None else dim,
            description,
            index_type=index_type,
            metric_type=metric_type,
            index_params=index_params,
            exist_ok=exist_ok,
        )

    def drop_collection(self, name: str | None = None) -> None:
        name = self._name(name)
        self.store.drop_collection(name)
        self._forget_thumbnails(name, None)

    def _forget_thumbnails(self, name: str, ids: list[str] | None) -> None:
        if self.thumbnails is None:
            return
        try:
            if ids is None:
                self.thumbnails.drop(name)
            else:
                self.thumbnails.delete(name, ids)
        except Exception as exc:  # left behind: never shown, replaced when an id comes back
            log.warning("thumbnails in %r not removed: %s", name, exc)

    def flush(self, name: str | None = None) -> dict[str, Any]:
        name = self._name(name)
        self.store.flush(name)
        return self.store.index_progress(name)

    def index_progress(
        self, name: str | None = None, wait: bool = False, progress: Callable | None = None
    ) -> dict[str, Any]:
        name = self._name(name)
        if wait:
            return self.store.wait_for_index(name, progress=progress)
        return self.store.index_progress(name)

    def rebuild_index(self, name: str | None = None, **spec: Any) -> dict[str, Any]:
        return self.store.rebuild_index(self._name(name), **spec)

    def health(self) -> dict[str, Any]:
        """The store's status, and the model's: it embeds a plain 64×64 test image."""
        store = self.store.ping()
        store.pop("uri", None)
        model: dict[str, Any] = dict(self.model_info)
        try:
            (result,) = self.embed([np.full((64, 64, 3), 128, np.uint8)])
            model.update(
                {
                    "ok": result.error is None,
                    "dim": None if result.vector is None else int(result.vector.shape[0]),
                }
            )
            if result.error is not None:
                model["error"] = result.error
        except AccelkitError as exc:
            model.update({"ok": False, "error": str(exc)})
        healthy = store["ok"] and model["ok"]
        return {"status": "ok" if healthy else "unhealthy", "model": model, "store": store}

    def close(self) -> None:
        for close in self._on_close:
            close()
        self._on_close.clear()

    def __enter__(self) -> LocalIndex:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def insert_in_chunks(
    index: ImageIndex,
    items: Sequence[ImageInput],
    collection: str | None = None,
    create_collection: bool = False,
    chunk: int = 256,
    flush_after_rows: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> InsertResult:
    """A bulk insert: `chunk` images at a time (bounded memory, visible progress), then a flush
    when at least `flush_after_rows` were stored, so a server's index covers them."""
    items = list(items)
    ids, indices, failures, name = [], [], {}, collection or ""
    for start in range(0, len(items), chunk):
        part = index.insert(items[start : start + chunk], collection, create_collection)
        name = part.collection or name
        ids += part.ids
        indices += [start + i for i in part.indices]
        failures.update({start + i: reason for i, reason in part.failures.items()})
        if ids:  # stored for good: what an interrupt after this chunk keeps
            record_kept(f"collection {name}", f"{len(ids)} images stored in collection {name!r}")
        if progress:
            progress(len(items[start : start + chunk]))
    if flush_after_rows is not None and ids and len(ids) >= flush_after_rows:
        index.flush(name)
    return InsertResult(name, ids, indices, dict(sorted(failures.items())))
