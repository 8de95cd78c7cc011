"""The service's answers other than 200: one JSON shape, `{"error": {status, code, message}}`,
and the mapping from accelkit errors to HTTP statuses (a client's mistake is 4xx, never 500)."""

from __future__ import annotations

from typing import Any

from accelkit.errors import AccelkitError, ConfigError, DataError, InputError, NoSpaceError
from accelkit.images.index.base import ItemNotFoundError, ModelMismatchError
from accelkit.images.store import (
    CollectionExistsError,
    CollectionNotFoundError,
    FilterError,
    ForeignCollectionError,
    StoreError,
    StoreTimeoutError,
    StoreUnavailableError,
)


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
        self.status, self.code, self.message = status, code, message
        self.headers, self.detail = headers or {}, detail


def error_body(status: int, code: str, message: str, detail: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {"status": status, "code": code, "message": message}
    if detail is not None:
        body["detail"] = detail
    return {"error": body}


def status_for(exc: AccelkitError) -> tuple[int, str]:
    """HTTP status and code for an accelkit error."""
    if isinstance(exc, CollectionNotFoundError):
        return 404, "collection_not_found"
    if isinstance(exc, ItemNotFoundError):
        return 404, "item_not_found"
    if isinstance(exc, CollectionExistsError):
        return 409, "collection_exists"
    if isinstance(exc, ModelMismatchError):
        return 409, "model_mismatch"
    if isinstance(exc, ForeignCollectionError):
        return 409, "foreign_collection"
    if isinstance(exc, FilterError):
        return 400, "invalid_filter"
    if isinstance(exc, NoSpaceError):  # a full disk under the store: until space is freed
        return 507, "insufficient_storage"
    if isinstance(exc, StoreUnavailableError):  # timed out on a store that does not answer
        return 503, "store_unavailable"
    if isinstance(exc, StoreTimeoutError):
        return 504, "store_timeout"
    if isinstance(exc, StoreError):
        return 503, "store_unavailable"
    if isinstance(exc, DataError):
        return 422, "invalid_data"
    if isinstance(exc, (InputError, ConfigError)):
        return 400, "invalid_request"
    return 400, "error"


def retry_headers(status: int, retry_after_s: int) -> dict[str, str]:
    """`Retry-After` for an answer that a retry may turn into a 200 by itself: the store is
    down or slow (503, 504); a full disk (507) needs someone to free space first."""
    return {"Retry-After": str(retry_after_s)} if status in (503, 504) else {}
