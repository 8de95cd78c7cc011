"""The root `accelkit` command: version, help without heavy imports, devices."""

import os
import subprocess
import sys
from pathlib import Path

from tests.support.cli import result_of, run_cli


def test_version_help_and_devices_in_a_fresh_process():
    env = {**os.environ, "XLA_FLAGS": ""}
    version = subprocess.run(
        [sys.executable, "-m", "accelkit", "--version"], capture_output=True, text=True, env=env
    )
    assert version.returncode == 0 and version.stdout.startswith("accelkit ")
    helped = subprocess.run(
        [sys.executable, "-m", "accelkit", "--help"], capture_output=True, text=True, env=env
    )
    assert helped.returncode == 0 and "stats" in helped.stdout and "devices" in helped.stdout
    # --help must not pay for heavy imports
    probe = "import sys; from accelkit import cli; print(sorted(m for m in ('jax', 'torch', 'pyarrow') if m in sys.modules))"
    assert (
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, env=env
        ).stdout.strip()
        == "[]"
    )
    devices = subprocess.run(
        [sys.executable, "-m", "accelkit", "devices", "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    info = result_of(devices.stdout)
    assert info["jax"]["chosen"] == "cpu" and info["jax"]["backends"]["cpu"]
    assert info["torch"]["chosen"] == "cpu" or "error" in info["torch"]


def test_a_config_of_named_jobs_without_config_name_lists_them(tmp_path, capsys):
    config = tmp_path / "jobs.yaml"
    config.write_text("job_a:\n  dataset: x\njob_b:\n  dataset: y\n")
    code, _, err = run_cli(["stats", "--config", str(config)], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "holds named entries (job_a, job_b); pick one with --config-name NAME" in err


def test_devices_names_the_extra_when_torch_is_missing(tmp_path):
    """The install hint keeps its `[torch]` (rich read it as markup and ate it)."""
    blocked = tmp_path / "blocked"
    (blocked / "torch").mkdir(parents=True)
    (blocked / "torch" / "__init__.py").write_text("raise ImportError('not installed here')\n")
    # wide enough that the table keeps the hint on one line (at 80 columns its cell wraps, and
    # the cells beside it come between the words)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(blocked), *sys.path]),
        "COLUMNS": "200",
    }
    for args in ([], ["--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "accelkit", "devices", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "pip install 'accelkit[torch]'" in " ".join(done.stdout.split()), done.stdout


def test_docs_state_the_exit_code_the_code_gives():
    """`images health` exits 3 when unhealthy (CheckFailed); every doc that says so agrees."""
    from accelkit.errors import CheckFailed

    root = Path(__file__).resolve().parents[1]
    for doc in (root / "docs").glob("*.md"):
        for line in doc.read_text().splitlines():
            if "images health" in line and "exit" in line and "unhealthy" in line:
                assert f"exit {CheckFailed.exit_code}" in line, (doc.name, line)


def test_a_full_disk_ends_a_command_in_one_line_and_leaves_the_old_output(tmp_path):
    """`accelkit stats DS -o FULL/stats.json` once ended `internal error: OSError: [Errno 28]` (exit
    1, the path not named). Now: exit 2, one line naming the path, the old file kept, nothing
    partial beside it."""
    from tests.support.small_disk import fill, small_disk

    dataset = tmp_path / "ds"
    made = subprocess.run(
        [sys.executable, "-m", "accelkit", "sample-dataset", str(dataset), "--episodes", "2"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    with small_disk(tmp_path / "disk") as disk:
        target = disk / "norm_stats.json"
        target.write_text("{}")
        fill(disk)
        ran = subprocess.run(
            [sys.executable, "-m", "accelkit", "stats", str(dataset), "-o", str(target),
             "--no-progress"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        lines = ran.stderr.strip().splitlines()
        assert ran.returncode == 2, ran.stderr
        assert len(lines) == 1 and lines[0].startswith("error: no space left on device writing")
        assert str(target) in lines[0] and "unchanged" in lines[0]
        assert target.read_text() == "{}"
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "norm_stats.json"]
