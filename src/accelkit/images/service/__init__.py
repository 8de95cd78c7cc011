"""The HTTP service of `accelkit images`, by concern: `app` (the FastAPI app: errors, key,
admission, page, health), `collections` and `items` (the routes, each one call of the
`LocalIndex`), `state` (what the routes share), `server` (uvicorn), `openapi`, `forms`
(request bodies into the schema's models), `sources` (uploads and paths under their limits),
`urls` (URLs, from public addresses only),
`guards` (body limit, API key, decode budget, metrics), `errors` (one JSON error shape)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.runtime.exports import lazy_exports

_EXPORTS = {
    "ServiceError": "accelkit.images.service.errors",
    "ServiceState": "accelkit.images.service.state",
    "create_app": "accelkit.images.service.app",
    "error_body": "accelkit.images.service.errors",
    "fastapi_app": "accelkit.images.service.app",
    "serve": "accelkit.images.service.server",
    "status_for": "accelkit.images.service.errors",
}
if TYPE_CHECKING:  # the same names, for help(), dir(), pyright and editors
    from accelkit.images.service.app import create_app, fastapi_app
    from accelkit.images.service.errors import ServiceError, error_body, status_for
    from accelkit.images.service.server import serve
    from accelkit.images.service.state import ServiceState

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
