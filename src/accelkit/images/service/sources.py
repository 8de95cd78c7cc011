"""Where the service's images come from, each under its limits: uploads and base64 (bounded by
the body limit), server-side paths (only regular files under `allowed_roots`, opened one component
at a time from the root and read with a deadline), and URLs (only with `allow_urls`, from public
addresses or hosts in `url_allow`: `accelkit.images.service.urls`).

A source that fails is a `DataError`/`InputError` for that item alone; a disabled or forbidden
source is a `ServiceError` (403) for the whole request.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import errno
import os
import stat
import time
from dataclasses import dataclass

from accelkit.errors import DataError, InputError
from accelkit.images.service.errors import ServiceError
from accelkit.images.service.urls import fetch_url
from accelkit.images.settings.config import ServerConfig
from accelkit.runtime.files import file_kind

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


def _parts(path: str) -> list[str]:
    """The components of an absolute path, without empty ones and "."."""
    return [part for part in path.split("/") if part not in ("", ".")]


def _below_root(path: str, roots: list[str], where: str) -> tuple[str, list[str]]:
    """(root, components of `path` below it) by text alone: nothing is resolved here, so nothing
    can change between this and the open. A root matches as written or as its real path (the
    root itself is configuration, trusted); ".." is never followed."""
    if not roots:
        raise ServiceError(
            403,
            "paths_disabled",
            f"{where}: server-side paths are disabled; upload the image "
            "(multipart or image_base64) or configure server.allowed_roots",
        )
    if not isinstance(path, str) or not path or "\x00" in path:
        raise InputError(f"{where}: path must be a non-empty string without NUL characters")
    parts = _parts(path if os.path.isabs(path) else os.path.join(os.getcwd(), path))
    if ".." in parts:
        raise ServiceError(
            403, "path_not_allowed", f"{where}: {path!r} holds '..', which is not followed"
        )
    matches = [
        (len(prefix), root)
        for root in roots
        for prefix in (_parts(os.path.abspath(root)), _parts(os.path.realpath(root)))
        if parts[: len(prefix)] == prefix
    ]
    if not matches:
        raise ServiceError(
            403, "path_not_allowed", f"{where}: {path!r} is outside the allowed roots"
        )
    depth, root = max(matches)  # the innermost root that holds the path
    return root, parts[depth:]


_DIRECTORY = (
    getattr(os, "O_PATH", os.O_RDONLY)
    | os.O_DIRECTORY
    | os.O_NOFOLLOW
    | getattr(os, "O_CLOEXEC", 0)
)
_FILE = (
    os.O_RDONLY
    | os.O_NONBLOCK
    | os.O_NOFOLLOW
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def _open_step(name: str, flags: int, parent: int, path: str, where: str) -> int:
    """`name` opened in the folder `parent` without following a symbolic link; a link is a 403,
    anything else that fails is this item's DataError."""
    try:
        return os.open(name, flags, dir_fd=parent)
    except FileNotFoundError as exc:
        raise DataError(f"{where}: no such file {path}") from exc
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise DataError(f"{where}: cannot open {path} ({exc.strerror})") from exc
        try:  # only for the message: the open above has already refused
            mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
        except OSError:
            raise DataError(f"{where}: no such file {path}") from exc
        if stat.S_ISLNK(mode):
            raise ServiceError(
                403,
                "path_not_allowed",
                f"{where}: {path!r} passes through the symbolic link {name!r}; links below an"
                " allowed root are not followed",
            ) from exc
        if stat.S_ISDIR(mode):
            raise DataError(f"{where}: {path} changed while it was opened; retry") from exc
        raise DataError(f"{where}: {path}: {name!r} is not a folder") from exc


def open_beneath(path: str, roots: list[str], where: str) -> tuple[int, str]:
    """(file descriptor, name below the root) of `path`, opened one component at a time from the
    allowed root's descriptor (`openat` with O_NOFOLLOW at every step).

    There is no check apart from the open: what is opened is what lies under the root at the
    moment of each step, so swapping a folder for a symbolic link at any time opens either the
    file under the root or nothing (a vanished component is this item's DataError). The last step
    opens non-blocking, and the caller checks with fstat that it is a regular file."""
    root, rest = _below_root(path, roots, where)
    try:
        fd = os.open(root, _DIRECTORY & ~os.O_NOFOLLOW)
    except OSError as exc:
        raise DataError(f"{where}: the allowed root holding {path} cannot be opened") from exc
    try:
        if not rest:
            raise DataError(f"{where}: {path} is a folder, not an image file")
        for name in rest[:-1]:
            step = _open_step(name, _DIRECTORY, fd, path, where)
            os.close(fd)
            fd = step
        step = _open_step(rest[-1], _FILE, fd, path, where)
    finally:
        os.close(fd)
    shown = "".join(ch for ch in "/".join(rest) if ch.isprintable())
    return step, shown[-MAX_SOURCE_NAME:]


def read_regular_file(fd: int, name: str, limit: int, deadline: float, where: str) -> bytes:
    """Bytes of the open file `fd`, at most `limit`, before `deadline` (time.monotonic()); closes
    `fd`. Checked with fstat first: a FIFO, device, socket or folder is refused before any read
    could block."""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = file_kind(info.st_mode)
            raise DataError(f"{where}: {name} is {kind}, not an image file")
        if info.st_size > limit:
            raise DataError(
                f"{where}: {name} is {info.st_size:,} bytes, over the limit of {limit:,}"
            )
        chunks, total = [], 0
        while True:
            if time.monotonic() > deadline:
                raise DataError(f"{where}: reading {name} took longer than server.fetch_timeout_s")
            try:
                chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            except BlockingIOError:  # cannot happen for regular files; never spin on it
                raise DataError(f"{where}: {name} cannot be read without blocking") from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # the file grew since fstat
                raise DataError(f"{where}: {name} is over the limit of {limit:,} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise DataError(f"{where}: cannot read {name} ({exc.strerror})") from exc
    finally:
        os.close(fd)


def read_allowed_file(
    path: str, roots: list[str], limit: int, deadline: float, where: str
) -> tuple[bytes, str]:
    """(bytes, name below its root) of a regular file under one of `roots` (`open_beneath`)."""
    fd, name = open_beneath(path, roots, where)
    return read_regular_file(fd, name, limit, deadline, where), name


async def read_allowed_path(path: str, server: ServerConfig, where: str) -> tuple[bytes, str]:
    deadline = time.monotonic() + server.fetch_timeout_s
    try:
        return await asyncio.wait_for(
            asyncio.to_thread(
                read_allowed_file,
                path,
                server.allowed_roots,
                server.fetch_max_bytes,
                deadline,
                where,
            ),
            server.fetch_timeout_s,
        )
    except TimeoutError as exc:
        raise DataError(f"{where}: reading {path} took longer than server.fetch_timeout_s") from exc


async def load(source: Source, server: ServerConfig, where: str) -> tuple[bytes, str | None]:
    """The bytes of one image and the name to record for it."""
    kind, value = source.kind, source.value
    if kind == "bytes" and isinstance(value, bytes):  # an upload's bytes
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
    return await read_allowed_path(value, server, where)
