"""Atomic writes: an interrupted run leaves the old file or the new one, never a torn one."""

from __future__ import annotations

import errno
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from accelkit.errors import InputError, NoSpaceError

FULL = (errno.ENOSPC, errno.EDQUOT)  # a full file system, or the user's quota on it

# What this process is writing and has written, for interrupts (runtime/interrupts.py): the
# temporary files still open are removed by a forced exit, and the line an interrupted command
# prints names the outputs it finished before the signal.
_pending: set[str] = set()
_completed: list[str] = []
SHOWN_WRITES = 6


_kept: dict[str, str] = {}


def record_kept(key: str, description: str) -> None:
    """Work that is stored as it goes, not written at the end (items upserted into a collection):
    what an interrupted run kept, by `key`, the latest description winning."""
    _kept[key] = description


def completed_writes() -> list[str]:
    """The outputs this process finished (the last few, and how many more) and what it kept."""
    shown = list(_completed)
    if len(shown) > SHOWN_WRITES:
        shown = [*shown[-SHOWN_WRITES:], f"and {len(shown) - SHOWN_WRITES} earlier"]
    return [*shown, *_kept.values()]


def forget_writes() -> None:
    _completed.clear()
    _kept.clear()


def remove_pending() -> None:
    """Remove every temporary file and folder still in use (a forced exit's last act)."""
    import shutil

    for name in list(_pending):
        if os.path.isdir(name) and not os.path.islink(name):
            shutil.rmtree(name, ignore_errors=True)
        else:
            with suppress(OSError):
                os.unlink(name)
        _pending.discard(name)


@contextmanager
def temporary_folder(prefix: str = "accelkit-") -> Iterator[Path]:
    """A private temporary folder, removed when the block ends, by an exception, an interrupt or
    a forced exit after one."""
    import shutil

    folder = tempfile.mkdtemp(prefix=prefix)
    _pending.add(folder)
    try:
        yield Path(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        _pending.discard(folder)


@contextmanager
def atomic_open(
    path: str | os.PathLike, mode: str = "w", *, output: bool = True
) -> Iterator[IO[Any]]:
    """Open a temporary file beside `path`; on success flush, fsync and rename it over `path`.

    The temporary file lives in the same folder so the final `os.replace` is a rename on one file
    system, which POSIX makes atomic. On any exception the temporary file is removed and `path`
    is untouched. `output=False` for a cache: an interrupted run does not list it as kept.
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
    _pending.add(tmp_name)
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
        if output and not any(str(target).startswith(folder + os.sep) for folder in _pending):
            _completed.append(str(target))  # a user's output (not a temporary folder's file)
    except OSError as exc:
        with suppress(FileNotFoundError):
            os.unlink(tmp_name)
        if exc.errno in FULL:
            raise no_space(target, exc, unchanged=target.exists()) from exc
        raise
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    finally:
        _pending.discard(tmp_name)


@contextmanager
def staged_folder(target: str | os.PathLike) -> Iterator[Path]:
    """A folder written whole or not at all: the block fills a temporary folder beside `target`,
    renamed to `target` when it succeeds (an empty `target` is replaced); on an exception or an
    interrupt the temporary folder is removed and `target` is as it was."""
    import shutil

    target = Path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        folder = tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    except OSError as exc:
        raise InputError(
            f"cannot write in {target.parent}: {exc.strerror}; choose another folder"
        ) from exc
    _pending.add(folder)
    try:
        yield Path(folder)
        os.chmod(folder, 0o777 & ~_current_umask())  # mkdtemp makes it private
        if target.is_dir() and not any(target.iterdir()):
            target.rmdir()
        os.rename(folder, target)
        _completed.append(str(target))
    except OSError as exc:
        if exc.errno in FULL:
            raise no_space(target, exc, unchanged=target.exists()) from exc
        raise
    finally:
        if os.path.isdir(folder):
            shutil.rmtree(folder, ignore_errors=True)
        _pending.discard(folder)


def no_space(path: str | os.PathLike | None, exc: OSError, *, unchanged: bool) -> NoSpaceError:
    """The one line for a full file system under `path`: what is free there, what was kept."""
    reason = "disk quota exceeded" if exc.errno == errno.EDQUOT else "no space left on device"
    if path is None:
        return NoSpaceError(f"{reason}; free some space and run the command again")
    where = Path(path)
    free = ""
    with suppress(OSError):
        stat = os.statvfs(where if where.is_dir() else where.parent)
        free = f" ({stat.f_bavail * stat.f_frsize / 2**20:.1f} MiB free there)"
    kept = f"{where} is unchanged" if unchanged else f"nothing was written to {where}"
    return NoSpaceError(
        f"{reason} writing {where}{free}; {kept}; free some space or choose another output path"
    )


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


def copy_atomic(source: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Copy `source` to `target` as `shutil.copy2` does (bytes, then times and mode), atomically:
    a process killed midway (SIGKILL, OOM) leaves a temporary file beside `target`, never a torn
    or empty `target`. For backups: not listed as a kept output."""
    import shutil

    with atomic_open(target, "wb", output=False) as handle, open(source, "rb") as data:
        shutil.copyfileobj(data, handle)
    shutil.copystat(source, target)
    return Path(target)


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


def file_kind(mode: int) -> str:
    """What a file whose `st_mode` is `mode` is, for a message: "a regular file", "a folder",
    "a FIFO", "a device", "a socket" (a path must say what it is when it is not what was asked)."""
    import stat

    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def regular_file(path: str | os.PathLike, what: str, setting: str, hint: str = "") -> Path:
    """`path` when it is a regular file (after symlinks); else one line (`InputError`) naming
    it, what it is instead (missing, a folder, a FIFO, a socket, a device) and the setting that
    gave it. Checked with stat, so a FIFO is never opened (an open would wait for a writer)."""
    found = Path(path)
    try:
        mode = found.stat().st_mode
    except FileNotFoundError:
        raise InputError(f"{found}: {what} does not exist; check {setting}{hint}") from None
    except OSError as exc:
        raise InputError(
            f"{found}: {what} cannot be read ({exc.strerror}); check {setting}{hint}"
        ) from None
    kind = file_kind(mode)
    if kind != "a regular file":
        raise InputError(f"{found}: is {kind}, not a {what}; check {setting}{hint}")
    return found
