"""Kill points at file-system writes, for the crash harness (harness.py): the command runs as

    python -m tests.support.crash.inject ARGS...      (ARGS: accelkit's; process.injected)

and each call that changes a file or folder (open for writing, os.open with O_CREAT/O_WRONLY/
O_RDWR, replace, rename, unlink, rmdir, mkdir, copy, rmtree) is an event. With
ACCELKIT_FAULTS_EVENTS=PATH each event is appended to PATH (`kind path`, one a line); with
ACCELKIT_FAULTS_KILL_AT=N the process SIGKILLs itself just before its Nth event (1-based), with
ACCELKIT_FAULTS_KILL_AFTER=N just after it (a file opened for writing and not yet written): the
moments between two writes that a time-based kill hits only by luck. With
ACCELKIT_FAULTS_KILL_MATCH=REGEX only the events whose `kind path` line matches REGEX are counted
for the kill (N: the Nth matching one), so the kill point does not move when a run writes fewer
other files (a warm cache: a cold run compiles and writes the JAX cache, the next does not). The writes a child process
or a native library makes (Milvus Lite's engine, SQLite) are not events: time-based kills cover
those."""

from __future__ import annotations

import builtins
import io
import os
import re
import shutil
import signal
import sys
import threading

_lock = threading.Lock()
_count = 0
_limit = int(os.environ.get("ACCELKIT_FAULTS_KILL_AT", "0") or 0)
_after = int(os.environ.get("ACCELKIT_FAULTS_KILL_AFTER", "0") or 0)
_match = (
    re.compile(os.environ["ACCELKIT_FAULTS_KILL_MATCH"])
    if os.environ.get("ACCELKIT_FAULTS_KILL_MATCH")
    else None
)
_matched = 0  # events matching _match so far
_log_fd: int | None = None
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def event(kind: str, path) -> int:
    """Count an event; returns its number as the kill variables count it (0: not counted)."""
    global _count, _matched
    line = f"{kind} {os.fspath(path) if path is not None else ''}"
    with _lock:
        _count += 1
        if _match is not None:
            if not _match.search(line):
                number = 0
            else:
                _matched += 1
                number = _matched
        else:
            number = _count
        if _limit and number >= _limit:
            os.kill(os.getpid(), signal.SIGKILL)
        if _log_fd is not None:
            os.write(_log_fd, f"{line}\n".encode())
        return number


def done(number: int) -> None:
    """After the call of event `number`: with ACCELKIT_FAULTS_KILL_AFTER=N, the Nth one's result
    stands (a file just opened for writing: created or emptied, nothing written yet)."""
    if _after and number == _after:
        os.kill(os.getpid(), signal.SIGKILL)


def _wrap(module, name: str, kind: str, when=None) -> None:
    real = getattr(module, name)

    def wrapped(*args, **kwargs):
        if when is None or when(*args, **kwargs):
            number = event(kind, args[0] if args else None)
            result = real(*args, **kwargs)
            done(number)
            return result
        return real(*args, **kwargs)

    wrapped.__wrapped__ = real
    setattr(module, name, wrapped)


def _writing(file=None, mode="r", *args, **kwargs) -> bool:
    return isinstance(file, (str, bytes, os.PathLike)) and any(c in str(mode) for c in "wax+")


def _os_open_writing(path=None, flags=0, *args, **kwargs) -> bool:
    return bool(flags & WRITE_FLAGS)


def arm() -> None:
    global _log_fd
    target = os.environ.get("ACCELKIT_FAULTS_EVENTS")
    if target:
        _log_fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    _wrap(builtins, "open", "open", _writing)
    _wrap(io, "open", "open", _writing)
    _wrap(os, "open", "os.open", _os_open_writing)
    for name in ("replace", "rename", "unlink", "remove", "rmdir", "mkdir"):
        _wrap(os, name, name)
    for name in ("copy", "copy2", "copyfile", "rmtree", "move"):
        _wrap(shutil, name, name)


STORE_WRITES = (
    "create_collection", "create_index", "load_collection", "release_collection", "upsert",
    "insert", "delete", "drop_collection", "alter_collection_properties", "flush",
)  # fmt: skip
THUMBNAIL_WRITES = ("put", "delete", "drop")


def arm_store() -> None:
    """The writes of `accelkit images`' stores as events too: each pymilvus MilvusClient call that
    changes the store (`milvus.upsert COLLECTION`), each thumbnail write (`thumbnails.put`)."""
    from pymilvus import MilvusClient

    from accelkit.images.store.thumbnails import ThumbnailStore

    for name in STORE_WRITES:
        setattr(MilvusClient, name, _method(getattr(MilvusClient, name), f"milvus.{name}"))
    for name in THUMBNAIL_WRITES:
        setattr(ThumbnailStore, name, _method(getattr(ThumbnailStore, name), f"thumbnails.{name}"))


def _method(real, kind: str):
    """A method whose call is an event named `kind`, with its first argument (a collection)."""

    def wrapped(self, *args, **kwargs):
        number = event(kind, args[0] if args else None)
        result = real(self, *args, **kwargs)
        done(number)
        return result

    return wrapped


def main() -> None:
    import runpy

    arm()
    if sys.argv[1:2] == ["images"]:
        arm_store()
    sys.argv = ["accelkit", *sys.argv[1:]]
    runpy.run_module("accelkit", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
