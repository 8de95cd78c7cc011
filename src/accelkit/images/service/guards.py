"""What stands between a client and the work, in the order a request meets it.

* `BodyLimit` (outermost ASGI wrapper): a body over `max_body_bytes` is answered 413 — from the
  Content-Length header before reading, or while streaming a chunked upload.
* `api_key_ok`: with `server.api_key`, every endpoint but /health and the docs needs
  `Authorization: Bearer <key>` (compared in constant time).
* `AdmissionLimiter` (batching.py): `max_concurrency` requests work, `max_queue` wait, more get 429.
* `DecodeBudget`: decoding holds width × height × channels × bytes-per-sample (and the
  conversion's copies) in memory; each image, each request and all requests together have a
  budget in bytes, read from the image headers before any pixel is decoded.
* `Metrics`: Prometheus series with bounded labels — unknown methods and paths collapse to one
  label, and refused requests (401, 413, 429) only count in `rejected{reason}`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from accelkit.images.service.errors import ServiceError, error_body

PUBLIC_PATHS = {"/health", "/docs", "/openapi.json", "/docs/oauth2-redirect", "/redoc"}
METHODS = {"GET", "POST", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"}
REJECT_REASONS = ("unauthorized", "overloaded", "body_too_large", "body_too_slow", "decode_budget")


def api_key_ok(authorization: str, api_key: str) -> bool:
    """`Authorization: Bearer <key>` matches, compared in constant time."""
    scheme, _, token = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        token.strip().encode(), api_key.encode()
    )


def method_label(method: str) -> str:
    return method if method in METHODS else "OTHER"


class BodyTooLarge(Exception):
    """The body passed `max_body_bytes`."""


class BodyTooSlow(Exception):
    """The body did not arrive within `body_timeout_s` (it would hold an admission slot)."""


def contains(exc: BaseException, kinds: type | tuple[type, ...]) -> bool:
    """`exc` is one of `kinds`, or an ExceptionGroup (from a task group) holding one."""
    if isinstance(exc, kinds):
        return True
    return any(contains(e, kinds) for e in getattr(exc, "exceptions", ()))


def is_body_refusal(exc: BaseException) -> bool:
    return contains(exc, (BodyTooLarge, BodyTooSlow))


def is_client_gone(exc: BaseException) -> bool:
    from starlette.requests import ClientDisconnect

    return contains(exc, ClientDisconnect)


class BodyLimit:
    """ASGI wrapper: 413 for a request body over `limit` bytes (declared or streamed), 408 for a
    body that has not arrived in full `timeout` seconds after the request started."""

    def __init__(
        self,
        app: Any,
        limit: int,
        on_reject: Callable[[str], None] | None = None,
        timeout: float = 60.0,
    ):
        self.app, self.limit, self.on_reject, self.timeout = app, limit, on_reject, timeout

    async def _reject(self, send, reason: str) -> None:
        if self.on_reject:
            self.on_reject(reason)
        if reason == "body_too_slow":
            status = 408
            message = f"the request body did not arrive within {self.timeout:g} s; send it at once"
        else:
            status = 413
            message = f"request body is larger than the limit of {self.limit:,} bytes; send fewer or smaller images"
        body = json.dumps(error_body(status, reason, message)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
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
            await self._reject(send, "body_too_large")
            return
        received = 0
        state = {"refused": "", "started": False, "complete": False}
        deadline = asyncio.get_running_loop().time() + self.timeout

        async def limited_receive():
            nonlocal received
            if state["complete"]:  # after the body: only the disconnect message is left to wait for
                return await receive()
            try:
                message = await asyncio.wait_for(
                    receive(), max(deadline - asyncio.get_running_loop().time(), 0.001)
                )
            except TimeoutError:
                state["refused"] = "body_too_slow"
                raise BodyTooSlow from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    state["refused"] = "body_too_large"
                    raise BodyTooLarge
                state["complete"] = not message.get("more_body", False)
            return message

        async def guarded_send(message):
            if state["refused"]:
                return  # the app's answer to the aborted read is replaced by the refusal below
            state["started"] = True
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception as exc:
            # Starlette re-raises after its error handler answered; refusals and clients that
            # left mid-body are answered (or have nobody to answer) and are not internal errors.
            if not ((state["refused"] and is_body_refusal(exc)) or is_client_gone(exc)):
                raise
        if state["refused"] and not state["started"]:
            await self._reject(send, state["refused"])


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

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """A request that was served (refused ones go to `reject`): labels from fixed sets."""
        self.requests.labels(method_label(method), route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def reject(self, reason: str) -> None:
        self.rejected.labels(reason if reason in REJECT_REASONS else "other").inc()

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class DecodeBudget:
    """Bytes of decoding in flight across the service, reserved per request before decoding.

    A request whose images need more than `per_request` bytes is refused (413); one that fits
    waits up to `wait_s` for room among the requests already decoding, then gets 503 with
    Retry-After. Headers are read first, so nothing is decoded beyond the budget."""

    def __init__(self, total: int, per_request: int, wait_s: float, retry_after_s: int = 1):
        self.total, self.per_request, self.wait_s = total, min(per_request, total), wait_s
        self.retry_after_s = retry_after_s
        self.in_use = 0
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def reserve(self, nbytes: int) -> AsyncIterator[None]:
        if nbytes > self.per_request:
            raise ServiceError(
                413,
                "decode_budget",
                f"decoding these images needs {nbytes / 2**20:,.0f} MiB, over the limit of "
                f"{self.per_request / 2**20:,.0f} MiB per request; send fewer or smaller images",
            )
        async with self._changed:
            try:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self.in_use + nbytes <= self.total), self.wait_s
                )
            except TimeoutError:
                raise ServiceError(
                    503,
                    "decode_budget",
                    f"the service is decoding {self.in_use / 2**20:,.0f} MiB of images already; "
                    f"retry after {self.retry_after_s} s",
                    {"Retry-After": str(self.retry_after_s)},
                ) from None
            self.in_use += nbytes
        try:
            yield
        finally:
            async with self._changed:
                self.in_use -= nbytes
                self._changed.notify_all()
