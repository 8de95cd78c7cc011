"""The HTTP service of `accelkit images`, by concern: `app` (routes over `LocalIndex`), `forms`
(request bodies into the schema's models), `sources` (uploads and paths under their limits),
`urls` (URLs, from public addresses only),
`guards` (body limit, API key, decode budget, metrics), `errors` (one JSON error shape)."""

from accelkit.images.service.app import ServiceState, create_app, fastapi_app, serve
from accelkit.images.service.errors import ServiceError, error_body, status_for

__all__ = [
    "ServiceError",
    "ServiceState",
    "create_app",
    "error_body",
    "fastapi_app",
    "serve",
    "status_for",
]
