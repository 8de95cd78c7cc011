"""The HTTP service: thin FastAPI routes over `LocalIndex`, whose embed function is the dynamic
batcher (the images of concurrent requests share model batches).

Endpoints: GET /health, GET /collections, POST /collections/create, GET|DELETE
/collections/{name}, GET /collections/{name}/stats, POST /collections/{name}/flush,
GET|POST /collections/{name}/index, POST /insert, POST /search, GET /items, DELETE /items,
POST /delete and POST /embed (EmbeddingTrident's), GET /metrics, OpenAPI at /docs.
Request bodies are the models of `accelkit.images.settings.schema` (JSON, or multipart with files), so
the OpenAPI schema is theirs. Images come as uploads or base64; server-side paths only under
`server.allowed_roots` (none by default → 403); http(s) URLs only with `allow_urls`.

Routes are module-level `APIRouter`s (the page, health and metrics here; `collections.router`,
`items.router`) that take the app's one `ServiceState` as a dependency (`state.State`), and the
error handlers and the guard middleware are module-level functions reading it from
`request.app.state.service`; `create_app` only builds the state and wires them.

An insert is answered only after the store has accepted it. On SIGTERM uvicorn stops accepting,
lets in-flight requests finish (`shutdown_timeout_s`), then the batcher drains and the store closes.
"""

from __future__ import annotations

import logging
import time
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request  # module level: FastAPI reads annotations here
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from accelkit import __version__
from accelkit.errors import AccelkitError
from accelkit.images.embedding.batching import BatcherClosed, Overloaded
from accelkit.images.service import collections, guards, items, openapi, page
from accelkit.images.service.errors import ServiceError, error_body, retry_headers, status_for
from accelkit.images.service.state import ServiceState, State
from accelkit.images.settings.config import ServiceConfig
from accelkit.images.settings.schema import (
    CreateCollectionRequest,
    DeleteRequest,
    EmbedRequest,
    InsertRequest,
    SearchRequest,
    check_collection_name,
)

log = logging.getLogger(__name__)

ADMITTED_METHODS = ("POST", "PUT", "PATCH", "DELETE")  # whatever may carry a body waits its turn


def _flat(routes) -> list:
    """The routes, with those of each included router in its place (FastAPI keeps an included
    router as one entry that holds its `original_router`)."""
    flat = []
    for route in routes:
        included = getattr(route, "original_router", None)
        flat += _flat(included.routes) if included is not None else [route]
    return flat


def _route_of(request, routes) -> str:
    """The route template (`/collections/{name}`), also for requests refused before routing, so
    metrics labels stay few; anything else is "unmatched"."""
    route = request.scope.get("route")
    if route is not None:
        return route.path
    for candidate in _flat(routes):
        if candidate.matches(request.scope)[0] == Match.FULL:
            return getattr(candidate, "path", "unmatched")
    return "unmatched"


def _allowed_methods(request, routes) -> list[str]:
    """The methods the routes matching the request's path take (a path may have several routes:
    GET and DELETE /collections/{name})."""
    methods: set[str] = set()
    for candidate in _flat(routes):
        if (
            getattr(candidate, "methods", None)
            and candidate.matches(request.scope)[0] != Match.NONE
        ):
            methods |= set(candidate.methods)
    return sorted(methods)


def error_response(exc: ServiceError) -> JSONResponse:
    return JSONResponse(
        error_body(exc.status, exc.code, exc.message, exc.detail),
        status_code=exc.status,
        headers=exc.headers,
    )


def authorized(request: Request) -> bool:
    """Whether the request carries the service's API key (or the service has none)."""
    api_key = request.app.state.service.config.server.api_key
    return not api_key or guards.api_key_ok(request.headers.get("authorization", ""), api_key)


def unauthorized() -> ServiceError:
    return ServiceError(
        401,
        "unauthorized",
        "missing or wrong API key; send Authorization: Bearer <key>",
        {"WWW-Authenticate": "Bearer"},
    )


@asynccontextmanager
async def lifespan(app):
    state = app.state.service
    await state.start()
    log.info(
        "accelkit images service ready: store %s, model %s",
        state.store.uri,
        state.config.model.name,
    )
    try:
        yield
    finally:
        await state.stop()


# -- errors: every one is one JSON body ----------------------------------------------------------


async def _service_error(request: Request, exc: ServiceError):
    if exc.code == "decode_budget":  # a refusal: counted in rejected, not as a request
        request.state.refused = "decode_budget"
    return error_response(exc)


async def _accelkit_error(request: Request, exc: AccelkitError):
    status, code = status_for(exc)
    headers = retry_headers(status, request.app.state.service.config.server.retry_after_s)
    return error_response(ServiceError(status, code, str(exc), headers))


async def _closing(request: Request, exc: BatcherClosed):
    return error_response(
        ServiceError(
            503, "shutting_down", "the service is shutting down; retry on another instance"
        )
    )


async def _validation_error(request: Request, exc: RequestValidationError):
    parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]]
    return error_response(ServiceError(422, "invalid_field", "; ".join(parts)))


async def _http_error(request: Request, exc: StarletteHTTPException):
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # Allow: what every route of this path takes, not the first's
        headers["Allow"] = ", ".join(_allowed_methods(request, request.app.router.routes))
    return error_response(ServiceError(exc.status_code, code, str(exc.detail), headers))


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


ERROR_HANDLERS = (
    (ServiceError, _service_error),
    (AccelkitError, _accelkit_error),
    (BatcherClosed, _closing),
    (RequestValidationError, _validation_error),
    (StarletteHTTPException, _http_error),
    (Exception, _internal_error),
)


async def _guard(request: Request, call_next):
    """The API key, admission (bodies wait their turn, beyond the queue: 429) and the metrics."""
    state = request.app.state.service
    server = state.config.server
    routes = request.app.router.routes
    started = time.perf_counter()
    path = request.url.path
    try:
        public = path in guards.PUBLIC_PATHS or page.is_page_request(request)
        if not authorized(request) and not public:
            state.metrics.reject("unauthorized")
            return error_response(unauthorized())
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
                route = _route_of(request, routes)
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
        route = _route_of(request, routes)
        state.metrics.observe(
            request.method, route, response.status_code, time.perf_counter() - started
        )
    return response


# -- the page, health, metrics -------------------------------------------------------------------

router = APIRouter()


@router.get("/", summary="The search page (Accept: text/html), else the service name and version")
async def root(request: Request):
    if page.wants_html(request):
        return page.asset_response("index.html", request)
    if not authorized(request):  # the page is public; what the service is, is not
        raise unauthorized()
    return {
        "service": "accelkit images",
        "version": __version__,
        "status": "running",
        "docs": "/docs",
    }


@router.get("/health", summary="Liveness; model and store details with the API key")
async def health(request: Request, state: State):
    config = state.config
    store = await state.run(state.store.ping)
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
            "text": config.model.has_text,  # loaded at start: words can be searched
            "loaded": state.pipeline is not None,
        },
        "store": {
            "ok": store["ok"],
            "kind": "milvus-server" if state.store.is_server else "milvus-lite",
            **(
                {"collections": store["collections"]}
                if store["ok"]
                else {"error": "unreachable; see the service log"}
            ),
        },
        # the index each collection's searches use, and what of its settings is ignored
        **({"collections": await state.run(state.index.indexes_in_use)} if store["ok"] else {}),
    }


@router.get("/favicon.ico", include_in_schema=False)
async def favicon():
    return Response(status_code=204)  # the page has no icon; browsers ask regardless


@router.get(
    "/static/{asset}", summary="The search page's script and style", include_in_schema=False
)
async def static_asset(asset: str, request: Request):
    return page.asset_response(asset, request)


@router.get(
    "/collections/{name}/items/{item_id:path}/thumbnail",
    summary="A stored item's thumbnail (JPEG, made at insert time)",
)
async def thumbnail(name: str, item_id: str, request: Request, state: State):
    name = check_collection_name(name)
    jpeg = await state.run(state.index.thumbnail, item_id, name)
    if jpeg is None:
        raise ServiceError(
            404, "not_found", f"no thumbnail for id {item_id[:80]!r} in collection {name!r}"
        )
    return page.thumbnail_response(jpeg, request)


@router.get("/metrics", summary="Prometheus metrics")
async def metrics(state: State):
    body, content_type = state.metrics.render()
    return Response(body, media_type=content_type)


def create_app(config: ServiceConfig | None = None, pipeline: Any = None):
    """The FastAPI app (wrapped in `BodyLimit`); `pipeline` may be given (tests), else built at startup."""
    config = config or ServiceConfig()
    state = ServiceState(config, pipeline)
    server = config.server
    app = FastAPI(
        title="accelkit images",
        version=__version__,
        lifespan=lifespan,
        description="Image embedding and similarity search: EfficientNet-Lite0 embeddings in Milvus.",
    )
    app.state.service = state
    for kind, handler in ERROR_HANDLERS:
        # starlette types a handler as taking any Exception; it calls each with its own kind
        app.add_exception_handler(kind, handler)  # pyright: ignore[reportArgumentType]
    app.middleware("http")(_guard)
    for routes in (router, collections.router, items.router):
        app.include_router(routes)
    openapi.document_bodies(
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
