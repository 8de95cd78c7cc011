"""Atomic writes: an interrupted run leaves the old file or the new one, never a torn one."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from accelkit.errors import InputError


@contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w") -> Iterator[IO[Any]]:
    """Open a temporary file beside `path`; on success flush, fsync and rename it over `path`.

    The temporary file lives in the same folder so the final `os.replace` is a rename on one file
    system, which POSIX makes atomic. On any exception the temporary file is removed and `path`
    is untouched.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open supports 'w' and 'wb', not {mode!r}")
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create folder {target.parent}: {exc.strerror}; choose another output path") from exc
    if target.is_dir():
        raise InputError(f"{target} is a folder; give a file path to write to")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise InputError(f"cannot write in {target.parent}: {exc.strerror}; choose another output path") from exc
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.replace(tmp_name, target)
        except OSError as exc:
            raise InputError(f"cannot replace {target}: {exc.strerror}; choose another output path") from exc
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def write_json_atomic(path: str | os.PathLike, payload: Any, *, indent: int = 2, trailing_newline: bool = False) -> Path:
    """Serialize first (so a serialization error never touches the file), then write atomically."""
    text = json.dumps(payload, indent=indent, allow_nan=False)
    if trailing_newline:
        text += "\n"
    with atomic_open(path, "w") as handle:
        handle.write(text)
    return Path(path)
