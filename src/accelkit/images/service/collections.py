"""Collection routes: list, create, describe (and EmbeddingTrident's stats), delete, flush, index
progress and rebuild, each one call of the `LocalIndex`."""

from __future__ import annotations

import logging

from fastapi import (
    APIRouter,
    Request,
)  # module level: FastAPI resolves the endpoints' annotations here

from accelkit.errors import InputError
from accelkit.images.service import forms
from accelkit.images.service.errors import ServiceError
from accelkit.images.service.state import State
from accelkit.images.settings.schema import (
    CreateCollectionRequest,
    check_collection_name,
)

log = logging.getLogger(__name__)
INDEX_SPEC_FIELDS = {"index_type", "metric_type", "index_params"}


router = APIRouter()


@router.get("/collections", summary="List collections")
async def list_collections(state: State):
    names = await state.run(state.index.list_collections)
    return {"collections": names, "count": len(names)}


@router.post("/collections/create", summary="Create a collection")
async def create_collection(request: Request, state: State):
    body, _ = await state.read(request, CreateCollectionRequest)
    if body.name and body.collection and body.name != body.collection:
        raise InputError("give the collection's name once (name or collection)")
    info = await state.run(
        state.index.create_collection,
        body.name or body.collection,
        body.dim,
        body.description,
        index_type=body.index_type,
        metric_type=body.metric_type,
        index_params=body.index_params,
        exist_ok=body.exist_ok,
    )
    return {**info, "message": f"Collection '{info['name']}' created successfully"}


@router.get("/collections/{name}", summary="Describe a collection")
async def describe_collection(name: str, state: State):
    return await state.run(state.index.describe, check_collection_name(name))


@router.get("/collections/{name}/stats", summary="Describe a collection (EmbeddingTrident's form)")
async def collection_stats(name: str, state: State):
    info = await state.run(state.index.describe, check_collection_name(name))
    return {**info, "num_entities": info["count"]}


@router.delete("/collections/{name}", summary="Delete a collection and everything in it")
async def drop_collection(name: str, state: State):
    await state.run(state.index.drop_collection, check_collection_name(name))
    return {"dropped": name, "message": f"Collection '{name}' deleted successfully"}


@router.post("/collections/{name}/flush", summary="Seal inserted rows so the index covers them")
async def flush_collection(name: str, state: State):
    return await state.run(state.index.flush, check_collection_name(name))


@router.get("/collections/{name}/index", summary="Index build progress (wait=true waits for it)")
async def index_progress(name: str, state: State, wait: bool = False):
    return await state.run(state.index.index_progress, check_collection_name(name), wait)


@router.post("/collections/{name}/index", summary="Replace the vector index (Milvus server)")
async def rebuild_index(name: str, request: Request, state: State):
    fields, _ = await forms.read_body(request, state.config.server.max_items_per_request)
    spec = forms.validate(
        CreateCollectionRequest,
        {k: v for k, v in fields.items() if k in INDEX_SPEC_FIELDS},
        state.limits,
    )
    unknown = sorted(set(fields) - INDEX_SPEC_FIELDS)
    if unknown:
        raise ServiceError(
            422,
            "invalid_field",
            f"{unknown[0]}: unknown field; allowed: {', '.join(sorted(INDEX_SPEC_FIELDS))}",
        )
    return await state.run(
        state.index.rebuild_index,
        check_collection_name(name),
        index_type=spec.index_type,
        metric_type=spec.metric_type,
        index_params=spec.index_params,
    )
