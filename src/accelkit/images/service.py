"""The HTTP service: FastAPI over `ImageEmbeddingPipeline` and `VectorStore`.

Endpoints: GET /health, GET /collections, POST /collections/create, GET /collections/{name},
DELETE /collections/{name}, POST /insert, POST /search, DELETE /items, GET /metrics, and the
OpenAPI docs at /docs. Images come as multipart uploads or base64 in JSON; server-side paths only
under `server.allowed_roots` (none by default → 403) and http(s) URLs only with `allow_urls`.

Safety and load, in the order a request meets them:
* `BodyLimit` (outermost ASGI wrapper): a body over `max_body_bytes` is answered 413 — from the
  Content-Length header before reading, or while streaming a chunked upload.
* API key: with `server.api_key`, every endpoint but /health and the docs needs
  `Authorization: Bearer <key>` (compared in constant time) → else 401.
* `AdmissionLimiter`: `max_concurrency` requests work, `max_queue` wait; more get 429 with
  `Retry-After` at once.
* Images are decoded by the pipeline with its pixel limit (decompression bombs fail as items).
* `DynamicBatcher`: the images of concurrent requests share model batches.
Errors are JSON: `{"error": {"status": 404, "code": "collection_not_found", "message": "..."}}`.
An insert is answered only after the store has accepted it. On SIGTERM uvicorn stops accepting,
lets in-flight requests finish (`shutdown_timeout_s`), then the batcher drains and the store closes.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import json
import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Request  # module level: FastAPI resolves the endpoints' annotations here

from accelkit.errors import AccelkitError, ConfigError, DataError, InputError
from accelkit.images.batching import AdmissionLimiter, BatcherClosed, DynamicBatcher, Overloaded
from accelkit.images.config import ServerConfig, ServiceConfig
from accelkit.images.store import CollectionExistsError, CollectionNotFoundError, StoreError

log = logging.getLogger(__name__)

PUBLIC_PATHS = {"/health", "/docs", "/openapi.json", "/docs/oauth2-redirect", "/redoc"}


class ServiceError(Exception):
    """An answer other than 200, with a machine-readable code."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: dict[str, str] | None = None,
        detail: Any = None,
    ):
        super().__init__(message)
        self.status, self.code, self.message, self.headers, self.detail = (
            status,
            code,
            message,
            headers or {},
            detail,
        )


def error_body(status: int, code: str, message: str, detail: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"status": status, "code": code, "message": message}
    if detail is not None:
        body["detail"] = detail
    return {"error": body}


def status_for(exc: AccelkitError) -> tuple[int, str]:
    """HTTP status and code for an accelkit error."""
    if isinstance(exc, CollectionNotFoundError):
        return 404, "collection_not_found"
    if isinstance(exc, CollectionExistsError):
        return 409, "collection_exists"
    if isinstance(exc, StoreError):
        return 503, "store_unavailable"
    if isinstance(exc, DataError):
        return 422, "invalid_data"
    if isinstance(exc, (InputError, ConfigError)):
        return 400, "invalid_request"
    return 400, "error"


# ---------------------------------------------------------------------------------------------
# Body size limit, outermost: it must see the raw ASGI messages.


class _BodyTooLarge(Exception):
    pass


class BodyLimit:
    """ASGI wrapper: 413 for a request body over `limit` bytes, declared or streamed."""

    def __init__(self, app: Any, limit: int, on_reject: Callable[[], None] | None = None):
        self.app, self.limit, self.on_reject = app, limit, on_reject

    async def _reject(self, send) -> None:
        if self.on_reject:
            self.on_reject()
        message = f"request body is larger than the limit of {self.limit:,} bytes; send fewer or smaller images"
        body = json.dumps(error_body(413, "body_too_large", message)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            await self._reject(send)
            return
        received = 0
        state = {"too_large": False, "started": False}

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    state["too_large"] = True
                    raise _BodyTooLarge
            return message

        async def guarded_send(message):
            if state["too_large"]:
                return  # the app's answer to the aborted read (a 500) is replaced by the 413 below
            state["started"] = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:  # _BodyTooLarge, possibly inside an ExceptionGroup from a task group
            if not state["too_large"]:
                raise
        if state["too_large"] and not state["started"]:
            await self._reject(send)


# ---------------------------------------------------------------------------------------------
# Metrics


class Metrics:
    """Prometheus metrics in a registry of their own (several apps may live in one process)."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter(
            "accelkit_images_requests",
            "HTTP requests by route and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "accelkit_images_request_seconds",
            "Request latency by route",
            ["route"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.rejected = Counter(
            "accelkit_images_rejected",
            "Requests refused by reason",
            ["reason"],
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "accelkit_images_in_flight",
            "Requests admitted (running or waiting)",
            registry=self.registry,
        )
        self.batch_images = Histogram(
            "accelkit_images_batch_images",
            "Images per model batch",
            registry=self.registry,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
        )
        self.batch_requests = Histogram(
            "accelkit_images_batch_requests",
            "Requests merged into one model batch",
            registry=self.registry,
            buckets=(1, 2, 4, 8, 16, 32),
        )
        self.images = Counter("accelkit_images_embedded", "Images embedded", registry=self.registry)
        self.failed_images = Counter(
            "accelkit_images_failed", "Images that could not be embedded", registry=self.registry
        )
        self.stored = Counter(
            "accelkit_images_stored", "Items acknowledged as stored", registry=self.registry
        )

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


# ---------------------------------------------------------------------------------------------
# Image sources


def decode_base64(text: str, where: str) -> bytes:
    if not isinstance(text, str) or not text:
        raise InputError(f"{where}: image_base64 must be a non-empty string")
    if text.startswith("data:"):  # data URLs: data:image/png;base64,....
        text = text.split(",", 1)[-1]
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InputError(f"{where}: image_base64 is not valid base64 ({exc})") from exc
    if not data:
        raise InputError(f"{where}: image_base64 decodes to 0 bytes")
    return data


def resolve_allowed_path(path: str, roots: list[str], where: str) -> Path:
    """The real path of `path` if it lies under one of `roots` (symlinks resolved), else 403."""
    if not roots:
        raise ServiceError(
            403,
            "paths_disabled",
            f"{where}: server-side paths are disabled; upload the image "
            "(multipart or image_base64) or configure server.allowed_roots",
        )
    real = Path(os.path.realpath(path))
    for root in roots:
        base = Path(os.path.realpath(root))
        if real == base or base in real.parents:
            return real
    raise ServiceError(403, "path_not_allowed", f"{where}: {path!r} is outside the allowed roots")


def read_limited(path: Path, limit: int, where: str) -> bytes:
    try:
        size = path.stat().st_size
        if size > limit:
            raise DataError(f"{where}: {path.name} is {size:,} bytes, over the limit of {limit:,}")
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise DataError(f"{where}: no such file {path}") from exc
    except IsADirectoryError as exc:
        raise DataError(f"{where}: {path} is a folder, not an image file") from exc
    except OSError as exc:
        raise DataError(f"{where}: cannot read {path} ({exc.strerror})") from exc


async def fetch_url(url: str, server: ServerConfig, where: str) -> bytes:
    if not server.allow_urls:
        raise ServiceError(
            403,
            "urls_disabled",
            f"{where}: fetching URLs is disabled; upload the image or set server.allow_urls",
        )
    if not url.lower().startswith(("http://", "https://")):
        raise InputError(f"{where}: only http(s) URLs can be fetched, not {url[:40]!r}")
    import httpx

    chunks, total = [], 0
    try:
        async with (
            httpx.AsyncClient(
                timeout=server.fetch_timeout_s, follow_redirects=True, max_redirects=3
            ) as client,
            client.stream("GET", url) as response,
        ):
            if response.status_code != 200:
                raise DataError(f"{where}: {url} answered HTTP {response.status_code}")
            async for chunk in response.aiter_bytes():
                total += len(chunk)
                if total > server.fetch_max_bytes:
                    raise DataError(
                        f"{where}: {url} is larger than the limit of {server.fetch_max_bytes:,} bytes"
                    )
                chunks.append(chunk)
    except httpx.HTTPError as exc:
        raise DataError(f"{where}: cannot fetch {url} ({type(exc).__name__}: {exc})") from exc
    return b"".join(chunks)


async def load_source(item: dict[str, Any], server: ServerConfig, where: str) -> bytes:
    """Bytes of one image given as exactly one of bytes (an upload), image_base64, path, url (or a
    path-or-URL `input`, the original service's form)."""
    given = [
        k for k in ("bytes", "image_base64", "path", "url", "input") if item.get(k) is not None
    ]
    if len(given) != 1:
        raise InputError(
            f"{where}: give exactly one of image_base64, path or url (got {', '.join(given) or 'none'})"
        )
    kind = given[0]
    value = item[kind]
    if kind == "bytes":
        if not value:
            raise DataError(f"{where}: the uploaded file is empty (0 bytes)")
        return value
    if not isinstance(value, str):
        raise InputError(f"{where}: {kind} must be a string")
    if kind == "input":  # the original service's form: a server path or a URL
        kind = "url" if value.lower().startswith(("http://", "https://")) else "path"
    if kind == "image_base64":
        return decode_base64(value, where)
    if kind == "url":
        return await fetch_url(value, server, where)
    real = resolve_allowed_path(value, server.allowed_roots, where)
    return await asyncio.to_thread(read_limited, real, server.fetch_max_bytes, where)


# ---------------------------------------------------------------------------------------------
# The application


class ServiceState:
    """What the endpoints share: config, pipeline (model + store), batcher, limits, metrics."""

    def __init__(self, config: ServiceConfig, pipeline: Any = None):
        self.config = config
        self.pipeline = pipeline
        self.owns_pipeline = pipeline is None
        self.metrics = Metrics()
        self.limiter = AdmissionLimiter(config.server.max_concurrency, config.server.max_queue)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelkit-batch")
        self.batcher: DynamicBatcher | None = None
        self.started = time.time()

    async def start(self) -> None:
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

    async def stop(self) -> None:
        if self.batcher is not None:
            await self.batcher.close()
        self.executor.shutdown(wait=True)
        if self.pipeline is not None and self.owns_pipeline:
            await asyncio.to_thread(self.pipeline.close)

    @property
    def store(self):
        return self.pipeline.store

    async def run_store(self, fn: Callable, *args, **kwargs):
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def embed(self, images: list[bytes]):
        try:
            results = await self.batcher.embed(images)
        except BatcherClosed as exc:
            raise ServiceError(
                503, "shutting_down", "the service is shutting down; retry on another instance"
            ) from exc
        ok = sum(r.error is None for r in results)
        self.metrics.images.inc(ok)
        self.metrics.failed_images.inc(len(results) - ok)
        return results


def _route_of(request, routes) -> str:
    """The route template (`/collections/{name}`), also for requests refused before routing, so
    metrics labels stay few."""
    route = request.scope.get("route")
    if route is not None:
        return route.path
    from starlette.routing import Match

    for candidate in routes:
        if candidate.matches(request.scope)[0] != Match.NONE:
            return getattr(candidate, "path", "unmatched")
    return "unmatched"


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

    @asynccontextmanager
    async def lifespan(app):
        await state.start()
        log.info(
            "accelkit images service ready: store %s, model %s", state.store.uri, config.model.name
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
        return error_response(exc)

    @app.exception_handler(AccelkitError)
    async def _accelkit_error(request: Request, exc: AccelkitError):
        status, code = status_for(exc)
        return error_response(ServiceError(status, code, str(exc)))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        return error_response(ServiceError(422, "invalid_request", "; ".join(parts)))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(ServiceError(exc.status_code, code, str(exc.detail)))

    @app.exception_handler(Exception)
    async def _internal_error(request: Request, exc: Exception):
        if isinstance(exc, _BodyTooLarge) or "_BodyTooLarge" in repr(
            getattr(exc, "exceptions", "")
        ):
            raise exc  # BodyLimit answers 413 instead
        log.exception("internal error on %s", request.url.path)
        return error_response(
            ServiceError(
                500, "internal_error", f"internal error ({type(exc).__name__}); see the service log"
            )
        )

    @app.middleware("http")
    async def _guard(request: Request, call_next):
        started = time.perf_counter()
        path = request.url.path
        try:
            if server.api_key and path not in PUBLIC_PATHS:
                given = request.headers.get("authorization", "")
                scheme, _, token = given.partition(" ")
                if scheme.lower() != "bearer" or not hmac.compare_digest(
                    token.strip().encode(), server.api_key.encode()
                ):
                    state.metrics.rejected.labels("unauthorized").inc()
                    raise ServiceError(
                        401,
                        "unauthorized",
                        "missing or wrong API key; send Authorization: Bearer <key>",
                        {"WWW-Authenticate": "Bearer"},
                    )
            if request.method in ("POST", "DELETE") and path in ("/insert", "/search", "/items"):
                try:
                    async with state.limiter.slot():
                        state.metrics.in_flight.set(state.limiter.admitted)
                        response = await call_next(request)
                finally:
                    state.metrics.in_flight.set(state.limiter.admitted)
            else:
                response = await call_next(request)
        except Overloaded:
            state.metrics.rejected.labels("overloaded").inc()
            response = error_response(
                ServiceError(
                    429,
                    "overloaded",
                    f"the service is busy ({server.max_concurrency} running, {server.max_queue} waiting); retry after "
                    f"{server.retry_after_s} s",
                    {"Retry-After": str(server.retry_after_s)},
                )
            )
        except ServiceError as exc:
            response = error_response(exc)
        route = _route_of(request, app.router.routes)
        state.metrics.requests.labels(request.method, route, str(response.status_code)).inc()
        state.metrics.latency.labels(route).observe(time.perf_counter() - started)
        return response

    # -- endpoints ---------------------------------------------------------------------------

    @app.get("/health", summary="Liveness, model and store status")
    async def health():
        store = await state.run_store(state.store.ping)
        store.pop("uri", None)  # public endpoint: no addresses
        store["kind"] = "milvus-lite" if "://" not in config.store.uri else "milvus-server"
        ok = store["ok"]
        return {
            "status": "ok" if ok else "degraded",
            "version": __version__,
            "uptime_s": round(time.time() - state.started, 1),
            "model": {
                "name": config.model.name,
                "backend": config.model.backend,
                "dim": config.model.embedding_dim,
                "loaded": state.pipeline is not None,
            },
            "store": store,
        }

    @app.get("/metrics", summary="Prometheus metrics")
    async def metrics():
        body, content_type = state.metrics.render()
        return Response(body, media_type=content_type)

    @app.get("/collections", summary="List collections")
    async def list_collections():
        names = await state.run_store(state.store.list_collections)
        return {"collections": names}

    @app.post("/collections/create", summary="Create a collection")
    async def create_collection(body: dict[str, Any]):
        name = body.get("name") or body.get("collection_name") or config.store.collection_name
        known = {
            "name",
            "collection_name",
            "dim",
            "description",
            "index_type",
            "metric_type",
            "index_params",
            "exist_ok",
        }
        unknown = sorted(set(body) - known)
        if unknown:
            raise InputError(f"unknown field {unknown[0]!r}; allowed: {', '.join(sorted(known))}")
        info = await state.run_store(
            state.store.create_collection,
            name,
            body.get("dim") or config.model.embedding_dim,
            body.get("description") or "",
            index_type=body.get("index_type"),
            metric_type=body.get("metric_type"),
            index_params=body.get("index_params"),
            exist_ok=bool(body.get("exist_ok", False)),
        )
        return info

    @app.get("/collections/{name}", summary="Collection stats")
    async def describe_collection(name: str):
        return await state.run_store(state.store.describe, name)

    @app.delete("/collections/{name}", summary="Delete a collection")
    async def drop_collection(name: str):
        await state.run_store(state.store.drop_collection, name)
        return {"dropped": name}

    @app.post(
        "/insert",
        summary="Embed and store images (JSON or multipart)",
        openapi_extra=INSERT_OPENAPI,
    )
    async def insert(request: Request):
        body = await read_request(request, many=True)
        items = body["items"]
        name = body.get("collection_name") or config.store.collection_name
        if len(items) > server.max_items_per_request:
            raise ServiceError(
                413,
                "too_many_items",
                f"{len(items)} images in one request; the limit is {server.max_items_per_request}",
            )
        if not items:
            raise InputError("no images given; send items (JSON) or files (multipart)")
        if body.get("create_collection"):
            await state.run_store(
                state.store.create_collection, name, config.model.embedding_dim, exist_ok=True
            )
        elif not await state.run_store(state.store.has_collection, name):
            await state.run_store(
                state.store.describe, name
            )  # raises the not-found error with the known names
        failures: dict[int, str] = {}
        images: list[tuple[int, bytes]] = []
        for i, item in enumerate(items):
            try:
                images.append((i, await load_source(item, server, f"item #{i}")))
            except (DataError, InputError) as exc:
                failures[i] = str(exc)
        results = await state.embed([data for _, data in images])
        from accelkit.images.pipeline import content_id

        ids, vectors, metadata, indices = [], [], [], []
        for (i, data), result in zip(images, results, strict=True):
            if result.error is not None:
                failures[i] = f"item #{i}: {result.error}"
                continue
            ids.append(items[i].get("id") or content_id(data))
            vectors.append(result.vector)
            metadata.append(items[i].get("metadata"))
            indices.append(i)
        if ids:
            import numpy as np

            await state.run_store(state.store.upsert, name, ids, np.stack(vectors), metadata)
            state.metrics.stored.inc(len(ids))
        report = [
            {"index": i, "id": items[i].get("id"), "error": reason}
            for i, reason in sorted(failures.items())
        ]
        if not ids:
            raise ServiceError(
                422,
                "no_item_stored",
                f"none of the {len(items)} images could be stored; first: {report[0]['error']}",
                detail={"failures": report},
            )
        return {
            "collection_name": name,
            "inserted": len(ids),
            "ids": ids,
            "indices": indices,
            "failures": report,
        }

    @app.post(
        "/search",
        summary="Nearest stored images to an image or a vector (JSON or multipart)",
        openapi_extra=SEARCH_OPENAPI,
    )
    async def search(request: Request):
        body = await read_request(request, many=False)
        name = body.get("collection_name") or config.store.collection_name
        topk = body.get("topk", 10)
        if isinstance(topk, str) and topk.isdigit():
            topk = int(topk)
        if not isinstance(topk, int) or isinstance(topk, bool) or not 1 <= topk <= server.max_topk:
            raise InputError(f"topk must be an integer from 1 to {server.max_topk}, not {topk!r}")
        filter_expr = body.get("filter_expr") or None
        if filter_expr is not None and not isinstance(filter_expr, str):
            raise InputError(
                'filter_expr must be a string such as metadata["category"] == "nature"'
            )
        started = time.perf_counter()
        import numpy as np

        if body.get("vector") is not None:
            try:
                vector = np.asarray(body["vector"], np.float32)
            except (TypeError, ValueError) as exc:
                raise InputError("vector must be a list of numbers") from exc
            if vector.ndim != 1:
                raise InputError("vector must be a flat list of numbers")
        else:
            item = body["items"][0] if body.get("items") else {}
            data = await load_source(item, server, "query")
            (result,) = await state.embed([data])
            if result.error is not None:
                raise DataError(f"query: {result.error}")
            vector = result.vector
        hits = (await state.run_store(state.store.search, name, vector, topk, filter_expr))[0]
        return {
            "collection_name": name,
            "topk": topk,
            "results": [h.to_dict() for h in hits],
            "took_ms": round((time.perf_counter() - started) * 1000, 2),
        }

    @app.delete("/items", summary="Delete items by id")
    async def delete_items(body: dict[str, Any]):
        name = body.get("collection_name") or config.store.collection_name
        ids = body.get("ids")
        if not isinstance(ids, list) or not ids:
            raise InputError("ids must be a non-empty list of item ids")
        deleted = await state.run_store(state.store.delete, name, ids)
        return {"collection_name": name, "requested": len(ids), "deleted": deleted}

    return BodyLimit(
        app,
        server.max_body_bytes,
        on_reject=lambda: state.metrics.rejected.labels("body_too_large").inc(),
    )


def fastapi_app(wrapped: Any):
    """The FastAPI app inside `create_app`'s wrapper (for tests and OpenAPI)."""
    return wrapped.app


# ---------------------------------------------------------------------------------------------
# Request parsing: one shape for JSON and multipart


_ITEM_KEYS = {"image_base64", "path", "url", "input", "id", "metadata"}
_INSERT_KEYS = {
    "collection_name",
    "items",
    "inputs",
    "images_base64",
    "ids",
    "metadata",
    "create_collection",
}
_SEARCH_KEYS = {
    "collection_name",
    "image_base64",
    "path",
    "url",
    "input",
    "query",
    "query_input",
    "vector",
    "topk",
    "filter_expr",
}


def _json_list(value: Any, what: str) -> list | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise InputError(f"{what} must be a JSON list") from exc
    if not isinstance(value, list):
        raise InputError(f"{what} must be a list")
    return value


def normalize_insert(body: dict[str, Any], uploads: list[bytes] | None = None) -> dict[str, Any]:
    """Insert requests in any accepted form -> {"collection_name", "create_collection", "items": [{source, id, metadata}]}.

    Forms: `items` (each with one of image_base64/path/url, optional id and metadata); the original
    service's `inputs` (paths or URLs) or `images_base64`, with parallel `ids` and `metadata` lists;
    multipart `files` with `ids`/`metadata` as JSON lists in form fields.
    """
    unknown = sorted(set(body) - _INSERT_KEYS)
    if unknown:
        raise InputError(
            f"unknown field {unknown[0]!r}; allowed: {', '.join(sorted(_INSERT_KEYS))}"
        )
    ids = _json_list(body.get("ids"), "ids")
    metadata = _json_list(body.get("metadata"), "metadata")
    if body.get("items") is not None:
        if (
            ids is not None
            or metadata is not None
            or body.get("inputs")
            or body.get("images_base64")
            or uploads
        ):
            raise InputError(
                "give either items (each with its id and metadata) or inputs/images_base64/files with ids and metadata lists"
            )
        items = body["items"]
        if not isinstance(items, list):
            raise InputError("items must be a list")
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise InputError(f"item #{i} must be an object")
            extra = sorted(set(item) - _ITEM_KEYS)
            if extra:
                raise InputError(
                    f"item #{i}: unknown field {extra[0]!r}; allowed: {', '.join(sorted(_ITEM_KEYS))}"
                )
    else:
        sources: list[dict[str, Any]] = []
        for value in _json_list(body.get("inputs"), "inputs") or []:
            sources.append({"input": value})
        for value in _json_list(body.get("images_base64"), "images_base64") or []:
            sources.append({"image_base64": value})
        for data in uploads or []:
            sources.append({"bytes": data})
        for what, values in (("ids", ids), ("metadata", metadata)):
            if values is not None and len(values) != len(sources):
                raise InputError(
                    f"got {len(sources)} images but {len(values)} {what}; give one per image or none"
                )
        items = [
            {**s, "id": ids[i] if ids else None, "metadata": metadata[i] if metadata else None}
            for i, s in enumerate(sources)
        ]
    for i, item in enumerate(items):
        if item.get("id") is not None and (not isinstance(item["id"], str) or not item["id"]):
            raise InputError(f"item #{i}: id must be a non-empty string")
        if item.get("metadata") is not None and not isinstance(item["metadata"], dict):
            raise InputError(f"item #{i}: metadata must be a JSON object")
    create = body.get("create_collection", False)
    if isinstance(create, str):
        create = create.strip().lower() in ("1", "true", "yes", "on")
    return {
        "collection_name": body.get("collection_name"),
        "create_collection": bool(create),
        "items": items,
    }


def normalize_search(body: dict[str, Any], upload: bytes | None = None) -> dict[str, Any]:
    unknown = sorted(set(body) - _SEARCH_KEYS)
    if unknown:
        raise InputError(
            f"unknown field {unknown[0]!r}; allowed: {', '.join(sorted(_SEARCH_KEYS))}"
        )
    item = {k: body[k] for k in ("image_base64", "path", "url", "input") if body.get(k) is not None}
    for alias in ("query", "query_input"):  # the original service's name: a path or URL
        if body.get(alias) is not None:
            item["input"] = body[alias]
    if upload is not None:
        item["bytes"] = upload
    count = len(item) + (body.get("vector") is not None)
    if count != 1:
        raise InputError("give exactly one query: a file, image_base64, path, url or vector")
    out = {
        k: body.get(k)
        for k in ("collection_name", "topk", "filter_expr", "vector")
        if body.get(k) is not None
    }
    out["items"] = [item] if item else []
    return out


async def read_request(request, many: bool) -> dict[str, Any]:
    """JSON or multipart body -> the normalized insert (many) or search request."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "multipart/form-data":
        form = await request.form(max_files=10_000, max_fields=1_000)
        fields: dict[str, Any] = {}
        uploads: list[bytes] = []
        for key, value in form.multi_items():
            if hasattr(value, "read"):
                uploads.append(await value.read())
            else:
                fields[key] = value
        await form.close()
        if many:
            return normalize_insert(fields, uploads)
        if len(uploads) > 1:
            raise InputError("search takes one image file")
        return normalize_search(fields, uploads[0] if uploads else None)
    if content_type not in ("application/json", ""):
        raise ServiceError(
            415,
            "unsupported_media_type",
            f"send application/json or multipart/form-data, not {content_type}",
        )
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError as exc:
        raise InputError(f"request body is not valid JSON ({exc})") from exc
    if not isinstance(body, dict):
        raise InputError("request body must be a JSON object")
    return normalize_insert(body) if many else normalize_search(body)


_ITEM_SCHEMA = {
    "type": "object",
    "properties": {
        "image_base64": {
            "type": "string",
            "description": "image file bytes, base64 (a data: URL works too)",
        },
        "path": {"type": "string", "description": "server-side path under server.allowed_roots"},
        "url": {"type": "string", "description": "http(s) URL, only with server.allow_urls"},
        "id": {"type": "string"},
        "metadata": {"type": "object"},
    },
}
INSERT_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "collection_name": {"type": "string"},
                        "create_collection": {"type": "boolean"},
                        "items": {"type": "array", "items": _ITEM_SCHEMA},
                        "inputs": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "original form: server paths or URLs",
                        },
                        "images_base64": {"type": "array", "items": {"type": "string"}},
                        "ids": {"type": "array", "items": {"type": "string"}},
                        "metadata": {"type": "array", "items": {"type": "object"}},
                    },
                }
            },
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "files": {"type": "array", "items": {"type": "string", "format": "binary"}},
                        "collection_name": {"type": "string"},
                        "ids": {"type": "string", "description": "JSON list"},
                        "metadata": {"type": "string", "description": "JSON list of objects"},
                        "create_collection": {"type": "boolean"},
                    },
                }
            },
        },
    }
}
SEARCH_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "properties": {
                        **_ITEM_SCHEMA["properties"],
                        "vector": {"type": "array", "items": {"type": "number"}},
                        "query": {
                            "type": "string",
                            "description": "original form: a server path or URL",
                        },
                        "collection_name": {"type": "string"},
                        "topk": {"type": "integer", "default": 10},
                        "filter_expr": {
                            "type": "string",
                            "example": 'metadata["category"] == "nature"',
                        },
                    },
                }
            },
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "collection_name": {"type": "string"},
                        "topk": {"type": "integer"},
                        "filter_expr": {"type": "string"},
                    },
                }
            },
        },
    }
}


def serve(config: ServiceConfig, host: str | None = None, port: int | None = None) -> None:
    """Run the service with uvicorn until SIGINT/SIGTERM; in-flight requests finish first."""
    import uvicorn

    server = config.server
    app = create_app(config)
    uvicorn_config = uvicorn.Config(
        app,
        host=host or server.host,
        port=port if port is not None else server.port,
        timeout_graceful_shutdown=int(server.shutdown_timeout_s),
        log_level=config.log_level.lower(),
        access_log=False,
        limit_concurrency=None,
        proxy_headers=False,
    )
    uvicorn.Server(uvicorn_config).run()
