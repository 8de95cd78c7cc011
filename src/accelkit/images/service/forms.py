"""Request bodies, JSON or multipart, into the pydantic models of `accelkit.images.settings.schema`.

Both encodings end in the same model, so validation happens once and the OpenAPI schema is the
model's. A malformed field is a 422 that names the field; a body that is not JSON (or is nested
past Python's recursion limit) is a 400. Multipart form fields are strings: the few typed ones
(topk, booleans, the ids/metadata JSON lists) are converted strictly before validation.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from accelkit.errors import InputError
from accelkit.images.service.errors import ServiceError
from accelkit.images.service.sources import Source
from accelkit.images.settings.schema import (
    LIMIT_SETTINGS,
    SURROGATE,
    TOO_MANY,
    ImageItem,
    InsertRequest,
    RequestLimits,
    SearchRequest,
)

Model = TypeVar("Model", bound=BaseModel)
_INTEGER_FIELDS = {"topk", "dim", "batch_size"}
_BOOLEAN_FIELDS = {"create_collection", "exist_ok", "auto_cut"}
_NUMBER_FIELDS = {"min_score", "negative_weight", "fold_duplicates"}
_JSON_FIELDS = {
    "ids",
    "metadata",
    "inputs",
    "images_base64",
    "vector",
    "index_params",
    "items",
    "negative_texts",
    "negative_ids",
}


def validate(model: type[Model], data: Any, limits: RequestLimits | None = None) -> Model:
    """`model` from `data`, its lists within `limits`: a list over its cap is a 413, any other
    bad field a 422, each naming the field."""
    if isinstance(data, dict):  # `collection` and `collection_name` are one field: not both
        for name, field in model.model_fields.items():
            choices = getattr(field.validation_alias, "choices", None) or ()
            given = [c for c in choices if isinstance(c, str) and c in data]
            if len(given) > 1:
                raise ServiceError(
                    422,
                    "invalid_field",
                    f"{name}: given twice (as {' and '.join(given)}); send one",
                )
    try:
        return model.model_validate(data, context={"limits": limits or RequestLimits()})
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        capped = [e for e in errors if e["type"] == TOO_MANY]
        parts = []
        for error in (capped or errors)[:5]:
            where = ".".join(str(p)[:40] for p in error["loc"]) or "body"
            message = error["msg"].removeprefix("Value error, ")
            if error["type"] == "extra_forbidden":
                message = f"unknown field; allowed: {', '.join(sorted(model.model_fields))}"
            parts.append(f"{where}: {message}")
        if capped:
            raise ServiceError(413, TOO_MANY, "; ".join(parts)) from None
        raise ServiceError(422, "invalid_field", "; ".join(parts)) from None


def shown_key(key: str) -> str:
    """A field's name as a message shows it: bare when it is a name, else quoted (an empty or
    odd key is still visible: `'': given twice`)."""
    return key[:40] if key.isidentifier() else repr(key[:40])


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """JSON objects with a key given twice are refused (which one counts is parser folklore);
    multipart refuses a field given twice the same way."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ServiceError(422, "invalid_field", f"{shown_key(key)}: given twice")
        seen[key] = value
    return seen


def _lone_surrogate(value: Any) -> bool:
    """A string holding half of a UTF-16 pair (JSON "\\ud800"): it cannot be stored or even
    written back as UTF-8."""
    if isinstance(value, str):
        return SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(_lone_surrogate(k) or _lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_lone_surrogate(v) for v in value)
    return False


def parse_json(raw: bytes, what: str = "request body") -> Any:
    try:
        value = json.loads(raw or b"{}", object_pairs_hook=_no_duplicate_keys)
        if _lone_surrogate(value):
            raise InputError(
                f"{what} holds an unpaired UTF-16 surrogate (\\ud800-\\udfff); send valid Unicode"
            )
        return value
    except RecursionError:
        raise InputError(f"{what} is nested too deeply to be a request") from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{what} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    except (ValueError, UnicodeDecodeError):  # e.g. a number of thousands of digits
        raise InputError(
            f"{what} is not valid JSON (unreadable text or a number too long)"
        ) from None


_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")  # ASCII digits only, within int64


def _form_value(key: str, value: str) -> Any:
    if key in _INTEGER_FIELDS:
        text = value.strip()
        if not _INTEGER.fullmatch(text):
            raise ServiceError(
                422, "invalid_field", f"{key}: must be a whole number, not {value[:20]!r}"
            )
        return int(text)
    if key in _NUMBER_FIELDS:
        try:
            return float(value.strip())  # NaN and inf pass here; the model refuses them
        except ValueError:
            raise ServiceError(
                422, "invalid_field", f"{key}: must be a number, not {value[:20]!r}"
            ) from None
    if key in _BOOLEAN_FIELDS:
        text = value.strip().lower()
        if text not in ("true", "false", "1", "0"):
            raise ServiceError(
                422, "invalid_field", f"{key}: must be true or false, not {value[:20]!r}"
            )
        return text in ("true", "1")
    if key in _JSON_FIELDS:
        if not value.strip():
            return None
        return parse_json(value.encode(), f"form field {key}")
    return value or None


async def read_body(
    request, max_files: int = RequestLimits.items
) -> tuple[dict[str, Any], list[tuple[str | None, bytes]]]:
    """(fields, uploads) of a JSON or multipart request; uploads are (file name, bytes), at most
    `max_files` of them."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        from starlette.exceptions import HTTPException

        try:
            form = await request.form(max_files=max_files, max_fields=1_000)
        except HTTPException as exc:
            if "Too many files" not in str(exc.detail):
                raise
            raise ServiceError(
                413,
                TOO_MANY,
                f"files: more than {max_files:,} files, over the limit of {max_files:,}"
                f" ({LIMIT_SETTINGS['items']})",
            ) from None
        fields: dict[str, Any] = {}
        uploads: list[tuple[str | None, bytes]] = []
        try:
            for key, value in form.multi_items():
                if hasattr(value, "read"):
                    uploads.append((value.filename, await value.read()))
                elif key in fields:
                    raise ServiceError(422, "invalid_field", f"{shown_key(key)}: given twice")
                else:
                    fields[key] = _form_value(key, value)
        finally:
            await form.close()
        return fields, uploads
    if content_type not in ("application/json", ""):
        raise ServiceError(
            415,
            "unsupported_media_type",
            f"send application/json or multipart/form-data, not {content_type[:60]}",
        )
    body = parse_json(await request.body())
    if not isinstance(body, dict):
        raise InputError("request body must be a JSON object")
    return body, []


def _source(item: ImageItem | dict, where: str) -> Source:
    given = [k for k in ("image_base64", "path", "url", "input") if getattr(item, k) is not None]
    if len(given) != 1:
        raise InputError(
            f"{where}: give exactly one of image_base64, path or url (got {', '.join(given) or 'none'})"
        )
    return Source(given[0], getattr(item, given[0]))


def insert_sources(
    request: InsertRequest, uploads: list[tuple[str | None, bytes]]
) -> list[tuple[Source, Any, Any]]:
    """(source, id, metadata) per image, from `items`, or from EmbeddingTrident's parallel
    lists (`inputs`/`images_base64`/uploaded files with `ids` and `metadata`)."""
    if request.items is not None:
        if (
            request.ids is not None
            or request.metadata is not None
            or request.inputs
            or request.images_base64
            or uploads
        ):
            raise InputError(
                "give either items (each with its id and metadata) or inputs/images_base64/files "
                "with ids and metadata lists"
            )
        return [
            (_source(item, f"items[{i}]"), item.id, item.metadata)
            for i, item in enumerate(request.items)
        ]
    sources = [Source("input", v) for v in request.inputs or []]
    sources += [Source("image_base64", v) for v in request.images_base64 or []]
    sources += [Source("bytes", data, name) for name, data in uploads]
    for what, values in (("ids", request.ids), ("metadata", request.metadata)):
        if values is not None and len(values) != len(sources):
            raise InputError(
                f"got {len(sources)} images but {len(values)} {what}; give one per image or none"
            )
    return [
        (
            source,
            request.ids[i] if request.ids else None,
            request.metadata[i] if request.metadata else None,
        )
        for i, source in enumerate(sources)
    ]


def search_source(request: SearchRequest, uploads: list[tuple[str | None, bytes]]) -> Source | None:
    """The query image (None when the query is a vector, an id or a text); exactly one query
    must be given."""
    given = [
        k
        for k in ("image_base64", "path", "url", "input", "query", "query_input")
        if getattr(request, k) is not None
    ]
    count = len(given) + len(uploads)
    count += (request.vector is not None) + (request.id is not None) + (request.text is not None)
    if count != 1:
        raise InputError(
            "give exactly one query: a file, image_base64, path, url, vector, id or text"
        )
    if uploads:
        name, data = uploads[0]
        return Source("bytes", data, name)
    if not given:
        return None
    kind = given[0]
    return Source("input" if kind in ("query", "query_input") else kind, getattr(request, kind))
