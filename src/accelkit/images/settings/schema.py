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
* **Every list in a request has a cap** (`RequestLimits`: images, ids, metadata keys, a filter's
  list values, a vector's length), checked before the list's elements are: a delete of a million
  ids once held the service for seconds and left it much larger. A list over its cap is a 413 that
  names the field, the cap and the setting that raises it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationInfo,
)
from pydantic_core import PydanticCustomError

from accelkit.errors import DataError, InputError
from accelkit.images.settings.filters import (
    MAX_LIST_VALUES,
    FilterListTooLong,
    FilterSyntaxError,
    check_syntax,
)

ID_CHARACTERS = "A-Z a-z 0-9 . _ - : / @ + = ~"
MAX_ID_CHARS = 256
MAX_NAME_CHARS = 255
MAX_FILTER_CHARS = 4096
MAX_METADATA_BYTES = 16_384
MAX_METADATA_DEPTH = 8
MAX_DESCRIPTION_CHARS = 1024
MAX_INDEX_PARAM = 65_536  # nlist, nprobe, M, efConstruction, ef: Milvus' ranges end at or below
MIN_DIM, MAX_DIM = 2, 32_768  # Milvus' own range for a float vector
MAX_INDEX_PARAMS = 8  # an index has at most three parameters
SOURCE_KEY = "source"  # metadata key that records where an inserted image came from

_ID = re.compile(r"[A-Za-z0-9._:/@+=~-]{1,256}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,254}")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# C0 and C1 controls but tab, new line and carriage return
_TEXT_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
SURROGATE = re.compile("[\ud800-\udfff]")  # half of a UTF-16 pair: never valid text


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


MAX_TEXT_CHARS = 1000  # a text query: a sentence or a paragraph, never a document
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+=~-]{0,127}")


def check_model_name(name: Any) -> str:
    """A model's name as it is recorded with collections: 1-128 characters of an id's alphabet."""
    if not isinstance(name, str) or not _MODEL_NAME.fullmatch(name):
        raise ValueError(
            f"model name {_shown(name)} is invalid; use 1-128 characters from {ID_CHARACTERS},"
            " starting with a letter or digit"
        )
    return name


def check_text(value: Any, where: str = "text") -> str:
    """A text query: a string of at most MAX_TEXT_CHARS characters with something to read in it
    (not only white space and invisible format characters such as U+200B), no control
    characters (new lines and tabs are spaces to a tokenizer, and are allowed) and no half of a
    UTF-16 pair (what an argument of invalid UTF-8 decodes to: no tokenizer takes it)."""
    import unicodedata

    _bounded_string(value, where, MAX_TEXT_CHARS)
    if SURROGATE.search(value):
        raise InputError(
            f"{where} holds an unpaired UTF-16 surrogate (\\ud800-\\udfff, e.g. from bytes"
            " that are not UTF-8); give valid Unicode text"
        )
    if _TEXT_CONTROL.search(value):
        raise InputError(f"{where} contains a control character")
    if all(ch.isspace() or unicodedata.category(ch) == "Cf" for ch in value):
        raise InputError(f"{where} is empty; give a few words to search for")
    return value


RESERVED_NAMES = "_accelkit_"  # the store's own collections (its catalog) start with it


def check_collection_name(name: Any, where: str = "collection", reserved_ok: bool = False) -> str:
    """A collection name; the store's own (`RESERVED_NAMES`…) only where `reserved_ok`."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InputError(
            f"{where} name {_shown(name)} is invalid; use letters, digits and underscores, "
            f"starting with a letter or _ (at most {MAX_NAME_CHARS})"
        )
    if name.startswith(RESERVED_NAMES) and not reserved_ok:
        raise InputError(
            f"{where} name {_shown(name)} is reserved ({RESERVED_NAMES}…); pick another"
        )
    return name


# Inside the application layer a filter is checked again for its grammar only: the boundary that
# received it (the service with server.max_filter_values, the CLI) already applied the list cap,
# which a second check with the default would undo.
GRAMMAR_ONLY = 1 << 62


def check_filter(expr: Any, where: str = "filter", max_values: int = MAX_LIST_VALUES) -> str | None:
    """A filter expression, bounded, printable, and one whole expression of the grammar in
    `accelkit.images.settings.filters` (Milvus silently drops what follows a complete expression), whose
    lists hold at most `max_values` values; None or "" means no filter."""
    if expr is None or expr == "":
        return None
    if not isinstance(expr, str):
        raise InputError(f'{where} must be a string such as metadata["album"] == "2026"')
    if len(expr) > MAX_FILTER_CHARS:
        raise InputError(
            f"{where} has {len(expr):,} characters, over the limit of {MAX_FILTER_CHARS:,}; "
            "filter on a metadata field instead of listing many values"
        )
    control = _CONTROL.search(expr)
    if control:
        raise InputError(
            f"{where} contains a control character ({control.group()!r}) at character"
            f" {control.start() + 1}; send a plain one-line expression"
        )
    try:
        check_syntax(expr, max_values)
    except FilterListTooLong as exc:
        raise InputError(f"{where}: {exc} ({LIMIT_SETTINGS['filter_values']})") from None
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


def _bounded_string(value: Any, where: str, limit: int) -> str:
    if not isinstance(value, str):
        raise InputError(f"{where} must be a string")
    if len(value) > limit:
        raise InputError(f"{where} has {len(value):,} characters, over the limit of {limit:,}")
    return value


def check_description(value: Any, where: str = "description") -> str:
    _bounded_string(value, where, MAX_DESCRIPTION_CHARS)
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


@dataclass(frozen=True)
class RequestLimits:
    """Caps on the lists a request holds (the service's `server.max_*` settings). The request
    models read them from the validation context (`model_validate(data, context={"limits": ...})`),
    these defaults otherwise."""

    items: int = 256  # images: items, inputs, images_base64, files, and an insert's ids/metadata
    ids: int = 10_000  # ids of one get or delete
    metadata_keys: int = 256  # keys in one image's metadata, every level together
    filter_values: int = MAX_LIST_VALUES  # values in one list of a filter
    vector: int = MAX_DIM  # a query vector's numbers
    index_params: int = MAX_INDEX_PARAMS


LIMIT_SETTINGS = {
    "items": "server.max_items_per_request",
    "ids": "server.max_ids_per_request",
    "metadata_keys": "server.max_metadata_keys",
    "filter_values": "server.max_filter_values",
    "vector": "the largest dim Milvus stores",
    "index_params": "an index's parameters",
}
TOO_MANY = "too_many_items"  # the error type (and the service's code) of a list over its cap


def _limits(info: ValidationInfo | None) -> RequestLimits:
    context = getattr(info, "context", None) or {}
    return context.get("limits") or RequestLimits()


def _too_many(count: int, what: str, kind: str, limit: int) -> PydanticCustomError:
    return PydanticCustomError(
        TOO_MANY,
        "{count} {what}, over the limit of {limit} ({setting})",
        {
            "count": f"{count:,}",
            "what": what,
            "limit": f"{limit:,}",
            "setting": LIMIT_SETTINGS[kind],
        },
    )


def _capped(kind: str) -> BeforeValidator:
    """A list (or object) of at most `RequestLimits.<kind>` entries, counted before any entry
    is validated."""

    def check(value: Any, info: ValidationInfo) -> Any:
        limit = getattr(_limits(info), kind)
        if isinstance(value, (list, dict)) and len(value) > limit:
            raise _too_many(len(value), "entries", kind, limit)
        return value

    return BeforeValidator(check)


def _count_keys(value: Any) -> int:
    """Keys in a JSON value, every level together."""
    count, pending = 0, [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            count += len(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return count


def _keys_capped(value: Any, info: ValidationInfo) -> Any:
    limit = _limits(info).metadata_keys
    count = _count_keys(value)
    if count > limit:
        raise _too_many(count, "keys", "metadata_keys", limit)
    return value


def _filter(value: Any, info: ValidationInfo) -> str | None:
    try:
        return check_filter(value, max_values=_limits(info).filter_values)
    except InputError as exc:
        raise ValueError(str(exc)) from None


ItemId = Annotated[str, _pydantic(check_id)]
CollectionName = Annotated[str, _pydantic(check_collection_name)]
FilterExpr = Annotated[str | None, AfterValidator(_filter)]
Metadata = Annotated[dict[str, Any] | None, BeforeValidator(_keys_capped)]
Description = Annotated[str, _pydantic(check_description)]
TextQueryText = Annotated[str, _pydantic(check_text)]
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
        default=None, description="image file bytes, base64 (a data: URL works too)"
    )
    path: str | None = Field(
        default=None, description="server-side path under server.allowed_roots"
    )
    url: str | None = Field(default=None, description="http(s) URL, only with server.allow_urls")
    input: str | None = Field(
        default=None, description="EmbeddingTrident's form: a server path or URL"
    )
    # ids and metadata are checked per item (a bad one fails its own item, not the request)
    id: str | None = Field(
        default=None,
        description=f"1-{MAX_ID_CHARS} characters from {ID_CHARACTERS}; default: from the image bytes",
    )
    metadata: Metadata = Field(
        default=None,
        description=f"JSON object; `{SOURCE_KEY}` is filled with where the image came from unless given",
    )


class InsertRequest(Body):
    collection: CollectionName | None = Field(
        default=None,
        validation_alias=_COLLECTION,
        description="default: the service's store.collection_name",
    )
    create_collection: StrictBool = False
    items: Annotated[list[ImageItem] | None, _capped("items")] = None
    inputs: Annotated[list[str] | None, _capped("items")] = Field(
        default=None, description="EmbeddingTrident's form: server paths or URLs"
    )
    images_base64: Annotated[list[str] | None, _capped("items")] = None
    ids: Annotated[list[str | None] | None, _capped("items")] = Field(
        default=None, description="one per image, with inputs/images_base64/files"
    )
    metadata: Annotated[list[Metadata] | None, _capped("items")] = Field(
        default=None, description="one per image, with inputs/images_base64/files"
    )
    batch_size: StrictInt | None = Field(
        default=None,
        ge=1,
        description="accepted from EmbeddingTrident's clients; batching is automatic",
    )


class SearchRequest(Body):
    collection: CollectionName | None = Field(default=None, validation_alias=_COLLECTION)
    image_base64: str | None = None
    path: str | None = None
    url: str | None = None
    input: str | None = None
    query: str | None = Field(
        default=None, description="EmbeddingTrident's form: a server path or URL"
    )
    query_input: str | None = None
    vector: Annotated[list[float] | None, _capped("vector")] = None
    id: ItemId | None = Field(default=None, description="a stored item's id: search by its vector")
    text: TextQueryText | None = Field(
        default=None,
        description=f"words, for a two-tower model's text tower (at most {MAX_TEXT_CHARS} characters)",
    )
    topk: StrictInt = Field(default=10, ge=1)
    filter: FilterExpr = Field(
        default=None,
        validation_alias=_FILTER,
        json_schema_extra={"example": 'metadata["category"] == "nature"'},
    )
    consistency: Consistency | None = Field(
        default=None, description="default: store.search_consistency"
    )
    min_score: float | None = Field(
        default=None,
        ge=-1,
        le=1,
        allow_inf_nan=False,
        description="drop results scoring below it (a cosine; COSINE and IP collections)",
    )
    auto_cut: StrictBool = Field(
        default=False, description="also drop those below a clear score gap"
    )
    negative_texts: Annotated[list[TextQueryText] | None, Field(max_length=16)] = Field(
        default=None, description="texts the results are pushed away from (as '-term' in text)"
    )
    negative_ids: Annotated[list[ItemId] | None, Field(max_length=16)] = Field(
        default=None,
        description="'less like this': stored items the results are pushed away from (from what"
        " sets them apart from the query's candidates)",
    )
    negative_weight: float = Field(default=0.5, gt=0, le=1, allow_inf_nan=False)
    fold_duplicates: float | None = Field(
        default=None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="fold results within this cosine of a higher-ranked one under it",
    )


class DeleteRequest(Body):
    collection: CollectionName | None = Field(default=None, validation_alias=_COLLECTION)
    ids: Annotated[list[ItemId] | None, _capped("ids")] = Field(
        default=None, description="at most server.max_ids_per_request (10,000)"
    )
    filter: FilterExpr = Field(
        default=None,
        validation_alias=_FILTER,
        description="delete every item that matches (EmbeddingTrident's form)",
    )


class CreateCollectionRequest(Body):
    name: CollectionName | None = None
    collection: CollectionName | None = Field(default=None, validation_alias=_COLLECTION)
    dim: StrictInt | None = Field(default=None, ge=MIN_DIM, le=MAX_DIM)
    description: Description = ""
    index_type: IndexType | None = None
    metric_type: MetricType | None = None
    index_params: Annotated[
        dict[str, Annotated[StrictInt, Field(ge=1, le=MAX_INDEX_PARAM)]] | None,
        _capped("index_params"),
    ] = None
    exist_ok: StrictBool = False


class EmbedRequest(Body):
    """EmbeddingTrident's POST /embed."""

    inputs: Annotated[list[str] | None, _capped("items")] = None
    images_base64: Annotated[list[str] | None, _capped("items")] = None
    batch_size: StrictInt | None = Field(default=None, ge=1)
