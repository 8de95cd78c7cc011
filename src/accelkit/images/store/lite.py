"""Milvus Lite's engine: which generation is installed, where a 2.x engine (a child process of
ours) keeps its scratch (`HOME`) and where its C++ output goes, quieting its and pymilvus'
loggers, one engine per database in this process whatever name opens it, and which other
process holds a database (Linux /proc), so a refused open names the holder.

Two generations, never both in one environment (both are the module `milvus_lite`): 2.x, a C++
engine in a child process that keeps a database in one SQLite file; 3.x, a Python engine over
faiss and pyarrow in threads of this process that keeps a database in a folder (parquet
segments, an Arrow write-ahead log, index files and a `LOCK` it holds with flock). Neither
opens the other's database (`check_lite_format`).

A database file is known by what it is, its device and inode (`file_identity`), not by how it is
spelled: a hard link, a symbolic link and a path through `..` are one file. Milvus Lite itself
keys its engines and its lock file on the path text (`milvus_lite.server_manager`,
`.NAME.lock` beside the file), so a hard link once got an engine and a lock of its own on the
same file, in this process or another: two engines writing one database.

Before a write it also checks that the file's disk has room for it (`check_lite_space`; on
Lite 3 with the index builds and merges that follow it, `lite3_upkeep`)."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import logging
import os
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from accelkit.errors import InputError
from accelkit.images.store.errors import StoreError, StoreFullError
from accelkit.images.store.records import is_local_uri
from accelkit.runtime.files import no_space

T = TypeVar("T")


@functools.lru_cache(maxsize=1)
def lite_generation() -> int:
    """The major version of the installed Milvus Lite: 2 (a SQLite file, a child process) or 3
    (a folder, threads of ours); 2 when it cannot be read (the import then names the extra)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version("milvus-lite").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return 2


SQLITE_HEADER = b"SQLite format 3\x00"
LITE3_ENTRIES = ("collections", "databases")  # what a Milvus Lite 3.x folder holds
LITE2_TABLE = "collection_meta"  # what a Milvus Lite 2.x file holds from its engine's first start


def is_sqlite(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def foreign_tables(path: str) -> list[str]:
    """The tables of the SQLite file at `path` where it is not a Milvus Lite 2.x database (it
    has tables, none of them Milvus Lite's): another program's database, which an engine must
    never write its tables into. Empty where it is one, where it holds no table, where it is no
    SQLite file, or where its tables cannot be read now (locked, a write unfinished: its own
    reader says so)."""
    import sqlite3
    from urllib.parse import quote

    path = os.path.expanduser(path)
    if os.path.isdir(path) or not is_sqlite(path):
        return []
    try:
        db = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True, timeout=1)
        try:
            rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return []
    tables = sorted(str(row[0]) for row in rows)
    return [] if LITE2_TABLE in tables else tables


def lite_format(path: str) -> int | None:
    """Which Milvus Lite generation made the database at `path`: 2 (a SQLite file, not another
    program's: `foreign_tables`), 3 (a folder holding Lite 3's `collections/` and
    `databases/`), or None (nothing there, an empty file or folder, anything else)."""
    path = os.path.expanduser(path)
    if os.path.isdir(path):
        return 3 if all(os.path.isdir(os.path.join(path, e)) for e in LITE3_ENTRIES) else None
    return 2 if is_sqlite(path) and not foreign_tables(path) else None


def lite_exists(path: str) -> bool:
    """Whether a Milvus Lite database of either generation is at `path`."""
    return lite_format(path) is not None


def check_lite_format(uri: str, role: str = "store.uri") -> None:
    """Refuse, in one line naming the path and the way on, a database the installed Milvus Lite
    cannot open (the engine itself says only "Open local milvus failed", or writes its folders
    into whatever folder it is given): a 2.x file under Lite 3, a 3.x folder under Lite 2,
    anything that is neither. Nothing there yet (or an empty file or folder, which the engine
    takes) passes."""
    path = os.path.expanduser(uri)
    found, installed = lite_format(path), lite_generation()
    empty = os.path.isdir(path) and not os.listdir(path) if installed >= 3 else _empty_file(path)
    foreign = foreign_tables(path)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", …" if len(foreign) > 5 else "")
        raise InputError(
            f"{role} {uri} is a SQLite database of another program (its tables: {shown}), not a"
            " Milvus Lite one, and is left as it is; give the path of a Milvus Lite database"
            + ("" if role == "SRC" else ", or a new one")
        )
    if found == 2 and installed >= 3:
        raise InputError(
            f"{role} {uri} is a Milvus Lite 2.x database (one SQLite file), which the installed"
            f" Milvus Lite {installed}.x cannot open; copy it into a Lite 3 store with `accelkit"
            f" images migrate {shlex.quote(uri)} NEW.db` (no 2.x engine needed), or install milvus-lite<3"
            " to use it as it is"
        )
    if found == 3 and installed < 3:
        raise InputError(
            f"{role} {uri} is a Milvus Lite 3.x database (a folder), which the installed Milvus"
            " Lite 2.x cannot open; install accelkit[images-lite3] (milvus-lite>=3) to use it"
        )
    if found is None and os.path.lexists(path) and not empty:
        raise InputError(
            f"{role} {uri} is not a Milvus Lite database (neither a Lite 2.x SQLite file nor a"
            " Lite 3.x folder); give the path of a database, or a new one"
        )


def _empty_file(path: str) -> bool:
    try:
        return os.path.isfile(path) and os.path.getsize(path) == 0
    except OSError:
        return False


class _NotMilvusLite(logging.Filter):
    """milvus_lite logs to the root logger (e.g. "Open x.db failed ..." before our own one-line
    error); its records are shown only at debug level."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "milvus_lite" not in record.pathname or logging.getLogger().level <= logging.DEBUG


_FILTER = _NotMilvusLite()


def _quiet_pymilvus() -> None:
    for name in ("pymilvus", "milvus_lite", "grpc._server"):  # Lite 3 serves gRPC in-process
        logging.getLogger(name).setLevel(logging.CRITICAL)
    root = logging.getLogger()
    if _FILTER not in root.filters:
        root.addFilter(_FILTER)


@contextlib.contextmanager
def _engine_output_to(log_path: str):
    """Milvus Lite's engine is a child process that writes its C++ logs and assertion messages
    (a parse error, a type check) to our stdout and stderr: started inside this block, it writes
    to `log_path` instead, unless debug logging is on."""
    if logging.getLogger().level <= logging.DEBUG:
        yield
        return
    try:
        target = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        yield
        return
    import sys

    saved = {fd: os.dup(fd) for fd in (1, 2)}
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd in saved:
            os.dup2(target, fd)
        yield
    finally:
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        os.close(target)


_ENVIRON = threading.Lock()


@contextlib.contextmanager
def _engine_home(db: str):
    """Milvus Lite's engine keeps its memory-mapped scratch in `$HOME/.cache/milvus` and deletes
    and re-creates that folder when its first collection call arrives: two engines of one user
    (two stores opened at once, two commands, two test workers) racing there leave one of them
    failing every collection call ("Mmap manager has not been init"), and a `~/.cache` that is
    not a writable folder breaks them all. The engine started inside this block gets a HOME of
    its own beside the database (one engine per database: the database's lock), so no other
    engine touches its scratch. The engine copies the environment when it starts, inside the
    block; the swap is under a lock for other stores opening in this process."""
    home = os.path.join(os.path.dirname(db), f".{os.path.basename(db)}.engine")
    try:
        os.makedirs(home, exist_ok=True)
    except OSError:  # a read-only folder: the database cannot be opened there anyway
        yield
        return
    with _ENVIRON:
        saved = os.environ.get("HOME")
        os.environ["HOME"] = home
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("HOME", None)
            else:
                os.environ["HOME"] = saved


_CALLS = threading.Lock()
_call_locks: dict[str, threading.RLock] = {}


def engine_calls(path: str) -> threading.RLock:
    """The lock that lets one call at a time into this process's Milvus Lite 3 engine on
    `path`. Lite 3 serves gRPC on a pool of threads and its collection takes writes, flushes and
    searches without a lock of its own (milvus-lite 3.2.2: sequence numbers are allocated and
    the memtable swapped for a flush unguarded): 8 threads writing and searching at once failed
    flushes with "current_seq is monotonic; tried to set 18 < 19" (3 in 480 calls)."""
    with _CALLS:
        return _call_locks.setdefault(path, threading.RLock())


def clear_aborted_collection(path: str, name: str) -> bool:
    """Remove what a Milvus Lite 3 collection creation stopped midway left in the database at
    `path` (the collection's folder, made before its schema: on a full disk, or killed between
    the two), which the engine does not count as a collection and yet refuses to create again
    ("File exists"). Only a folder holding nothing but a partial schema is removed; returns
    whether one was."""
    import shutil

    folder = os.path.join(path, "collections", name)
    try:
        entries = os.listdir(folder)
    except OSError:
        return False
    if set(entries) - {"schema.json.tmp"}:
        return False
    shutil.rmtree(folder, ignore_errors=True)
    return True


def index_coverage(path: str, name: str, field: str) -> tuple[int, int] | None:
    """(rows whose segment has its `field` index, rows in segments) of collection `name` in the
    Milvus Lite 3 database at `path`, which this process runs; None where it cannot be read.

    Lite 3 builds a segment's index on a background thread after the flush that made the
    segment, and searches the segment by brute force until then, while `describe_index` says
    Finished with every row indexed from the start: only the engine's own segments say how far
    the build is. They are read through its private objects (milvus-lite 3.2), so any change
    there gives None, and the wait falls back to what `describe_index` says."""
    try:
        from milvus_lite.server_manager import server_manager_instance

        entry = server_manager_instance._servers.get(os.path.abspath(path))
        if entry is None:
            return None
        segments = entry[1].get_collection(name)._segments_snapshot()
        total = sum(int(seg.num_rows) for seg in segments)
        indexed = sum(int(seg.num_rows) for seg in segments if field in seg.indexes)
        return indexed, total
    except Exception:
        return None


def lite3_upkeep(path: str, name: str) -> int:
    """Bytes Milvus Lite 3 may write for collection `name` of the database at `path` besides the
    rows it is given: after a flush, and at the next load for a segment without one, it builds
    each segment's index, and it merges small segments into one, writing the new files before it
    removes the old ones (and a failed background build only shows at the next load). Counted as
    the collection's size on disk: its segments, their indexes and its write-ahead log."""
    total = 0
    for folder, _, files in os.walk(os.path.join(path, "collections", name)):
        for file in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(folder, file))
    return total


def index_files(path: str, name: str) -> dict[str, tuple[int, int]]:
    """(size, modification time) of each index file of collection `name` in the Milvus Lite 3
    database at `path`, by path."""
    import glob

    found = {}
    for index in glob.glob(
        os.path.join(path, "collections", name, "partitions", "*", "indexes", "*")
    ):
        with contextlib.suppress(OSError):
            stat = os.stat(index)
            found[index] = (stat.st_size, stat.st_mtime_ns)
    return found


def clear_new_indexes(path: str, name: str, before: dict[str, tuple[int, int]]) -> int:
    """Remove the index files of collection `name` written since `before` (`index_files`) by a
    Milvus Lite 3 load that failed on a full disk: the engine writes an index file in place, and
    loads one that exists rather than building it again, so the one it was writing, left short,
    failed every later load ("could only read ..."). An index file is built again from its
    segment by the next load: nothing stored is lost. Returns how many were removed."""
    removed = 0
    for index, stamp in index_files(path, name).items():
        if before.get(index) != stamp:
            with contextlib.suppress(OSError):
                os.unlink(index)
                removed += 1
    return removed


def file_identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of the file `path` names, the same for every name of it; None when
    there is no such file."""
    try:
        found = os.stat(os.path.expanduser(path))
    except OSError:
        return None
    return found.st_dev, found.st_ino


@dataclass
class _Engine:
    """One of this process's Milvus Lite engines: the path it was started with, the identity of
    its file, how many open stores use it, and how many times one of them changed a collection
    (made, dropped, or its records rewritten: `engine_changed`)."""

    path: str
    identity: tuple[int, int] | None
    users: int = 0
    changes: int = 0


_ENGINES = threading.Lock()
_engines: list[_Engine] = []


def _engine_of(uri: str) -> _Engine | None:
    """This process's engine on the file `uri` names (by its real path, or by device and inode:
    a hard link), or None."""
    from pathlib import Path

    path, identity = str(Path(uri).expanduser().resolve()), file_identity(uri)
    for engine in _engines:
        if engine.identity is None:  # a database the engine has not written yet when opened
            engine.identity = file_identity(engine.path)
        if engine.path == path or (identity is not None and engine.identity == identity):
            return engine
    return None


def open_engine(uri: str, start: Callable[[str], T]) -> tuple[str, T]:
    """`start(path)` (a client of the engine on `path`) for the file `uri` names, with the path
    under which this process already runs an engine on that file if it does, so that one file
    never gets two engines here (Milvus Lite's own manager would start one per spelling);
    returns (path, client). Each `open_engine` is paired with one `close_engine(path)`."""
    from pathlib import Path

    with _ENGINES:
        engine = _engine_of(uri)
        path = engine.path if engine else str(Path(uri).expanduser().resolve())
        client = start(path)
        if engine is None:
            engine = _Engine(path, file_identity(path))
            _engines.append(engine)
        engine.users += 1
    return path, client


def close_engine(path: str) -> bool:
    """One user of the engine started on `path` is done; True when it was the last (the engine
    is then to be released)."""
    with _ENGINES:
        engine = next((e for e in _engines if e.path == path), None)
        if engine is None:
            return True
        engine.users -= 1
        if engine.users > 0:
            return False
        _engines.remove(engine)
        return True


def engine_changes(path: str) -> int:
    """How many times a store of this process changed a collection on the engine started on
    `path`: a store whose kept dimensions, index specs, declared fields and records were read at
    another count reads them again. Only this process can change a Milvus Lite database (the
    engine holds its file's lock), so the count covers every other client of it."""
    with _ENGINES:
        engine = next((e for e in _engines if e.path == path), None)
        return engine.changes if engine is not None else 0


def engine_changed(path: str) -> None:
    """A store changed a collection on the engine started on `path` (`engine_changes`)."""
    with _ENGINES:
        engine = next((e for e in _engines if e.path == path), None)
        if engine is not None:
            engine.changes += 1


# What a refused open advises besides stopping the holder: the running command's own way
# through the holder (`holder_advice`); the store's commands have --server.
_HOLDER_ADVICE: contextvars.ContextVar[str] = contextvars.ContextVar(
    "holder_advice", default="stop it, or go through that service with --server"
)


@contextlib.contextmanager
def holder_advice(advice: str):
    """Inside the block, a Milvus Lite database another process holds is refused advising
    `advice` (the ways the running command has), not the store commands' --server."""
    token = _HOLDER_ADVICE.set(advice)
    try:
        yield
    finally:
        _HOLDER_ADVICE.reset(token)


def _held_by(uri: str, pid: int) -> StoreError:
    return StoreError(
        f"cannot open the Milvus Lite database {uri}: process {pid} holds it "
        f"(e.g. a running `accelkit images serve`); {_HOLDER_ADVICE.get()}"
    )


# Room a write needs besides its rows: SQLite's journal and pages, Milvus Lite's own files.
LITE_SPACE_MARGIN = 1 << 20


def row_bytes(dim: int, id_: str, metadata_json: int) -> int:
    """Disk bytes one row may take in a Milvus Lite file: twice its payload and a page's share
    (an overestimate: a row of small vectors and short ids takes less)."""
    return 2 * (4 * dim + len(id_.encode()) + metadata_json + 64)


def check_lite_space(uri: str, needed: int, what: str, kept: str | None = None) -> None:
    """Refuse `what` when the file system under Milvus Lite database `uri` has less than
    `needed` bytes (and the margin) free. Milvus Lite cannot be asked: on a full disk it answers
    an upsert and a flush as done, serves the rows from memory, and they are gone when it closes
    (tests/images/test_outage.py shows it). `kept`: what the refusal leaves as it was, when more
    than "the database is unchanged" must be said (a refused flush keeps the acknowledged rows)."""
    import errno

    db = os.path.abspath(uri)
    try:
        stat = os.statvfs(os.path.dirname(db))
    except OSError:
        return
    free = stat.f_bavail * stat.f_frsize
    if free < needed + LITE_SPACE_MARGIN:
        full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), db)
        short = f"about {(needed + LITE_SPACE_MARGIN) / 2**20:.1f} MiB needed"
        said = str(no_space(db, full, unchanged=True))
        if kept:
            said = said.replace(f"{db} is unchanged", kept)
        raise StoreFullError(f"{what} ({short}): {said}")


ORPHAN_WAIT_S = (
    15.0  # an engine whose owner exited notices it and stops; under load it takes seconds
)


def check_lite_free(uri: str) -> None:
    """Refuse, in one line naming the process, a Milvus Lite file another process has open. An
    engine left behind by a process that has exited (a Ctrl-C, a kill) is still stopping: wait for
    it rather than fail on the file it still holds."""
    if is_local_uri(uri):
        deadline = time.monotonic() + ORPHAN_WAIT_S
        while _lite_engines(uri, orphans=True) and time.monotonic() < deadline:
            time.sleep(0.1)
        holder = lite_lock_holder(uri)
        if holder is not None:
            raise _held_by(uri, holder)
        left = _lite_engines(uri, orphans=True)
        if left:
            raise StoreError(
                f"{uri} is still held by a Milvus Lite engine (process {left[0]}) whose owner "
                f"exited {ORPHAN_WAIT_S:g} s ago or more; end it (kill {left[0]}) and try again"
            )


def _lite_engines(uri: str, orphans: bool) -> list[int]:
    """PIDs of Milvus Lite engines (other than ours) with `uri` open; `orphans`: only those whose
    owner has exited (reparented to init)."""
    return [pid for pid, owner in _lite_holders(uri) if not orphans or owner in (0, 1)]


def lite_lock_holder(uri: str) -> int | None:
    """PID of another process that has the Milvus Lite database `uri` open, or None.

    Milvus Lite runs its engine as a child process that holds the file; the process reported is
    that child's parent (e.g. `accelkit images serve`). Read from /proc (Linux), so a refused open
    says who holds the file only when that is true. An engine whose owner died (reparented to init)
    is stopping: it is not reported (`check_lite_free` waits for it)."""
    for _, owner in _lite_holders(uri):
        if owner not in (0, 1):
            return owner
    return None


def _lite_holders(uri: str) -> list[tuple[int, int]]:
    """(pid, owner pid) of every other process with the database open under any of its names
    (device and inode; a Milvus Lite 2.x engine opens a `.db` name and is owned by its parent; a
    3.x database's `LOCK` is held by the process that runs the engine), our own engines left
    out. Which of the two follows the database's format, whichever engine is installed here (a
    2.x file under Lite 3, which migrate reads, is held by a 2.x engine of another environment);
    a database not there yet, by the installed engine."""
    from pathlib import Path

    db = str(Path(uri).expanduser().resolve())
    found = lite_format(db)
    threads = found == 3 if found is not None else lite_generation() >= 3
    if threads:  # Lite 3: the engine is the process itself, holding the folder's LOCK
        db = os.path.join(db, "LOCK")
    identity = file_identity(db)
    me = os.getpid()

    def same_file(fd_path: str, target: str) -> bool:
        if target == db:
            return True
        if identity is None or not target.endswith("LOCK" if threads else ".db"):
            return False
        return file_identity(fd_path) == identity

    def parent(pid: int) -> int:
        try:
            return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return 0

    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return []
    found = []
    for pid in pids:
        if pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if same_file(f"/proc/{pid}/fd/{fd}", target):
                owner = pid if threads else parent(pid)
                if owner != me:  # our own engine
                    found.append((pid, owner))
                break
    return found
