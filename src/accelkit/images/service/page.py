"""The search page: three fixed files shipped in `static/` (HTML, one script, one style sheet),
read once, served from memory by name, and the headers every answer carries.

The page holds no data: it is public like /docs, and everything it shows comes from the API
through the same key, limits and metrics as any client (`fetch` with `Authorization`; thumbnails
are fetched the same way and shown from `blob:` URLs). Its script builds the DOM with
`textContent` only, and the Content-Security-Policy allows scripts, styles, images and requests
from this origin alone (images also from `blob:`): no inline script or style runs, so a file name
such as `<script>…` can only ever be text.
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources

from accelkit.images.service.errors import ServiceError

ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "page.js": "text/javascript; charset=utf-8",
    "page.css": "text/css; charset=utf-8",
}
PAGE_PATHS = {"/static/page.js", "/static/page.css", "/favicon.ico"}
# The whole API answers with it: JSON cannot run either way, and an error page rendered by a
# browser gets no power. /docs (Swagger UI from a CDN, inline script) is left as FastAPI makes it.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
DOCS_PATHS = ("/docs", "/redoc", "/openapi.json")
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


@functools.cache
def asset(name: str) -> bytes:
    return resources.files("accelkit.images.service").joinpath("static", name).read_bytes()


def wants_html(request) -> bool:
    """A browser asking for `/`: its Accept header names text/html (API clients send
    application/json or */*, and keep getting JSON)."""
    return "text/html" in request.headers.get("accept", "")


def is_page_request(request) -> bool:
    """The page's own files, which need no key (the data they fetch does)."""
    if request.method not in ("GET", "HEAD"):
        return False
    path = request.url.path
    return path in PAGE_PATHS or (path == "/" and wants_html(request))


def _cached(data: bytes, media_type: str, cache_control: str, request=None):
    """`data` with an ETag; 304 when the browser holds it already."""
    from fastapi.responses import Response

    etag = '"' + hashlib.sha256(data).hexdigest()[:32] + '"'
    headers = {"cache-control": cache_control, "etag": etag}
    if request is not None and request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(data, media_type=media_type, headers=headers)


def asset_response(name: str, request=None):
    """One of the page's files by name; any other name is a 404 (nothing else is read)."""
    if name not in ASSETS:
        raise ServiceError(404, "not_found", f"no page file {name[:40]!r}")
    return _cached(asset(name), ASSETS[name], "no-cache", request)


def thumbnail_response(jpeg: bytes, request=None):
    return _cached(jpeg, "image/jpeg", "private, no-cache", request)


async def security_headers(request, call_next):
    """Middleware: the headers above on every answer but the interactive docs'."""
    response = await call_next(request)
    if not request.url.path.startswith(DOCS_PATHS):
        for key, value in HEADERS.items():
            response.headers.setdefault(key, value)
    return response
