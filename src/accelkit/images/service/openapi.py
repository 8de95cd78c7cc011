"""The OpenAPI document: each route's body documented as the pydantic model it validates with
(JSON, and the same fields as multipart form fields)."""

from __future__ import annotations

from accelkit.images.schema import InsertRequest, SearchRequest


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
        app.openapi_schema = schema
        return schema

    app.openapi = openapi
