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
        raise InputError(
            f"cannot create folder {target.parent}: {exc.strerror}; choose another output path"
        ) from exc
    if target.is_dir():
        raise InputError(f"{target} is a folder; give a file path to write to")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise InputError(
            f"cannot write in {target.parent}: {exc.strerror}; choose another output path"
        ) from exc
    try:
        # mkstemp creates 0600; the result should carry the permissions a plain open() would give
        # (or keep those of the file it replaces), so others can read a shared norm_stats.json.
        os.fchmod(fd, _mode_for(target))
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.replace(tmp_name, target)
        except OSError as exc:
            raise InputError(
                f"cannot replace {target}: {exc.strerror}; choose another output path"
            ) from exc
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def _mode_for(target: Path) -> int:
    """Permission bits for `target`: its current ones if it exists, else 0o666 less the umask."""
    with suppress(OSError):
        return target.stat().st_mode & 0o7777
    return 0o666 & ~_current_umask()


def _current_umask() -> int:
    # Linux exposes the umask read-only; elsewhere set-and-restore is the only way to read it.
    with suppress(OSError, ValueError, StopIteration), open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("Umask:"))
        return int(line.split()[1], 8)
    previous = os.umask(0o022)
    os.umask(previous)
    return previous


def write_json_atomic(
    path: str | os.PathLike, payload: Any, *, indent: int = 2, trailing_newline: bool = False
) -> Path:
    """Serialize first (so a serialization error never touches the file), then write atomically."""
    text = json.dumps(payload, indent=indent, allow_nan=False)
    if trailing_newline:
        text += "\n"
    with atomic_open(path, "w") as handle:
        handle.write(text)
    return Path(path)
