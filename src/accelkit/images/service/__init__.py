"""The HTTP service of `accelkit images`, by concern: `app` (the FastAPI app: errors, key,
admission, page, health), `collections` and `items` (the routes, each one call of the
`LocalIndex`), `state` (what the routes share), `server` (uvicorn), `openapi`, `forms`
(request bodies into the schema's models), `sources` (uploads and paths under their limits),
`urls` (URLs, from public addresses only),
`guards` (body limit, API key, decode budget, metrics), `errors` (one JSON error shape)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.runtime.exports import lazy_exports

if TYPE_CHECKING:  # the public names, listed once (runtime/exports.py reads them)
    from accelkit.images.service.app import create_app as create_app
    from accelkit.images.service.app import fastapi_app as fastapi_app
    from accelkit.images.service.errors import (
        ServiceError as ServiceError,
    )
    from accelkit.images.service.errors import (
        error_body as error_body,
    )
    from accelkit.images.service.errors import (
        status_for as status_for,
    )
    from accelkit.images.service.server import serve as serve
    from accelkit.images.service.state import ServiceState as ServiceState

__getattr__, __dir__, __all__ = lazy_exports(__name__)
