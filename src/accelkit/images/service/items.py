"""Item routes: insert, search, get, delete (by ids or a filter) and EmbeddingTrident's /embed,
each reading its body once into the schema's model and calling the `LocalIndex`."""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi import (
    APIRouter,
    Request,
)  # module level: FastAPI resolves the endpoints' annotations here

from accelkit.errors import DataError, InputError
from accelkit.images.index import ranking
from accelkit.images.index.base import ImageInput, Steering, TextQuery
from accelkit.images.service import forms
from accelkit.images.service.errors import ServiceError
from accelkit.images.service.sources import Source
from accelkit.images.service.state import State
from accelkit.images.settings.schema import (
    LIMIT_SETTINGS,
    DeleteRequest,
    EmbedRequest,
    InsertRequest,
    SearchRequest,
    check_collection_name,
)

log = logging.getLogger(__name__)


router = APIRouter()


@router.post("/insert", summary="Embed and store images (JSON or multipart)")
async def insert(request: Request, state: State):
    config = state.config
    server = config.server
    body, uploads = await state.read(request, InsertRequest)
    triples = forms.insert_sources(body, uploads)
    if len(triples) > server.max_items_per_request:
        raise ServiceError(
            413,
            "too_many_items",
            f"{len(triples)} images in one request (items, inputs, images_base64 and files"
            f" together); the limit is {server.max_items_per_request}"
            f" ({LIMIT_SETTINGS['items']})",
        )
    if not triples:
        raise InputError("no images given; send items (JSON) or files (multipart)")
    name = check_collection_name(body.collection or config.store.collection_name)
    if not body.create_collection:
        await state.run(state.store.describe_dim, name)  # 404 before anything is read
    loaded, failures, cost = await state.load_images([s for s, _, _ in triples], "items")
    result = None
    if loaded:
        inputs = [
            ImageInput(data, triples[i][1], triples[i][2], source, label=f"items[{i}]")
            for i, data, source in loaded
        ]
        async with state.budget.reserve(cost):
            result = await state.run(state.index.insert, inputs, name, body.create_collection)
        failures.update({loaded[k][0]: reason for k, reason in result.failures.items()})
    ids = result.ids if result else []
    indices = [loaded[k][0] for k in result.indices] if result else []
    state.metrics.stored.inc(len(ids))
    report = [
        {"index": i, "id": triples[i][1], "error": reason} for i, reason in sorted(failures.items())
    ]
    if not ids:
        raise ServiceError(
            422,
            "no_item_stored",
            f"none of the {len(triples)} images could be stored; first: {report[0]['error']}",
            detail={"failures": report},
        )
    return {
        "collection": name,
        "inserted": len(ids),
        "ids": ids,
        "indices": indices,
        "failures": report,
        # EmbeddingTrident's fields
        "collection_name": name,
        "inserted_ids": ids,
        "count": len(ids),
    }


@router.post("/search", summary="Nearest stored images to an image or a vector (JSON or multipart)")
async def search(request: Request, state: State):
    config = state.config
    server = config.server
    body, uploads = await state.read(request, SearchRequest)
    if body.topk > server.max_topk:
        raise ServiceError(
            422, "invalid_field", f"topk: must be at most {server.max_topk}, not {body.topk}"
        )
    name = check_collection_name(body.collection or config.store.collection_name)
    if body.text is not None:  # its terms ('""', '-cat' alone): "text: …", a field's 422 too
        try:
            ranking.parse_terms(body.text, "text")
        except InputError as exc:
            raise ServiceError(422, "invalid_field", str(exc)) from None
    steering = Steering.checked(
        body.min_score,
        body.auto_cut,
        body.negative_texts,
        body.negative_ids,
        body.negative_weight,
        body.fold_duplicates,
    )
    source = forms.search_source(body, uploads)
    started = time.perf_counter()
    if source is None:
        import numpy as np

        if body.id is not None:  # "search by this result": the stored vector, nothing read
            query = await state.run(state.index.stored_vector, body.id, name)
        elif body.text is not None:  # words, through the model's text tower
            query = TextQuery(body.text)
        else:
            query = np.asarray(body.vector, np.float32)
        hits = await state.run(
            state.index.search, query, body.topk, body.filter, name, body.consistency, steering
        )
    else:
        loaded, failures, cost = await state.load_images([source], "query")
        if failures:
            raise DataError(failures[0])
        async with state.budget.reserve(cost):
            hits = await state.run(
                state.index.search,
                ImageInput(loaded[0][1]),
                body.topk,
                body.filter,
                name,
                body.consistency,
                steering,
            )
    took = round((time.perf_counter() - started) * 1000, 2)
    results = [{**hit.document(), "distance": hit.score} for hit in hits]
    return {
        "collection": name,
        "topk": body.topk,
        "results": results,
        "took_ms": took,
        "warnings": hits.warnings,  # what the store did not apply (Milvus Lite's nprobe)
        # the scores before the min-score and automatic cuts, what they kept, and when nothing
        # passed, "no photo scores above X"
        "cut": hits.cut.document(),
        "message": hits.cut.message,
        # EmbeddingTrident's fields
        "collection_name": name,
        "count": len(results),
        "query_time_ms": took,
    }


@router.get("/items", summary="Stored items by id (metadata only)")
async def get_items(request: Request, state: State):
    config = state.config
    params = request.query_params
    fields: dict[str, Any] = {"ids": params.getlist("ids")}
    for key in ("collection", "collection_name"):
        values = params.getlist(key)
        if len(values) > 1:
            raise ServiceError(422, "invalid_field", f"{key}: given {len(values)} times")
        if values:
            fields[key] = values[0]
    unknown = sorted(set(params) - {"ids", "collection", "collection_name"})
    if unknown:
        raise ServiceError(
            422, "invalid_field", f"{forms.shown_key(unknown[0])}: unknown parameter"
        )
    body = forms.validate(DeleteRequest, fields, state.limits)
    name = check_collection_name(body.collection or config.store.collection_name)
    return {"collection": name, "items": await state.run(state.index.get, body.ids or [], name)}


@router.delete("/items", summary="Delete items by id")
async def delete_items(request: Request, state: State):
    config = state.config
    body, _ = await state.read(request, DeleteRequest)
    if not body.ids or body.filter is not None:
        raise InputError(
            "ids must be a non-empty list of item ids (delete by filter: POST /delete)"
        )
    name = check_collection_name(body.collection or config.store.collection_name)
    deleted = await state.run(state.index.delete, body.ids, None, name)
    return {
        "collection": name,
        "requested": len(body.ids),
        "deleted": deleted,
        "collection_name": name,
    }


@router.post("/delete", summary="Delete items by ids or by a filter (EmbeddingTrident's form)")
async def delete(request: Request, state: State):
    config = state.config
    body, _ = await state.read(request, DeleteRequest)
    name = check_collection_name(body.collection or config.store.collection_name)
    if body.ids:  # as in EmbeddingTrident: ids win when both are given
        deleted = await state.run(state.index.delete, body.ids, None, name)
    elif body.filter:
        deleted = await state.run(state.index.delete, None, body.filter, name)
    else:
        raise InputError("give ids or filter_expr to delete by")
    return {"collection": name, "deleted": deleted, "message": f"Deleted {deleted} embeddings"}


@router.post(
    "/embed", summary="Embeddings of images, without storing them (EmbeddingTrident's form)"
)
async def embed(request: Request, state: State):
    config = state.config
    server = config.server
    body, uploads = await state.read(request, EmbedRequest)
    sources = [Source("input", v) for v in body.inputs or []]
    sources += [Source("image_base64", v) for v in body.images_base64 or []]
    sources += [Source("bytes", data, name) for name, data in uploads]
    if not sources:
        raise InputError("no images given; send inputs, images_base64 or files")
    if len(sources) > server.max_items_per_request:
        raise ServiceError(
            413,
            "too_many_items",
            f"{len(sources)} images in one request (inputs, images_base64 and files"
            f" together); the limit is {server.max_items_per_request}"
            f" ({LIMIT_SETTINGS['items']})",
        )
    loaded, failures, cost = await state.load_images(sources, "inputs")
    rows, indices = [], []
    if loaded:
        async with state.budget.reserve(cost):
            results = await state.run(state.embed_blocking, [data for _, data, _ in loaded])
        for (i, _, _), result in zip(loaded, results, strict=True):
            if result.error is None:
                rows.append(result.vector.tolist())
                indices.append(i)
            else:
                failures[i] = result.error
    return {
        "embeddings": rows,
        "count": len(rows),
        "embedding_dim": config.model.embedding_dim,
        "indices": indices,
        "failures": [{"index": i, "error": reason} for i, reason in sorted(failures.items())],
    }
