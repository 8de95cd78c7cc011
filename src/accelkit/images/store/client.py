"""`StoreClient`: the connection to Milvus (Lite file or server) and what every operation
needs — one bounded call (`_call`), the consistency of a read, the collection checks and caches
(dimension, index spec, loaded state). The operations build on it: `admin` (collections, flush,
index), `writes` (upsert, delete), `search` (search, get)."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import threading
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

from accelkit.errors import AccelkitError, ConfigError, InputError, require
from accelkit.images.settings.config import StoreConfig
from accelkit.images.settings.fields import declared_from_schema, scalar_filter
from accelkit.images.settings.filters import (
    NotOnLite3,
    for_lite3,
    json_path,
    lite3_ambiguous_fields,
)
from accelkit.images.settings.schema import check_collection_name
from accelkit.images.store.errors import (
    CollectionNotFoundError,
    FilterNotOnEngine,
    ForeignCollectionError,
    StoreError,
    StoreFullError,
    StoreTimeoutError,
    StoreUnavailableError,
    _collection_gone,
    _reason,
    _timed_out,
    _unreachable,
)
from accelkit.images.store.lite import (
    _engine_home,
    _engine_output_to,
    _held_by,
    _quiet_pymilvus,
    check_lite_format,
    check_lite_free,
    check_lite_space,
    clear_new_indexes,
    close_engine,
    engine_calls,
    engine_changed,
    engine_changes,
    index_files,
    lite3_upkeep,
    lite_generation,
    lite_lock_holder,
    open_engine,
)
from accelkit.images.store.records import (
    CONSISTENCY_LEVELS,
    METADATA_FIELD,
    PROP_INDEX,
    RESERVED_PREFIX,
    VECTOR_FIELD,
    IndexSpec,
    foreign_fields,
    is_local_uri,
    redact_uri,
    vector_dim,
)
from accelkit.runtime.files import no_space
from accelkit.runtime.logs import import_library

if TYPE_CHECKING:  # pymilvus is imported when a store connects
    from pymilvus import MilvusClient

log = logging.getLogger(__name__)


RECOVERY_S = 60.0  # after an outage, a timeout this soon is the server recovering, not slow


def _disk_full(exc: BaseException) -> bool:
    """Whether Milvus Lite 3 failed a call on a full file system (its answer carries the OS
    error's text)."""
    text = str(exc)
    if re.search(r"\b\d+ requested and \d+ written\b", text):  # numpy's short write of an index
        return True
    return f"[Errno {errno.ENOSPC}]" in text or f"[Errno {errno.EDQUOT}]" in text


def _import_scipy_sparse_once() -> None:
    """pymilvus asks of every search's vectors whether they are a scipy sparse matrix; the first
    time, it executes a second copy of `scipy.sparse` (client/utils.py, SciPyHelper). Two service
    threads asking first at once meet a partly imported `scipy.sparse._bsr` and the search fails
    (503, "partially initialized module"). Imported here, once, before any request thread, the
    copy's imports find finished modules. Without scipy pymilvus skips the check."""
    import importlib.util

    if importlib.util.find_spec("scipy") is not None:
        import scipy.sparse  # noqa: F401


class StoreClient:
    """The connection and the shared steps; `VectorStore` adds the operations.

    Thread-safe: the pymilvus client is, and the caches have a lock.
    """

    def __init__(self, config: StoreConfig | None = None, **overrides: Any):
        self.config = config.model_copy(update=overrides) if config else StoreConfig(**overrides)
        self._loaded: set[str] = set()
        self._specs: dict[str, IndexSpec] = {}
        self._records: dict[str, dict[str, Any]] = {}  # our properties of each collection
        self._dims: dict[str, int] = {}  # cached: searches should not pay two extra RPCs
        self._fields: dict[str, dict[str, str]] = {}  # declared filter fields (settings/fields)
        # Collections with a delete that no later write's timestamp covers: Milvus 2.3 answers a
        # delete with timestamp 0, so a Session read would not wait for it; such reads go Strong
        # until the next upsert (whose timestamp is later than the delete's) returns.
        self._deleted: set[str] = set()
        # Milvus Lite 3 searches rows it has not flushed by turning each back into a Python list
        # (at every search) and keeps no index over them: collections written
        # (or first used) since their last flush, with the disk bytes of what they wrote, flushed
        # before their next search (`_settle`).
        self._unflushed: dict[str, int] = {}
        self._lock = threading.Lock()
        self._engine: str | None = None  # the Milvus Lite engine's path (`lite.open_engine`)
        self._down_at: float | None = None  # when a call last found the server unavailable
        self._seen = (
            0  # Milvus Lite: the engine's change count the caches were read at (`_current`)
        )
        self._client: MilvusClient | None = self._connect()

    @property
    def uri(self) -> str:
        return redact_uri(self.config.uri)

    @property
    def is_server(self) -> bool:
        return not is_local_uri(self.config.uri)

    @property
    def lite(self) -> int | None:
        """The Milvus Lite generation this store runs on (2 or 3, `lite.lite_generation`); None
        on a server."""
        return None if self.is_server else lite_generation()

    @property
    def _milvus(self) -> MilvusClient:
        """The open pymilvus client; a closed store says so in one line."""
        if self._client is None:
            raise StoreError("this VectorStore is closed")
        return self._client

    def _connect(self) -> MilvusClient:
        import_library("pymilvus", "images")
        _quiet_pymilvus()
        _import_scipy_sparse_once()
        from pymilvus import MilvusClient

        uri = self.config.uri
        if is_local_uri(uri) and not uri.endswith(".db"):
            raise ConfigError(
                f"store uri {uri!r}: a Milvus Lite database must end in .db (or give a server URI such as http://host:19530)"
            )
        try:
            with warnings.catch_warnings():  # milvus-lite 2.x imports the deprecated pkg_resources
                warnings.simplefilter("ignore", UserWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
                if is_local_uri(uri):
                    require("milvus_lite", "images")
                    # Checked first: a refused Milvus Lite start deletes the holder's lock file,
                    # after which a third process could open the same database.
                    check_lite_free(uri)
                    check_lite_format(uri)

                    def start(db: str):
                        if self.lite == 3:  # threads of ours: no child's HOME or output to move
                            os.makedirs(os.path.dirname(db), exist_ok=True)  # as 2.x's HOME did
                            return MilvusClient(
                                uri=db, token=self.config.token or "", timeout=self.config.timeout
                            )
                        log_path = os.path.join(os.path.dirname(db), f".{os.path.basename(db)}.log")
                        # Milvus Lite 2.x waits 0.5 s for its engine to start, and pymilvus then
                        # connects once, at once: on a busy machine the engine's socket is not
                        # there yet ("Fail connecting … No such file or directory"). The engine
                        # keeps starting (it is kept by path): connect again until store.timeout.
                        deadline = time.monotonic() + self.config.timeout
                        while True:
                            try:
                                with _engine_home(db), _engine_output_to(log_path):
                                    return MilvusClient(
                                        uri=db,
                                        token=self.config.token or "",
                                        timeout=self.config.timeout,
                                    )
                            except Exception as exc:
                                if not _unreachable(exc) or time.monotonic() > deadline:
                                    raise
                            time.sleep(0.25)

                    self._engine, client = open_engine(uri, start)
                    return client
                return MilvusClient(
                    uri=uri,
                    token=self.config.token or "",
                    db_name=self.config.db_name,
                    timeout=self.config.timeout,
                )
        except AccelkitError:
            raise
        except Exception as exc:
            if is_local_uri(uri):
                holder = lite_lock_holder(uri)
                if holder is not None:
                    raise _held_by(uri, holder) from exc
                check_lite_space(uri, 0, f"opening the Milvus Lite database {uri}")  # a full disk
                raise StoreError(
                    f"cannot open the Milvus Lite database {uri}: {_reason(exc)}"
                ) from exc
            raise StoreError(
                f"cannot connect to Milvus at {self.uri}: {_reason(exc)}; check store.uri/token and that the server runs"
            ) from exc

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            finally:
                engine, self._engine = self._engine, None
                if engine is not None and close_engine(engine):
                    # the last store on the file here: release the embedded server now (and its
                    # file lock), not at process exit
                    try:
                        from milvus_lite.server_manager import server_manager_instance

                        server_manager_instance.release_server(engine)
                    except Exception:  # older milvus-lite: released at exit
                        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, what: str, fn: Callable, *args, **kwargs):
        """One pymilvus call, bounded by `store.timeout`; failures become one clean line."""
        if self._client is None:
            raise StoreError("this VectorStore is closed")
        kwargs.setdefault("timeout", self.config.timeout)
        if self.lite == 3 and self._engine is not None:
            calls = engine_calls(self._engine)
            if not calls.acquire(timeout=self.config.timeout):
                raise StoreTimeoutError(
                    f"{what} waited longer than store.timeout ({self.config.timeout:g} s) for"
                    " the Milvus Lite engine's other calls; retry, or raise store.timeout"
                )
            try:
                return self._attempt(what, fn, args, kwargs)
            finally:
                calls.release()
        return self._attempt(what, fn, args, kwargs)

    def _attempt(self, what: str, fn: Callable, args: tuple, kwargs: dict):
        try:
            return fn(*args, **kwargs)
        except AccelkitError:
            raise
        except Exception as exc:
            if _timed_out(exc) and (_unreachable(exc) or not self._answers()):
                # pymilvus retried a dead server until now, or the call waited for a connection
                # to one until its deadline: unavailable, not slow
                self._saw_down()
                raise StoreUnavailableError(
                    f"{what} took longer than store.timeout ({self.config.timeout:g} s): Milvus"
                    f" at {self.uri} is unavailable (down or restarting); retry later"
                ) from exc
            since = time.monotonic() - self._down_at if self._down_at is not None else None
            if _timed_out(exc) and since is not None and since < RECOVERY_S:
                # back, and still recovering: a server SIGKILLed and started again answers
                # cheap calls at once and searches only later (tests/images/test_outage.py)
                raise StoreUnavailableError(
                    f"{what} took longer than store.timeout ({self.config.timeout:g} s): Milvus"
                    f" at {self.uri} was unavailable {since:.0f} s ago and is still recovering;"
                    " retry later"
                ) from exc
            if self.lite == 3 and _disk_full(exc):  # Lite 3 says so (2.x did not: lite.py)
                full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                raise StoreFullError(
                    f"{what}: {no_space(self.config.uri, full, unchanged=True)}"
                ) from exc
            if _timed_out(exc):
                raise StoreTimeoutError(
                    f"{what} took longer than store.timeout ({self.config.timeout:g} s); "
                    "retry, narrow the filter, or raise store.timeout"
                ) from exc
            if _unreachable(exc):  # refused at once: down, and recovering once it is back
                self._saw_down()
            if _collection_gone(exc):  # dropped by another client since this one looked
                self._uncache_all()
                raise CollectionNotFoundError(
                    f"{what} failed: the collection does not exist (another client dropped it);"
                    " see the collections with `accelkit images collection list`, create it again"
                    " (accelkit images collection create NAME), or insert with --create-collection"
                ) from exc
            raise StoreError(f"{what} failed: {_reason(exc)}") from exc

    def _saw_down(self) -> None:
        """A call found the server down or reloading: the recovery window (`RECOVERY_S`) runs from
        the latest such sighting, not the first (a server under load answers searches again up to
        ~45 s after it is back, its refusals and reloads meanwhile: tests/images/test_outage.py)."""
        self._down_at = time.monotonic()

    def _current(self) -> None:
        """On Milvus Lite: forget what this client keeps of its collections (dimensions, index
        specs, declared fields, records, loaded state) when another store of this process has
        changed a collection since (`lite.engine_changes`): two clients of one database in one
        process — a service and an index, two indexes — otherwise searched a collection the other
        made anew with its old metric (refused until a restart) or index parameters (a wrong
        top-k shown as right), and checked inserts against its old model record. A server is
        read again where it matters instead (`_spec`, `declared_fields`, `recorded(fresh=True)`)."""
        if self._engine is None:
            return
        changes = engine_changes(self._engine)
        with self._lock:
            if changes == self._seen:
                return
            self._seen = changes
        self._uncache_all()

    def _changed(self) -> None:
        """This client made, dropped or re-recorded a collection: every store of this process on
        the same Milvus Lite database reads what it keeps again (`_current`)."""
        if self._engine is not None:
            engine_changed(self._engine)

    def _answers(self) -> bool:
        """Whether a server answers a cheap call within 2 s: tells a timeout on a dead server
        from a slow call on a live one. Milvus Lite runs in-process: always True."""
        if not self.is_server:
            return True
        try:
            self._milvus.list_collections(timeout=min(2.0, self.config.timeout))  # pyright: ignore[reportUnusedCoroutine]  (pymilvus' untyped handler is inferred async; the call is not)
        except Exception:
            return False
        return True

    def _consistency(self, name: str, level: str | None) -> str:
        level = level or self.config.consistency
        if level not in CONSISTENCY_LEVELS:
            raise InputError(f"consistency {level!r} is not one of {', '.join(CONSISTENCY_LEVELS)}")
        with self._lock:
            return "Strong" if level == "Session" and name in self._deleted else level

    def _engine_filter(self, name: str, expr: str | None, info: dict | None = None) -> str:
        """A checked filter as this engine must be sent it to select what Milvus selects: on
        Milvus Lite 3 rewritten (`filters.for_lite3`, after looking up which kinds of values equal
        to 0 or 1 the fields it compares with true/false/0/1 hold), or refused there as a
        `FilterError` naming the filter and the way on; "" for none. `info`: the collection's
        description if the caller has just read it (`described`)."""
        if not expr or self.lite != 3:
            return scalar_filter(expr, self.declared_fields(name, info)) if expr else ""
        try:
            fields = lite3_ambiguous_fields(expr)
            return for_lite3(expr, self._flag_kinds(name, fields) if fields else {})
        except NotOnLite3 as exc:
            raise FilterNotOnEngine(expr, str(exc)) from None

    def _flag_kinds(self, name: str, fields: list[str]) -> dict[str, set[str]]:
        """For each metadata field, the kinds ("bool", "number") of its values equal to 0 or 1
        in collection `name` (Lite 3 finds true, 1 and 1.0 alike by `== 1`: told apart here)."""
        self._require(name)
        self._ensure_loaded(name)
        wanted = " or ".join(f"{f} == 0 or {f} == 1" for f in fields)
        iterator = self._call(
            f"reading {name!r}",
            self._milvus.query_iterator,
            name,
            batch_size=1000,
            filter=wanted,
            output_fields=[METADATA_FIELD],
            consistency_level="Strong",
        )
        kinds: dict[str, set[str]] = {f: set() for f in fields}
        paths = {f: json_path(f) for f in fields}
        try:
            while rows := self._call(f"reading {name!r}", lambda timeout: iterator.next()):
                for row in rows:
                    for field, path in paths.items():
                        value = row.get(METADATA_FIELD) or {}
                        for key in path:
                            value = value.get(key) if isinstance(value, dict) else None
                        if isinstance(value, (bool, int, float)) and value in (0, 1):
                            kinds[field].add("bool" if isinstance(value, bool) else "number")
        finally:
            iterator.close()
        return kinds

    def list_collections(self) -> list[str]:
        """The collections' names, sorted (our catalog left out)."""
        names = self._call("listing collections", self._milvus.list_collections)
        return sorted(n for n in names if not n.startswith(RESERVED_PREFIX))

    def has_collection(self, name: str) -> bool:
        return bool(
            self._call(
                f"checking collection {name!r}",
                self._milvus.has_collection,
                check_collection_name(name, reserved_ok=True),
            )
        )

    def _require(self, name: str) -> None:
        if not self.has_collection(name):
            known = ", ".join(self.list_collections()) or "none"
            raise CollectionNotFoundError(
                f"collection {name!r} does not exist (collections: {known}); create it first"
                f" (accelkit images collection create {name}), or insert with --create-collection"
                ' ("create_collection": true over HTTP)'
            )

    def describe_dim(self, name: str) -> int:
        self._current()
        with self._lock:
            if name in self._dims:
                return self._dims[name]
        self._require(name)
        info = self._describe_now(name)
        dim = self._our_dim(name, info)
        with self._lock:
            self._dims[name] = dim
        return dim

    def _uncache(self, name: str) -> None:
        """Drop what this client keeps of collection `name` (its dimension, declared fields, index
        spec, records, loaded state): the next call reads them from the store again."""
        with self._lock:
            self._loaded.discard(name)
            for cache in (self._specs, self._dims, self._fields, self._records):
                cache.pop(name, None)

    def _uncache_all(self) -> None:
        with self._lock:
            self._loaded.clear()
            for cache in (self._specs, self._dims, self._fields, self._records):
                cache.clear()

    def _schema_changed(self, name: str, used: tuple[int, dict[str, str]]) -> bool:
        """After a write the store refused: whether collection `name` now has another dimension
        or other declared fields than `used` (what the refused write was made for: another
        client dropped the collection and made it anew); the caches then hold the new ones."""
        self._uncache(name)
        try:
            return (self.describe_dim(name), self.declared_fields(name)) != used
        except StoreError:
            return False

    @staticmethod
    def _our_dim(name: str, info: dict[str, Any]) -> int:
        """The dimension of collection `name` from its description; `ForeignCollectionError`
        for one another program made with another schema."""
        found = foreign_fields(info)
        if found is not None:
            raise ForeignCollectionError(
                f"collection {name!r} was not made by accelkit (its fields: {found}; accelkit"
                " reads and writes id: varchar, vector: float_vector, metadata: json); use"
                " another collection (accelkit images collection create NAME)"
            )
        return vector_dim(info)

    def current_dim(self, name: str, given: int, info: dict[str, Any] | None = None) -> int:
        """The dimension of collection `name` to check a `given`-d vector against: the kept one,
        read again when they differ (the collection may have been made anew by another client
        since this one read it); `info`'s when the caller has just read the description
        (`described`: a kept dimension equal to a stale query's would let the query through to a
        collection of another dimension, which a server refuses with an internal assertion)."""
        if info is not None:
            dim = self._our_dim(name, info)
            with self._lock:
                self._dims[name] = dim
            return dim
        dim = self.describe_dim(name)
        if dim != given:
            with self._lock:
                self._dims.pop(name, None)
            dim = self.describe_dim(name)
        return dim

    def _describe_now(self, name: str) -> dict[str, Any]:
        """Collection `name`'s description, read now (one round trip)."""
        info = self._call(f"describing collection {name!r}", self._milvus.describe_collection, name)
        return dict(info or {})

    def described(self, name: str) -> dict[str, Any]:
        """Collection `name`'s description, read once for a search, which takes its dimension,
        index spec and declared fields from it (`current_dim`, `_spec`, `declared_fields`): each
        read alone is one more round trip per search, and a kept one is stale once another
        client has made the collection anew — on a server any other process, on Milvus Lite
        also a pymilvus client of this process, which accelkit's change count does not see
        (a search then ranked by the old metric: wrong scores on Lite 3, every search refused
        on Lite 2.5)."""
        return self._describe_now(name)

    def declared_fields(self, name: str, info: dict[str, Any] | None = None) -> dict[str, str]:
        """The filter fields collection `name` declares (`settings.fields`), from its schema.
        On a server only "none" is kept between calls: a filter is rewritten, and rows and items
        are checked, by the declaration, so a kept one that another client has since changed
        (the collection dropped and made anew) would select other items than the filter says, or
        delete them. A kept "none" cannot: the metadata JSON the filter then reads holds every
        value, and an insert missing new fields is refused by the store (`upsert` then reads
        them again). Milvus Lite keeps every one: only this process changes it (`_current`)."""
        self._current()
        with self._lock:
            kept = self._fields.get(name)
            if kept is not None and (kept == {} or (not self.is_server and info is None)):
                return kept
        if info is None:
            self._require(name)
            info = self._describe_now(name)
        declared = declared_from_schema(info["fields"])
        with self._lock:
            self._fields[name] = declared
        return declared

    def _spec(self, name: str, info: dict[str, Any] | None = None) -> IndexSpec:
        """The collection's index: type, metric, build and search parameters. Kept on Milvus Lite
        (only this process can change its file: `_current`); read at each call on a server (one describe), where another
        process may have replaced the index (`images collection index`) or made the collection
        anew: a kept spec then searched the new index with the old one's parameters — Milvus'
        defaults for an IVF index — and answered with 45 % of the true top-10, as if right.
        `info`: the description the caller has just read (`described`)."""
        self._current()
        with self._lock:
            if name in self._specs and not self.is_server and info is None:
                return self._specs[name]
        if info is None:
            info = self._describe_now(name)
        properties = info.get("properties") or {}
        if PROP_INDEX in properties:
            try:
                saved = json.loads(properties[PROP_INDEX])
                spec = IndexSpec(saved["index_type"], saved["metric_type"], saved["params"])
            except (ValueError, KeyError, TypeError):
                spec = None
            if spec is not None:
                with self._lock:
                    self._specs[name] = spec
                return spec
        info = self._index_info(name)
        kind = str(info.get("index_type", "FLAT")).upper()
        params = {
            k: int(info[k])
            for k in ("nlist", "M", "efConstruction")
            if k in info and str(info[k]).isdigit()
        }
        if kind == "IVF_FLAT":
            params = {"nlist": params.get("nlist", self.config.nlist), "nprobe": self.config.nprobe}
        elif kind == "HNSW":
            params = {
                "M": params.get("M", self.config.M),
                "efConstruction": params.get("efConstruction", self.config.efConstruction),
                "ef": self.config.ef,
            }
        else:
            params = {}
        spec = IndexSpec(
            kind, str(info.get("metric_type", self.config.metric_type)).upper(), params
        )
        with self._lock:
            self._specs[name] = spec
        return spec

    def _index_info(self, name: str) -> dict[str, Any]:
        names = self._call(
            f"listing the indexes of {name!r}", self._milvus.list_indexes, name, VECTOR_FIELD
        )
        if not names:
            return {}
        return (
            self._call(
                f"describing the index of {name!r}", self._milvus.describe_index, name, names[0]
            )
            or {}
        )

    def _ensure_loaded(self, name: str, force: bool = False) -> None:
        self._current()
        with self._lock:
            if name in self._loaded and not force:
                return
        self._require(name)
        engine = self._engine if self.lite == 3 else None
        before = index_files(engine, name) if engine is not None else {}
        try:
            self._call(f"loading collection {name!r}", self._milvus.load_collection, name)
        except StoreFullError:
            # Lite 3 builds missing indexes at load: the one it was writing is short
            if engine is not None:
                clear_new_indexes(engine, name, before)
            raise
        except StoreTimeoutError as exc:  # not a slow query: the collection is not there yet
            self._saw_down()
            raise StoreUnavailableError(
                f"loading collection {name!r} took longer than store.timeout"
                f" ({self.config.timeout:g} s): it is unavailable until Milvus has loaded it"
                " (again, after a restart); retry later"
            ) from exc
        with self._lock:
            self._loaded.add(name)
            if self.lite == 3:  # rows another process left in the write-ahead log
                self._unflushed.setdefault(name, 0)

    def _wrote(self, name: str, written: int = 0) -> None:
        """`written` bytes of rows of `name` were written (or rows deleted): on Milvus Lite 3
        they wait in its memtable until the next search flushes them (`_settle`)."""
        if self.lite == 3:
            with self._lock:
                self._unflushed[name] = self._unflushed.get(name, 0) + written

    def _pending(self, name: str) -> int:
        """Bytes of rows of `name` that Milvus Lite 3 has not flushed yet (0 elsewhere)."""
        with self._lock:
            return self._unflushed.get(name, 0)

    def _upkeep(self, name: str) -> int:
        """Bytes Milvus Lite 3 may write for `name` besides new rows: its index builds and
        segment merges, after a flush and at the next load (`lite.lite3_upkeep`; 0 elsewhere).
        Without room for them a store answers every write and cannot be loaded by the next
        process ("N requested and M written": tests/images/test_outage.py)."""
        return lite3_upkeep(self._engine, name) if self.lite == 3 and self._engine else 0

    def _flush_room(self, name: str) -> None:
        """Refuse a Milvus Lite 3 flush the disk has no room for: on a full disk its flush fails
        after setting the rows aside, and they are gone from searches at once and from the
        database at the next flush (measured on milvus-lite 3.2.2: an acknowledged row lost)."""
        needed = 2 * self._pending(name) + self._upkeep(name)
        check_lite_space(
            self.config.uri,
            needed,
            f"flushing {name!r}",
            kept="every acknowledged row is kept in Milvus Lite's log and stays searchable;"
            " the flush waits for room",
        )

    def _settle(self, name: str) -> None:
        """Before a search on Milvus Lite 3: flush what was written since the last one, so the
        search reads segments (indexed, once the engine's background build has them) instead of
        the memtable, which is many times slower (docs/images.md); a flush is paid once.
        Without room on the disk for the flush, the search reads the memtable (slower, as
        exact)."""
        with self._lock:
            if name not in self._unflushed:
                return
            pending = self._unflushed.pop(name)
        try:
            self._flush_room(name)
            self._call(f"flushing {name!r}", self._milvus.flush, name)
        except BaseException as exc:
            with self._lock:
                self._unflushed[name] = self._unflushed.get(name, 0) + pending
            if not isinstance(exc, StoreFullError):
                raise

    def _with_load(self, name: str, what: str, fn, *args, **kwargs):
        """Run a read; if Milvus says the collection is not loaded (released elsewhere), load and retry once."""
        self._ensure_loaded(name)
        try:
            return self._call(what, fn, *args, **kwargs)
        except StoreUnavailableError:
            raise
        except StoreTimeoutError as exc:
            if self.is_server and not self._serving(name):
                # a server that answers but is loading the collection again (after a restart)
                # is unavailable for it, not slow: searches would wait for the reload
                self._saw_down()
                raise StoreUnavailableError(
                    f"{what} took longer than store.timeout ({self.config.timeout:g} s): Milvus"
                    f" at {self.uri} is loading {name!r} (again, after a restart); retry later"
                ) from exc
            raise
        except StoreError as exc:
            if "load" not in str(exc).lower():
                raise
            self._ensure_loaded(name, force=True)
            return self._call(what, fn, *args, **kwargs)

    def _serving(self, name: str) -> bool:
        """Whether a server says within 2 s that collection `name` is loaded."""
        try:
            state = self._milvus.get_load_state(name, timeout=min(2.0, self.config.timeout))
        except Exception:
            return False
        return "Loaded" in str((state or {}).get("state", ""))
