"""What a collection holds and how it is addressed: the three fields, the properties in which
we record the description and the index, `Hit`, `IndexSpec`, and the expressions built from
checked ids (every string escaped, never pasted)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from accelkit.errors import ConfigError
from accelkit.images.settings.config import StoreConfig
from accelkit.images.settings.schema import MAX_INDEX_PARAM, RESERVED_NAMES, check_ids

ID_FIELD, VECTOR_FIELD, METADATA_FIELD = "id", "vector", "metadata"
MAX_ID_LENGTH = (
    512  # the VARCHAR's capacity in the schema; ids themselves are at most 256 characters
)
PROP_DESCRIPTION, PROP_INDEX = "accelkit.description", "accelkit.index"
# Our records of a collection — the model that fills it (`models.model_record`), where a
# migrated collection came from and how far the copy got — travel with the database: on a server
# as collection properties (`accelkit.model`, `accelkit.origin`); on Milvus Lite, which keeps no
# collection properties (it returns none of those given at creation, and cannot alter them), as
# one row per collection of a catalog collection, hidden from listings.
CATALOG = RESERVED_NAMES + "catalog"
# A server's database is known by a random id accelkit keeps in it (the description of this
# hidden, empty collection), not by the URI that reaches it: `localhost` and `127.0.0.1`, a host
# name in capitals, db_name "" and "default" all spell one database (`StoreClient.store_marker`).
MARKER = RESERVED_NAMES + "store"
MARKER_PREFIX = "accelkit store "
RESERVED_PREFIX = RESERVED_NAMES
PROP_MODEL, PROP_ORIGIN = "model", "origin"
RECORD_KEYS = (PROP_MODEL, PROP_ORIGIN)
PROPERTY_PREFIX = "accelkit."
CONSISTENCY_LEVELS = ("Strong", "Session", "Bounded", "Eventually")
# ids in one `id in [...]` expression: one delete of a million ids held Milvus Lite for seconds and
# left it much larger; the service takes at most server.max_ids_per_request ids in a request
ID_BATCH = 1000


@dataclass(frozen=True)
class Hit:
    """One search result: `score` is Milvus' distance (COSINE/IP: larger is closer; L2: smaller)."""

    id: str
    score: float
    metadata: dict[str, Any] = field(default_factory=dict)
    similar: list[str] = field(default_factory=list)  # near-duplicates folded under this one

    def document(self) -> dict[str, Any]:
        out = {"id": self.id, "score": self.score, "metadata": self.metadata}
        return {**out, "similar": self.similar} if self.similar else out


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
            low = 2 if key == "M" else 1
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or not low <= value <= MAX_INDEX_PARAM
            ):
                raise ConfigError(
                    f"index parameter {key}={value!r} must be a whole number from {low} to {MAX_INDEX_PARAM}"
                )
        return cls(kind, metric, merged)

    def build_params(self) -> dict[str, Any]:
        return {k: v for k, v in self.params.items() if k in ("nlist", "M", "efConstruction")}

    def search_params(self, topk: int, filtered: bool = False) -> dict[str, Any]:
        if self.index_type == "IVF_FLAT":
            return {"nprobe": min(int(self.params["nprobe"]), int(self.params["nlist"]))}
        if self.index_type == "HNSW":  # HNSW needs ef >= top-k
            ef = max(int(self.params["ef"]), topk)
            # A filter hides most of the graph's neighbours from the walk: with 10 % of the items
            # matching, recall@10 of the filtered top-10 was 0.78-0.83 at ef 64 and 0.98 at 256
            # (10k clustered 1280-d vectors, Milvus 2.3.5), for about the same latency.
            return {"ef": min(ef * FILTERED_EF_FACTOR, MAX_INDEX_PARAM) if filtered else ef}
        return {}


FILTERED_EF_FACTOR = 4  # a filtered HNSW search walks with this many times `ef`


def literal(text: str) -> str:
    """`text` as a Milvus string literal: double quotes, with backslash and quote escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def ids_filter(ids: Sequence[str]) -> str:
    """`id in ["a", "b"]` for checked ids, every one escaped (defence in depth)."""
    return f"{ID_FIELD} in [{', '.join(literal(i) for i in check_ids(list(ids)))}]"


def redact_uri(uri: str) -> str:
    """A URI safe to show: credentials in `user:password@` are hidden."""
    return re.sub(r"//[^/@]*@", "//***@", uri)


def is_local_uri(uri: str) -> bool:
    return "://" not in uri


def ignored_params(index_type: str, lite: int | None) -> list[str]:
    """The index settings a deployment takes but does not apply (`lite`: the Milvus Lite
    generation, None on a server): Milvus Lite 2.x builds IVF_FLAT and searches it the same
    whatever `nprobe` says (measured: identical results for nprobe 1, 16 and 128;
    tests/images/store/test_store.py); Lite 3 (faiss) applies `nprobe` and HNSW's `ef`, sent with
    each search."""
    return ["nprobe"] if lite == 2 and index_type == "IVF_FLAT" else []


def ignored_warnings(info: Mapping[str, Any]) -> list[str]:
    """One line per ignored setting of a collection (`info`: its description)."""
    params = info.get("index_params") or {}
    return [
        f"collection {info['name']!r}: Milvus Lite ignores {key} ({params.get(key)}) for"
        f" {info['index_type']}, its searches do not change with it; use FLAT for exact results,"
        f" or a Milvus server where {key} applies"
        for key in info.get("ignored") or []
    ]


OUR_FIELDS = {ID_FIELD: "VARCHAR", VECTOR_FIELD: "FLOAT_VECTOR", METADATA_FIELD: "JSON"}


def vector_dim(info: dict[str, Any]) -> int:
    """The vector field's dimension in a collection's description (`describe_collection`), one
    accelkit made (`foreign_fields`)."""
    return next(int(f["params"]["dim"]) for f in info["fields"] if f["name"] == VECTOR_FIELD)


def foreign_fields(info: dict[str, Any]) -> str | None:
    """None for a collection of accelkit's schema (a varchar id, a float vector, JSON metadata,
    and declared fields beside them); else its fields as "name: type, ...", for the refusal of
    one another program made (pymilvus' quick setup: an int64 id and no metadata): its writes,
    reads by id and filters would fail or match nothing."""
    kinds = {
        str(f["name"]): str(getattr(f.get("type"), "name", f.get("type"))) for f in info["fields"]
    }
    if all(kinds.get(name) == kind for name, kind in OUR_FIELDS.items()):
        return None
    return ", ".join(f"{name}: {kind.lower()}" for name, kind in kinds.items())
