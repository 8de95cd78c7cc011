"""The HTTP service: thin FastAPI routes over `LocalIndex`, whose embed function is the dynamic
batcher (the images of concurrent requests share model batches).

Endpoints: GET /health, GET /collections, POST /collections/create, GET|DELETE
/collections/{name}, GET /collections/{name}/stats, POST /collections/{name}/flush,
GET|POST /collections/{name}/index, POST /insert, POST /search, GET /items, DELETE /items,
POST /delete and POST /embed (EmbeddingTrident's), GET /metrics, OpenAPI at /docs.
Request bodies are the models of `accelkit.images.schema` (JSON, or multipart with files), so
the OpenAPI schema is theirs. Images come as uploads or base64; server-side paths only under
`server.allowed_roots` (none by default → 403); http(s) URLs only with `allow_urls`.

An insert is answered only after the store has accepted it. On SIGTERM uvicorn stops accepting,
lets in-flight requests finish (`shutdown_timeout_s`), then the batcher drains and the store closes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Request  # module level: FastAPI resolves the endpoints' annotations here

from accelkit.errors import AccelkitError, DataError, InputError
from accelkit.images.batching import AdmissionLimiter, BatcherClosed, DynamicBatcher, Overloaded
from accelkit.images.config import ServiceConfig
from accelkit.images.decode import check_pixels, header_cost
from accelkit.images.index import ImageInput, LocalIndex
from accelkit.images.schema import (
    CreateCollectionRequest,
    DeleteRequest,
    EmbedRequest,
    InsertRequest,
    SearchRequest,
    check_collection_name,
)
from accelkit.images.service import forms, guards, page
from accelkit.images.service.errors import ServiceError, error_body, status_for
from accelkit.images.service.sources import Source, load

log = logging.getLogger(__name__)
FETCH_CONCURRENCY = 4  # sources of one request loaded at a time (URLs, server-side paths)

ADMITTED_METHODS = ("POST", "PUT", "PATCH", "DELETE")  # whatever may carry a body waits its turn
INDEX_SPEC_FIELDS = {"index_type", "metric_type", "index_params"}


class ServiceState:
    """What the routes share: config, pipeline (model + store), the index over them, batcher,
    admission, decode budget, metrics."""

    def __init__(self, config: ServiceConfig, pipeline: Any = None):
        server = config.server
        self.config = config
        self.pipeline = pipeline
        self.owns_pipeline = pipeline is None
        self.metrics = guards.Metrics()
        self.limiter = AdmissionLimiter(server.max_concurrency, server.max_queue)
        self.budget = guards.DecodeBudget(
            server.max_decode_bytes_in_flight,
            server.max_decode_bytes_per_request,
            server.decode_wait_s,
            server.retry_after_s,
        )
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelkit-batch")
        self.batcher: DynamicBatcher | None = None
        self.index: LocalIndex | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.started = time.time()

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        if self.pipeline is None:
            from accelkit.images.pipeline import ImageEmbeddingPipeline

            self.pipeline = await asyncio.to_thread(ImageEmbeddingPipeline, self.config)
        # open the store and load its collections now: fail at start, and no first request waits
        await asyncio.to_thread(lambda: self.pipeline.store.load_all())

        def on_batch(images: int, jobs: int) -> None:
            self.metrics.batch_images.observe(images)
            self.metrics.batch_requests.observe(jobs)

        self.batcher = DynamicBatcher(
            self.pipeline.embed,
            self.executor,
            self.config.server.batch_max_size,
            self.config.server.batch_max_wait_ms / 1000.0,
            on_batch,
        )
        self.batcher.start()
        from accelkit.images.thumbnails import open_thumbnails

        store_config = self.config.store
        self.index = LocalIndex(
            self.pipeline.store,
            self.embed_blocking,
            store_config.collection_name,
            self.config.model.embedding_dim,
            thumbnails=open_thumbnails(store_config.uri, store_config.thumbnails),
            max_pixels=self.config.preprocess.max_pixels,
        )
        self.index.model_info = {
            "name": self.config.model.name,
            "backend": self.config.model.backend,
        }

    async def stop(self) -> None:
        if self.batcher is not None:
            await self.batcher.close()
        self.executor.shutdown(wait=True)
        if self.pipeline is not None and self.owns_pipeline:
            await asyncio.to_thread(self.pipeline.close)

    def embed_blocking(self, items: list[Any]):
        """The index's embed function: runs in a worker thread, waits for the batcher on the loop."""
        results = asyncio.run_coroutine_threadsafe(self.batcher.embed(items), self.loop).result()
        ok = sum(r.error is None for r in results)
        self.metrics.images.inc(ok)
        self.metrics.failed_images.inc(len(results) - ok)
        return results

    async def run(self, fn: Callable, *args, **kwargs):
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def _load_all(self, sources: list[Source], labels: list[str]) -> list:
        """Each source's (bytes, name) or its error, loaded FETCH_CONCURRENCY at a time within one
        deadline for the whole request (`server.fetch_timeout_s`): 256 slow URLs or paths on a
        hanging file system once held a request for minutes, one deadline after another. A source
        refused for the whole request (403) is raised."""
        server = self.config.server
        gate = asyncio.Semaphore(FETCH_CONCURRENCY)

        async def one(i: int):
            async with gate:
                return await load(sources[i], server, labels[i])

        tasks = [asyncio.create_task(one(i)) for i in range(len(sources))]
        if not tasks:
            return []
        _, pending = await asyncio.wait(tasks, timeout=server.fetch_timeout_s)
        for task in pending:
            task.cancel()
        outcomes = []
        for i, task in enumerate(tasks):  # every outcome read first: none is left unretrieved
            if task in pending:
                outcomes.append(
                    DataError(
                        f"{labels[i]}: not loaded within server.fetch_timeout_s "
                        f"({server.fetch_timeout_s:g} s) for the request's images"
                    )
                )
            else:
                error = task.exception()
                outcomes.append(error if error is not None else task.result())
        for outcome in outcomes:  # refused for the whole request (403), or a failure of ours
            if isinstance(outcome, BaseException) and (
                isinstance(outcome, ServiceError)
                or not isinstance(outcome, (DataError, InputError))
            ):
                raise outcome
        return outcomes

    async def load_images(
        self, sources: list[Source], where: str
    ) -> tuple[list[tuple[int, bytes, str | None]], dict[int, str], int]:
        """(position, bytes, name) of every source that loaded and fits the per-image decode
        budget, failures by position, and the decode bytes the loaded ones need together."""
        per_image = self.config.server.max_decode_bytes_per_image
        loaded, failures, total = [], {}, 0
        labels = [
            f"{where}[{i}]" if len(sources) > 1 or where == "items" else where
            for i in range(len(sources))
        ]
        fetched = await self._load_all(sources, labels)
        for i, outcome in enumerate(fetched):
            label = labels[i]
            if isinstance(outcome, BaseException):
                failures[i] = str(outcome)
                continue
            data, name = outcome
            width, height, cost = header_cost(data)
            if width and height:  # the pixel limit first: a bomb is named as one
                try:
                    check_pixels(label, width, height, self.config.preprocess.max_pixels)
                except DataError as exc:
                    failures[i] = str(exc)
                    continue
            if cost > per_image:
                failures[i] = (
                    f"{label}: decoding it needs {cost / 2**20:,.0f} MiB, over the limit of "
                    f"{per_image / 2**20:,.0f} MiB per image; send a smaller image"
                )
                continue
            loaded.append((i, data, name))
            total += cost
        return loaded, failures, total


def _route_of(request, routes) -> str:
    """The route template (`/collections/{name}`), also for requests refused before routing, so
    metrics labels stay few; anything else is "unmatched"."""
    route = request.scope.get("route")
    if route is not None:
        return route.path
    from starlette.routing import Match

    for candidate in routes:
        if candidate.matches(request.scope)[0] == Match.FULL:
            return getattr(candidate, "path", "unmatched")
    return "unmatched"


def _openapi_bodies(app, bodies: dict[tuple[str, str], type]) -> None:
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


def create_app(config: ServiceConfig | None = None, pipeline: Any = None):
    """The FastAPI app (wrapped in `BodyLimit`); `pipeline` may be given (tests), else built at startup."""
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, Response
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from accelkit import __version__

    config = config or ServiceConfig()
    state = ServiceState(config, pipeline)
    server = config.server
    limits = server.request_limits()

    @asynccontextmanager
    async def lifespan(app):
        await state.start()
        log.info(
            "accelkit images service ready: store %s, model %s",
            state.pipeline.store.uri,
            config.model.name,
        )
        try:
            yield
        finally:
            await state.stop()

    app = FastAPI(
        title="accelkit images",
        version=__version__,
        lifespan=lifespan,
        description="Image embedding and similarity search: EfficientNet-Lite0 embeddings in Milvus.",
    )
    app.state.service = state

    def error_response(exc: ServiceError) -> JSONResponse:
        return JSONResponse(
            error_body(exc.status, exc.code, exc.message, exc.detail),
            status_code=exc.status,
            headers=exc.headers,
        )

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError):
        if exc.code == "decode_budget":  # a refusal: counted in rejected, not as a request
            request.state.refused = "decode_budget"
        return error_response(exc)

    @app.exception_handler(AccelkitError)
    async def _accelkit_error(request: Request, exc: AccelkitError):
        status, code = status_for(exc)
        return error_response(ServiceError(status, code, str(exc)))

    @app.exception_handler(BatcherClosed)
    async def _closing(request: Request, exc: BatcherClosed):
        return error_response(
            ServiceError(
                503, "shutting_down", "the service is shutting down; retry on another instance"
            )
        )

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]]
        return error_response(ServiceError(422, "invalid_field", "; ".join(parts)))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(ServiceError(exc.status_code, code, str(exc.detail)))

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception):
        if guards.is_body_refusal(exc):
            raise exc  # BodyLimit answers 413 or 408 instead
        if guards.is_client_gone(exc):  # the client left mid-body: nobody to answer
            log.info("client disconnected during %s %s", request.method, request.url.path)
            return error_response(
                ServiceError(400, "client_disconnected", "the request body was cut off")
            )
        log.exception("internal error on %s", request.url.path)
        return error_response(
            ServiceError(
                500, "internal_error", f"internal error ({type(exc).__name__}); see the service log"
            )
        )

    def authorized(request: Request) -> bool:
        return not server.api_key or guards.api_key_ok(
            request.headers.get("authorization", ""), server.api_key
        )

    @app.middleware("http")
    async def _guard(request: Request, call_next):
        started = time.perf_counter()
        path = request.url.path
        try:
            public = path in guards.PUBLIC_PATHS or page.is_page_request(request)
            if not authorized(request) and not public:
                state.metrics.reject("unauthorized")
                return error_response(
                    ServiceError(
                        401,
                        "unauthorized",
                        "missing or wrong API key; send Authorization: Bearer <key>",
                        {"WWW-Authenticate": "Bearer"},
                    )
                )
            if request.method in ADMITTED_METHODS:
                try:
                    async with state.limiter.slot():
                        state.metrics.in_flight.set(state.limiter.admitted)
                        response = await call_next(request)
                finally:
                    state.metrics.in_flight.set(state.limiter.admitted)
            else:
                response = await call_next(request)
        except Exception as exc:
            if not isinstance(exc, Overloaded):
                if not (guards.is_body_refusal(exc) or guards.is_client_gone(exc)):
                    # an internal error: counted here, answered 500 by the handler
                    route = _route_of(request, app.router.routes)
                    state.metrics.observe(request.method, route, 500, time.perf_counter() - started)
                raise

            state.metrics.reject("overloaded")
            return error_response(
                ServiceError(
                    429,
                    "overloaded",
                    f"the service is busy ({server.max_concurrency} running, {server.max_queue} waiting); "
                    f"retry after {server.retry_after_s} s",
                    {"Retry-After": str(server.retry_after_s)},
                )
            )
        if getattr(request.state, "refused", None):
            state.metrics.reject(request.state.refused)
        else:
            route = _route_of(request, app.router.routes)
            state.metrics.observe(
                request.method, route, response.status_code, time.perf_counter() - started
            )
        return response

    # -- health, metrics, collections -----------------------------------------------------------

    @app.get("/", summary="The search page (Accept: text/html), else the service name and version")
    async def root(request: Request):
        if page.wants_html(request):
            return page.asset_response("index.html", request)
        if not authorized(request):  # the page is public; what the service is, is not
            raise ServiceError(
                401,
                "unauthorized",
                "missing or wrong API key; send Authorization: Bearer <key>",
                {"WWW-Authenticate": "Bearer"},
            )
        return {
            "service": "accelkit images",
            "version": __version__,
            "status": "running",
            "docs": "/docs",
        }

    @app.get("/health", summary="Liveness; model and store details with the API key")
    async def health(request: Request):
        store = await state.run(state.pipeline.store.ping)
        status = "ok" if store["ok"] else "degraded"
        if not authorized(request):  # public: only whether the service works
            return {"status": status}
        return {
            "status": status,
            "version": __version__,
            "uptime_s": round(time.time() - state.started, 1),
            "model": {
                "name": config.model.name,
                "backend": config.model.backend,
                "dim": config.model.embedding_dim,
                "loaded": state.pipeline is not None,
            },
            "store": {
                "ok": store["ok"],
                "kind": "milvus-server" if state.pipeline.store.is_server else "milvus-lite",
                **(
                    {"collections": store["collections"]}
                    if store["ok"]
                    else {"error": "unreachable; see the service log"}
                ),
            },
        }

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon():
        return Response(status_code=204)  # the page has no icon; browsers ask regardless

    @app.get(
        "/static/{asset}", summary="The search page's script and style", include_in_schema=False
    )
    async def static_asset(asset: str, request: Request):
        return page.asset_response(asset, request)

    @app.get(
        "/collections/{name}/items/{item_id:path}/thumbnail",
        summary="A stored item's thumbnail (JPEG, made at insert time)",
    )
    async def thumbnail(name: str, item_id: str, request: Request):
        name = check_collection_name(name)
        jpeg = await state.run(state.index.thumbnail, item_id, name)
        if jpeg is None:
            raise ServiceError(
                404, "not_found", f"no thumbnail for id {item_id[:80]!r} in collection {name!r}"
            )
        return page.thumbnail_response(jpeg, request)

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics():
        body, content_type = state.metrics.render()
        return Response(body, media_type=content_type)

    @app.get("/collections", summary="List collections")
    async def list_collections():
        names = await state.run(state.index.list_collections)
        return {"collections": names, "count": len(names)}

    @app.post("/collections/create", summary="Create a collection")
    async def create_collection(request: Request):
        fields, _ = await forms.read_body(request, server.max_items_per_request)
        body = forms.validate(CreateCollectionRequest, fields, limits)
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

    @app.get("/collections/{name}", summary="Describe a collection")
    async def describe_collection(name: str):
        return await state.run(state.index.describe, check_collection_name(name))

    @app.get("/collections/{name}/stats", summary="Describe a collection (EmbeddingTrident's form)")
    async def collection_stats(name: str):
        info = await state.run(state.index.describe, check_collection_name(name))
        return {**info, "num_entities": info["count"]}

    @app.delete("/collections/{name}", summary="Delete a collection and everything in it")
    async def drop_collection(name: str):
        await state.run(state.index.drop_collection, check_collection_name(name))
        return {"dropped": name, "message": f"Collection '{name}' deleted successfully"}

    @app.post("/collections/{name}/flush", summary="Seal inserted rows so the index covers them")
    async def flush_collection(name: str):
        return await state.run(state.index.flush, check_collection_name(name))

    @app.get("/collections/{name}/index", summary="Index build progress (wait=true waits for it)")
    async def index_progress(name: str, wait: bool = False):
        return await state.run(state.index.index_progress, check_collection_name(name), wait)

    @app.post("/collections/{name}/index", summary="Replace the vector index (Milvus server)")
    async def rebuild_index(name: str, request: Request):
        fields, _ = await forms.read_body(request, server.max_items_per_request)
        spec = forms.validate(
            CreateCollectionRequest,
            {k: v for k, v in fields.items() if k in INDEX_SPEC_FIELDS},
            limits,
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

    # -- items ---------------------------------------------------------------------------------

    @app.post("/insert", summary="Embed and store images (JSON or multipart)")
    async def insert(request: Request):
        fields, uploads = await forms.read_body(request, server.max_items_per_request)
        body = forms.validate(InsertRequest, fields, limits)
        triples = forms.insert_sources(body, uploads)
        if len(triples) > server.max_items_per_request:
            raise ServiceError(
                413,
                "too_many_items",
                f"{len(triples)} images in one request; the limit is {server.max_items_per_request}",
            )
        if not triples:
            raise InputError("no images given; send items (JSON) or files (multipart)")
        name = check_collection_name(body.collection or config.store.collection_name)
        if not body.create_collection:
            await state.run(state.index.store.describe_dim, name)  # 404 before anything is read
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
            {"index": i, "id": triples[i][1], "error": reason}
            for i, reason in sorted(failures.items())
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

    @app.post(
        "/search", summary="Nearest stored images to an image or a vector (JSON or multipart)"
    )
    async def search(request: Request):
        fields, uploads = await forms.read_body(request, server.max_items_per_request)
        body = forms.validate(SearchRequest, fields, limits)
        if body.topk > server.max_topk:
            raise ServiceError(
                422, "invalid_field", f"topk: must be at most {server.max_topk}, not {body.topk}"
            )
        name = check_collection_name(body.collection or config.store.collection_name)
        source = forms.search_source(body, uploads)
        started = time.perf_counter()
        if source is None:
            import numpy as np

            if body.id is not None:  # "search by this result": the stored vector, nothing read
                query = await state.run(state.index.stored_vector, body.id, name)
            else:
                query = np.asarray(body.vector, np.float32)
            hits = await state.run(
                state.index.search, query, body.topk, body.filter, name, body.consistency
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
                )
        took = round((time.perf_counter() - started) * 1000, 2)
        results = [{**hit.to_dict(), "distance": hit.score} for hit in hits]
        return {
            "collection": name,
            "topk": body.topk,
            "results": results,
            "took_ms": took,
            # EmbeddingTrident's fields
            "collection_name": name,
            "count": len(results),
            "query_time_ms": took,
        }

    @app.get("/items", summary="Stored items by id (metadata only)")
    async def get_items(request: Request):
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
            raise ServiceError(422, "invalid_field", f"{unknown[0][:40]}: unknown parameter")
        body = forms.validate(DeleteRequest, fields, limits)
        name = check_collection_name(body.collection or config.store.collection_name)
        return {"collection": name, "items": await state.run(state.index.get, body.ids or [], name)}

    @app.delete("/items", summary="Delete items by id")
    async def delete_items(request: Request):
        fields, _ = await forms.read_body(request, server.max_items_per_request)
        body = forms.validate(DeleteRequest, fields, limits)
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

    @app.post("/delete", summary="Delete items by ids or by a filter (EmbeddingTrident's form)")
    async def delete(request: Request):
        fields, _ = await forms.read_body(request, server.max_items_per_request)
        body = forms.validate(DeleteRequest, fields, limits)
        name = check_collection_name(body.collection or config.store.collection_name)
        if body.ids:  # as in EmbeddingTrident: ids win when both are given
            deleted = await state.run(state.index.delete, body.ids, None, name)
        elif body.filter:
            deleted = await state.run(state.index.delete, None, body.filter, name)
        else:
            raise InputError("give ids or filter_expr to delete by")
        return {"collection": name, "deleted": deleted, "message": f"Deleted {deleted} embeddings"}

    @app.post(
        "/embed", summary="Embeddings of images, without storing them (EmbeddingTrident's form)"
    )
    async def embed(request: Request):
        fields, uploads = await forms.read_body(request, server.max_items_per_request)
        body = forms.validate(EmbedRequest, fields, limits)
        sources = [Source("input", v) for v in body.inputs or []]
        sources += [Source("image_base64", v) for v in body.images_base64 or []]
        sources += [Source("bytes", data, name) for name, data in uploads]
        if not sources:
            raise InputError("no images given; send inputs, images_base64 or files")
        if len(sources) > server.max_items_per_request:
            raise ServiceError(
                413,
                "too_many_items",
                f"{len(sources)} images in one request; the limit is {server.max_items_per_request}",
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

    _openapi_bodies(
        app,
        {
            ("POST", "/insert"): InsertRequest,
            ("POST", "/search"): SearchRequest,
            ("POST", "/collections/create"): CreateCollectionRequest,
            ("DELETE", "/items"): DeleteRequest,
            ("POST", "/delete"): DeleteRequest,
            ("POST", "/embed"): EmbedRequest,
        },
    )

    app.middleware("http")(page.security_headers)  # outermost: on every answer, refusals too
    return guards.BodyLimit(
        app, server.max_body_bytes, on_reject=state.metrics.reject, timeout=server.body_timeout_s
    )


def fastapi_app(wrapped: Any):
    """The FastAPI app inside `create_app`'s wrapper (for tests and OpenAPI)."""
    return wrapped.app


def return_freed_memory() -> None:
    """Let glibc give freed image buffers back to the system (allocations over 128 KiB are
    mapped, and unmapped when freed): with its default, memory of decoded images stayed with the
    process — 13 concurrent big-image requests left it at 2.1 GB when idle and its peak crept up
    round by round (2.0 → 2.5 GB); with this, 0.7-0.8 GB idle and a 1.3-1.5 GB peak."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


def header_deadline_protocol(header_timeout: float, send_timeout: float):
    """uvicorn's HTTP/1.1 protocol, closing a connection that has not sent a whole request's
    headers within `header_timeout` seconds of opening (or of its last response), or that has not
    read any of a buffered answer for `send_timeout` seconds. uvicorn has neither limit: 200
    connections that each sent half a header stayed open for good, and 30 that never read a 15 MB
    answer held 515 MB."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadline(H11Protocol):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm_header_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_header_deadline()

        def connection_lost(self, exc) -> None:
            self._disarm_header_deadline()
            self._disarm_send_deadline()
            super().connection_lost(exc)

        # A client that stops reading leaves its answer buffered here: give it `send_timeout`.
        def pause_writing(self) -> None:
            super().pause_writing()
            self._disarm_send_deadline()
            self._send_timer = self.loop.call_later(send_timeout, self.transport.abort)

        def resume_writing(self) -> None:
            self._disarm_send_deadline()
            super().resume_writing()

        def _disarm_send_deadline(self) -> None:
            timer = getattr(self, "_send_timer", None)
            if timer is not None:
                timer.cancel()
                self._send_timer = None

        def _arm_header_deadline(self) -> None:
            self._disarm_header_deadline()
            self._header_timer = self.loop.call_later(
                header_timeout, self._header_deadline, self.cycle
            )

        def _disarm_header_deadline(self) -> None:
            timer = getattr(self, "_header_timer", None)
            if timer is not None:
                timer.cancel()

        def _header_deadline(self, cycle) -> None:
            waiting = self.cycle is cycle and (cycle is None or cycle.response_complete)
            if waiting and not self.transport.is_closing():  # no new request since: drop it
                self.transport.close()

    return HeaderDeadline


def serve(
    config: ServiceConfig,
    host: str | None = None,
    port: int | None = None,
    on_ready: Callable[[str], None] | None = None,
) -> None:
    """Run the service with uvicorn until SIGINT/SIGTERM; in-flight requests finish first.
    The port is bound before anything else, so a busy port is one clear error."""
    import socket

    import uvicorn

    from accelkit.errors import ConfigError

    server = config.server
    host = host or server.host
    port = server.port if port is None else port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port or stop what uses it"
        ) from exc
    from accelkit.images.store import check_lite_free

    check_lite_free(config.store.uri)  # one line and exit 2, not uvicorn's startup traceback
    return_freed_memory()
    app = create_app(config)
    if on_ready:
        on_ready(f"http://{host}:{sock.getsockname()[1]}")
    uvicorn_config = uvicorn.Config(
        app,
        http=header_deadline_protocol(server.header_timeout_s, server.send_timeout_s),
        timeout_graceful_shutdown=int(server.shutdown_timeout_s),
        log_level=config.log_level.lower(),
        access_log=False,
        limit_concurrency=server.max_connections,  # beyond: 503 at once, no task, no body read
        proxy_headers=False,
    )
    uvicorn.Server(uvicorn_config).run(sockets=[sock])
