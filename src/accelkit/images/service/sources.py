"""Where the service's images come from, each under its limits: uploads and base64 (bounded by
the body limit), server-side paths (only regular files under `allowed_roots`, read with a
deadline), and URLs (only with `allow_urls`, one deadline for connect, redirects and every chunk).

A source that fails is a `DataError`/`InputError` for that item alone; a disabled or forbidden
source is a `ServiceError` (403) for the whole request.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from accelkit.errors import DataError, InputError
from accelkit.images.config import ServerConfig
from accelkit.images.service.errors import ServiceError

MAX_SOURCE_NAME = 256


@dataclass(frozen=True)
class Source:
    """One image as a request names it: `kind` is bytes, image_base64, path, url or input (the
    original service's path-or-URL); `name` is an upload's file name."""

    kind: str
    value: object
    name: str | None = None


def clean_name(name: str | None) -> str | None:
    """An upload's file name as metadata: its last path part, printable, at most 256 characters."""
    if not name:
        return None
    name = os.path.basename(name.replace("\\", "/"))
    name = "".join(ch for ch in name if ch.isprintable())[:MAX_SOURCE_NAME]
    return name or None


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
    if "\x00" in path or not path:
        raise InputError(f"{where}: path must be a non-empty string without NUL characters")
    real = Path(os.path.realpath(path))
    for root in roots:
        base = Path(os.path.realpath(root))
        if real == base or base in real.parents:
            return real
    raise ServiceError(403, "path_not_allowed", f"{where}: {path!r} is outside the allowed roots")


def read_regular_file(path: Path, limit: int, deadline: float, where: str) -> bytes:
    """Bytes of a regular file, at most `limit`, before `deadline` (time.monotonic()).

    Opened non-blocking and without following a final symlink, then checked with fstat: a FIFO,
    device, socket or folder is refused before any read could block."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as exc:
        raise DataError(f"{where}: no such file {path}") from exc
    except OSError as exc:
        raise DataError(f"{where}: cannot open {path} ({exc.strerror})") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = (
                "a folder"
                if stat.S_ISDIR(info.st_mode)
                else "a FIFO"
                if stat.S_ISFIFO(info.st_mode)
                else "a device"
                if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
                else "a socket"
                if stat.S_ISSOCK(info.st_mode)
                else "not a regular file"
            )
            raise DataError(f"{where}: {path} is {kind}, not an image file")
        if info.st_size > limit:
            raise DataError(
                f"{where}: {path.name} is {info.st_size:,} bytes, over the limit of {limit:,}"
            )
        chunks, total = [], 0
        while True:
            if time.monotonic() > deadline:
                raise DataError(
                    f"{where}: reading {path.name} took longer than server.fetch_timeout_s"
                )
            try:
                chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            except BlockingIOError:  # cannot happen for regular files; never spin on it
                raise DataError(f"{where}: {path} cannot be read without blocking") from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # the file grew since fstat
                raise DataError(f"{where}: {path.name} is over the limit of {limit:,} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise DataError(f"{where}: cannot read {path} ({exc.strerror})") from exc
    finally:
        os.close(fd)


async def read_allowed_path(path: str, server: ServerConfig, where: str) -> bytes:
    real = resolve_allowed_path(path, server.allowed_roots, where)
    deadline = time.monotonic() + server.fetch_timeout_s
    try:
        return await asyncio.wait_for(
            asyncio.to_thread(read_regular_file, real, server.fetch_max_bytes, deadline, where),
            server.fetch_timeout_s,
        )
    except TimeoutError as exc:
        raise DataError(
            f"{where}: reading {real.name} took longer than server.fetch_timeout_s"
        ) from exc


async def fetch_url(url: str, server: ServerConfig, where: str) -> bytes:
    """GET an http(s) URL within `fetch_max_bytes` and one deadline of `fetch_timeout_s` for the
    whole exchange (a server that drips one byte at a time is cut off at the deadline)."""
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
        async with asyncio.timeout(server.fetch_timeout_s):
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
    except TimeoutError as exc:
        raise DataError(
            f"{where}: {url} did not answer in full within server.fetch_timeout_s ({server.fetch_timeout_s:g} s)"
        ) from exc
    except httpx.HTTPError as exc:
        raise DataError(f"{where}: cannot fetch {url} ({type(exc).__name__}: {exc})") from exc
    return b"".join(chunks)


async def load(source: Source, server: ServerConfig, where: str) -> tuple[bytes, str | None]:
    """The bytes of one image and the name to record for it."""
    kind, value = source.kind, source.value
    if kind == "bytes":
        if not value:
            raise DataError(f"{where}: the uploaded file is empty (0 bytes)")
        return value, clean_name(source.name)
    if not isinstance(value, str):
        raise InputError(f"{where}: {kind} must be a string")
    if kind == "input":  # EmbeddingTrident's form: a server path or a URL
        kind = "url" if value.lower().startswith(("http://", "https://")) else "path"
    if kind == "image_base64":
        return decode_base64(value, where), None
    if kind == "url":
        return await fetch_url(value, server, where), value[:512]
    return await read_allowed_path(value, server, where), clean_name(value)
