"""Our records of a collection (the model that fills it, where a migration copies it from) and
the store's marker: on a server as collection properties, on Milvus Lite as rows of a hidden
catalog collection (`records.CATALOG`, `records.MARKER`), read through `client.StoreClient`'s
connection and caches."""

from __future__ import annotations

import json
import uuid
from typing import Any

from accelkit.images.store.client import StoreClient
from accelkit.images.store.errors import StoreError
from accelkit.images.store.lite import clear_aborted_collection
from accelkit.images.store.records import (
    CATALOG,
    ID_FIELD,
    MARKER,
    MARKER_PREFIX,
    MAX_ID_LENGTH,
    METADATA_FIELD,
    PROPERTY_PREFIX,
    RECORD_KEYS,
    VECTOR_FIELD,
    ids_filter,
)


class CollectionRecords(StoreClient):
    """Read and write our records of a collection; the store's marker."""

    def recorded(
        self, name: str, key: str, fresh: bool = False, info: dict[str, Any] | None = None
    ) -> dict[str, Any] | None:
        """One of our records of a collection (`records.PROP_MODEL`, `PROP_ORIGIN`), or None
        when it has none (made before we recorded it, or by another program). A server keeps
        them as collection properties (`accelkit.<key>`); Milvus Lite, which keeps no
        properties, in the catalog collection of its database. Kept after the first read;
        `fresh` reads a server's again (another client may have made the collection anew since);
        on Milvus Lite only this process's stores write them, and a kept one is forgotten when any
        of them does (`StoreClient._current`). `info`: a server collection's description the
        caller has just read (`described`), its records taken from it (no round trip)."""
        self._current()
        with self._lock:
            cached = None if fresh and self.is_server else self._records.get(name)
        if info is not None and self.is_server:  # the description the caller has just read
            cached = self._records_in(info)
            with self._lock:
                self._records[name] = cached
        elif cached is None:
            self._require(name)
            cached = (
                self._records_in(self._describe_now(name))
                if self.is_server
                else self._catalog_records(name)
            )
            with self._lock:
                self._records[name] = cached
        value = cached.get(key)
        return value if isinstance(value, dict) else None

    def record(self, name: str, records: dict[str, Any], replace: bool = False) -> None:
        """Keep `records` (JSON objects by key) for collection `name`, replacing the keys given
        (`replace`: all of them — a new collection inherits nothing of an old one's)."""
        if not records and not (replace and not self.is_server):
            return
        if self.is_server:
            self._call(
                f"recording {name!r}",
                self._milvus.alter_collection_properties,
                name,
                {
                    f"{PROPERTY_PREFIX}{k}": json.dumps(v, sort_keys=True)
                    for k, v in records.items()
                },
            )
        elif replace and not records:
            self._forget(name)
        else:
            merged = records if replace else {**(self._catalog_records(name) or {}), **records}
            self._catalog_write(name, merged)
        self._changed()
        with self._lock:
            self._records.pop(name, None)

    @staticmethod
    def _records_in(info: dict[str, Any]) -> dict[str, Any]:
        """Our records among a server collection's properties (its description)."""
        found = {}
        for prop, text in (info.get("properties") or {}).items():
            key = str(prop).removeprefix(PROPERTY_PREFIX)
            if str(prop).startswith(PROPERTY_PREFIX) and key in RECORD_KEYS:
                try:
                    found[key] = json.loads(text)
                except ValueError:
                    continue
        return found

    def _catalog_records(self, name: str) -> dict[str, Any]:
        if not self.has_collection(CATALOG):
            return {}
        rows = self._with_load(
            CATALOG,
            "reading the catalog",
            self._milvus.query,
            CATALOG,
            filter=ids_filter([name]),
            output_fields=[METADATA_FIELD],
            consistency_level="Strong",
        )
        return dict(rows[0].get(METADATA_FIELD) or {}) if rows else {}

    def _catalog_write(self, name: str, records: dict[str, Any]) -> None:
        """The catalog row of collection `name` (Milvus Lite), the catalog made on first use."""
        if not self.has_collection(CATALOG):
            from pymilvus import DataType

            schema = self._milvus.create_schema(auto_id=False, enable_dynamic_field=False)
            schema.add_field(ID_FIELD, DataType.VARCHAR, is_primary=True, max_length=MAX_ID_LENGTH)
            schema.add_field(VECTOR_FIELD, DataType.FLOAT_VECTOR, dim=2)  # Milvus needs one
            schema.add_field(METADATA_FIELD, DataType.JSON)
            index = self._milvus.prepare_index_params()
            index.add_index(VECTOR_FIELD, index_type="FLAT", metric_type="L2")
            if self.lite == 3 and self._engine is not None:
                clear_aborted_collection(self._engine, CATALOG)
            self._call(
                "creating the catalog",
                self._milvus.create_collection,
                CATALOG,
                schema=schema,
                index_params=index,
                consistency_level="Strong",
            )
        row = {ID_FIELD: name, VECTOR_FIELD: [0.0, 0.0], METADATA_FIELD: records}
        self._with_load(CATALOG, "writing the catalog", self._milvus.upsert, CATALOG, [row])

    def store_marker(self, create: bool = False) -> str | None:
        """The random id accelkit keeps in this server database (`records.MARKER`), made first
        when `create` and it has none; None when it has none. Two clients that read one id are
        on one database, however their URIs and database names are spelled."""
        if self.has_collection(MARKER):
            return self._marker_id()
        if not create:
            return None

        from pymilvus import DataType

        schema = self._milvus.create_schema(
            auto_id=False,
            enable_dynamic_field=False,
            description=f"{MARKER_PREFIX}{uuid.uuid4().hex}",
        )
        schema.add_field(ID_FIELD, DataType.VARCHAR, is_primary=True, max_length=MAX_ID_LENGTH)
        schema.add_field(VECTOR_FIELD, DataType.FLOAT_VECTOR, dim=2)  # Milvus needs one
        try:
            self._call(
                "marking the store",
                self._milvus.create_collection,
                MARKER,
                schema=schema,
                description=schema.description,
            )
        except StoreError:
            if not self.has_collection(MARKER):  # else another client made it first: its id
                raise
        return self._marker_id()

    def _marker_id(self) -> str | None:
        info = self._call("reading the store's marker", self._milvus.describe_collection, MARKER)
        text = str(info.get("description") or "")
        return text.removeprefix(MARKER_PREFIX) if text.startswith(MARKER_PREFIX) else None

    def _forget(self, name: str) -> None:
        """Remove a dropped collection's records (a server's went with its properties)."""
        with self._lock:
            self._records.pop(name, None)
        if not self.is_server and self.has_collection(CATALOG):
            self._with_load(
                CATALOG,
                "writing the catalog",
                self._milvus.delete,
                CATALOG,
                filter=ids_filter([name]),
            )
            self._changed()
