"""`VectorStore`: image vectors with string ids and JSON metadata in Milvus, through `pymilvus`.

One client serves both deployments: a Milvus Lite database folder (`./accelkit_images.db`,
embedded in this process, the default) or a Milvus server/cluster (`http://host:19530` + token).
A collection has three fields: `id` (VARCHAR primary key, user-given or generated), `vector`
(FLOAT_VECTOR) and `metadata` (JSON, filterable as `metadata["category"] == "nature"`).

Why the details below exist:
* Collections are created with Strong consistency, so a search right after an acknowledged upsert
  sees it (Milvus' default "Bounded" may not).
* A collection that was released, or reopened from disk, must be loaded before search/get/query;
  `_ensure_loaded` does it once per collection and again if Milvus says it is not loaded.
* Inserts are upserts (idempotent by id), sent in `insert_batch_size` rows; duplicate ids within
  one call keep the last row, as a sequence of single upserts would.
* pymilvus logs every failed RPC with a traceback; we turn each failure into one `AccelkitError`
  line, so its logger is quieted.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accelkit.errors import AccelkitError, ConfigError, DataError, InputError, require
from accelkit.images.config import StoreConfig

log = logging.getLogger(__name__)

ID_FIELD, VECTOR_FIELD, METADATA_FIELD = "id", "vector", "metadata"
MAX_ID_LENGTH = 512
PROP_DESCRIPTION, PROP_INDEX = "accelkit.description", "accelkit.index"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")


class StoreError(AccelkitError):
    """The vector store cannot be reached or refused an operation."""


class CollectionNotFoundError(InputError):
    """The named collection does not exist."""


class CollectionExistsError(InputError):
    """A collection of that name exists already."""


@dataclass(frozen=True)
class Hit:
    """One search result: `score` is Milvus' distance (COSINE/IP: larger is closer; L2: smaller)."""

    id: str
    score: float
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "score": self.score, "metadata": self.metadata}


@dataclass(frozen=True)
class IndexSpec:
    """Index type, metric and parameters, for building (`build_params`) and searching (`search_params`)."""

    index_type: str = "HNSW"
    metric_type: str = "COSINE"
    params: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(
        cls,
        config: StoreConfig,
        index_type: str | None = None,
        metric_type: str | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> IndexSpec:
        kind = (index_type or config.index_type).upper()
        metric = (metric_type or config.metric_type).upper()
        if kind not in ("FLAT", "IVF_FLAT", "HNSW"):
            raise ConfigError(f"index_type {kind!r} is not supported; use FLAT, IVF_FLAT or HNSW")
        if metric not in ("COSINE", "IP", "L2"):
            raise ConfigError(f"metric_type {metric!r} is not supported; use COSINE, IP or L2")
        defaults = {
            "FLAT": {},
            "IVF_FLAT": {"nlist": config.nlist, "nprobe": config.nprobe},
            "HNSW": {"M": config.M, "efConstruction": config.efConstruction, "ef": config.ef},
        }[kind]
        given = dict(params or {})
        unknown = sorted(set(given) - set(defaults))
        if unknown:
            allowed = ", ".join(defaults) or "none"
            raise ConfigError(
                f"index parameter {unknown[0]!r} does not apply to {kind}; its parameters: {allowed}"
            )
        merged = {**defaults, **given}
        for key, value in merged.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"index parameter {key}={value!r} must be a positive integer")
        return cls(kind, metric, merged)

    def build_params(self) -> dict[str, Any]:
        return {k: v for k, v in self.params.items() if k in ("nlist", "M", "efConstruction")}

    def search_params(self, topk: int) -> dict[str, Any]:
        if self.index_type == "IVF_FLAT":
            return {"nprobe": min(int(self.params["nprobe"]), int(self.params["nlist"]))}
        if self.index_type == "HNSW":
            return {"ef": max(int(self.params["ef"]), topk)}  # HNSW needs ef >= top-k
        return {}


def check_collection_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InputError(
            f"collection name {name!r} is invalid; use letters, digits and underscores, starting with a letter or _ (at most 255)"
        )
    return name


def check_ids(ids: Sequence[Any]) -> list[str]:
    out = []
    for i, value in enumerate(ids):
        if not isinstance(value, str) or not value:
            raise InputError(f"id #{i} ({value!r}) must be a non-empty string")
        if len(value.encode("utf-8")) > MAX_ID_LENGTH:
            raise InputError(f"id #{i} is longer than {MAX_ID_LENGTH} bytes")
        out.append(value)
    return out


def redact_uri(uri: str) -> str:
    """A URI safe to show: credentials in `user:password@` are hidden."""
    return re.sub(r"//[^/@]*@", "//***@", uri)


def is_local_uri(uri: str) -> bool:
    return "://" not in uri


def _quiet_pymilvus() -> None:
    for name in ("pymilvus", "milvus_lite"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


class VectorStore:
    """Collections of (string id, vector, JSON metadata) in Milvus Lite or a Milvus server.

    ```python
    with VectorStore(StoreConfig(uri="./photos.db")) as store:
        store.create_collection("photos", dim=1280)
        store.upsert("photos", ["a", "b"], vectors, [{"tag": "cat"}, {"tag": "dog"}])
        hits = store.search("photos", query, topk=10, filter_expr='metadata["tag"] == "cat"')[0]
    ```
    Thread-safe: the pymilvus client is, and the loaded-collection cache has a lock.
    """

    def __init__(self, config: StoreConfig | None = None, **overrides: Any):
        self.config = config.model_copy(update=overrides) if config else StoreConfig(**overrides)
        self._loaded: set[str] = set()
        self._specs: dict[str, IndexSpec] = {}
        self._dims: dict[str, int] = {}  # cached: searches should not pay two extra RPCs
        self._lock = threading.Lock()
        self._client = self._connect()

    @property
    def uri(self) -> str:
        return redact_uri(self.config.uri)

    def _connect(self):
        require("pymilvus", "images")
        _quiet_pymilvus()
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
                return MilvusClient(
                    uri=uri, token=self.config.token or "", timeout=self.config.timeout
                )
        except Exception as exc:
            if is_local_uri(uri):
                raise StoreError(
                    f"cannot open the Milvus Lite database {uri}: {_reason(exc)}; another process "
                    "(e.g. a running `accelkit images serve`) may hold it — stop it, or use that service"
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
                if is_local_uri(self.config.uri):
                    # release the embedded server now (and its folder lock), not at process exit
                    try:
                        from milvus_lite.server_manager import server_manager_instance

                        server_manager_instance.release_server(self.config.uri)
                    except Exception:  # older milvus-lite: released at exit
                        pass

    def __enter__(self) -> VectorStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, what: str, fn, *args, **kwargs):
        if self._client is None:
            raise StoreError("this VectorStore is closed")
        try:
            return fn(*args, **kwargs)
        except AccelkitError:
            raise
        except Exception as exc:
            raise StoreError(f"{what} failed: {_reason(exc)}") from exc

    # collections -----------------------------------------------------------------------------

    def list_collections(self) -> list[str]:
        return sorted(self._call("listing collections", self._client.list_collections))

    def has_collection(self, name: str) -> bool:
        return bool(
            self._call(
                f"checking collection {name!r}",
                self._client.has_collection,
                check_collection_name(name),
            )
        )

    def _require(self, name: str) -> None:
        if not self.has_collection(name):
            known = ", ".join(self.list_collections()) or "none"
            raise CollectionNotFoundError(
                f"collection {name!r} does not exist (collections: {known}); create it first"
            )

    def create_collection(
        self,
        name: str,
        dim: int | None = None,
        description: str = "",
        *,
        index_type: str | None = None,
        metric_type: str | None = None,
        index_params: Mapping[str, Any] | None = None,
        exist_ok: bool = False,
    ) -> dict[str, Any]:
        """Create `name` with a `dim`-d vector field (default `store.embedding_dim`); returns `describe(name)`.
        An existing collection raises `CollectionExistsError` unless `exist_ok`, which also checks its dim."""
        check_collection_name(name)
        dim = int(dim or self.config.embedding_dim)
        if dim < 1 or dim > 32768:
            raise InputError(f"dim {dim} must be between 1 and 32768")
        if self.has_collection(name):
            if not exist_ok:
                raise CollectionExistsError(
                    f"collection {name!r} exists already; delete it first or pick another name"
                )
            info = self.describe(name)
            if info["dim"] != dim:
                raise DataError(
                    f"collection {name!r} holds {info['dim']}-d vectors, not {dim}-d; use another collection"
                )
            return info
        spec = IndexSpec.from_config(self.config, index_type, metric_type, index_params)
        from pymilvus import DataType

        client = self._client
        schema = client.create_schema(
            auto_id=False, enable_dynamic_field=False, description=description or ""
        )
        schema.add_field(ID_FIELD, DataType.VARCHAR, is_primary=True, max_length=MAX_ID_LENGTH)
        schema.add_field(VECTOR_FIELD, DataType.FLOAT_VECTOR, dim=dim)
        schema.add_field(METADATA_FIELD, DataType.JSON)
        index = client.prepare_index_params()
        index.add_index(
            VECTOR_FIELD,
            index_type=spec.index_type,
            metric_type=spec.metric_type,
            params=spec.build_params(),
        )
        # Our own record of the description and index spec travels as collection properties:
        # Milvus Lite does not return either from describe_collection/describe_index.
        properties = {
            PROP_DESCRIPTION: description or "",
            PROP_INDEX: json.dumps(
                {
                    "index_type": spec.index_type,
                    "metric_type": spec.metric_type,
                    "params": dict(spec.params),
                }
            ),
        }
        try:
            self._create(name, schema, index, description, properties)
        except StoreError as exc:
            if "local mode only support" in str(exc):
                # Milvus Lite creates the collection before it refuses the index: undo that
                if self._client.has_collection(name):
                    self._client.drop_collection(name)
                raise ConfigError(
                    f"Milvus Lite ({self.uri}) supports the index types FLAT and IVF_FLAT; "
                    f"{spec.index_type} needs a Milvus server (store.uri: http://host:19530)"
                ) from exc
            raise
        self._call(f"loading collection {name!r}", client.load_collection, name)
        with self._lock:
            self._loaded.add(name)
            self._specs[name] = spec
        return self.describe(name)

    def _create(self, name, schema, index, description, properties) -> None:
        self._call(
            f"creating collection {name!r}",
            self._client.create_collection,
            name,
            schema=schema,
            index_params=index,
            consistency_level="Strong",
            description=description or "",
            properties=properties,
        )

    def describe(self, name: str) -> dict[str, Any]:
        """name, description, dim, count, index_type, metric_type, index params."""
        self._require(name)
        info = self._call(f"describing collection {name!r}", self._client.describe_collection, name)
        dim = next(int(f["params"]["dim"]) for f in info["fields"] if f["name"] == VECTOR_FIELD)
        spec = self._spec(name)
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
        }

    def count(self, name: str) -> int:
        """Stored items (upserts of an existing id count once)."""
        self._ensure_loaded(name)
        rows = self._call(
            f"counting {name!r}", self._client.query, name, filter="", output_fields=["count(*)"]
        )
        return int(rows[0]["count(*)"])

    def drop_collection(self, name: str) -> None:
        self._require(name)
        self._call(f"dropping collection {name!r}", self._client.drop_collection, name)
        with self._lock:
            self._loaded.discard(name)
            self._specs.pop(name, None)
            self._dims.pop(name, None)

    def _spec(self, name: str) -> IndexSpec:
        with self._lock:
            if name in self._specs:
                return self._specs[name]
        properties = (
            self._call(
                f"describing collection {name!r}", self._client.describe_collection, name
            ).get("properties")
            or {}
        )
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
        info = (
            self._call(
                f"describing the index of {name!r}", self._client.describe_index, name, VECTOR_FIELD
            )
            or {}
        )
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

    def _ensure_loaded(self, name: str, force: bool = False) -> None:
        with self._lock:
            if name in self._loaded and not force:
                return
        self._require(name)
        self._call(f"loading collection {name!r}", self._client.load_collection, name)
        with self._lock:
            self._loaded.add(name)

    def _with_load(self, name: str, what: str, fn, *args, **kwargs):
        """Run a read; if Milvus says the collection is not loaded (released elsewhere), load and retry once."""
        self._ensure_loaded(name)
        try:
            return self._call(what, fn, *args, **kwargs)
        except StoreError as exc:
            if "load" not in str(exc).lower():
                raise
            self._ensure_loaded(name, force=True)
            return self._call(what, fn, *args, **kwargs)

    # items -----------------------------------------------------------------------------------

    def upsert(
        self,
        name: str,
        ids: Sequence[str],
        vectors: np.ndarray,
        metadata: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> list[str]:
        """Store (or replace) items; returns the ids. Acknowledged means stored: the call returns
        after Milvus has accepted every batch."""
        ids = check_ids(ids)
        vectors = np.asarray(vectors, np.float32)
        if vectors.ndim != 2 or len(vectors) != len(ids):
            raise DataError(
                f"got {len(ids)} ids but vectors of shape {vectors.shape}; need one row per id"
            )
        if not np.isfinite(vectors).all():
            raise DataError("vectors contain NaN or Inf")
        metadata = list(metadata) if metadata is not None else [None] * len(ids)
        if len(metadata) != len(ids):
            raise DataError(f"got {len(ids)} ids but {len(metadata)} metadata entries")
        for i, meta in enumerate(metadata):
            if meta is not None and not isinstance(meta, Mapping):
                raise DataError(
                    f"metadata #{i} must be a JSON object (a mapping), not {type(meta).__name__}"
                )
        if not ids:
            return []
        dim = self.describe_dim(name)
        if vectors.shape[1] != dim:
            raise DataError(f"collection {name!r} holds {dim}-d vectors; got {vectors.shape[1]}-d")
        last = {item_id: i for i, item_id in enumerate(ids)}  # duplicate ids: the last one wins
        order = sorted(last.values())
        rows = [
            {
                ID_FIELD: ids[i],
                VECTOR_FIELD: vectors[i],  # numpy rows: pymilvus packs them ~15 % faster than lists
                METADATA_FIELD: dict(metadata[i] or {}),
            }
            for i in order
        ]
        step = self.config.insert_batch_size
        for start in range(0, len(rows), step):
            self._call(
                f"inserting into {name!r}", self._client.upsert, name, rows[start : start + step]
            )
        return ids

    def describe_dim(self, name: str) -> int:
        with self._lock:
            if name in self._dims:
                return self._dims[name]
        self._require(name)
        info = self._call(f"describing collection {name!r}", self._client.describe_collection, name)
        dim = next(int(f["params"]["dim"]) for f in info["fields"] if f["name"] == VECTOR_FIELD)
        with self._lock:
            self._dims[name] = dim
        return dim

    def search(
        self, name: str, queries: np.ndarray, topk: int = 10, filter_expr: str | None = None
    ) -> list[list[Hit]]:
        """Top-k hits (best first) for each query row, optionally among items matching `filter_expr`."""
        queries = np.asarray(queries, np.float32)
        if queries.ndim == 1:
            queries = queries[None]
        if not isinstance(topk, int) or topk < 1 or topk > 16384:
            raise InputError(f"topk {topk!r} must be an integer between 1 and 16384")
        if not np.isfinite(queries).all():
            raise DataError("query vector contains NaN or Inf")
        dim = self.describe_dim(name)
        if queries.shape[1] != dim:
            raise DataError(
                f"collection {name!r} holds {dim}-d vectors; the query is {queries.shape[1]}-d"
            )
        spec = self._spec(name)
        try:
            results = self._with_load(
                name,
                f"searching {name!r}",
                self._client.search,
                name,
                data=queries.tolist(),
                limit=topk,
                filter=filter_expr or "",
                output_fields=[METADATA_FIELD],
                search_params={"metric_type": spec.metric_type, "params": spec.search_params(topk)},
            )
        except StoreError as exc:
            if filter_expr:
                raise InputError(
                    f"search with filter {filter_expr!r} failed: {str(exc).split(': ', 1)[-1]}"
                ) from exc
            raise
        return [
            [
                Hit(
                    str(h["id"]),
                    float(h["distance"]),
                    dict((h.get("entity") or {}).get(METADATA_FIELD) or {}),
                )
                for h in hits
            ]
            for hits in results
        ]

    def get(
        self, name: str, ids: Sequence[str], with_vectors: bool = False
    ) -> list[dict[str, Any]]:
        """Stored items among `ids` (missing ones are left out), in the order of `ids`."""
        ids = check_ids(ids)
        if not ids:
            return []
        fields = [METADATA_FIELD] + ([VECTOR_FIELD] if with_vectors else [])
        rows = self._with_load(
            name, f"reading from {name!r}", self._client.get, name, ids=ids, output_fields=fields
        )
        by_id = {}
        for row in rows:
            item = {"id": str(row[ID_FIELD]), "metadata": dict(row.get(METADATA_FIELD) or {})}
            if with_vectors:
                item["vector"] = np.asarray(row[VECTOR_FIELD], np.float32)
            by_id[item["id"]] = item
        return [by_id[i] for i in dict.fromkeys(ids) if i in by_id]

    def delete(self, name: str, ids: Sequence[str]) -> int:
        """Delete items by id; returns how many of them existed."""
        ids = list(dict.fromkeys(check_ids(ids)))
        if not ids:
            return 0
        present = len(self.get(name, ids))
        self._with_load(name, f"deleting from {name!r}", self._client.delete, name, ids=ids)
        return present

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


def _reason(exc: BaseException) -> str:
    """pymilvus' exception text without its wrapper: `<MilvusException: (code=1, message=...)>` -> message."""
    text = str(exc)
    found = re.search(r"message=(.*)\)>?$", text, re.S)
    text = found.group(1) if found else text
    return " ".join(text.split()) or type(exc).__name__
