"""`accelkit images migrate` run again on a finished copy, Milvus Lite to Milvus
Lite through the command: what DST gained is kept and said, never dropped by advice; `--restart`
refuses to drop a complete copy or DST's own items unless `--force`; a stopped rerun says what
this run did. No server: these run in the Lite 3 pass too (tests/images/store/test_engines.py)."""

import os
import signal

import pytest

from tests.support.cli import result_of
from tests.support.migrate import add_items, everything, run, same_items, small_lite, stopped_line


def test_a_finished_copy_run_again_keeps_what_dst_gained(tmp_path, capsys):
    """Migrate, insert photos into DST, migrate again: it said "the source changed
    during the copy, or DST was written to: run again with --restart" (exit 3), and --restart
    then dropped the new photos. Now the rerun says the copy was finished and verified earlier,
    that DST holds items SRC lacks, and that nothing needs doing (exit 0); --restart refuses to
    drop the copy unless forced, naming what it would lose."""
    src, dst = small_lite(tmp_path / "src.db"), str(tmp_path / "dst.db")
    assert run(capsys, "migrate", src, dst, "--no-progress")[0] == 0
    code, out, err = run(capsys, "migrate", src, dst, "--no-progress")  # unchanged: done
    assert code == 0 and "nothing to do" in out and "finished and verified on" in out, out + err
    add_items(dst, ["new-1", "new-2"])
    code, out, err = run(capsys, "migrate", src, dst, "--no-progress")
    (line,) = [x for x in out.splitlines() if "SRC lacks" in x]
    assert code == 0, err
    assert "finished and verified on" in line and "nothing needs doing" in line, line
    assert "DST now holds 2 items SRC lacks" in line and "--restart" not in out + err, line
    add_items(src, ["from-src"])  # SRC gained one too: copied, DST's own kept
    code, out, err = run(capsys, "migrate", src, dst, "--no-progress", "--json")
    (copy,) = result_of(out)["collections"]
    assert code == 0 and copy["copied"] == 1 and copy["extra"] == 2 and copy["verified"], err
    held = everything({"uri": dst}, "pics")
    assert set(held) == set(everything({"uri": src}, "pics")) | {"new-1", "new-2"}
    for args in (["--restart"], ["--force"]):
        code, _, err = run(capsys, "migrate", src, dst, "--no-progress", *args)
        assert code == 2 and len(err.strip().splitlines()) == 1, err
    code, _, err = run(capsys, "migrate", src, dst, "--no-progress", "--restart")
    assert "8 items, 2 of them SRC lacks" in err and "--force" in err and "complete" in err, err
    assert set(everything({"uri": dst}, "pics")) == set(held)
    code, out, err = run(capsys, "migrate", src, dst, "--restart", "--force", "--json")
    assert code == 0 and result_of(out)["collections"][0]["copied"] == 6, err
    assert same_items(everything({"uri": dst}, "pics"), everything({"uri": src}, "pics"))


def test_restart_refuses_to_drop_a_complete_copy(tmp_path, capsys):
    """A complete, verified copy is not dropped by --restart alone (nothing needs restarting),
    nor an unfinished one holding items SRC lacks; --restart on an unfinished copy of SRC's items
    only still starts over."""
    from accelkit.images.store import StoreConfig, VectorStore
    from accelkit.images.store.records import PROP_ORIGIN

    src, dst = small_lite(tmp_path / "src.db"), str(tmp_path / "dst.db")
    assert run(capsys, "migrate", src, dst, "--no-progress")[0] == 0
    code, _, err = run(capsys, "migrate", src, dst, "--no-progress", "--restart")
    assert code == 2 and "complete" in err and "5 items" in err and "--force" in err, err
    with VectorStore(StoreConfig(uri=dst)) as store:  # as if stopped after 2 items
        origin = store.recorded("pics", PROP_ORIGIN)
        store.record("pics", {PROP_ORIGIN: {**origin, "after": "i1", "copied": 2, "complete": False}})  # fmt: skip
    add_items(dst, ["written-to-dst"])
    code, _, err = run(capsys, "migrate", src, dst, "--no-progress", "--restart")
    assert code == 2 and "1 item" in err and "SRC lacks" in err and "--force" in err, err
    assert "written-to-dst" in everything({"uri": dst}, "pics")
    code, out, err = run(capsys, "migrate", src, dst, "--json")  # goes on, keeping it
    (copy,) = result_of(out)["collections"]
    assert code == 0 and copy["verified"] and copy["extra"] == 1, err
    with VectorStore(StoreConfig(uri=dst)) as store:
        store.delete("pics", ["written-to-dst"])
        origin = store.recorded("pics", PROP_ORIGIN)
        store.record("pics", {PROP_ORIGIN: {**origin, "after": "i1", "copied": 2, "complete": False}})  # fmt: skip
    code, out, err = run(capsys, "migrate", src, dst, "--restart", "--json")
    assert code == 0 and result_of(out)["collections"][0]["copied"] == 5, err


def test_a_stopped_rerun_says_what_this_run_did(tmp_path, capsys, monkeypatch):
    """The verification of a finished copy run again stops: its line says this run copied
    nothing and when the copy was verified, not "all 5 items … copied"."""
    from accelkit.images.store import StoreError

    src, dst = small_lite(tmp_path / "src.db"), str(tmp_path / "dst.db")
    assert run(capsys, "migrate", src, dst, "--no-progress")[0] == 0
    failure = StoreError("reading 'pics' failed: gone")
    code, line = stopped_line(capsys, monkeypatch, "verify", failure, src, dst, "--no-progress")
    assert code == 2 and "stopped in the verification" in line, line
    assert "copied 0 items of 'pics' in this run; the copy was verified on" in line, line
    assert "--restart" not in line, line


def _edit(path: str, item: str, name: str = "pics") -> None:
    """Write item `item` again with another vector and metadata (a re-insert with new
    metadata keeps a photo's content-hash id)."""
    import numpy as np

    from accelkit.images.store import StoreConfig, VectorStore

    with VectorStore(StoreConfig(uri=path)) as store:
        store.upsert(name, [item], np.full((1, 8), 7.0, np.float32), [{"edited": path}])


def _restart_refused(capsys, src, dst, count: int) -> None:
    code, _, err = run(capsys, "migrate", src, dst, "--no-progress", "--restart")
    assert code == 2 and f"{count} item" in err and "differ from SRC's" in err, err
    assert "'i0'" in err and "--force" in err, err


def test_an_item_edited_in_dst_after_an_interrupted_copy_is_never_dropped(
    tmp_path, capsys, monkeypatch
):
    """Findings 56 #1: a copy stopped midway, an already-copied item edited in DST, migrate
    again: it said "item … differs from SRC; run again with --restart", and --restart (no
    --force needed) dropped the edit. Now every item is compared by content: the rerun names the
    item, exit 3, advises no --restart (and no plain rerun), and --restart refuses it as a loss;
    --replace-changed takes SRC's version, saying it replaced one DST item."""
    from accelkit.images.store import StoreError

    src, dst = small_lite(tmp_path / "src.db"), str(tmp_path / "dst.db")
    failure = StoreError("upserting into 'pics' failed: gone")
    code, _ = stopped_line(capsys, monkeypatch, "upsert", failure, src, dst, "--batch-size", "2", "--no-progress")  # fmt: skip
    assert code == 2 and set(everything({"uri": dst}, "pics")) == {"i0", "i1"}
    _edit(dst, "i0")
    edited = everything({"uri": dst}, "pics")["i0"]
    code, _, err = run(capsys, "migrate", src, dst, "--batch-size", "2", "--no-progress")
    assert code == 3 and "1 item of SRC's 5 differ in DST" in err and "'i0'" in err, err
    assert "--restart" not in err and "again to resume" not in err, err
    assert "--replace-changed" in err and "replaces those 1 item in DST" in err, err
    _restart_refused(capsys, src, dst, 1)
    assert everything({"uri": dst}, "pics")["i0"][1] == edited[1] == {"edited": dst}
    code, out, err = run(capsys, "migrate", src, dst, "--replace-changed", "--json")
    (copy,) = result_of(out)["collections"]
    assert code == 0 and copy["verified"] and copy["replaced"] == 1, err
    assert same_items(everything({"uri": dst}, "pics"), everything({"uri": src}, "pics"))


def test_a_finished_copy_with_an_item_changed_on_either_side(tmp_path, capsys):
    """Findings 56 #2 and #3: an item written again in DST after a finished copy gave "run
    again to resume" forever, and --restart's refusal counted "0 of them SRC lacks" so --force
    looked safe; an item replaced in SRC gave "verified again", exit 0, with DST keeping the old
    one (only a sample was read back). Now both are found (every item's vector bytes and
    metadata compared), exit 3, nothing overwritten, and the way on keeps or replaces them."""
    for side in ("dst", "src"):
        src, dst = small_lite(tmp_path / f"src-{side}.db"), str(tmp_path / f"dst-{side}.db")
        assert run(capsys, "migrate", src, dst, "--no-progress")[0] == 0
        _edit(dst if side == "dst" else src, "i0")
        before = everything({"uri": dst}, "pics")
        for _ in range(2):  # the same answer each time: a plain rerun cannot help
            code, out, err = run(capsys, "migrate", src, dst, "--no-progress")
            assert code == 3 and "1 item of SRC's 5 differ in DST" in err, (side, out + err)
            assert "verified again" not in out + err and "again to resume" not in err, err
            assert "--replace-changed" in err and "--restart" not in err, err
        _restart_refused(capsys, src, dst, 1)
        assert same_items(everything({"uri": dst}, "pics"), before)
        code, out, err = run(capsys, "migrate", src, dst, "--replace-changed", "--no-progress")
        assert code == 0 and "replaced 1 item DST held otherwise than SRC" in out, out + err
        assert same_items(everything({"uri": dst}, "pics"), everything({"uri": src}, "pics"))
        code, out, err = run(capsys, "migrate", src, dst, "--no-progress")
        assert code == 0 and "nothing to do, verified again" in out and "all 5 equal" in out, out


def test_a_dst_collection_from_no_migration_is_never_advised_deleted(tmp_path, capsys):
    """Findings 56 #4: "delete it from DST dst.db" for a collection holding the user's own
    photos. Now the refusal says how many items it holds and only ways that keep them."""
    src, dst = small_lite(tmp_path / "src.db"), small_lite(tmp_path / "dst.db", count=4)
    code, _, err = run(capsys, "migrate", src, dst, "--no-progress")
    assert code == 2 and "came from no migration" in err and "4 items" in err, err
    assert "delete" not in err and "another DST" in err and "--collection" in err, err
    assert len(everything({"uri": dst}, "pics")) == 4


def test_an_interrupted_top_up_says_what_it_wrote(tmp_path, capsys, monkeypatch):
    """Findings 56 #7: stopped while copying what SRC gained since a finished copy, it said
    "nothing written" with thousands written. Now the line counts them."""
    from accelkit.runtime.interrupts import Interrupted

    src, dst = small_lite(tmp_path / "src.db"), str(tmp_path / "dst.db")
    assert run(capsys, "migrate", src, dst, "--no-progress")[0] == 0
    add_items(src, [f"new-{k}" for k in range(6)])
    args = (src, dst, "--batch-size", "2", "--no-progress")
    code, line = stopped_line(capsys, monkeypatch, "upsert", Interrupted(signal.SIGINT), *args)
    assert code == 130 and "nothing written" not in line, line
    assert "2 of the 6 items of 'pics' DST lacked" in line and "stopped in the copy" in line, line
    assert len(everything({"uri": dst}, "pics")) == 7


def test_another_programs_sqlite_database_is_never_written(tmp_path, capsys):
    """Findings 56 #6: `migrate src.db app.db` (app.db: the user's own SQLite database) exited 0
    with Milvus Lite's tables written into it; under Lite 3 such a file was called "a Milvus Lite
    2.x database" with advice to migrate it. Now every open of a Milvus Lite store (a command's
    store, migrate's SRC and DST) refuses it in one line, exit 2, writing nothing; a new path
    still makes a store."""
    import sqlite3

    from accelkit.errors import InputError
    from accelkit.images.store import StoreConfig, VectorStore

    src = small_lite(tmp_path / "stores" / "src.db")
    app = tmp_path / "app.db"
    with sqlite3.connect(app) as db:
        db.execute("CREATE TABLE contacts (name TEXT)")
        db.execute("INSERT INTO contacts VALUES ('Ada')")
    db.close()
    before, listing = app.read_bytes(), sorted(os.listdir(tmp_path))
    for args in ([src, str(app)], [str(app), str(tmp_path / "stores" / "new.db")]):
        code, _, err = run(capsys, "migrate", *args, "--no-progress")
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "SQLite database of another program (its tables: contacts)" in err, err
        assert "2.x" not in err and "damaged" not in err, err
    with pytest.raises(InputError, match="another program"), VectorStore(StoreConfig(uri=str(app))) as store:  # fmt: skip
        store.list_collections()
    assert app.read_bytes() == before and sorted(os.listdir(tmp_path)) == listing
    assert not (tmp_path / "stores" / "new.db").exists()
    with VectorStore(StoreConfig(uri=str(tmp_path / "fresh.db"))) as store:
        assert store.list_collections() == []


def test_a_held_source_is_refused_with_advice_migrate_can_follow(tmp_path, capsys):
    """Findings 56 #11: migrating from a file a running service holds advised "go through that
    service with --server", an option migrate lacks. Now it advises stopping the holder and the
    command to run then."""
    import subprocess
    import sys
    from pathlib import Path

    src, dst = small_lite(tmp_path / "src.db"), str(tmp_path / "dst.db")
    root = Path(__file__).resolve().parents[3]
    code = (
        "import sys, time\nfrom accelkit.images.store import StoreConfig, VectorStore\n"
        "s = VectorStore(StoreConfig(uri=sys.argv[1])); s.count('pics')\n"
        "print('ready', flush=True); time.sleep(120)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root)])}
    holder = subprocess.Popen(
        [sys.executable, "-c", code, src], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        code, _, err = run(capsys, "migrate", src, dst, "--no-progress")
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert code == 2 and f"process {holder.pid} holds it" in err, err
    assert (
        "--server" not in err and f"stop it, then run `accelkit images migrate {src} {dst}" in err
    ), err
    assert not os.path.exists(dst)


def test_a_resumed_copy_does_not_write_over_what_dst_holds_past_its_mark(
    tmp_path, capsys, monkeypatch
):
    """Findings 56 #1, past the mark: an item DST holds beyond a stopped copy's mark (the batch
    in flight, or written to DST since) with other content than SRC's was written over by the
    resumed copy without a word. Now the rerun refuses before writing, naming it (exit 3);
    --replace-changed takes SRC's."""
    from accelkit.images.store import StoreError

    src, dst = small_lite(tmp_path / "src.db"), str(tmp_path / "dst.db")
    failure = StoreError("upserting into 'pics' failed: gone")
    code, _ = stopped_line(capsys, monkeypatch, "upsert", failure, src, dst, "--batch-size", "2", "--no-progress")  # fmt: skip
    assert code == 2
    _edit(dst, "i3")  # past the mark (i1)
    before = everything({"uri": dst}, "pics")
    code, _, err = run(capsys, "migrate", src, dst, "--batch-size", "2", "--no-progress")
    assert code == 3 and "1 item of SRC's 5 differ in DST" in err and "'i3'" in err, err
    assert "--replace-changed" in err and "--restart" not in err, err
    assert same_items(everything({"uri": dst}, "pics"), before)
    code, out, err = run(capsys, "migrate", src, dst, "--replace-changed", "--json")
    assert code == 0 and result_of(out)["collections"][0]["verified"], err
    assert same_items(everything({"uri": dst}, "pics"), everything({"uri": src}, "pics"))
