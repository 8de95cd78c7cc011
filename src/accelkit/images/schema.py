"""What `accelkit images` accepts, checked once: ids, collection names, filters, metadata, top-k,
and the request bodies built from them (shared by the HTTP service, its OpenAPI schema, the CLI
and the Python API).

Why the rules are this strict:
* **Ids** travel into Milvus expressions (`id in [...]`) and, inside Milvus Lite, into SQL. An
  id of `x') OR ('1'='1` once emptied a collection. Ids are therefore 1-256 characters from
  `A-Z a-z 0-9 . _ - : / @ + = ~` (no quotes, backslashes, spaces or control characters), and
  every expression we build escapes its strings anyway.
* **Collection names** are matched whole (`re.fullmatch`: a trailing newline is not a name).
* **Filters** stay user expressions by design (`metadata["album"] == "2026"`), so they can only
  narrow a search; they are bounded in length, free of control characters, and run under the
  store's timeout.
* **Metadata** is a JSON object of bounded size and depth (Milvus stores JSON up to 64 KiB).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
)

from accelkit.errors import DataError, InputError
from accelkit.images.filters import FilterSyntaxError, check_syntax

ID_CHARACTERS = "A-Z a-z 0-9 . _ - : / @ + = ~"
MAX_ID_CHARS = 256
MAX_NAME_CHARS = 255
MAX_FILTER_CHARS = 4096
MAX_METADATA_BYTES = 16_384
MAX_METADATA_DEPTH = 8
MAX_DESCRIPTION_CHARS = 1024
MAX_INDEX_PARAM = 65_536  # nlist, nprobe, M, efConstruction, ef: Milvus' ranges end at or below
MIN_DIM, MAX_DIM = 2, 32_768  # Milvus' own range for a float vector
SOURCE_KEY = "source"  # metadata key that records where an inserted image came from

_ID = re.compile(r"[A-Za-z0-9._:/@+=~-]{1,256}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _shown(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_id(value: Any, where: str = "id") -> str:
    """`value` if it is a valid item id, else `InputError` naming it and the rule."""
    if not isinstance(value, str):
        raise InputError(f"{where} must be a string, not {type(value).__name__}")
    if not _ID.fullmatch(value):
        if not value:
            reason = "is empty"
        elif len(value) > MAX_ID_CHARS:
            reason = f"has {len(value)} characters (at most {MAX_ID_CHARS})"
        else:
            bad = next(ch for ch in value if not _ID.fullmatch(ch))
            reason = f"contains {bad!r}"
        raise InputError(
            f"{where} {_shown(value)} {reason}; ids are 1-{MAX_ID_CHARS} characters from {ID_CHARACTERS}"
        )
    return value


def check_ids(values: Any, where: str = "ids") -> list[str]:
    if not isinstance(values, (list, tuple)):
        raise InputError(f"{where} must be a list of ids")
    return [check_id(v, f"{where}[{i}]") for i, v in enumerate(values)]


def check_collection_name(name: Any, where: str = "collection") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InputError(
            f"{where} name {_shown(name)} is invalid; use letters, digits and underscores, "
            f"starting with a letter or _ (at most {MAX_NAME_CHARS})"
        )
    return name


def check_filter(expr: Any, where: str = "filter") -> str | None:
    """A filter expression, bounded, printable, and one whole expression of the grammar in
    `accelkit.images.filters` (Milvus silently drops what follows a complete expression);
    None or "" means no filter."""
    if expr is None or expr == "":
        return None
    if not isinstance(expr, str):
        raise InputError(f'{where} must be a string such as metadata["album"] == "2026"')
    if len(expr) > MAX_FILTER_CHARS:
        raise InputError(
            f"{where} has {len(expr):,} characters, over the limit of {MAX_FILTER_CHARS:,}; "
            "filter on a metadata field instead of listing many values"
        )
    if _CONTROL.search(expr):
        raise InputError(f"{where} contains a control character; send a plain one-line expression")
    try:
        check_syntax(expr)
    except FilterSyntaxError as exc:
        raise InputError(f"{where} {_shown(expr, 60)} is not one expression: {exc}") from None
    return expr


def _depth(value: Any, level: int = 0) -> int:
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level


def _out_of_range_int(value: Any) -> int | None:
    """An integer that Milvus' JSON field cannot hold (outside int64), anywhere in `value`."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if not -(2**63) <= value < 2**63 else None
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            found = _out_of_range_int(item)
            if found is not None:
                return found
    return None


def check_metadata(value: Any, where: str = "metadata") -> dict[str, Any]:
    """A JSON object within the size and depth limits, its integers within int64 (None means {})."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise DataError(f"{where} must be a JSON object, not {type(value).__name__}")
    if _depth(value) > MAX_METADATA_DEPTH:
        raise DataError(f"{where} is nested deeper than {MAX_METADATA_DEPTH} levels")
    big = _out_of_range_int(value)
    if big is not None:
        raise DataError(
            f"{where} holds the integer {_shown(big, 30)}, outside the 64-bit range Milvus stores; "
            "send it as a string or a float"
        )
    try:
        size = len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode())
    except (TypeError, ValueError) as exc:
        raise DataError(f"{where} is not plain JSON ({exc})") from exc
    if size > MAX_METADATA_BYTES:
        raise DataError(
            f"{where} is {size:,} bytes of JSON, over the limit of {MAX_METADATA_BYTES:,}"
        )
    return value


def check_description(value: Any, where: str = "description") -> str:
    if not isinstance(value, str):
        raise InputError(f"{where} must be a string")
    if len(value) > MAX_DESCRIPTION_CHARS:
        raise InputError(
            f"{where} has {len(value):,} characters, over the limit of {MAX_DESCRIPTION_CHARS:,}"
        )
    if _CONTROL.search(value):
        raise InputError(f"{where} contains a control character")
    return value


def _pydantic(check):
    """Run an accelkit check inside a pydantic model: its message becomes the field's error."""

    def validate(value):
        try:
            return check(value)
        except InputError as exc:
            raise ValueError(str(exc)) from None

    return AfterValidator(validate)


ItemId = Annotated[str, _pydantic(check_id)]
CollectionName = Annotated[str, _pydantic(check_collection_name)]
FilterExpr = Annotated[str | None, _pydantic(check_filter)]
Description = Annotated[str, _pydantic(check_description)]
Consistency = Literal["Strong", "Session", "Bounded", "Eventually"]
IndexType = Literal["FLAT", "IVF_FLAT", "HNSW"]
MetricType = Literal["COSINE", "IP", "L2"]


_COLLECTION = AliasChoices(
    "collection", "collection_name"
)  # one name everywhere; EmbeddingTrident's kept
_FILTER = AliasChoices("filter", "filter_expr")


class Body(BaseModel):
    """Request bodies: unknown fields are errors; no type coercion ("false" is not a boolean)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ImageItem(Body):
    """One image: exactly one of `image_base64`, `path` (server-side, under allowed roots) or
    `url` (only with `allow_urls`); `input` is EmbeddingTrident's path-or-URL."""

    image_base64: str | None = Field(
        None, description="image file bytes, base64 (a data: URL works too)"
    )
    path: str | None = Field(None, description="server-side path under server.allowed_roots")
    url: str | None = Field(None, description="http(s) URL, only with server.allow_urls")
    input: str | None = Field(None, description="EmbeddingTrident's form: a server path or URL")
    # ids and metadata are checked per item (a bad one fails its own item, not the request)
    id: str | None = Field(
        None,
        description=f"1-{MAX_ID_CHARS} characters from {ID_CHARACTERS}; default: from the image bytes",
    )
    metadata: dict[str, Any] | None = Field(
        None, description=f"JSON object; `{SOURCE_KEY}` is filled with the file name unless given"
    )


class InsertRequest(Body):
    collection: CollectionName | None = Field(
        None,
        validation_alias=_COLLECTION,
        description="default: the service's store.collection_name",
    )
    create_collection: StrictBool = False
    items: list[ImageItem] | None = None
    inputs: list[str] | None = Field(
        None, description="EmbeddingTrident's form: server paths or URLs"
    )
    images_base64: list[str] | None = None
    ids: list[str | None] | None = Field(
        None, description="one per image, with inputs/images_base64/files"
    )
    metadata: list[dict[str, Any] | None] | None = Field(
        None, description="one per image, with inputs/images_base64/files"
    )
    batch_size: StrictInt | None = Field(
        None,
        ge=1,
        description="accepted from EmbeddingTrident's clients; batching is automatic",
    )


class SearchRequest(Body):
    collection: CollectionName | None = Field(None, validation_alias=_COLLECTION)
    image_base64: str | None = None
    path: str | None = None
    url: str | None = None
    input: str | None = None
    query: str | None = Field(None, description="EmbeddingTrident's form: a server path or URL")
    query_input: str | None = None
    vector: list[float] | None = None
    topk: StrictInt = Field(10, ge=1)
    filter: FilterExpr = Field(
        None,
        validation_alias=_FILTER,
        json_schema_extra={"example": 'metadata["category"] == "nature"'},
    )
    consistency: Consistency | None = Field(None, description="default: store.search_consistency")


class DeleteRequest(Body):
    collection: CollectionName | None = Field(None, validation_alias=_COLLECTION)
    ids: list[ItemId] | None = None
    filter: FilterExpr = Field(
        None,
        validation_alias=_FILTER,
        description="delete every item that matches (EmbeddingTrident's form)",
    )


class CreateCollectionRequest(Body):
    name: CollectionName | None = None
    collection: CollectionName | None = Field(None, validation_alias=_COLLECTION)
    dim: StrictInt | None = Field(None, ge=MIN_DIM, le=MAX_DIM)
    description: Description = ""
    index_type: IndexType | None = None
    metric_type: MetricType | None = None
    index_params: dict[str, Annotated[StrictInt, Field(ge=1, le=MAX_INDEX_PARAM)]] | None = None
    exist_ok: StrictBool = False


class EmbedRequest(Body):
    """EmbeddingTrident's POST /embed."""

    inputs: list[str] | None = None
    images_base64: list[str] | None = None
    batch_size: StrictInt | None = Field(None, ge=1)
