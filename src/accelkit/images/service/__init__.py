"""The HTTP service of `accelkit images`, by concern: `app` (the FastAPI app: errors, key,
admission, page, health), `collections` and `items` (the routes, each one call of the
`LocalIndex`), `state` (what the routes share), `server` (uvicorn), `openapi`, `forms`
(request bodies into the schema's models), `sources` (uploads and paths under their limits),
`urls` (URLs, from public addresses only),
`guards` (body limit, API key, decode budget, metrics), `errors` (one JSON error shape)."""

from accelkit.runtime.output import lazy_exports

_EXPORTS = {
    "ServiceError": "accelkit.images.service.errors",
    "ServiceState": "accelkit.images.service.state",
    "create_app": "accelkit.images.service.app",
    "error_body": "accelkit.images.service.errors",
    "fastapi_app": "accelkit.images.service.app",
    "serve": "accelkit.images.service.server",
    "status_for": "accelkit.images.service.errors",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
