"""The one place that chooses an `ImageIndex`: a running service (`RemoteIndex`) when a server is
given, else the config's own store and model in this process (`LocalIndex`)."""

from __future__ import annotations

import os

from accelkit.images.index.base import ImageIndex
from accelkit.images.index.local import open_local_index
from accelkit.images.index.remote import RemoteIndex
from accelkit.images.settings.config import ServiceConfig
from accelkit.runtime.progress import phase


def open_index(
    settings: ServiceConfig, server: str | None = None, api_key: str | None = None
) -> ImageIndex:
    """The service at `server` (its key: `api_key`, else `ACCELKIT_SERVER_API_KEY`, else
    `server.api_key`), else the settings' own store and model."""
    if server:
        key = api_key or os.environ.get("ACCELKIT_SERVER_API_KEY") or settings.server.api_key
        return RemoteIndex(server, key)
    phase("opening the store and loading the model")
    return open_local_index(settings)
