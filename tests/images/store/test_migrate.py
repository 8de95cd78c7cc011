"""`accelkit images migrate`: Milvus Lite to the suite's real Milvus server and back, with
nothing lost (ids, vectors bit for bit, metadata, thumbnails, the model record), in batches; an
interrupted copy (a real SIGINT to the command) leaves the destination consistent and resumes."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from accelkit.images.store.lite import lite_generation
from tests.support import two_tower
from tests.support.cli import result_of
from tests.support.groups import SERVERS
from tests.support.migrate import everything, run, same_items, small_lite, stopped_line
from tests.support.terminal import with_default_signals

pytestmark = pytest.mark.xdist_group(SERVERS)
ROOT = Path(__file__).resolve().parents[3]
NAMES = ["chelsea", "coffee", "rocket", "astronaut", "moon", "coins", "camera"]
BULK = 1500
BATCH = 2  # the interrupted copy's batch size


@pytest.fixture(scope="module")
def source(tmp_path_factory, photos):
    """A Milvus Lite database with a two-tower model's photos (thumbnails, a model record) and a
    bulk collection of odd vectors and metadata."""
    from accelkit import images
    from accelkit.images.store import StoreConfig, VectorStore

    folder = tmp_path_factory.mktemp("migrate")
    _, files = two_tower.build(folder / "model")
    for name in NAMES:
        Image.fromarray(photos[name]).save(folder / f"{name}.png")
    database = folder / "source.db"
    config = folder / "tiny.yaml"
    config.write_text(two_tower.config_yaml(files, str(database)))
    report = images.insert([str(folder / f"{n}.png") for n in NAMES], "pics", create_collection=True, config=config)  # fmt: skip
    assert len(report.stored) == len(NAMES)
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(BULK, 8)).astype(np.float32)
    vectors[0] = np.float32(1e-38)  # tiny, and exact bits to keep
    metadata = [{"i": i, "tags": ["é", "ü"] if i % 2 else [], "deep": {"a": {"b": i}}} for i in range(BULK)]  # fmt: skip
    with VectorStore(StoreConfig(uri=str(database))) as store:
        store.create_collection("bulk", 8, "odd vectors", metric_type="L2")
        store.upsert("bulk", [f"item-{i:05d}@x/y" for i in range(BULK)], vectors, metadata)
    return {"folder": folder, "database": str(database), "config": config, "files": files}


@pytest.fixture(scope="module")
def server_db(milvus_server):
    from tests.support.milvus_server import server_database

    return {"uri": milvus_server.uri, "db_name": server_database(milvus_server, "migrate"), "timeout": 60}  # fmt: skip


def test_lite_to_server_and_back_loses_nothing(source, server_db, onnx_path, tmp_path, capsys):
    from accelkit import images
    from accelkit.images.index.base import ModelMismatchError
    from accelkit.images.store.thumbnails import ThumbnailStore

    lite = {"uri": source["database"]}
    server_thumbs = tmp_path / "server-thumbnails.sqlite"
    code, out, err = run(capsys, "migrate", source["database"], server_db["uri"], "--target-db", server_db["db_name"], "--target-thumbnails", str(server_thumbs), "--batch-size", "100", "--json")  # fmt: skip
    assert code == 0, err
    report = {c["name"]: c for c in result_of(out)["collections"]}
    assert set(report) == {"bulk", "pics"} and report["bulk"]["copied"] == BULK
    assert report["bulk"]["verified"] and report["bulk"]["sampled"] == 100
    assert report["pics"]["thumbnails"] == len(NAMES)
    for name in ("bulk", "pics"):
        assert same_items(everything(lite, name), everything(server_db, name)), name
    source_thumbs = ThumbnailStore(source["database"] + ".thumbnails.sqlite")
    ids = list(everything(lite, "pics"))
    assert ThumbnailStore(str(server_thumbs)).get_many("pics", ids) == source_thumbs.get_many(
        "pics", ids
    )
    described = images.describe_collection("pics", config=source["config"])
    on_server = source["folder"] / "server.yaml"
    on_server.write_text(
        source["config"]
        .read_text()
        .replace(
            f"uri: {source['database']}",
            f"uri: {server_db['uri']}\n  db_name: {server_db['db_name']}\n  timeout: 60",
        )
    )
    copied = images.describe_collection("pics", config=on_server)
    assert copied["model"] == described["model"] and copied["dim"] == two_tower.DIM
    assert images.describe_collection("bulk", config=on_server)["metric_type"] == "L2"
    here = images.search(text="a photo of a cat", collection="pics", config=source["config"])
    there = images.search(text="a photo of a cat", collection="pics", config=on_server)
    assert [(h.id, h.metadata) for h in here.hits] == [(h.id, h.metadata) for h in there.hits]
    assert np.allclose([h.score for h in here.hits], [h.score for h in there.hits], atol=1e-6)
    other = tmp_path / "default.yaml"  # the record travelled: no other model searches the copy
    other.write_text(
        f"model:\n  onnx_path: {onnx_path}\n  embedding_dim: {two_tower.DIM}\n"
        f"store:\n  uri: {server_db['uri']}\n  db_name: {server_db['db_name']}\n  timeout: 60\n"
    )
    with pytest.raises(ModelMismatchError, match="tiny-clip"):
        images.search(str(source["folder"] / "coffee.png"), collection="pics", config=other)

    back = tmp_path / "back.db"
    code, out, err = run(capsys, "migrate", server_db["uri"], str(back), "--source-db", server_db["db_name"], "--source-thumbnails", str(server_thumbs), "--json")  # fmt: skip
    assert code == 0, err
    for name in ("bulk", "pics"):
        assert same_items(everything(lite, name), everything({"uri": str(back)}, name)), name
    assert ThumbnailStore(f"{back}.thumbnails.sqlite").get_many("pics", ids) == source_thumbs.get_many("pics", ids)  # fmt: skip
    code, out, err = run(capsys, "migrate", server_db["uri"], str(back), "--source-db", server_db["db_name"], "--json")  # fmt: skip
    again = {c["name"]: c for c in result_of(out)["collections"]}
    assert code == 0 and again["bulk"]["copied"] == 0 and again["bulk"]["verified"]


def test_refusals_are_one_line(source, tmp_path, capsys):
    from accelkit.images.store import StoreConfig, VectorStore

    target = tmp_path / "t.db"
    with VectorStore(StoreConfig(uri=str(target))) as store:
        store.create_collection("bulk", 8)  # not a copy of anything
    code, _, err = run(capsys, "migrate", source["database"], str(target), "-c", "bulk")
    assert code == 2 and "came from no migration" in err and "'bulk' exists in DST" in err
    code, _, err = run(capsys, "migrate", source["database"], str(target), "-c", "nope")
    assert code == 2 and "collection 'nope' is not in SRC (its collections: bulk, pics)" in err
    code, _, err = run(capsys, "migrate", source["database"], source["database"])
    assert code == 2 and "the same store" in err
    typo = tmp_path / "typo.db"  # once: "migrated" nothing, exit 0, and two empty databases made
    code, _, err = run(capsys, "migrate", str(typo), str(tmp_path / "new.db"))
    assert code == 2 and f"SRC {typo}: no such Milvus Lite database" in err, err
    assert not typo.exists() and not (tmp_path / "new.db").exists()
    # the same file by another name is the same store too (it was told to "delete it there":
    # the source's own collection)
    link = tmp_path / "link.db"
    link.symlink_to(source["database"])
    folder, file = os.path.split(source["database"])
    for alias in (str(link), os.path.join(folder, ".", file), os.path.join(folder, "..", os.path.basename(folder), file)):  # fmt: skip
        code, _, err = run(capsys, "migrate", source["database"], alias, "-c", "bulk")
        assert code == 2 and "the same store" in err, (alias, err)
    assert everything({"uri": str(target)}, "bulk") == {}


def test_a_copy_resumes_only_from_the_file_it_came_from(source, tmp_path, capsys, monkeypatch):
    """A Lite SRC is recorded by its absolute path: `migrate photos.db …` run again from another
    folder names another file, whose items must not go on into the unfinished copy."""
    from accelkit.images.store import StoreConfig, VectorStore
    from accelkit.images.store.records import PROP_ORIGIN

    here, elsewhere, target = tmp_path / "here", tmp_path / "elsewhere", tmp_path / "t.db"
    here.mkdir()
    elsewhere.mkdir()
    (here / "source.db").symlink_to(source["database"])
    monkeypatch.chdir(here)
    code, _out, err = run(capsys, "migrate", "source.db", str(target), "-c", "pics", "--batch-size", "2")  # fmt: skip
    assert code == 0, err
    copied = everything({"uri": str(target)}, "pics")
    with VectorStore(StoreConfig(uri=str(target))) as store:  # as if stopped after 2 items
        origin = store.recorded("pics", PROP_ORIGIN)
        assert origin["complete"] is True
        first = sorted(copied)[:2]
        store.record("pics", {PROP_ORIGIN: {**origin, "after": first[-1], "copied": 2, "complete": False}})  # fmt: skip
    with VectorStore(StoreConfig(uri=str(elsewhere / "source.db"))) as store:  # another file
        store.create_collection("pics", two_tower.DIM)
        store.upsert("pics", ["zz-other"], np.ones((1, two_tower.DIM), np.float32))
    monkeypatch.chdir(elsewhere)
    code, _out, err = run(capsys, "migrate", "source.db", str(target), "-c", "pics")
    assert code == 2 and "came from another store" in err, err
    assert same_items(everything({"uri": str(target)}, "pics"), copied)
    monkeypatch.chdir(here)  # the file it came from: the copy goes on and completes
    code, out, err = run(capsys, "migrate", "source.db", str(target), "-c", "pics", "--json")
    (pics,) = result_of(out)["collections"]
    assert code == 0 and pics["resumed_after"] == first[-1] and pics["verified"], err


def test_an_interrupted_copy_is_consistent_and_resumes(source, server_db, tmp_path, capsys):
    """A real SIGINT to `accelkit images migrate` in the middle of the copy: exit 130, one line
    saying how far it got and how to resume; the destination then holds whole copies of the
    source's items: all of those up to its mark, and at most the batch that was in flight; the
    same command finishes the copy. Batches of BATCH items, so that the copy's ~750 server round
    trips outlast the watcher even on a loaded machine. The child starts with SIGINT at its
    default whatever the worker's: a trial run as a background job has SIGINT ignored, which a
    plain Popen child inherits (and rightly keeps) — two trials failed so, the copy ending
    unstopped with exit 0 (reproduced by running this test as a background job)."""
    from accelkit.images.store import StoreConfig, VectorStore
    from accelkit.images.store.records import PROP_ORIGIN

    database = server_db["db_name"] + "_resume"
    from pymilvus import MilvusClient

    client = MilvusClient(uri=server_db["uri"], timeout=30)
    if database not in client.list_databases():
        client.create_database(database)
    client.close()
    target = {**server_db, "db_name": database}
    args = [sys.executable, "-m", "accelkit", "images", "migrate", source["database"], target["uri"], "--target-db", database, "-c", "bulk", "--batch-size", str(BATCH)]  # fmt: skip
    child = subprocess.Popen(
        with_default_signals(args), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    # the signal follows the command's own progress lines ("copying bulk: 82/1,500 items")
    lines: list[str] = []

    def read() -> None:
        for x in child.stderr:
            lines.append(x)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline, progress = time.monotonic() + 240, re.compile(r"copying bulk: ([\d,]+)/")
    while time.monotonic() < deadline and child.poll() is None:
        copied = [int(m.group(1).replace(",", "")) for x in lines if (m := progress.search(x))]
        if copied and max(copied) >= 10 * BATCH:
            break
        time.sleep(0.02)
    assert child.poll() is None, "".join(lines)  # still copying when signalled
    child.send_signal(signal.SIGINT)
    child.wait(timeout=60)
    reader.join(timeout=10)
    err = "".join(lines)
    with VectorStore(StoreConfig(**target)) as store:
        assert child.returncode == 130, err
        *activity, line = [x for x in err.splitlines() if x.strip()]
        assert all(x.startswith("[") for x in activity), err  # timestamped progress lines only
        assert line.startswith("interrupted (SIGINT); kept what was written before it:")
        assert f"of {BULK:,} items of 'bulk'" in line and "stopped in the copy" in line
        assert "again to resume" in line
        resume = f"accelkit images migrate {source['database']} {target['uri']} --target-db {database} --collection bulk"  # fmt: skip
        assert resume in line  # the whole command: without --target-db it copied elsewhere
        store._records.clear()
        mark = store.recorded("bulk", PROP_ORIGIN)
    assert not mark["complete"] and 10 * BATCH <= mark["copied"] < BULK
    held = everything(target, "bulk")
    wanted = everything({"uri": source["database"]}, "bulk")
    marked = {i for i in wanted if i <= mark["after"]}
    following = sorted(i for i in wanted if i > mark["after"])[:BATCH]  # the batch in flight
    assert marked <= set(held) <= marked | set(following) and len(marked) == mark["copied"]
    assert all(np.array_equal(held[i][0], wanted[i][0]) and held[i][1] == wanted[i][1] for i in held)  # fmt: skip
    code, out, err = run(capsys, "migrate", source["database"], target["uri"], "--target-db", database, "-c", "bulk", "--json")  # fmt: skip
    (bulk,) = result_of(out)["collections"]
    assert code == 0 and bulk["resumed_after"] == mark["after"] and bulk["verified"]
    assert bulk["copied"] == BULK - mark["copied"]
    assert same_items(everything(target, "bulk"), wanted)
    with VectorStore(StoreConfig(**target)) as store:
        assert store.recorded("bulk", PROP_ORIGIN)["complete"] is True
    assert json.dumps(bulk)  # plain JSON


def test_a_copy_does_not_go_on_from_a_collection_made_again(tmp_path, capsys):
    """SRC's collection deleted and filled again by another model (the same photos keep their
    content-hash ids, so the counts still agree and 100 items read back can miss the few copied
    before) is not resumed into the copy that began with the old vectors."""
    from accelkit.images.store import StoreConfig, VectorStore
    from accelkit.images.store.records import PROP_ORIGIN

    source, target = str(tmp_path / "s.db"), str(tmp_path / "t.db")
    ids = [f"photo-{i:04d}" for i in range(300)]
    rng = np.random.default_rng(0)

    def fill(model: str) -> None:
        with VectorStore(StoreConfig(uri=source)) as store:
            if store.has_collection("pics"):
                store.drop_collection("pics")
            record = {"name": model, "dim": 8, "text": False, "fingerprint": None}
            store.create_collection("pics", 8, model=record)
            store.upsert("pics", ids, rng.normal(size=(len(ids), 8)).astype(np.float32))

    fill("old-model")
    code, _out, err = run(capsys, "migrate", source, target, "--batch-size", "100")
    assert code == 0, err
    with VectorStore(StoreConfig(uri=target)) as store:  # as if stopped after the first batch
        origin = store.recorded("pics", PROP_ORIGIN)
        store.record("pics", {PROP_ORIGIN: {**origin, "after": ids[99], "copied": 100, "complete": False}})  # fmt: skip
    copied = everything({"uri": target}, "pics")
    fill("new-model")
    code, _out, err = run(capsys, "migrate", source, target)
    assert code == 2 and "now holds another model's" in err and "--restart" in err, err
    assert same_items(everything({"uri": target}, "pics"), copied)
    code, out, err = run(capsys, "migrate", source, target, "--restart", "--json")
    assert code == 0 and result_of(out)["collections"][0]["copied"] == len(ids), err
    assert same_items(everything({"uri": target}, "pics"), everything({"uri": source}, "pics"))


def test_thumbnails_left_behind_are_said(source, server_db, capsys):
    """Lite -> server without --target-thumbnails: a server keeps no thumbnails beside it, so
    the copy has none; that is one warning (in --json's warnings), not a quiet 0."""
    from pymilvus import MilvusClient

    from tests.support.cli import envelope_of

    database = server_db["db_name"] + "_thumbs"
    client = MilvusClient(uri=server_db["uri"], timeout=30)
    if database not in client.list_databases():
        client.create_database(database)
    client.close()
    code, out, err = run(capsys, "migrate", source["database"], server_db["uri"], "--target-db", database, "-c", "pics", "--json")  # fmt: skip
    assert code == 0, err
    envelope = envelope_of(out)
    assert envelope["result"]["collections"][0]["thumbnails"] == 0
    (warning,) = [w for w in envelope["warnings"] if "thumbnails" in w]
    assert (
        f"its {len(NAMES)} thumbnails are not copied" in warning
        and "--target-thumbnails" in warning
    )


# -- store identity: a store is what it is, not how it is spelled -----------------------------


def engines_of_ours_on(path: str) -> set[int]:
    """PIDs of this process's children that have the file `path` open, by device and inode
    (read from /proc, not from the code under test)."""
    wanted = os.stat(path)
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            if int(stat.rsplit(")", 1)[1].split()[1]) != os.getpid():
                continue
            fds = os.listdir(f"/proc/{pid}/fd")
        except (OSError, ValueError, IndexError):
            continue
        for fd in fds:
            try:
                held = os.stat(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if (held.st_dev, held.st_ino) == (wanted.st_dev, wanted.st_ino):
                found.add(int(pid))
    return found


def test_one_file_by_any_name_is_the_same_store(tmp_path, capsys):
    """A hard link, a symbolic link and a path through `..` name the file SRC is: one line,
    exit 2, saying so and why; never advice to delete a collection "there" (the source's own),
    and the source untouched."""
    src = small_lite(tmp_path / "src.db")
    before = everything({"uri": src}, "pics")
    aliases = [tmp_path / "soft.db", tmp_path / "x" / ".." / "src.db"]
    if lite_generation() == 2:  # a Lite 3 database is a folder, which takes no hard link
        os.link(src, tmp_path / "hard.db")
        aliases.append(tmp_path / "hard.db")
    (tmp_path / "soft.db").symlink_to(src)
    (tmp_path / "x").mkdir()
    for alias in aliases:
        for pair in ((src, str(alias)), (str(alias), src)):
            code, _, err = run(capsys, "migrate", *pair)
            lines = err.strip().splitlines()
            assert code == 2 and len(lines) == 1, (pair, err)
            assert "SRC and DST are the same store" in err and "same file" in err, (pair, err)
            assert "delete" not in err, (pair, err)
    assert same_items(everything({"uri": src}, "pics"), before)


def test_one_file_gets_one_engine_whatever_its_name(tmp_path):
    """In one process, a file opened under two names (a hard link) runs one Milvus Lite engine,
    and closing one store leaves the other working; another process's engine on the file is
    named whatever name it was opened by."""
    from accelkit.images.store import StoreConfig, StoreError, VectorStore

    src = small_lite(tmp_path / "src.db")
    hard = tmp_path / "hard.db"
    if lite_generation() == 2:
        os.link(src, hard)
    else:  # a Lite 3 database is a folder, which takes no hard link: a symbolic one
        hard.symlink_to(src)
    first = VectorStore(StoreConfig(uri=src))
    second = VectorStore(StoreConfig(uri=str(hard)))
    try:
        if lite_generation() == 2:  # a child process per engine
            assert len(engines_of_ours_on(src)) == 1
        else:  # threads of ours: one engine is one server in milvus_lite's manager
            from milvus_lite.server_manager import server_manager_instance

            assert len(server_manager_instance._servers) == 1, server_manager_instance._servers
        first.close()
        assert second.count("pics", consistency="Strong") == 5
    finally:
        first.close()
        second.close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom accelkit.images.store import StoreConfig, VectorStore\n"
         f"s = VectorStore(StoreConfig(uri={src!r})); print('ready', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreError, match=f"process {holder.pid} holds it"):
            VectorStore(StoreConfig(uri=str(hard))).close()
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_a_database_flag_on_a_lite_side_is_refused(tmp_path, capsys):
    src = small_lite(tmp_path / "src.db")
    target = tmp_path / "t.db"
    for flag in ("--source-db", "--target-db"):
        code, _, err = run(capsys, "migrate", src, str(target), flag, "team")
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert flag in err and "Milvus Lite" in err and "no databases" in err, err
    assert not target.exists()


def test_one_server_by_any_spelling_is_the_same_store(milvus_server, tmp_path, capsys):
    """localhost, 127.0.0.1 and an upper-case host name reach one server, and db '' is its
    database 'default': the same store, found by the marker accelkit keeps in SRC's database,
    not by the URI's text. Two databases of one server are two stores, and a copy made through
    one spelling resumes through another."""
    from pymilvus import MilvusClient

    from accelkit.images.store import StoreConfig, VectorStore

    port = milvus_server.uri.rsplit(":", 1)[1]
    spellings = [f"http://127.0.0.1:{port}", f"http://localhost:{port}", f"http://LocalHost:{port}"]
    one, two = "migrate_same_a", "migrate_same_b"
    client = MilvusClient(uri=milvus_server.uri, timeout=30)
    for database in (one, two):
        if database not in client.list_databases():
            client.create_database(database)
    client.close()
    settings = {"uri": milvus_server.uri, "db_name": one, "timeout": 60}
    with VectorStore(StoreConfig(**settings)) as store:
        if not store.has_collection("pics"):
            store.create_collection("pics", 8)
            store.upsert("pics", [f"i{k}" for k in range(5)], np.eye(5, 8, dtype=np.float32))
    before = everything(settings, "pics")
    for a in spellings:
        for b in spellings:
            code, _, err = run(capsys, "migrate", a, b, "--source-db", one, "--target-db", one)
            assert code == 2 and len(err.strip().splitlines()) == 1, (a, b, err)
            assert "SRC and DST are the same store" in err and "marker" in err, (a, b, err)
            assert "delete" not in err, (a, b, err)
    for dbs in (["--target-db", "default"], ["--source-db", "default"]):
        code, _, err = run(capsys, "migrate", spellings[0], spellings[1], *dbs)
        assert code == 2 and "SRC and DST are the same store" in err, (dbs, err)
    assert same_items(everything(settings, "pics"), before)
    # two databases are two stores; the copy's record names its source by the marker
    code, out, err = run(capsys, "migrate", spellings[0], spellings[0], "--source-db", one, "--target-db", two, "-c", "pics", "--restart", "--json")  # fmt: skip
    assert code == 0 and result_of(out)["collections"][0]["copied"] == 5, err
    code, out, err = run(capsys, "migrate", spellings[2], spellings[1], "--source-db", one, "--target-db", two, "-c", "pics", "--json")  # fmt: skip
    assert code == 0, err
    (pics,) = result_of(out)["collections"]
    assert pics["copied"] == 0 and pics["verified"]
    assert same_items(everything({**settings, "db_name": two}, "pics"), before)


def test_a_stopped_copy_names_the_stage_it_stopped_in(tmp_path, capsys, monkeypatch):
    """Interrupted (SIGINT) or failed in the copy or in the verification: the one line says
    which, with the command that goes on."""
    from accelkit.images.store import StoreError
    from accelkit.runtime.interrupts import Interrupted

    src = small_lite(tmp_path / "src.db", count=6)
    cases = [
        ("upsert", Interrupted(signal.SIGINT), 130, "interrupted (SIGINT)", "copy"),
        ("verify", Interrupted(signal.SIGINT), 130, "interrupted (SIGINT)", "verification"),
        ("upsert", StoreError("upserting into 'pics' failed: gone"), 2, "error: ", "copy"),
        ("verify", StoreError("reading 'pics' failed: gone"), 2, "error: ", "verification"),
    ]
    for k, (where, failure, exit_code, start, stage) in enumerate(cases):
        target = tmp_path / f"t{k}.db"
        args = (src, str(target), "--batch-size", "2", "--no-progress")
        code, line = stopped_line(capsys, monkeypatch, where, failure, *args)
        assert code == exit_code and line.startswith(start), (where, line)
        assert f"stopped in the {stage}" in line, (where, line)
        assert f"accelkit images migrate {src} {target}" in line and "again to" in line, line
        if stage == "copy":
            assert "2 of 6 items of 'pics'" in line, line
        if isinstance(failure, StoreError):
            assert str(failure) in line, line
        code, out, err = run(capsys, "migrate", src, str(target), "--json")  # it goes on and ends
        assert code == 0 and result_of(out)["collections"][0]["verified"], err
        assert same_items(
            everything({"uri": str(target)}, "pics"), everything({"uri": src}, "pics")
        )


def test_a_source_that_cannot_be_marked(milvus_server, tmp_path, capsys, monkeypatch):
    """Where SRC's database may not be written (a read-only token: here, creating the marker
    there fails), DST is marked and SRC read for it: the same database is still found, and a
    Lite DST is still known to be another store."""
    from pymilvus import MilvusClient

    from accelkit.images.store import StoreConfig, StoreError, VectorStore
    from accelkit.images.store.records import MARKER

    database, port = "migrate_unmarked", milvus_server.uri.rsplit(":", 1)[1]
    client = MilvusClient(uri=milvus_server.uri, timeout=30)
    if database not in client.list_databases():
        client.create_database(database)
    client.close()
    settings = {"uri": milvus_server.uri, "db_name": database, "timeout": 60}
    with VectorStore(StoreConfig(**settings)) as store:
        if store.has_collection(MARKER):
            store._client.drop_collection(MARKER)
        if not store.has_collection("pics"):
            store.create_collection("pics", 8)
            store.upsert("pics", [f"i{k}" for k in range(5)], np.eye(5, 8, dtype=np.float32))
    marker = VectorStore.store_marker

    def read_only_127(self, create=False):
        if create and "127.0.0.1" in self.config.uri:
            raise StoreError("marking the store failed: permission denied")
        return marker(self, create)

    monkeypatch.setattr(VectorStore, "store_marker", read_only_127)
    source = f"http://127.0.0.1:{port}"
    code, _, err = run(capsys, "migrate", source, f"http://localhost:{port}", "--source-db", database, "--target-db", database)  # fmt: skip
    assert code == 2 and "the same store" in err and "marker" in err, err
    target = tmp_path / "t.db"
    with VectorStore(StoreConfig(uri=str(target))) as store:
        store.create_collection("pics", 8)  # not a copy of anything
    code, _, err = run(capsys, "migrate", source, str(target), "--source-db", database)
    assert code == 2 and "came from no migration" in err and "another DST" in err, err
    assert "delete" not in err, err
    code, out, err = run(capsys, "migrate", source, str(tmp_path / "u.db"), "--source-db", database, "--json")  # fmt: skip
    assert code == 0 and result_of(out)["collections"][0]["copied"] == 5, err


class Killed(BaseException):
    """A SIGKILL as the process's own code meets it: nothing after it runs (no handler, no
    AccelkitError)."""


def test_a_copy_killed_just_after_an_upsert_holds_no_item_without_its_thumbnail(
    source, tmp_path, monkeypatch
):
    """Found by benchmarks/reliability/faults.py (images-migrate-lite, killed just after the first batch's
    upsert): the batch's items were in DST, searchable, without their thumbnails until the copy
    was resumed. The thumbnails are now copied first (one of an item DST does not hold is never
    served), as `images insert` keeps them first."""
    from accelkit.images.store import StoreConfig, VectorStore
    from accelkit.images.store.migrate import migrate
    from accelkit.images.store.thumbnails import ThumbnailStore

    upsert = VectorStore.upsert

    def killed_after(self, *args, **kwargs):
        upsert(self, *args, **kwargs)
        raise Killed

    monkeypatch.setattr(VectorStore, "upsert", killed_after)
    target = tmp_path / "t.db"
    with pytest.raises(Killed):
        migrate(StoreConfig(uri=source["database"]), StoreConfig(uri=str(target)), ["pics"], batch_size=2)  # fmt: skip
    monkeypatch.undo()
    held = sorted(everything({"uri": str(target)}, "pics"))
    assert len(held) == 2
    kept = ThumbnailStore(f"{target}.thumbnails.sqlite").get_many("pics", held)
    theirs = ThumbnailStore(source["database"] + ".thumbnails.sqlite").get_many("pics", held)
    assert sorted(kept) == held and kept == theirs


def test_a_copy_killed_between_its_collection_and_its_index_is_finished_by_the_same_command(
    source, milvus_server, capsys, monkeypatch
):
    """Found by benchmarks/reliability/faults.py (images-migrate-lite-server, killed just after the server's
    create_collection): DST's collection was left without its index (a kill runs no `except`: the
    all-or-nothing drop never came), and the same command then failed for good ("loading
    collection 'pics' failed: index not found"), the copy neither resumed nor finished. Now a
    resumed copy gives its collection the index it was created with first."""
    from pymilvus import MilvusClient

    from accelkit.images.store import StoreConfig
    from accelkit.images.store.migrate import migrate
    from tests.support.milvus_server import server_database

    db = server_database(milvus_server, "migrate_killed")

    def killed(self, *args, **kwargs):
        raise Killed

    monkeypatch.setattr(MilvusClient, "create_index", killed)
    monkeypatch.setattr(MilvusClient, "drop_collection", killed)  # the kill: no drop after it
    target = StoreConfig(uri=milvus_server.uri, db_name=db, timeout=60)
    with pytest.raises(Killed):
        migrate(StoreConfig(uri=source["database"]), target, ["pics"], batch_size=2)
    monkeypatch.undo()
    args = ("migrate", source["database"], milvus_server.uri, "--target-db", db, "-c", "pics", "--batch-size", "2", "--json")  # fmt: skip
    code, out, err = run(capsys, *args)
    assert code == 0, err
    (pics,) = result_of(out)["collections"]
    assert pics["verified"] and pics["index_type"] == "FLAT", pics
    assert same_items(
        everything({"uri": milvus_server.uri, "db_name": db}, "pics"),
        everything({"uri": source["database"]}, "pics"),
    )
