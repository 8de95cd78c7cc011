"""`accelkit stats diff --dataset` in a terminal, as every long command is tested
(tests/stats/checking/test_terminal.py): never silent while it recomputes, and Ctrl-C or SIGTERM
in any of its recomputations stops it with one line and exit 130 / 143, writing nothing."""

import json
import signal
import subprocess

import pytest

from tests.support.terminal import (
    accelkit,
    assert_interrupted,
    assert_never_silent,
    run_in_terminal,
)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """1M rows of LeRobot v3.0, its exact statistics (A) and the same with every action median
    moved by one (B): nothing gives B's medians back, so every recomputation runs."""
    folder = tmp_path_factory.mktemp("diff-terminal")
    root = folder / "ds"
    subprocess.run(
        [
            *accelkit("-q", "sample-dataset", str(root)),
            *("--episodes", "200", "--frames", "5000", "--layout", "v3.0"),
        ],
        check=True,
        timeout=600,
    )
    a = folder / "stats.json"
    subprocess.run(
        [
            *accelkit("-q", "stats", str(root), "--format", "lerobot", "-o", str(a)),
            *("--images", "none", "--no-progress"),
        ],
        check=True,
        timeout=600,
    )
    moved = json.loads(a.read_text())
    moved["action"]["q50"] = [v + 1.0 for v in moved["action"]["q50"]]
    b = folder / "moved.json"
    b.write_text(json.dumps(moved))
    return root, a, b


def before(folder) -> dict:
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_diff_is_never_silent_while_it_recomputes(files):
    root, a, b = files
    run = run_in_terminal(accelkit("stats", "diff", str(a), str(b), "--dataset", str(root)))
    assert run.code == 3, run.output[-3000:]
    assert "recomputing LeRobot's per-episode arithmetic" in run.output
    assert "no known cause" in run.output
    assert_never_silent(run)


@pytest.mark.parametrize(
    "when, signum",
    [
        ("pass 1", signal.SIGINT),
        ("recomputing LeRobot's per-episode arithmetic", signal.SIGINT),
        ("recomputing LeRobot's per-episode arithmetic", signal.SIGTERM),
    ],
)
def test_diff_stops_mid_recomputation_with_one_line(files, when, signum):
    root, a, b = files
    kept = before(a.parent)
    run = run_in_terminal(
        accelkit("stats", "diff", str(a), str(b), "--dataset", str(root)),
        signal_when=lambda text, seconds: when in text,
        signum=signum,
        timeout=600,
    )
    assert_interrupted(run, signum)
    assert before(a.parent) == kept
