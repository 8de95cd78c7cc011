"""Collections: create (all or nothing), describe, count, drop; flush, index progress, waiting
for a server's index and its hand-off, rebuilding an index; loading everything at start; ping."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from accelkit.errors import AccelkitError, ConfigError, DataError, InputError
from accelkit.images.settings.fields import check_fields, presence_field, value_field
from accelkit.images.settings.schema import (
    MAX_DIM,
    MAX_METADATA_BYTES,
    MIN_DIM,
    check_collection_name,
    check_description,
)
from accelkit.images.store.errors import CollectionExistsError, StoreError, StoreTimeoutError
from accelkit.images.store.lite import clear_aborted_collection, index_coverage
from accelkit.images.store.recorded import CollectionRecords
from accelkit.images.store.records import (
    ID_FIELD,
    MAX_ID_LENGTH,
    METADATA_FIELD,
    PROP_DESCRIPTION,
    PROP_INDEX,
    PROP_MODEL,
    PROP_ORIGIN,
    PROPERTY_PREFIX,
    VECTOR_FIELD,
    IndexSpec,
    ignored_params,
    ignored_warnings,
    vector_dim,
)

log = logging.getLogger(__name__)

MIN_INDEXED_ROWS = 1024  # Milvus' indexCoord.segment.minSegmentNumRowsToEnableIndex default


class CollectionAdmin(CollectionRecords):
    """Collections and their indexes."""

    def create_collection(
        self,
        name: str,
        dim: int,
        description: str = "",
        *,
        index_type: str | None = None,
        metric_type: str | None = None,
        index_params: Mapping[str, Any] | None = None,
        exist_ok: bool = False,
        model: Mapping[str, Any] | None = None,
        origin: Mapping[str, Any] | None = None,
        fields: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        """Create `name` with a `dim`-d vector field; returns `describe(name)`. `fields` (default:
        `store.fields`) are the filter fields it declares (`settings.fields`). `model` (what
        `models.model_record` says of the model that fills it) and `origin` (where a migration
        copies it from) are recorded with it.
        An existing collection raises `CollectionExistsError` unless `exist_ok`, which also checks its dim.
        All or nothing: everything is checked first, and a collection whose index or load fails is dropped."""
        check_collection_name(name)
        if not isinstance(dim, int) or isinstance(dim, bool) or not MIN_DIM <= dim <= MAX_DIM:
            raise InputError(f"dim {dim!r} must be a whole number between {MIN_DIM} and {MAX_DIM}")
        check_description(description)
        spec = IndexSpec.from_config(self.config, index_type, metric_type, index_params)
        try:
            wanted = check_fields(self.config.fields if fields is None else fields)
        except ValueError as exc:
            raise ConfigError(f"store.fields: {exc}") from None
        if self.has_collection(name):
            if not exist_ok:
                raise CollectionExistsError(
                    f"collection {name!r} exists already; delete it first or pick another name"
                )
            self._same_fields(name, wanted)
            info = self.describe(name)
            if info["dim"] != dim:
                raise DataError(
                    f"collection {name!r} holds {info['dim']}-d vectors, not {dim}-d; use another collection"
                )
            return self.describe(name) if self.finish_index(name, spec) else info
        if self.lite == 2 and spec.index_type == "HNSW":
            raise ConfigError(
                "Milvus Lite 2.x supports the index types FLAT and IVF_FLAT; "
                f"{spec.index_type} needs Milvus Lite 3 (pip install 'accelkit[images-lite3]')"
                " or a Milvus server (store.uri: http://host:19530)"
            )
        if wanted and self.lite == 3:
            raise ConfigError(
                f"store.fields ({', '.join(wanted)}): accelkit declares no filter fields on"
                " Milvus Lite 3 (its filters are rewritten for Lite 3's reading of the JSON"
                " instead); leave store.fields empty, or use Milvus Lite 2.5 or a server"
            )
        from pymilvus import DataType

        client = self._milvus
        schema = client.create_schema(
            auto_id=False, enable_dynamic_field=False, description=description
        )
        schema.add_field(ID_FIELD, DataType.VARCHAR, is_primary=True, max_length=MAX_ID_LENGTH)
        schema.add_field(VECTOR_FIELD, DataType.FLOAT_VECTOR, dim=dim)
        schema.add_field(METADATA_FIELD, DataType.JSON)
        for key, kind in wanted.items():  # each declared key: its value, and whether it is set
            extra = {"max_length": MAX_METADATA_BYTES} if kind == "varchar" else {}
            schema.add_field(value_field(key), getattr(DataType, kind.upper()), **extra)
            schema.add_field(presence_field(key), DataType.BOOL)
        # Our own record of the description and index spec travels as collection properties:
        # Milvus Lite does not return either from describe_collection/describe_index.
        properties = {
            PROP_DESCRIPTION: description,
            PROP_INDEX: json.dumps(
                {
                    "index_type": spec.index_type,
                    "metric_type": spec.metric_type,
                    "params": dict(spec.params),
                }
            ),
        }
        records = {k: dict(v) for k, v in ((PROP_MODEL, model), (PROP_ORIGIN, origin)) if v}
        properties.update(
            {f"{PROPERTY_PREFIX}{k}": json.dumps(v, sort_keys=True) for k, v in records.items()}
        )
        if not self.is_server:  # a server takes them with the collection's properties
            # recorded first: a process killed between the two (SIGKILL, OOM) leaves a record of
            # a collection that does not exist, which the next creation replaces, rather than a
            # collection without its model record for good. A catalog row left by a collection of
            # this name dropped by another program (or a drop stopped before its row went) is
            # replaced, not inherited.
            self.record(name, records, replace=True)
        if self.lite == 3 and self._engine is not None:
            clear_aborted_collection(self._engine, name)
        self._call(
            f"creating collection {name!r}",
            client.create_collection,
            name,
            schema=schema,
            consistency_level="Strong",
            description=description,
            properties=properties,
        )
        try:
            self._call(
                f"indexing collection {name!r}", client.create_index, name, self._index_params(spec)
            )
            self._call(f"loading collection {name!r}", client.load_collection, name)
        except BaseException:
            try:  # all or nothing: no half-created collection is left behind
                client.drop_collection(name, timeout=self.config.timeout)
            except Exception:
                log.warning("could not drop the half-created collection %r", name)
            raise
        finally:
            self._changed()
        with self._lock:
            self._loaded.add(name)
            self._specs[name] = spec
            self._fields[name] = wanted
        return self.describe(name)

    def fields_to_write(self, name: str, exists: bool) -> dict[str, str]:
        """The filter fields an insert into `name` fills: the collection's own declaration, or
        `store.fields` for the one the insert makes (`exists` False). A non-empty `store.fields`
        naming other fields than an existing collection's is refused (`_same_fields`), as
        `create_collection` refuses it: the user asked for fields the collection does not have."""
        try:
            wanted = check_fields(self.config.fields)
        except ValueError as exc:
            raise ConfigError(f"store.fields: {exc}") from None
        if not exists:
            return wanted
        self._same_fields(name, wanted)
        return self.declared_fields(name)

    def _same_fields(self, name: str, wanted: Mapping[str, str]) -> None:
        """Refuse to change the filter fields an existing collection declares (`wanted`, when
        given): they are its schema's, fixed when it was made."""
        have = self.declared_fields(name)
        if not wanted or dict(wanted) == have:
            return
        shown = json.dumps(have) if have else "none"
        raise ConfigError(
            f"collection {name!r} declares the filter fields {shown}, not {json.dumps(dict(wanted))}"
            f" (store.fields); a collection's fields are fixed when it is made: set store.fields"
            " back to its own to use it as it is, or copy it into a store whose store.fields"
            " declares the new ones (accelkit images migrate SRC DST --config DST.yaml: the copy"
            " keeps every item and its metadata)"
        )

    def finish_index(self, name: str, spec: IndexSpec | None = None) -> bool:
        """Give an existing collection without an index the one `spec` (default: the config's)
        names, and load it: a creation killed between the two (SIGKILL, OOM: no `except` ran)
        is finished by the next one. Returns whether it had to."""
        if self._call(f"listing indexes of {name!r}", self._milvus.list_indexes, name):
            return False
        spec = spec or IndexSpec.from_config(self.config)
        with self._lock:
            self._specs.pop(name, None)
        self._call(
            f"indexing collection {name!r}",
            self._milvus.create_index,
            name,
            self._index_params(spec),
        )
        self._changed()
        self._call(f"loading collection {name!r}", self._milvus.load_collection, name)
        with self._lock:
            self._loaded.add(name)
        return True

    def _index_params(self, spec: IndexSpec):
        index = self._milvus.prepare_index_params()
        build = spec.build_params()
        index.add_index(
            VECTOR_FIELD,
            index_type=spec.index_type,
            metric_type=spec.metric_type,
            # pymilvus sends each build parameter as a key of its own, which Milvus Lite 3 drops
            # (it reads one JSON "params" key: nlist 8 built 128 lists, measured on 3.2.2)
            params={"params": build} if self.lite == 3 and build else build,
        )
        return index

    def describe(self, name: str) -> dict[str, Any]:
        """name, description, dim, count, index_type, metric_type, index params."""
        self._require(name)
        info = self._describe_now(name)
        dim = vector_dim(info)
        spec = self._spec(name, info)
        description = (info.get("properties") or {}).get(PROP_DESCRIPTION) or info.get(
            "description", ""
        )
        return {
            "name": name,
            "description": description,
            "dim": dim,
            "count": self.count(name),
            "index_type": spec.index_type,
            "metric_type": spec.metric_type,
            "index_params": dict(spec.params),
            "ignored": ignored_params(spec.index_type, self.lite),
            "model": self.recorded(name, PROP_MODEL),
            "fields": self.declared_fields(name, info),
        }

    def ignored(self, name: str, searched: bool = False) -> list[str]:
        """What this deployment does not apply of the collection's index settings, one line
        each (`records.ignored_params`). `searched`: of the spec the search just made read (a
        search's answer names what it ignored without another round trip to a server)."""
        with self._lock:
            spec = self._specs.get(name) if searched else None
        spec = spec or self._spec(name)
        return ignored_warnings(
            {
                "name": name,
                "index_type": spec.index_type,
                "index_params": spec.params,
                "ignored": ignored_params(spec.index_type, self.lite),
            }
        )

    def index_in_use(self, name: str) -> dict[str, Any]:
        """The index a collection's searches actually use: type, metric and build parameters as
        Milvus reports them, the search parameters that apply, and those ignored."""
        info = self._index_info(name)
        spec = self._spec(name)
        params = info.get("params")
        nested = params if isinstance(params, dict) else {}
        info = {**nested, **info}  # Milvus Lite 3 answers them nested under "params"
        build = {
            k: int(info[k])
            for k in ("nlist", "M", "efConstruction")
            if k in info and str(info[k]).isdigit()
        }
        ignored = ignored_params(spec.index_type, self.lite)
        searched = {k: v for k, v in spec.params.items() if k in ("nprobe", "ef")}
        return {
            "name": name,
            "index_type": str(info.get("index_type") or spec.index_type).upper(),
            "metric_type": str(info.get("metric_type") or spec.metric_type).upper(),
            "params": {**build, **{k: v for k, v in searched.items() if k not in ignored}},
            "ignored": ignored,
        }

    def count(self, name: str, consistency: str | None = None) -> int:
        """Stored items (upserts of an existing id count once)."""
        rows = self._with_load(
            name,
            f"counting {name!r}",
            self._milvus.query,
            name,
            filter="",
            output_fields=["count(*)"],
            consistency_level=self._consistency(name, consistency),
        )
        return int(rows[0]["count(*)"])

    def drop_collection(self, name: str) -> None:
        self._require(name)
        try:
            self._call(f"dropping collection {name!r}", self._milvus.drop_collection, name)
        finally:
            self._changed()
        self._uncache(name)
        self._forget(name)

    def flush(self, name: str) -> None:
        """Seal the collection's growing segments so the index can cover them (a server builds
        indexes on sealed segments only; Milvus Lite indexes as it goes), then, on a server, wait
        until its query nodes have applied this client's writes: an upsert returns when the
        proxy has logged the rows, and the query nodes take a while longer, in proportion to the
        rows, to apply them. After a bulk insert (which ends with a flush) the first search,
        from this client or any other, answers at once and sees every row."""
        self._require(name)
        if self.lite == 3:
            self._flush_room(name)
        with self._lock:
            pending = self._unflushed.pop(name, None)
        try:
            self._call(f"flushing {name!r}", self._milvus.flush, name)
        except BaseException:
            if pending is not None:
                self._wrote(name, pending)
            raise
        if self.is_server:
            self.wait_applied(name)

    def wait_applied(self, name: str) -> None:
        """Return once the query nodes serve every write this client made to `name`: a Session
        read waits for exactly that (the server's safe time reaching the last write's
        timestamp); a count is the cheapest read."""
        self.count(name, consistency="Session")

    def index_progress(self, name: str) -> dict[str, Any]:
        """index_type, state, indexed_rows, total_rows, pending_rows of the vector index."""
        self._require(name)
        info = self._index_info(name)
        spec = self._spec(name)
        total = int(info.get("total_rows", 0) or 0)
        indexed = int(info.get("indexed_rows", 0) or 0)
        state = {
            "collection": name,
            "index_type": spec.index_type,
            "metric_type": spec.metric_type,
            "state": str(info.get("state", "Finished")),
            "indexed_rows": indexed,
            "total_rows": total,
            "pending_rows": int(info.get("pending_index_rows", max(total - indexed, 0)) or 0),
        }
        if self.lite == 2 and not total and state["state"] == "Finished":
            # Milvus Lite 2.x indexes as it goes and says 0 of 0 rows: every row it holds
            total = indexed = self.count(name)
            state.update(indexed_rows=indexed, total_rows=total, pending_rows=0)
        # Milvus Lite 3 says Finished from the start; its segments say how far the build is,
        # once loaded: it reads their indexes back at load (a new process had read none)
        coverage = None
        if self.lite == 3 and self._engine is not None:
            self._ensure_loaded(name)
            coverage = index_coverage(self._engine, name, VECTOR_FIELD)
        if coverage is not None:
            indexed, sealed = coverage  # unflushed rows count as pending: no index has them
            total = max(total, sealed)
            state.update(
                indexed_rows=indexed,
                total_rows=total,
                pending_rows=total - indexed,
                state="Finished" if indexed >= total else "InProgress",
            )
        return state

    def serving_rows(self, name: str, indexed: bool = True) -> int | None:
        """Rows in sealed segments that the query nodes serve (`indexed`: with their index, where
        the segment is large enough to get one); None where the store cannot say (Milvus Lite)."""
        try:
            segments = self._call(
                f"listing the loaded segments of {name!r}", self._milvus.list_loaded_segments, name
            )
        except StoreTimeoutError:
            raise
        except StoreError:
            return None
        # Growing segments are not listed. A sealed segment is listed as soon as the query node
        # loads it, first without its index (`index_id` 0: searched through the interim index,
        # recall@10 0.7 instead of 0.98 on filtered searches), later with it; segments smaller
        # than Milvus' minimum for an index (minSegmentNumRowsToEnableIndex) never get one.
        return sum(
            int(seg.num_rows)
            for seg in segments or []
            if not indexed or getattr(seg, "index_id", 1) or int(seg.num_rows) < MIN_INDEXED_ROWS
        )

    def wait_for_index(
        self,
        name: str,
        timeout: float | None = None,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Flush, then wait until the index covers every sealed row *and* the query nodes serve
        it (or `timeout` seconds pass).

        A server builds the index on sealed segments, then hands them to the query nodes, which
        load them seconds later; until then searches run on the growing segments' interim index,
        of much lower recall at the same ef."""
        self.flush(name)
        deadline = time.monotonic() + (timeout if timeout is not None else 10 * self.config.timeout)
        while True:
            state = self.index_progress(name)
            built = state["pending_rows"] == 0 and state["indexed_rows"] >= state["total_rows"]
            serving = (
                self.serving_rows(name, indexed=state["index_type"] != "FLAT")
                if built and self.is_server
                else None
            )
            if serving is not None:
                state["serving_rows"] = serving
            if progress:
                progress(state)
            if state["state"] == "Failed":
                raise StoreError(
                    f"building the index of {name!r} failed on the server; see its log"
                )
            if built and (serving is None or serving >= state["indexed_rows"]):
                return state
            if time.monotonic() > deadline:
                raise StoreTimeoutError(
                    f"the index of {name!r} covers {state['indexed_rows']:,} of {state['total_rows']:,} rows "
                    f"and serves {state.get('serving_rows', 0):,} after the wait; it keeps building on the "
                    "server, check again later"
                )
            time.sleep(0.5)

    def rebuild_index(
        self,
        name: str,
        index_type: str | None = None,
        metric_type: str | None = None,
        index_params: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Replace the vector index on a server (release, drop, create, load); searches pause
        meanwhile. The metric stays the collection's unless `metric_type` is given: the
        config's default would silently change what "nearest" means for its vectors (L2 made
        COSINE by an index type given alone)."""
        self._require(name)
        metric_type = metric_type or self._spec(name).metric_type
        spec = IndexSpec.from_config(self.config, index_type, metric_type, index_params)
        if not self.is_server:
            raise ConfigError(
                "Milvus Lite cannot change a collection's index; create a new "
                "collection with the index you want and insert into it (or use a Milvus server)"
            )
        client = self._milvus
        self._call(f"releasing {name!r}", client.release_collection, name)
        with self._lock:
            self._loaded.discard(name)
        for index_name in (
            self._call(f"listing the indexes of {name!r}", client.list_indexes, name, VECTOR_FIELD)
            or []
        ):
            self._call(f"dropping the index of {name!r}", client.drop_index, name, index_name)
        self._call(f"indexing {name!r}", client.create_index, name, self._index_params(spec))
        record = json.dumps(
            {
                "index_type": spec.index_type,
                "metric_type": spec.metric_type,
                "params": dict(spec.params),
            }
        )
        self._call(
            f"recording the index of {name!r}",
            client.alter_collection_properties,
            name,
            {PROP_INDEX: record},
        )
        with self._lock:
            self._specs[name] = spec
        self._ensure_loaded(name, force=True)
        return self.describe(name)

    def load_all(self) -> list[str]:
        """Load every collection now (a service does this at start: loading 100k vectors from
        disk takes seconds, which the first searches would otherwise wait for)."""
        names = self.list_collections()
        for name in names:
            self._ensure_loaded(name, force=True)
        return names

    def ping(self) -> dict[str, Any]:
        """Store status for /health: reachable, and how many collections."""
        try:
            return {"ok": True, "uri": self.uri, "collections": len(self.list_collections())}
        except AccelkitError as exc:
            return {"ok": False, "uri": self.uri, "error": str(exc)}
