"""The OpenAPI document: each route's body documented as the pydantic model it validates with
(JSON, and the same fields as multipart form fields), and every answer other than 200 as the one
error shape the service sends (`{"error": {status, code, message[, detail]}}`, errors.py) under
the statuses it sends. Collection names in paths carry their pattern, /metrics its text type."""

from __future__ import annotations

from accelkit.images.settings.schema import MAX_NAME_CHARS, InsertRequest, SearchRequest

ERROR_MODEL = "ErrorResponse"
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "additionalProperties": False,
    "properties": {
        "error": {
            "type": "object",
            "required": ["status", "code", "message"],
            "additionalProperties": False,
            "properties": {
                "status": {"type": "integer", "description": "the HTTP status, again"},
                "code": {"type": "string", "description": "machine-readable: invalid_field, ..."},
                "message": {"type": "string", "description": "one line naming the field"},
                "detail": {"description": "per-item failures, where a request had several"},
            },
        }
    },
}
# What each status means, on every route (a 500 is a bug and is not documented).
ERROR_STATUSES = {
    "400": "a value the service refuses; the message names the field",
    "401": "missing or wrong API key",
    "403": "a path outside server.allowed_roots, or a URL the service may not fetch",
    "404": "no such collection, item or route",
    "405": "the route does not take this method (Allow lists those it takes)",
    "408": "the request body arrived too slowly",
    "409": "the collection exists already, or holds another model's embeddings",
    "413": "a body or a list over its limit (the message names the setting)",
    "415": "a body neither JSON nor multipart",
    "422": "a field of the wrong type or value; the message names the field",
    "429": "overloaded; retry after Retry-After seconds",
    "503": "the store is unavailable, or the service is shutting down",
    "504": "the store did not answer within store.timeout",
}
ITEMS_QUERY = [
    {
        "name": "ids",
        "in": "query",
        "required": False,
        "schema": {"type": "array", "items": {"type": "string"}},
        "style": "form",
        "explode": True,
        "description": "item ids, repeated: ?ids=a&ids=b",
    },
    {"name": "collection", "in": "query", "required": False, "schema": {"type": "string"}},
    {"name": "collection_name", "in": "query", "required": False, "schema": {"type": "string"}},
]
COLLECTION_PATTERN = rf"^[A-Za-z_][A-Za-z0-9_]{{0,{MAX_NAME_CHARS - 1}}}$"


def _document_answers(schema: dict) -> None:
    """Every operation: the error statuses with the error shape (FastAPI's own 422 shape is not
    what the service sends), collection names with their pattern, /metrics as text."""
    schema["components"]["schemas"][ERROR_MODEL] = ERROR_SCHEMA
    schema["components"]["schemas"].pop("HTTPValidationError", None)
    schema["components"]["schemas"].pop("ValidationError", None)
    error = {"application/json": {"schema": {"$ref": f"#/components/schemas/{ERROR_MODEL}"}}}
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            for status, description in ERROR_STATUSES.items():
                responses[status] = {"description": description, "content": error}
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path" and parameter["name"] == "name":
                    parameter["schema"]["pattern"] = COLLECTION_PATTERN
            if path == "/items" and method == "get":  # read from the query by the route itself
                operation["parameters"] = ITEMS_QUERY
            if path == "/metrics" and method == "get":
                responses["200"]["content"] = {"text/plain": {"schema": {"type": "string"}}}


def document_bodies(app, bodies: dict[tuple[str, str], type]) -> None:
    """Document each route's body as its pydantic model (JSON and multipart), the same model the
    route validates with."""
    from fastapi.openapi.utils import get_openapi

    def openapi():
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for (method, path), model in bodies.items():
            model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(model_schema.pop("$defs", {}))
            components[model.__name__] = model_schema
            ref = {"$ref": f"#/components/schemas/{model.__name__}"}
            content = {"application/json": {"schema": ref}}
            if model in (InsertRequest, SearchRequest):
                form = {
                    "type": "object",
                    "properties": {
                        "files" if model is InsertRequest else "file": {
                            "type": "array" if model is InsertRequest else "string",
                            **(
                                {"items": {"type": "string", "format": "binary"}}
                                if model is InsertRequest
                                else {"format": "binary"}
                            ),
                        }
                    },
                    "description": f"the fields of {model.__name__} as form fields (lists as JSON)",
                }
                content["multipart/form-data"] = {"schema": form}
            schema["paths"][path][method.lower()]["requestBody"] = {
                "required": True,
                "content": content,
            }
        _document_answers(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi
