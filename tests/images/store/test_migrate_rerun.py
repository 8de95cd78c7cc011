"""`accelkit images migrate` run again on a finished copy (issue 56), Milvus Lite to Milvus
Lite through the command: what DST gained is kept and said, never dropped by advice; `--restart`
refuses to drop a complete copy or DST's own items unless `--force`; a stopped rerun says what
this run did. No server: these run in the Lite 3 pass too (tests/images/store/test_engines.py)."""

from tests.support.cli import result_of
from tests.support.migrate import add_items, everything, run, same_items, small_lite, stopped_line


def test_a_finished_copy_run_again_keeps_what_dst_gained(tmp_path, capsys):
    """Issue 56: migrate, insert photos into DST, migrate again: it said "the source changed
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
