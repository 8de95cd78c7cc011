"""`ImageIndex`: the one application layer of `accelkit images` — insert, search, get, delete and
collections — between the faces (CLI, HTTP service, Python API) and the parts (model, store).

Every operation is written here once: its signature, its documentation and the checks of its
arguments (ids, filters, top-k, the "ids or a filter" rule of a delete, the `source` rule of an
insert). What differs per backend is a handful of steps, the `_`-methods:
`accelkit.images.index.local.LocalIndex` does them with a model and a `VectorStore` (Milvus Lite or a
server) in this process; `accelkit.images.index.remote.RemoteIndex` asks a running `accelkit images
serve` over HTTP. A face opens one of them (`accelkit.images.api.open_index`) and calls the same
methods; no face forks on the backend.

An insert is all-or-nothing per item, never per request: a bad id, oversize metadata or an image
that cannot be decoded fails that item with a reason, and the rest are stored. Duplicate ids in
one call store the last item; the earlier ones are reported as replaced.
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accelkit.errors import DataError, InputError
from accelkit.images.index import ranking
from accelkit.images.settings.schema import (
    GRAMMAR_ONLY,
    SOURCE_KEY,
    check_filter,
    check_ids,
    check_text,
)
from accelkit.images.store.errors import StoreError
from accelkit.images.store.records import ignored_warnings
from accelkit.runtime.files import record_kept
from accelkit.runtime.storage import ObjectPath


class ItemNotFoundError(InputError):
    """No stored item has the id given."""


class ModelMismatchError(DataError):
    """A collection's vectors were made by another model than the one configured."""


# What a collection without a model record holds: it was made before accelkit recorded models,
# when EfficientNet-Lite0 was the one model a config could name.
UNRECORDED_MODEL = {"name": "efficientnet-lite0"}
# The parts of a tower's record (`models.ModelRecords`), as messages name them.
IMAGE_PARTS = {
    "weights": "image encoder weights",
    "output_name": "model.output_name",
    "image_size": "preprocess.image_size",
    "mean": "preprocess.mean",
    "std": "preprocess.std",
    "fit": "preprocess.fit",
    "resample": "preprocess.resample",
    "data_format": "preprocess.data_format",
    "normalize": "model.normalize",
}
# What a part absent from a record means: records leave `resample` out where it is bilinear
# (`PreprocessConfig.vector_settings`), so those made before the setting existed stay equal.
PART_DEFAULTS = {"resample": "bilinear"}
TEXT_PARTS = {
    "weights": "text encoder weights",
    "tokenizer": "tokenizer",
    "context_length": "model.context_length",
}


@dataclass
class ModelCheck:
    """What `check_same_model` found besides a mismatch: `record_text`: the collection has no text tower
    recorded, so the configured one is recorded now (a text tower added to an image-only
    collection)."""

    record_text: bool = False


def set_model_hint(collection: str) -> str:
    return (
        f" (if you have checked that the model still makes the stored vectors,"
        f" `accelkit images collection set-model {collection}` verifies and records it)"
    )


def check_same_model(collection: str, recorded: dict | None, mine: Any, tower: str) -> ModelCheck:
    """Refuse to fill or search `collection` with a model other than the one that made its
    vectors. `mine`: the configured model's `models.ModelRecords` (None: no check); `tower`:
    "image" (inserts and image searches: the image tower) or "text" (text searches: the text
    tower). A different name is refused; so is any part of the tower that differs, named. A
    record of a pre-release version (one `fingerprint` over all files' bytes) is refused with
    the way on (`collection set-model`)."""
    if mine is None:
        return ModelCheck()
    theirs: dict[str, Any] = recorded or UNRECORDED_MODEL
    if theirs.get("name") != mine.name:
        raise ModelMismatchError(
            f"collection {collection!r} holds vectors of model {theirs.get('name')!r}"
            f"{'' if recorded else ' (no model recorded: made before accelkit recorded models)'},"
            f" but the configured model is {mine.name!r}; a collection is filled and searched"
            " only by the model that made it: use a collection of this model, or that model's"
            " config"
        )
    if recorded is None:  # made before records (or by another tool): the name is all there is
        return ModelCheck()
    if "image_tower" not in recorded:
        raise ModelMismatchError(
            f"collection {collection!r} has a model record of version"
            f" {recorded.get('version', 1)!r} (one fingerprint over all files, from a pre-release"
            " accelkit), which this version does not read: `accelkit images collection set-model"
            f" {collection}` checks the configured model against its stored vectors and records it"
        )
    if tower == "image":
        differences = _differences(theirs["image_tower"], mine.image()["image_tower"], IMAGE_PARTS)
    else:
        configured = mine.text()
        if configured is None:  # no text tower: the query says so itself
            return ModelCheck()
        if not isinstance(theirs.get("text_tower"), dict):
            return ModelCheck(record_text=True)
        differences = _differences(theirs["text_tower"], configured, TEXT_PARTS)
    if differences:
        raise ModelMismatchError(
            f"collection {collection!r} was filled by model {mine.name!r} with"
            f" {'; '.join(differences)}: vectors made otherwise would not compare with the stored"
            f" ones; set it back, or use another collection{set_model_hint(collection)}"
        )
    return ModelCheck()


def _differences(theirs: dict, mine: dict, parts: dict[str, str]) -> list[str]:
    """'<part> <recorded> (configured: <mine>)' for each part that differs; weights that one
    side cannot know (a Triton model's) are not compared."""
    found = []
    for key, named in parts.items():
        default = PART_DEFAULTS.get(key)
        recorded, configured = theirs.get(key, default), mine.get(key, default)
        if key == "weights" and (recorded is None or configured is None):
            continue
        if recorded != configured:
            found.append(f"{named} {_shown(recorded)} (configured: {_shown(configured)})")
    return found


def _shown(value: Any) -> str:
    return str(value) if isinstance(value, list) else repr(value)


class Hits(list):
    """Search results, best first (a list of `Hit`), `warnings`: what the backend did not
    apply of the settings (Milvus Lite's nprobe), one line each, the `collection` searched
    (through a service, the service's default when none was named), and `cut`: the scores
    before the min-score and automatic cuts and what they kept (`ranking.Cut`)."""

    def __init__(
        self,
        hits=(),
        warnings: Sequence[str] = (),
        collection: str | None = None,
        cut: ranking.Cut | None = None,
    ):
        super().__init__(hits)
        self.warnings = list(warnings)
        self.collection = collection
        self.cut = cut if cut is not None else ranking.cut([h.score for h in self], None, False)


@dataclass(frozen=True)
class Steering:
    """How a search is cut and steered, beyond its query and top k (`ImageIndex.search`).

    `min_score`: results scoring below it are dropped; `auto_cut`: so are those below a clear
    gap in the scores (`ranking.gap_cut`); `negatives`: texts whose direction the query is
    pushed away from (`ranking.steer`), `negative_ids`: stored items likewise, from what sets
    them apart from the query's candidates ("less like this", `ranking.push_away`), both by
    `negative_weight`; `fold`: results within that cosine of a higher-ranked one are folded
    under it (`Hit.similar`), and more are fetched so `topk` distinct ones come back."""

    min_score: float | None = None
    auto_cut: bool = False
    negatives: tuple[str, ...] = ()
    negative_ids: tuple[str, ...] = ()
    negative_weight: float = ranking.DEFAULT_NEGATIVE_WEIGHT
    fold: float | None = None

    @classmethod
    def checked(
        cls,
        min_score: Any = None,
        auto_cut: Any = False,
        negatives: Sequence[str] | None = None,
        negative_ids: Sequence[str] | None = None,
        negative_weight: Any = ranking.DEFAULT_NEGATIVE_WEIGHT,
        fold: Any = None,
    ) -> Steering:
        if not isinstance(auto_cut, bool):
            raise InputError(f"auto_cut {auto_cut!r} must be true or false")
        texts = tuple(check_text(t, "negative text") for t in (negatives or ()))
        ids = tuple(check_ids(list(negative_ids or ())))
        if len(texts) + len(ids) > ranking.MAX_NEGATIVES:
            raise InputError(f"at most {ranking.MAX_NEGATIVES} negatives (texts and ids)")
        return cls(
            ranking.check_min_score(min_score),
            auto_cut,
            texts,
            ids,
            ranking.check_weight(negative_weight),
            ranking.check_fold(fold, "fold_duplicates"),
        )

    @property
    def cuts(self) -> bool:
        """Whether scores are compared with a threshold (which needs a similarity metric)."""
        return self.min_score is not None or self.auto_cut

    def fields(self) -> dict[str, Any]:
        """The non-default settings, as the service's search fields name them."""
        out: dict[str, Any] = {}
        if self.min_score is not None:
            out["min_score"] = self.min_score
        if self.auto_cut:
            out["auto_cut"] = True
        if self.negatives:
            out["negative_texts"] = list(self.negatives)
        if self.negative_ids:
            out["negative_ids"] = list(self.negative_ids)
        if self.negative_weight != ranking.DEFAULT_NEGATIVE_WEIGHT:
            out["negative_weight"] = self.negative_weight
        if self.fold is not None:
            out["fold_duplicates"] = self.fold
        return out


@dataclass(frozen=True)
class TextQuery:
    """A query in words, for a two-tower model's text tower."""

    text: str


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

    def document(self) -> dict[str, Any]:
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


def is_query_vector(item: Any) -> bool:
    """A 1-D float array is a query vector; anything else is an image input."""
    return (
        isinstance(item, np.ndarray) and item.ndim == 1 and np.issubdtype(item.dtype, np.floating)
    )


def check_topk(topk: Any) -> int:
    if not isinstance(topk, int) or isinstance(topk, bool) or topk < 1:
        raise InputError(f"topk {topk!r} must be a whole number of at least 1")
    return topk


class ImageIndex(ABC):
    """What every face calls. `collection=None` means the default collection (the config's
    `store.collection_name`; through a service, the service's)."""

    def __enter__(self) -> ImageIndex:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # items -----------------------------------------------------------------------------------

    def insert(
        self,
        items: Sequence[ImageInput],
        collection: str | None = None,
        create_collection: bool = False,
    ) -> InsertResult:
        """Embed and store images. A bad item is reported in `failures` and the rest are stored;
        the call returns only after the store has accepted every stored item."""
        items = list(items)
        metadata = [with_source(item.metadata, item.source) for item in items]
        return self._insert(items, metadata, collection, create_collection)

    def search(
        self,
        query: ImageInput | np.ndarray | Any,
        topk: int = 10,
        filter: str | None = None,
        collection: str | None = None,
        consistency: str | None = None,
        steering: Steering | None = None,
    ) -> Hits:
        """The `topk` nearest stored items to an image, a `TextQuery` (a two-tower model's
        words; "cat -glasses" searches "cat" pushed away from "glasses": `ranking.parse_terms`)
        or a query vector, best first; `steering`: cut and steer them (`Steering`)."""
        filter = check_filter(filter, max_values=GRAMMAR_ONLY)
        topk = check_topk(topk)
        if isinstance(query, TextQuery):
            query = TextQuery(check_text(query.text))
            ranking.parse_terms(query.text)  # its syntax is refused here, before any backend
        elif not (isinstance(query, ImageInput) or is_query_vector(query)):
            query = ImageInput(query)
        return self._search(query, topk, filter, collection, consistency, steering or Steering())

    def get(self, ids: Sequence[str], collection: str | None = None) -> list[dict[str, Any]]:
        """Stored items (id and metadata) among `ids`, in their order; missing ones left out."""
        return self._get(check_ids(list(ids)), collection)

    def delete(
        self,
        ids: Sequence[str] | None = None,
        filter: str | None = None,
        collection: str | None = None,
    ) -> int:
        """Delete items by ids or by a filter (not both); returns how many were deleted."""
        filter = check_filter(filter, max_values=GRAMMAR_ONLY)
        if (ids is None) == (filter is None):
            raise InputError("give either ids or a filter to delete by (not both)")
        if ids is not None:
            return self._delete_ids(check_ids(list(ids)), collection)
        assert filter is not None  # exactly one of the two, checked above
        return self._delete_matching(filter, collection)

    # collections -----------------------------------------------------------------------------

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
        """A collection for this index's embeddings (`dim`, when given, must be the model's);
        returns its description. An existing one is an error unless `exist_ok`."""
        spec = {"index_type": index_type, "metric_type": metric_type, "index_params": index_params}
        return self._create_collection(name, dim, description, spec, exist_ok)

    def describe(self, collection: str | None = None) -> dict[str, Any]:
        """name, description, dim, count, index_type, metric_type and index_params."""
        return self._describe(collection)

    def ignored(self, collection: str | None = None) -> list[str]:
        """What the backend does not apply of the collection's index settings, one line each."""
        return ignored_warnings(self.describe(collection))

    def drop_collection(self, name: str | None = None) -> None:
        """Delete a collection and everything in it."""
        self._drop_collection(name)

    def flush(self, name: str | None = None) -> dict[str, Any]:
        """Seal inserted rows so a server's index covers them; returns the index progress."""
        return self._flush(name)

    def index_progress(
        self, name: str | None = None, wait: bool = False, progress: Callable | None = None
    ) -> dict[str, Any]:
        """Rows the index covers; `wait` flushes and waits until it covers every row."""
        return self._index_progress(name, wait, progress)

    def rebuild_index(self, name: str | None = None, **spec: Any) -> dict[str, Any]:
        """Replace a collection's index (a Milvus server): index_type, metric_type, index_params."""
        return self._rebuild_index(name, spec)

    # the steps each backend does its own way ----------------------------------------------------

    @abstractmethod
    def _insert(
        self, items: list[ImageInput], metadata: list[Any], collection: str | None, create: bool
    ) -> InsertResult: ...

    @abstractmethod
    def _search(
        self,
        query: Any,
        topk: int,
        filter: str | None,
        collection: str | None,
        consistency: Any,
        steering: Steering,
    ) -> Hits: ...

    @abstractmethod
    def _get(self, ids: list[str], collection: str | None) -> list[dict[str, Any]]: ...

    @abstractmethod
    def _delete_ids(self, ids: list[str], collection: str | None) -> int: ...

    @abstractmethod
    def _delete_matching(self, filter: str, collection: str | None) -> int: ...

    @abstractmethod
    def list_collections(self) -> list[str]:
        """The collections' names, sorted."""

    @abstractmethod
    def _create_collection(
        self, name: str | None, dim: int | None, description: str, spec: dict, exist_ok: bool
    ) -> dict[str, Any]: ...

    @abstractmethod
    def _describe(self, collection: str | None) -> dict[str, Any]: ...

    @abstractmethod
    def _drop_collection(self, name: str | None) -> None: ...

    @abstractmethod
    def _flush(self, name: str | None) -> dict[str, Any]: ...

    @abstractmethod
    def _index_progress(
        self, name: str | None, wait: bool, progress: Callable | None
    ) -> dict[str, Any]: ...

    @abstractmethod
    def _rebuild_index(self, name: str | None, spec: dict[str, Any]) -> dict[str, Any]: ...

    @abstractmethod
    def health(self) -> dict[str, Any]:
        """Whether the model embeds and the store answers."""

    @abstractmethod
    def close(self) -> None:
        """Release the store, the model or the connection."""


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
    when at least `flush_after_rows` were stored, so a server's index covers them. A store error
    (the server went away, the disk filled) says how many images the chunks before it stored."""
    items = list(items)
    ids, indices, failures, name = [], [], {}, collection or ""
    for start in range(0, len(items), chunk):
        try:
            part = index.insert(items[start : start + chunk], collection, create_collection)
        except StoreError as exc:  # the store went away or filled up: say what is kept
            raise type(exc)(
                f"{exc}; {len(ids)} of {len(items)} images were stored before it (run the same"
                " command again to store the rest: a stored id is replaced, not doubled)"
            ) from exc
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
