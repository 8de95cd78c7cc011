"""`accelkit stats check` in a terminal, as every long command is tested (tests/runtime/
test_interrupts.py, test_terminal.py): never silent, Ctrl-C and SIGTERM mid-read stop it with one
line and exit 130 / 143, and a `--fix` stopped while it writes leaves the dataset as it was."""

import shutil
import signal
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from accelkit.runtime.interrupts import Interrupted
from tests.support.cli import run_cli
from tests.support.terminal import (
    accelkit,
    assert_interrupted,
    assert_never_silent,
    run_in_terminal,
)

# one xdist worker runs this module (pyproject: --dist loadgroup), so its stale dataset is made once
pytestmark = pytest.mark.xdist_group("stats-check-terminal")

FIXTURES = Path(__file__).parents[1] / "fixtures"


def snapshot(root: Path) -> dict:
    """Every file of the dataset's meta/ folder (backups included) and its bytes."""
    return {p.relative_to(root): p.read_bytes() for p in (root / "meta").rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def stale_dataset(tmp_path_factory):
    """1M rows of LeRobot v3.0 with exact statistics written by `--per-episode --write-into`,
    then every episode's stored action median moved: check recomputes, then re-reads every
    episode's actions to look for the cause (there is none: "no known cause")."""
    root = tmp_path_factory.mktemp("check-terminal") / "ds"
    subprocess.run(
        [
            *accelkit("-q", "sample-dataset", str(root)),
            *("--episodes", "200", "--frames", "5000", "--layout", "v3.0"),
        ],
        check=True,
        timeout=600,
    )
    subprocess.run(
        [
            *accelkit("-q", "stats", str(root), "--format", "lerobot", "--per-episode"),
            *("--write-into", str(root), "--no-progress"),
        ],
        check=True,
        timeout=600,
    )
    shutil.rmtree(root / "meta" / ".accelkit-backup")
    for path in (root / "meta" / "episodes").rglob("*.parquet"):
        table = pq.read_table(path)
        rows = table.column("stats/action/q50").to_pylist()
        moved = pa.array([[v + 1.0 for v in row] for row in rows], table.schema.field(
            "stats/action/q50"
        ).type)  # fmt: skip
        index = table.schema.get_field_index("stats/action/q50")
        pq.write_table(table.set_column(index, table.schema.field(index), moved), path)
    return root


def test_check_is_never_silent_while_it_computes_and_recomputes_causes(stale_dataset):
    run = run_in_terminal(accelkit("stats", "check", str(stale_dataset)), timeout=900)
    assert run.code == 3, run.output[-3000:]
    assert "recomputing the stored numbers' causes" in run.output
    assert "no known cause" in run.output
    assert_never_silent(run)


@pytest.mark.parametrize(
    "when, signum",
    [
        ("pass 1", signal.SIGINT),
        ("recomputing the stored numbers' causes", signal.SIGINT),
        ("recomputing the stored numbers' causes", signal.SIGTERM),
    ],
)
def test_check_stops_mid_read_with_one_line(stale_dataset, when, signum):
    before = snapshot(stale_dataset)
    run = run_in_terminal(
        accelkit("stats", "check", str(stale_dataset)),
        signal_when=lambda text, seconds: when in text,
        signum=signum,
        timeout=600,
    )
    assert_interrupted(run, signum)
    assert snapshot(stale_dataset) == before


@pytest.mark.parametrize("layout", ["lerobot_v30", "lerobot_v21"])
@pytest.mark.parametrize("stop_at", ["stats.json", "norm_stats.json"])
def test_fix_stopped_while_writing_leaves_the_dataset_as_it_was(
    layout, stop_at, tmp_path, capsys, monkeypatch
):
    """The signal arrives after the per-episode files were replaced (and, for `norm_stats.json`,
    after stats.json too): SIGINT raises `Interrupted` in the main thread
    (runtime/interrupts.py), raised here at that moment. Every file gets its bytes back, the
    backups made on the way are removed, and the command says it was interrupted."""
    from accelkit.stats.formats import stats_files as formats

    root = Path(shutil.copytree(FIXTURES / layout, tmp_path / "ds"))
    norm = tmp_path / "norm_stats.json"
    code, _, err = run_cli(["stats", str(root), "-o", str(norm), "--no-progress"], capsys)
    assert code == 0, err
    before, norm_before = snapshot(root), norm.read_bytes()
    real = formats.write_stats

    def stopped(path, *args, **kwargs):
        if Path(path).name == stop_at:
            raise Interrupted(signal.SIGINT)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(formats, "write_stats", stopped)
    code, _, err = run_cli(
        ["stats", "check", str(root), "--stats", str(norm), "--fix", "--no-progress"], capsys
    )
    assert code == 130 and "interrupted (SIGINT)" in err
    assert snapshot(root) == before
    assert norm.read_bytes() == norm_before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ds",
        "norm_stats.json",
        "norm_stats.run.json",
    ]
