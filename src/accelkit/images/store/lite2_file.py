"""A Milvus Lite 2.x database file read without its engine, and which engine a database needs.

Milvus Lite 2.x keeps a database in one SQLite file; Lite 3.x keeps it in a directory and cannot
open a 2.x file, and both engines are the module `milvus_lite`, so one environment never has
both. `Lite2File` reads a 2.x file with the standard library's `sqlite3` (opened read-only: the
file is never written) and pymilvus' protobufs, so `accelkit images migrate` copies it into a
Lite 3 store with nothing but Lite 3 installed.

The format (milvus-lite 2.5.1, read back in tests/images/store/test_lite2_file.py against the
engine's own answers):
* `collection_meta(id, collection_name, meta_type, blob_field, string_field)`: per collection a
  `schema` row (a `CollectionSchema` protobuf: name, description, fields) and an `index` row
  (field id, index id, field name, then `KeyValuePair`s: index_type, metric_type, nlist, dim).
* one table per collection, named after it: `(id INTEGER PRIMARY KEY, milvus_id, data)`, one
  live row per item. An upsert deletes the old row and appends a new one; a delete removes the
  row (no tombstones). `data` is segcore's `InsertRecord`: repeated `FieldData` (field 1) and
  `num_rows` (field 2). A plain `insert` of an existing id (never done by accelkit) leaves two
  rows; the engine's query answers the later one, and so does this reader.
* accelkit's records (model, origin) are the `metadata` of the catalog collection's row named
  after the collection (`records.CATALOG`); Lite keeps no collection properties.

Which engine a database needs is told apart before an engine is asked to open it
(`lite.lite_format`, `lite.check_lite_format`).
"""

from __future__ import annotations

import json
import os
import shlex
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import quote

import numpy as np

from accelkit.errors import DataError, InputError
from accelkit.images.settings.config import StoreConfig
from accelkit.images.settings.fields import declared_from_schema, presence_field, value_field
from accelkit.images.settings.schema import check_ids
from accelkit.images.store.errors import CollectionNotFoundError
from accelkit.images.store.lite import check_lite_free, is_sqlite
from accelkit.images.store.records import (
    CATALOG,
    ID_FIELD,
    METADATA_FIELD,
    RESERVED_PREFIX,
    VECTOR_FIELD,
    IndexSpec,
    ignored_params,
    redact_uri,
)

INTERNAL_FIELDS = ("RowID", "Timestamp")  # every 2.x row carries them; not the user's
READ_ROWS = 500  # rows fetched from SQLite at a time
DAMAGED = "a damaged or partly copied file: copy it again from where it came from"


@dataclass(frozen=True)
class Field:
    """One field of a 2.x collection's schema: name, type (pymilvus' DataType name), id, and
    its type parameters (`dim`, `max_length`)."""

    name: str
    type: str
    field_id: int
    primary: bool
    params: dict[str, str]


@dataclass(frozen=True)
class Schema:
    name: str
    description: str
    fields: tuple[Field, ...]

    @property
    def primary(self) -> Field:
        return next(f for f in self.fields if f.primary)

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)


SCALARS = {  # DataType name -> the ScalarField member holding its values
    "Bool": "bool_data",
    "Int8": "int_data",
    "Int16": "int_data",
    "Int32": "int_data",
    "Int64": "long_data",
    "Float": "float_data",
    "Double": "double_data",
    "VarChar": "string_data",
    "String": "string_data",
}


def _wire(blob: bytes) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of a protobuf message: a varint's int, or the bytes of a
    length-delimited field; ValueError for anything else or a torn message."""
    at, end = 0, len(blob)

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            if at >= end or shift > 63:
                raise ValueError("a varint runs past the end")
            byte = blob[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while at < end:
        key = varint()
        number, kind = key >> 3, key & 7
        if kind == 0:
            yield number, kind, varint()
        elif kind == 2:
            size = varint()
            if at + size > end:
                raise ValueError("a field runs past the end")
            yield number, kind, blob[at : at + size]
            at += size
        else:
            raise ValueError(f"wire type {kind} of field {number} is not one Milvus Lite writes")


class Lite2File:
    """A Milvus Lite 2.x database file, read-only: its collections, their schema and index, and
    their rows. Anything it does not understand (a field type it does not decode, a torn row, a
    file that is not Milvus Lite's) is refused with one line naming the file and collection."""

    def __init__(self, path: str):
        self.path = os.path.expanduser(path)
        if not is_sqlite(self.path):
            raise InputError(
                f"{path} is not a Milvus Lite 2.x database (no SQLite header); name the .db"
                " file a Lite 2.x store wrote"
            )
        check_lite_free(self.path)  # an engine writing it now: refused, naming its process
        uri = f"file:{quote(os.path.abspath(self.path))}?mode=ro"
        try:
            self._db = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self._db.text_factory = bytes
            checked = self._db.execute("PRAGMA quick_check").fetchall()
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master")}
        except sqlite3.Error as exc:
            journal = f"{self.path}-journal"
            if os.path.exists(journal):  # a hot journal: only a writer may roll it back
                undo = (
                    f"import sqlite3; sqlite3.connect({self.path!r}).execute('PRAGMA quick_check')"
                )
                raise DataError(
                    f"Milvus Lite 2.x file {self.path} holds a write its engine did not finish"
                    f" ({journal}); let SQLite undo it, then run again:"
                    f" {shlex.join(['python3', '-c', undo])}"
                ) from exc
            self._fail(f"SQLite cannot read it ({exc})")
        if checked != [(b"ok",)]:
            self._fail(f"SQLite finds it damaged ({checked[0][0].decode(errors='replace')})")
        if b"collection_meta" not in tables:
            self._fail(
                "it is a SQLite file without Milvus Lite's collection_meta table",
                fix="name the .db file a Lite 2.x store wrote",
            )
        self._tables = {t.decode(errors="replace") for t in tables}
        self._schemas: dict[str, Schema] = {}
        self._rows: dict[str, dict[Any, int]] = {}  # primary key -> SQLite rowid, per collection

    def _fail(self, why: str, collection: str | None = None, fix: str = DAMAGED) -> NoReturn:
        where = f"collection {collection!r} of " if collection else ""
        raise DataError(f"{where}Milvus Lite 2.x file {self.path}: {why}; {fix}")

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Lite2File:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _query(
        self, sql: str, args: Sequence[Any] = (), collection: str | None = None
    ) -> list[Any]:
        try:
            return self._db.execute(sql, tuple(args)).fetchall()
        except sqlite3.Error as exc:
            self._fail(f"SQLite cannot read it ({exc})", collection)

    def _meta(self, name: str, kind: str) -> bytes | None:
        rows = self._query(
            "SELECT blob_field FROM collection_meta WHERE collection_name = ? AND meta_type = ?"
            " ORDER BY id DESC LIMIT 1",
            (name, kind),
            name,
        )
        return bytes(rows[0][0]) if rows else None

    def collections(self, hidden: bool = False) -> list[str]:
        """The collections' names, sorted (accelkit's own, `_accelkit_*`, only when `hidden`)."""
        rows = self._query(
            "SELECT DISTINCT collection_name FROM collection_meta WHERE meta_type = ?", ("schema",)
        )
        names = sorted(r[0].decode() for r in rows)
        return [n for n in names if hidden or not n.startswith(RESERVED_PREFIX)]

    def schema(self, name: str) -> Schema:
        if name in self._schemas:
            return self._schemas[name]
        blob = self._meta(name, "schema")
        if blob is None or name not in self._tables:
            known = ", ".join(self.collections()) or "none"
            raise CollectionNotFoundError(
                f"collection {name!r} is not in {self.path} (its collections: {known})"
            )
        from pymilvus.grpc_gen import schema_pb2

        parsed = schema_pb2.CollectionSchema()
        try:
            parsed.ParseFromString(blob)
        except Exception as exc:
            self._fail(f"its schema does not decode ({exc})", name)
        fields = tuple(
            Field(
                f.name,
                schema_pb2.DataType.Name(f.data_type),
                f.fieldID,
                f.is_primary_key,
                {p.key: p.value for p in f.type_params},
            )
            for f in parsed.fields
            if f.name not in INTERNAL_FIELDS
        )
        if sum(f.primary for f in fields) != 1:
            self._fail("its schema has no single primary key", name)
        for f in fields:
            if f.type not in SCALARS and f.type not in ("JSON", "FloatVector"):
                self._fail(
                    f"field {f.name!r} is of type {f.type}, which this reader does not decode"
                    " (it reads Bool, integers, Float, Double, VarChar, JSON, FloatVector)",
                    name,
                    "copy the other collections (--collection), or this one with the 2.x engine",
                )
        schema = Schema(parsed.name, parsed.description, fields)
        self._schemas[name] = schema
        return schema

    def index(self, name: str) -> dict[str, str]:
        """The vector index's parameters as the engine keeps them (index_type, metric_type,
        nlist, dim ...); {} when the collection has none."""
        self.schema(name)
        blob = self._meta(name, "index")
        if blob is None:
            return {}
        params: dict[str, str] = {}
        try:
            for number, kind, value in _wire(blob):
                if number == 5 and kind == 2:  # a KeyValuePair: key 1, value 2
                    pair = {n: v for n, k, v in _wire(value) if k == 2}
                    params[pair.get(1, b"").decode()] = pair.get(2, b"").decode()
        except (ValueError, UnicodeDecodeError) as exc:
            self._fail(f"its index record does not decode ({exc})", name)
        return params

    def _ids(self, name: str) -> dict[Any, int]:
        """Every item's primary key -> its SQLite rowid (an id stored twice: the later row,
        as the engine's query answers), in ascending key order."""
        if name in self._rows:
            return self._rows[name]
        primary = self.schema(name).primary
        table = name.replace('"', '""')
        found: dict[Any, int] = {}
        for rowid, key in self._query(f'SELECT id, milvus_id FROM "{table}" ORDER BY id', (), name):
            try:
                text = bytes(key).decode()
                found[int(text) if primary.type == "Int64" else text] = rowid
            except (ValueError, TypeError):
                self._fail(f"row {rowid} has the primary key {key!r}", name)
        self._rows[name] = dict(sorted(found.items()))
        return self._rows[name]

    def count(self, name: str) -> int:
        return len(self._ids(name))

    def keys(self, name: str) -> list[Any]:
        """Every item's primary key, ascending."""
        return list(self._ids(name))

    def rows(
        self,
        name: str,
        batch_size: int = 1000,
        after: Any = None,
        keys: Sequence[Any] | None = None,
    ) -> Iterator[list[dict[str, Any]]]:
        """The items (`keys`, or all after `after`) as {field: value} in batches of at most
        `batch_size`, ascending by primary key (`keys` in their order; missing ones left out).
        A FloatVector is a float32 array with the stored bits; a JSON field a parsed value."""
        by_key = self._ids(name)
        wanted = (
            [k for k in keys if k in by_key]
            if keys is not None
            else [k for k in by_key if after is None or k > after]
        )
        for start in range(0, len(wanted), batch_size):
            part = wanted[start : start + batch_size]
            decoded: dict[int, dict[str, Any]] = {}
            for chunk in range(0, len(part), READ_ROWS):
                rowids = [by_key[k] for k in part[chunk : chunk + READ_ROWS]]
                marks = ", ".join("?" * len(rowids))
                table = name.replace('"', '""')
                for rowid, data in self._query(
                    f'SELECT id, data FROM "{table}" WHERE id IN ({marks})', rowids, name
                ):
                    decoded[rowid] = self._decode(name, rowid, bytes(data))
            primary = self.schema(name).primary.name
            for key in part:
                if by_key[key] not in decoded or decoded[by_key[key]][primary] != key:
                    self._fail(f"row {by_key[key]} holds another primary key than {key!r}", name)
            yield [decoded[by_key[k]] for k in part]

    def _decode(self, name: str, rowid: int, data: bytes) -> dict[str, Any]:
        """One row's `InsertRecord`: its fields by name (the engine's RowID/Timestamp left out)."""
        from pymilvus.grpc_gen import schema_pb2

        schema = self.schema(name)
        row: dict[str, Any] = {}
        try:
            parts = list(_wire(data))
            count = next((v for n, k, v in parts if n == 2 and k == 0), None)
            if count != 1 or any((n, k) not in ((1, 2), (2, 0)) for n, k, _ in parts):
                raise ValueError(f"{count} rows in one record, or fields it does not know")
            for _, _, blob in (p for p in parts if p[0] == 1):
                field = schema_pb2.FieldData.FromString(blob)
                if field.field_name in INTERNAL_FIELDS:
                    continue
                known = schema.field(field.field_name)
                kind = schema_pb2.DataType.Name(field.type)
                if known is None or known.type != kind:
                    raise ValueError(f"field {field.field_name!r} ({kind}) is not in its schema")
                if list(field.valid_data) and not all(field.valid_data):
                    raise ValueError(f"field {field.field_name!r} holds a null")
                row[field.field_name] = _value(field, kind)
        except Exception as exc:
            self._fail(f"row {rowid} does not decode ({exc})", name)
        missing = [f.name for f in schema.fields if f.name not in row]
        if missing:
            self._fail(f"row {rowid} lacks the field {missing[0]!r}", name)
        return row


def _value(field, kind: str) -> Any:
    """The one value a `FieldData` of one row holds."""
    if kind == "FloatVector":
        dim = field.vectors.dim
        values = np.asarray(field.vectors.float_vector.data, np.float32)
        if dim < 1 or values.shape != (dim,):
            raise ValueError(f"vector of {values.size} values for dim {dim}")
        return values
    if kind == "JSON":
        (text,) = field.scalars.json_data.data
        return json.loads(text)
    (value,) = getattr(field.scalars, SCALARS[kind]).data
    return value


class Lite2Store:
    """A Milvus Lite 2.x file as `migrate` reads a source store (the `VectorStore` calls it
    makes: list, describe, records, count, iterate, get), for collections accelkit made (fields
    `id` VARCHAR, `vector` FLOAT_VECTOR, `metadata` JSON); read-only."""

    is_server = False

    def __init__(self, config: StoreConfig):
        self.config = config
        self.file = Lite2File(config.uri)

    @property
    def uri(self) -> str:
        return redact_uri(self.config.uri)

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> Lite2Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def list_collections(self) -> list[str]:
        return self.file.collections()

    def has_collection(self, name: str) -> bool:
        return name in self.file.collections(hidden=True)

    def _accelkit(self, name: str) -> Schema:
        """The schema of `name`, checked as one accelkit made: id, vector, metadata, and the
        value and presence fields of the filter keys it declares (`settings.fields`)."""
        schema = self.file.schema(name)
        shape = [(f.name, f.type) for f in schema.fields]
        declared = declared_from_schema([{"name": n, "type": t} for n, t in shape])
        extra = {(value_field(k), presence_field(k)) for k in declared}
        if shape[:3] != [
            (ID_FIELD, "VarChar"),
            (VECTOR_FIELD, "FloatVector"),
            (METADATA_FIELD, "JSON"),
        ] or {n for n, _ in shape[3:]} != {n for pair in extra for n in pair}:
            fields = ", ".join(f"{n} {t}" for n, t in shape)
            raise InputError(
                f"collection {name!r} of {self.file.path} was not made by accelkit (fields"
                f" {fields}; accelkit's are id VarChar, vector FloatVector, metadata JSON, and"
                " field_KEY/has_KEY pairs of declared filter keys); migrate the others with"
                " --collection"
            )
        return schema

    def declared_fields(self, name: str) -> dict[str, str]:
        """The filter fields collection `name` declares, from its schema."""
        shape = [{"name": f.name, "type": f.type} for f in self._accelkit(name).fields]
        return declared_from_schema(shape)

    def describe_dim(self, name: str) -> int:
        vector = self._accelkit(name).field(VECTOR_FIELD)
        assert vector is not None  # `_accelkit` checked the fields
        return int(vector.params["dim"])

    def describe(self, name: str) -> dict[str, Any]:
        """What `VectorStore.describe` answers on the 2.x engine: Lite keeps no properties, so
        the index is the engine's (IVF_FLAT's nprobe from the config, as there)."""
        schema = self._accelkit(name)
        index = self.file.index(name)
        kind = index.get("index_type", "FLAT").upper()
        params: dict[str, Any] = {}
        if kind == "IVF_FLAT":
            nlist = index.get("nlist", "")
            params = {
                "nlist": int(nlist) if nlist.isdigit() else self.config.nlist,
                "nprobe": self.config.nprobe,
            }
        spec = IndexSpec(kind, index.get("metric_type", self.config.metric_type).upper(), params)
        return {
            "name": name,
            "description": schema.description,
            "dim": self.describe_dim(name),
            "count": self.count(name),
            "index_type": spec.index_type,
            "metric_type": spec.metric_type,
            "index_params": dict(spec.params),
            "ignored": ignored_params(spec.index_type, 2),
            "model": self.recorded(name, "model"),
            "fields": self.declared_fields(name),
        }

    def recorded(self, name: str, key: str, fresh: bool = False) -> dict[str, Any] | None:
        """accelkit's record `key` of collection `name`: its catalog row's metadata."""
        self._accelkit(name)
        if CATALOG not in self.file.collections(hidden=True):
            return None
        rows = [r for batch in self.file.rows(CATALOG, keys=[name]) for r in batch]
        value = (rows[0][METADATA_FIELD] or {}).get(key) if rows else None
        return value if isinstance(value, dict) else None

    def count(self, name: str, consistency: str | None = None) -> int:
        self._accelkit(name)
        return self.file.count(name)

    def iterate(
        self, name: str, batch_size: int = 1000, after: str | None = None, ids_only: bool = False
    ) -> Iterator[list[dict[str, Any]]]:
        """Every item in batches, ascending by id from the one after `after` (as the engine's
        query iterator pages)."""
        self._accelkit(name)
        if ids_only:
            keys = [k for k in self.file.keys(name) if after is None or k > after]
            for start in range(0, len(keys), batch_size):
                yield [{"id": k} for k in keys[start : start + batch_size]]
            return
        for rows in self.file.rows(name, batch_size, after=after):
            yield [_item(row) for row in rows]

    def get(
        self,
        name: str,
        ids: Sequence[str],
        with_vectors: bool = False,
        consistency: str | None = None,
    ) -> list[dict[str, Any]]:
        """Stored items among `ids`, in their order (missing ones left out)."""
        self._accelkit(name)
        ids = list(dict.fromkeys(check_ids(list(ids))))
        found = [_item(r) for rows in self.file.rows(name, len(ids) or 1, keys=ids) for r in rows]
        return (
            found
            if with_vectors
            else [{k: v for k, v in i.items() if k != "vector"} for i in found]
        )


def _item(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": str(row[ID_FIELD]),
        "vector": row[VECTOR_FIELD],
        "metadata": dict(row[METADATA_FIELD] or {}),
    }
