"""`accelkit images migrate SRC DST`: copy collections between stores — Milvus Lite to a Milvus
server (the documented growth path) or back — without re-embedding a photo.

Per collection: ids, vectors (float32, bit for bit), metadata, thumbnails (where both sides keep
them) and the model record. The destination collection is created with the source's dimension,
metric, description and index (Milvus Lite 2.x builds no HNSW: such a collection gets FLAT
there, with a warning), and its record (`origin`: a property on a server, a catalog row on Milvus Lite)
says where it came from and how far the copy got. Items are read in ascending id order (Milvus' query iterator) and upserted in batches; after
each batch the destination's record moves its mark to the batch's last id. So whenever the
copy stops, the destination holds whole copies of source items — every one up to the mark, and
at most the batch that was in flight beyond it — and the same command resumes after the mark
(that batch is written again: upserts are idempotent). At the end every item of both sides is
compared by content (a digest of its vector's bytes and its metadata; SRC's items that DST
lacks — gained behind the mark, or since a finished copy — are copied), and a sample is read
back from both sides and compared exactly; only then is the copy marked complete, with the
time. Items DST holds that SRC lacks (written to DST, or deleted from SRC) are kept and counted,
never dropped; items both hold that differ (written to either since they were copied) are
counted, named and kept (exit 3) unless `replace_changed` takes SRC's. `--restart` refuses to
drop a complete copy or one holding either kind unless `force`. A collection of that name in
the destination that did not come from this source is never written to, nor advised deleted.

SRC and DST are compared by what they are, not by how they are spelled: two Milvus Lite files by
device and inode (a hard link, a symbolic link and `./x/../photos.db` are one file), two servers'
databases by the random id accelkit keeps in each (`StoreClient.store_marker`: `localhost`,
`127.0.0.1` and `LOCALHOST`, db_name "" and "default", reach one database). One store named twice
is refused before anything is written. A copy that stops (a signal, a failure) says whether it stopped in the copy
or in the verification, with the command that goes on.

A Milvus Lite 2.x file (one SQLite file) is read without its engine (`lite2_file.Lite2Store`)
where the installed engine is Lite 3, which cannot open it: a 2.x user moves to Lite 3 with
`accelkit images migrate old.db new.db`. A store the installed engine cannot open otherwise (a
Lite 3 directory under Lite 2, a 2.x file as DST under Lite 3) is refused in one line first.
"""

from __future__ import annotations

import logging
import os
import random
import shlex
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accelkit.errors import AccelkitError, CheckFailed, InputError
from accelkit.images.settings.config import StoreConfig
from accelkit.images.settings.schema import check_collection_name
from accelkit.images.store import VectorStore
from accelkit.images.store.compare import (
    Difference,
    changed_refusal,
    compare,
    items_text,
    refuse_changed_ahead,
    refuse_undeclarable,
    such_as,
)
from accelkit.images.store.errors import StoreError
from accelkit.images.store.lite import (
    check_lite_format,
    file_identity,
    foreign_tables,
    holder_advice,
    lite_exists,
    lite_format,
    lite_generation,
)
from accelkit.images.store.lite2_file import Lite2Store
from accelkit.images.store.records import (
    MARKER,
    PROP_MODEL,
    PROP_ORIGIN,
    IndexSpec,
    is_local_uri,
    redact_uri,
)
from accelkit.images.store.thumbnails import open_thumbnails
from accelkit.runtime.files import record_kept
from accelkit.runtime.progress import rows_progress

log = logging.getLogger(__name__)


@dataclass
class CollectionCopy:
    """One collection's migration: `copied` items this run (`resumed_after`: the id it went on
    after), `total` in the source, `verified` (every SRC id in DST, `sampled` items read back
    equal), `extra` items DST holds that SRC lacks (kept), `verified_before` when the copy was
    finished and verified before this run (None: it was not), `note`: what this run did, where
    the table does not say it, `compared`: items whose content (vector bytes and metadata) was
    found equal in SRC and DST, `replaced`: DST items that differed, replaced by SRC's
    (`replace_changed`)."""

    name: str
    total: int
    copied: int = 0
    resumed_after: str | None = None
    thumbnails: int = 0
    sampled: int = 0
    verified: bool = False
    index_type: str = ""
    extra: int = 0
    verified_before: str | None = None
    note: str = ""
    compared: int = 0
    replaced: int = 0

    def document(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class MigrateReport:
    source: str
    target: str
    collections: list[CollectionCopy] = field(default_factory=list)

    def document(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "collections": [c.document() for c in self.collections],
        }


def store_key(config: StoreConfig) -> str:
    """Where a store is, as its copies record it beside its identity (`_identify`): a Milvus
    Lite file by its real absolute path (a file's device number can change when it is mounted
    again; its path stays), a server by its URI (credentials hidden)."""
    if is_local_uri(config.uri):
        return os.path.realpath(config.uri)
    return redact_uri(config.uri).rstrip("/")


def _database(config: StoreConfig) -> str:
    """A server's database by its name ("" is the server's default, "default"); none for Lite."""
    return (config.db_name or "default") if not is_local_uri(config.uri) else ""


def _where(config: StoreConfig) -> str:
    database = _database(config)
    return redact_uri(config.uri) + (f" (database {database!r})" if database else "")


def _refuse_database_flags(source: StoreConfig, target: StoreConfig) -> None:
    for side, flag, config in (("SRC", "--source-db", source), ("DST", "--target-db", target)):
        if is_local_uri(config.uri) and config.db_name:
            raise InputError(
                f"{flag} {config.db_name!r}: {side} {config.uri} is a Milvus Lite file, and Milvus"
                f" Lite files have no databases; leave {flag} out"
            )


def _refuse_one_file(source: StoreConfig, target: StoreConfig) -> None:
    """Refuse SRC and DST that name one Milvus Lite file (before either is opened: one file
    must not get two engines)."""
    if not (is_local_uri(source.uri) and is_local_uri(target.uri)):
        return
    identity = file_identity(source.uri)
    if identity is not None and identity == file_identity(target.uri):
        raise InputError(
            f"SRC and DST are the same store: {source.uri} and {target.uri} are the same file"
            f" (device {identity[0]}, inode {identity[1]}); name two different ones"
        )


def _marker(store, create: bool = False) -> str | None:
    """The id accelkit keeps in a server database; None where it has none or it cannot be read
    or written (a token that may not create a collection)."""
    try:
        return store.store_marker(create=create)
    except StoreError as exc:
        log.debug("no store marker in %s: %s", store.uri, exc)
        return None


def _identify(src, dst) -> tuple[str | None, bool]:
    """SRC's identity as its copies record it, and whether SRC and DST are proven two stores;
    `InputError` where they are one. A Milvus Lite SRC is its file's device and inode; a
    server's database is the marker kept in it, written there when it has none. DST is SRC when
    it reads SRC's marker; where SRC cannot be marked, DST is marked and SRC read for it."""
    if not src.is_server:
        identity = file_identity(src.config.uri)
        return (f"file {identity[0]}:{identity[1]}" if identity else None), True
    mine = _marker(src, create=True)
    theirs = _marker(dst, create=mine is None) if dst.is_server else None
    if mine is None and theirs is not None:
        mine = _marker(src)
    if dst.is_server and mine is not None and mine == theirs:
        raise InputError(
            f"SRC and DST are the same store: {_where(src.config)} and {_where(dst.config)} hold"
            f" the same server marker ({MARKER} {mine}); name two different ones"
        )
    distinct = not dst.is_server or mine is not None or theirs is not None
    return (f"marker {mine}" if mine else None), distinct


def _came_from(found: dict[str, Any], origin: dict[str, Any]) -> bool:
    """Whether a copy's record `found` names the source `origin` (its identity when both have
    one and the source is a server; else, or for a Lite file also, its place)."""
    if found.get("collection") != origin["collection"]:
        return False
    theirs, ours = found.get("store"), origin.get("store")
    if theirs and ours and theirs == ours:
        return True
    if theirs and ours and ours.startswith("marker "):
        return False
    return found.get("uri") == origin["uri"] and (found.get("db_name") or "default") == (
        origin["db_name"] or "default"
    )


def resume_hint(
    source: StoreConfig,
    target: StoreConfig,
    collections: Sequence[str] | None = None,
    source_thumbnails: str = "auto",
    target_thumbnails: str = "auto",
    *extra: str,
) -> str:
    """The command that goes on with a migration: the same stores, databases, collections and
    thumbnail files, then `extra` flags (tokens and credentials are not shown: give them
    again)."""
    words = ["accelkit", "images", "migrate", redact_uri(source.uri), redact_uri(target.uri)]
    for flag, value in (("--source-db", source.db_name), ("--target-db", target.db_name)):
        words += [flag, value] if value else []
    for name in collections or ():
        words += ["--collection", name]
    for flag, value in (
        ("--source-thumbnails", source_thumbnails),
        ("--target-thumbnails", target_thumbnails),
    ):
        words += [flag, value] if value != "auto" else []
    words += extra
    secret = [
        f"--{side}-token"
        for side, config in (("source", source), ("target", target))
        if config.token or redact_uri(config.uri) != config.uri
    ]
    return shlex.join(words) + (f" (with the same {' and '.join(secret)})" if secret else "")


def migrate(
    source: StoreConfig,
    target: StoreConfig,
    collections: Sequence[str] | None = None,
    *,
    batch_size: int = 1000,
    index_type: str | None = None,
    sample: int = 100,
    source_thumbnails: str = "auto",
    target_thumbnails: str = "auto",
    restart: bool = False,
    force: bool = False,
    replace_changed: bool = False,
    progress: bool = False,
    lite2_reader: bool | None = None,
) -> MigrateReport:
    """Copy `collections` (default: all) of the store `source` into the store `target`.
    `restart`: drop an unfinished copy and start over (`force`: a complete one, or one holding
    items SRC lacks or items that differ from SRC's, too). `replace_changed`: items that differ
    between SRC and DST (written to either since they were copied) take SRC's version (else
    they are counted, kept and the verification fails). `lite2_reader`: read a Milvus Lite 2.x SRC file without its engine
    (None: where the installed engine is Lite 3, which cannot open it)."""
    if not 1 <= batch_size <= 16384:
        raise InputError(f"--batch-size {batch_size} must be between 1 and 16384")
    if force and not restart:
        raise InputError("--force only goes with --restart (what it drops); leave it out")
    _refuse_database_flags(source, target)
    if is_local_uri(source.uri) and foreign_tables(source.uri):
        check_lite_format(source.uri, "SRC")  # another program's SQLite database: refused
    if is_local_uri(source.uri) and not lite_exists(source.uri):  # opening would make it
        raise InputError(
            f"SRC {source.uri}: no such Milvus Lite database; check the path (or give a server"
            " URI such as http://host:19530)"
        )
    _refuse_one_file(source, target)
    hint = resume_hint(source, target, collections, source_thumbnails, target_thumbnails)
    replace_hint = resume_hint(
        source, target, collections, source_thumbnails, target_thumbnails, "--replace-changed"
    )
    report = MigrateReport(redact_uri(source.uri), redact_uri(target.uri))
    with ExitStack() as stack:
        # migrate has no --server: a held file is copied once its holder stops
        stack.enter_context(holder_advice(f"stop it, then run `{hint}` again"))
        src = stack.enter_context(_open_source(source, lite2_reader))
        if isinstance(src, Lite2Store):  # one it cannot copy: refused before DST is touched
            for name in collections or src.list_collections():
                src.describe_dim(check_collection_name(name))
        if is_local_uri(target.uri):
            check_lite_format(target.uri, "DST")
        dst = stack.enter_context(VectorStore(target))
        identity, _ = _identify(src, dst)
        names = list(collections or src.list_collections())
        for name in names:
            check_collection_name(name)
            if not src.has_collection(name):
                known = ", ".join(src.list_collections()) or "none"
                raise InputError(f"collection {name!r} is not in SRC (its collections: {known})")
        thumbs = (
            open_thumbnails(source.uri, source_thumbnails),
            open_thumbnails(target.uri, target_thumbnails),
        )
        for name in names:
            if thumbs[0] is not None and thumbs[1] is None and target_thumbnails == "auto":
                kept = thumbs[0].count(name)
                if kept:  # said, not silently left behind: the page shows none for the copies
                    log.warning(
                        "collection %r: its %d thumbnails are not copied: DST keeps none of its"
                        " own (a server's are where its service's store.thumbnails says: give"
                        " that file with --target-thumbnails)",
                        name,
                        kept,
                    )
            origin = _prepare(src, dst, name, index_type, (restart, force), identity)
            copying = (thumbs, batch_size, progress, hint, replace_changed, replace_hint)
            copy = _copy(src, dst, name, origin, *copying)
            found = _top_up(src, dst, copy, thumbs, batch_size, hint, replace_changed)
            with _stage("verification", _this_run(copy, _where(dst.config)), hint):
                _kept(dst, name, f"all {copy.total:,} items", "verification", hint, "verify them")
                copy.sampled, copy.verified = _verify(src, dst, copy, found, sample, replace_hint)
            origin = dst.recorded(name, PROP_ORIGIN) or {}
            _mark(dst, name, {**origin, "complete": True, "verified_at": _now()})
            copy.note = _note(copy)
            record_kept(
                f"migrate {name}", f"{copy.total:,} items of {name!r} in {_where(dst.config)}"
            )
            report.collections.append(copy)
    return report


def _open_source(config: StoreConfig, lite2_reader: bool | None):
    """SRC as migrate reads it: a Milvus Lite 2.x file through `Lite2Store` (no engine) where
    asked or where the installed engine is Lite 3; else the store, once its engine can open it."""
    if is_local_uri(config.uri):
        if lite_format(config.uri) == 2 and (
            lite2_reader or (lite2_reader is None and lite_generation() >= 3)
        ):
            log.info("reading the Milvus Lite 2.x file %s without its engine", config.uri)
            return Lite2Store(config)
        check_lite_format(config.uri, "SRC")
    return VectorStore(config)


def _kept(dst, name: str, items: str, stage: str, hint: str, then: str) -> None:
    """What an interruption now keeps of the copy of `name`, and in which stage it stopped."""
    record_kept(
        f"migrate {name}",
        f"{items} of {name!r} in {_where(dst.config)} (stopped in the {stage}; run `{hint}`"
        f" again to {then})",
    )


@contextmanager
def _stage(stage: str, state: str | Callable[[], str], hint: str) -> Iterator[None]:
    """A failure inside the block says, on its one line, that the migration stopped in `stage`,
    how far it got (`state`, or what `state()` says then), and (unless it asks for --restart)
    the command that goes on."""
    try:
        yield
    except AccelkitError as exc:
        got = state if isinstance(state, str) else state()
        advised = "--restart" in str(exc) or getattr(exc, "advised", False)
        goes_on = "" if advised else f"; run `{hint}` again to resume"
        exc.args = (f"migrate stopped in the {stage} ({got}): {exc}{goes_on}",)
        raise


def _origin(store, name: str, identity: str | None) -> dict[str, Any]:
    return {
        "uri": store_key(store.config),
        "db_name": _database(store.config),
        "collection": name,
        "store": identity,
    }


def _mark(dst, name: str, origin: dict[str, Any]) -> None:
    """Move the destination's record of the copy (its other records stay)."""
    dst.record(name, {PROP_ORIGIN: origin})


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())


def _when(origin: dict[str, Any]) -> str:
    """When a complete copy was verified, as a line says it (records before 0.x kept no time)."""
    return f"on {origin['verified_at']}" if origin.get("verified_at") else "earlier"


def _loss(src, dst, name: str, found: dict[str, Any], changed: bool = True) -> str | None:
    """What dropping DST's copy of `name` would lose, said in a line; None where nothing (an
    unfinished copy holding only SRC's items as SRC holds them: the copy starts over and writes
    them again). Items DST holds with another vector or metadata than SRC's are lost too, unless
    not `changed` (SRC's collection was made again with another model: all its items differ)."""
    diff = compare(src, dst, name)
    diff.changed = diff.changed if changed else []
    since = "(written to DST, or deleted from SRC, since)"
    differ = (
        f", and {items_text(len(diff.changed))} that differ from SRC's (such as"
        f" {such_as(diff.changed)}: written to DST or to SRC since they were copied)"
        if diff.changed
        else ""
    )
    if found.get("complete"):
        held = items_text(dst.count(name, consistency="Strong"))
        return f"it is complete (verified {_when(found)}): {held}, {diff.extra:,} of them SRC lacks {since}{differ}"  # fmt: skip
    if diff.extra or diff.changed:
        return f"it holds {items_text(diff.extra)} SRC lacks {since}{differ}"
    return None


def _prepare(src, dst, name: str, index_type: str | None, restart, identity) -> dict[str, Any]:
    """The destination collection, created like the source's or found as an earlier run of
    this copy left it; returns its origin record. `restart`: (restart, force). A collection of
    that name in DST that is no copy of this one is never written to, and never advised
    deleted (its items may be the user's only copy)."""
    restart, force = restart
    origin = _origin(src, name, identity)
    if dst.has_collection(name):
        found = dst.recorded(name, PROP_ORIGIN) or {}
        if not _came_from(found, origin):
            where = "another store" if found else "no migration"
            held = items_text(dst.count(name, consistency="Strong"))
            raise InputError(
                f"collection {name!r} exists in DST {_where(dst.config)} and came from {where}"
                f" ({held}, kept: migrate writes only into its own copies); migrate into another"
                " DST, or migrate other collections (--collection)"
            )
        if dst.lite == 3:  # its copy was made without them (below): set aside again, said again
            _lite3_sets_fields_aside(dst.config.fields, name)
        else:
            dst.fields_to_write(name, exists=True)  # DST's store.fields naming others: refused
        same = _same_vectors(src, dst, name)
        loss = _loss(src, dst, name, found, same) if restart and not force else None
        if loss:
            raise InputError(
                f"--restart would drop the copy of {name!r} in DST {_where(dst.config)}: {loss};"
                " nothing is dropped (run without --restart: it copies what SRC gained and keeps"
                " the rest), or add --force to drop it anyway"
            )
        if restart:
            dst.drop_collection(name)
        else:
            refuse_undeclarable(src, name, dst.declared_fields(name), src.describe(name))
            # a creation killed between the collection and its index (a kill runs no `except`:
            # the all-or-nothing drop never came) is finished: the copy resumes, not fails
            kind, params, _ = _index_of(src, dst, name, index_type)
            metric = src.describe(name)["metric_type"]
            dst.finish_index(name, IndexSpec.from_config(dst.config, kind, metric, params))
            if same:
                return {**found, **origin}
            # SRC's collection was made again since: its items are not the ones copied
            loss = _loss(src, dst, name, found, changed=False)
            then = (
                f"its copy in DST is left as it is: {loss}" if loss else "run again with --restart"
            )
            raise InputError(
                f"collection {name!r} in SRC now holds another model's or another dimension's"
                f" vectors than its copy in DST began with; {then}"
            )
    info = src.describe(name)
    kind, params, flat = _index_of(src, dst, name, index_type)
    if flat:
        log.warning(
            "collection %r: Milvus Lite 2.x builds no HNSW index; its copy gets FLAT (exact)", name
        )
    fields = dst.config.fields or info.get("fields") or {}
    if dst.lite == 3:
        _lite3_sets_fields_aside(fields, name)
        fields = {}
    refuse_undeclarable(src, name, fields, info)  # before DST's collection is made
    origin = {**origin, "after": None, "copied": 0, "complete": False}
    dst.create_collection(
        name,
        info["dim"],
        info["description"],
        index_type=kind,
        metric_type=info["metric_type"],
        index_params=params,
        model=src.recorded(name, PROP_MODEL),
        origin=origin,
        fields=fields,  # the source's filter fields, or those DST's store.fields declares
    )
    return origin


def _index_of(src, dst, name: str, index_type: str | None) -> tuple[str, Any, bool]:
    """The index of DST's copy: `index_type` or the source's (its parameters where the same
    kind), FLAT for an HNSW source on Milvus Lite 2.x (then True: said when the copy is
    made)."""
    info = src.describe(name)
    kind = (index_type or info["index_type"]).upper()
    params = dict(info["index_params"]) if kind == info["index_type"] else None
    if kind == "HNSW" and dst.lite == 2:
        return "FLAT", None, True
    return kind, params, False


def _same_vectors(src, dst, name: str) -> bool:
    """Whether SRC's collection still holds vectors of the model and dimension its copy in DST
    records (a collection made again under its name with a re-embedding keeps the ids, and
    a sample read back can miss the few items copied before)."""
    return src.describe_dim(name) == dst.describe_dim(name) and src.recorded(
        name, PROP_MODEL
    ) == dst.recorded(name, PROP_MODEL)


def _copy(
    src, dst, name, origin, thumbs, batch_size, progress, hint, replace_changed, replace_hint
) -> CollectionCopy:
    total = src.count(name, consistency="Strong")
    copy = CollectionCopy(name, total, index_type=dst.describe(name)["index_type"])
    if origin.get("complete"):
        copy.verified_before = _when(origin)
        return copy  # nothing left in order: what SRC gained since is copied, then verified
    after, done = origin.get("after"), int(origin.get("copied") or 0)
    copy.resumed_after = after
    where = _where(dst.config)

    def state() -> str:
        resumed = f", {copy.copied:,} of them in this run" if after is not None else ""
        return f"{done:,} of {total:,} items of {name!r} copied to {where}{resumed}"

    with (
        _stage("copy", state, hint),
        rows_progress(progress and total > 0, "items") as bar,
    ):
        _kept(dst, name, f"{done:,} of {total:,} items", "copy", hint, "resume")
        task = bar.add_task(f"copying {name}", total=total)
        bar.update(task, advance=done)
        if after is not None and not replace_changed:  # never written over without a word
            refuse_changed_ahead(src, dst, name, after, batch_size, total, replace_hint)
        for rows in src.iterate(name, batch_size, after=after):
            ids = [row["id"] for row in rows]
            if copy.resumed_after is not None and min(ids) <= after:
                raise InputError(
                    f"collection {name!r}: SRC returned ids out of order; cannot resume safely,"
                    " run again with --restart"
                )
            # thumbnails first: killed between, DST holds no item without its thumbnail (one of
            # an item DST does not hold is never served, and the resumed batch keeps it again)
            copy.thumbnails += _copy_thumbnails(thumbs, name, ids)
            dst.upsert(
                name, ids, np.stack([r["vector"] for r in rows]), [r["metadata"] for r in rows]
            )
            after, done = max(ids), done + len(ids)
            copy.copied += len(ids)
            _mark(dst, name, {**origin, "after": after, "copied": done, "complete": False})
            _kept(dst, name, f"{done:,} of {total:,} items", "copy", hint, "resume")
            bar.advance(task, len(ids))
        dst.flush(name)
    return copy


def _top_up(
    src, dst, copy: CollectionCopy, thumbs, batch_size: int, hint: str, replace_changed: bool
) -> Difference:
    """Copy SRC's items that DST lacks (added to SRC behind the ordered copy's mark, or since a
    finished copy), and with `replace_changed` SRC's version of the items that differ; count
    DST's items that SRC lacks (`copy.extra`: kept); returns SRC and DST compared again."""
    name, where = copy.name, _where(dst.config)
    with _stage("verification", _this_run(copy, where), hint):
        diff = compare(src, dst, name)
        copy.extra = diff.extra
    todo = diff.missing + (diff.changed if replace_changed else [])
    if not todo:
        return diff
    copy.total, done = len(diff.ids), 0
    since = f"; the copy was verified {copy.verified_before}" if copy.verified_before else ""
    what = f"{len(todo):,} items of {name!r} DST lacked or held otherwise than SRC"

    def state() -> str:
        return f"{done:,} of the {what} copied to {where} in this run{since}"

    with _stage("copy", state, hint):
        for start in range(0, len(todo), batch_size):
            rows = src.get(name, todo[start : start + batch_size], with_vectors=True)
            ids = [row["id"] for row in rows]
            if ids:
                copy.thumbnails += _copy_thumbnails(thumbs, name, ids)
                vectors = np.stack([r["vector"] for r in rows])
                dst.upsert(name, ids, vectors, [r["metadata"] for r in rows])
            done += len(ids)
            copy.copied += len(ids)
            copy.replaced += len(set(ids) & set(diff.changed)) if replace_changed else 0
            _kept(dst, name, f"{done:,} of the {what}", "copy", hint, "resume")
        dst.flush(name)
    with _stage("verification", _this_run(copy, where), hint):
        diff = compare(src, dst, name)
        copy.extra = diff.extra
    return diff


def _this_run(copy: CollectionCopy, where: str) -> str:
    """What this run did before its verification, as a stopped one says it."""
    if copy.verified_before and not copy.copied:
        return f"copied 0 items of {copy.name!r} in this run; the copy was verified {copy.verified_before}"  # fmt: skip
    return (
        f"all {copy.total:,} items of {copy.name!r} in {where}, {copy.copied:,} of them copied"
        " in this run, not yet verified"
    )


def _note(copy: CollectionCopy) -> str:
    """One line on what this run did where the table does not say it: a finished copy run
    again, items DST holds that SRC lacks."""
    name, parts = repr(copy.name), []
    if copy.verified_before:
        parts.append(f"the copy of {name} was finished and verified {copy.verified_before}")
        if copy.copied - copy.replaced:
            parts.append(f"copied the {items_text(copy.copied - copy.replaced)} SRC gained since")
    if copy.replaced:
        parts.append(
            f"replaced {items_text(copy.replaced)} DST held otherwise than SRC with SRC's"
            " (--replace-changed)"
        )
    if copy.extra:
        during = "since" if copy.verified_before else "during the copy"
        held = "now holds" if copy.verified_before else "also holds"
        parts.append(
            f"DST {held} {items_text(copy.extra)} SRC lacks (written to DST, or deleted from SRC,"
            f" {during}), kept"
        )
    if not parts:
        return ""
    if copy.verified_before and not copy.copied:
        end = "nothing needs doing" if copy.extra else "nothing to do, verified again"
        return "; ".join(parts) + f"; {end}"
    return "; ".join(parts) + "; verified"


def _copy_thumbnails(thumbs, name: str, ids: list[str]) -> int:
    source, target = thumbs
    if source is None or target is None:
        return 0
    found = source.get_many(name, ids)
    target.put(name, list(found.items()))
    return len(found)


def _verify(
    src, dst, copy: CollectionCopy, found: Difference, sample: int, replace_hint: str
) -> tuple[int, bool]:
    """SRC's items all in DST with the same content (`found`: every item's vector bytes and
    metadata compared by digest), and `sample` of them (chosen at random, seeded by the name)
    read back from both stores with equal vectors (bit for bit) and metadata; `CheckFailed`
    otherwise, advising --restart only where dropping the copy loses nothing, and for items
    that differ only what keeps them (`replace_hint`: SRC's version replaces DST's, said how
    many)."""
    name, ids, lacking = copy.name, found.ids, found.missing
    if found.changed:
        raise changed_refusal(name, found.changed, len(ids), replace_hint)
    copy.compared = len(ids)
    if copy.verified_before or copy.extra:  # the copy is kept: never advice to drop it
        kept = (
            f"the copy was verified {copy.verified_before}"
            if copy.verified_before
            else f"DST holds {items_text(copy.extra)} SRC lacks"
        )
        fix = f"nothing was dropped ({kept}: SRC or DST was written to since)"
    else:
        fix = "run again with --restart"
    if lacking:
        raise CheckFailed(
            f"collection {name!r}: DST lacks {items_text(len(lacking))} of SRC's {len(ids):,} (such"
            f" as {lacking[0]!r}) after copying them; SRC or DST changed during the copy: {fix}"
        )
    chosen = random.Random(name).sample(ids, min(sample, len(ids)))
    theirs = {r["id"]: r for r in src.get(name, chosen, with_vectors=True, consistency="Strong")}
    ours = {r["id"]: r for r in dst.get(name, chosen, with_vectors=True, consistency="Strong")}
    for item_id in chosen:
        a, b = theirs.get(item_id), ours.get(item_id)
        if (
            a is None  # SRC lost it during the copy
            or b is None
            or not np.array_equal(a["vector"], b["vector"])
            or a["metadata"] != b["metadata"]
        ):
            raise CheckFailed(
                f"collection {name!r}: item {item_id!r} read back from DST differs from SRC; {fix}"
            )
    return len(chosen), True


def _lite3_sets_fields_aside(fields, name: str) -> None:
    """Milvus Lite 3 takes no declared filter fields: a copy into it is made without them (the
    first run and every run after it alike), and the user is told once per run."""
    if fields:
        log.warning(
            "collection %r: Milvus Lite 3 takes no declared filter fields; its copy filters on"
            " the metadata as written (the same answers)",
            name,
        )
