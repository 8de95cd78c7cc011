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


# What a command imports, read in a fresh process after it ran (`accelkit stats --help` once
# paid for the images config, rich and the installed-package metadata of every capability).
_IMPORTED = """
import sys
from accelkit.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("\\nIMPORTED", " ".join(sorted(sys.modules)))
"""
NOT_FOR_STATS = ("accelkit.images", "accelkit.quant", "accelkit.bench", "jax", "torch")


def imported_by(args: list[str]) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTED, *args], capture_output=True, text=True, check=True
    )
    return set(done.stdout.rsplit("IMPORTED", 1)[1].split())


def under(modules: set[str], prefixes) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


def test_stats_help_imports_only_what_it_shows():
    """Its options are the settings model's (typer, pydantic); no other capability, no rich (the
    progress bars), no numpy/pyarrow (nothing is read), no package metadata (the version)."""
    modules = imported_by(["stats", "--help"])
    assert "accelkit.stats.cli" in modules and "accelkit.stats.settings" in modules
    heavy = (*NOT_FOR_STATS, "rich", "numpy", "pyarrow", "accelkit.stats.computation")
    assert under(modules, heavy) == []


def test_stats_compute_imports_no_other_capability(tmp_path):
    from accelkit.stats.formats.synthetic import write_sample_dataset

    dataset = write_sample_dataset(tmp_path / "sample", episodes=3, frames_per_episode=50)
    out = tmp_path / "norm_stats.json"
    modules = imported_by(["stats", str(dataset), "--no-progress", "-o", str(out)])
    assert out.is_file() and "accelkit.stats.computation.api" in modules
    assert under(modules, NOT_FOR_STATS) == []


def test_a_command_mounts_its_capability_alone_and_shows_the_same():
    """`accelkit COMMAND` mounts COMMAND's capability only (`cli.COMMANDS` names what each one
    adds); the help it prints is the help the whole root prints."""
    import typer
    from typer.testing import CliRunner

    from accelkit import cli

    def shown(group, args):
        return CliRunner().invoke(group, args, prog_name="accelkit").output

    whole = cli.root_group()
    for capability, commands in cli.COMMANDS.items():
        alone = cli.root_group((capability,))
        assert set(typer.main.get_command(alone).commands) == {"devices", *commands}
        for name in commands:
            assert cli.capabilities_for(["-q", name, "x"]) == (capability,)
            help_text = shown(alone, [name, "--help"])
            assert help_text == shown(whole, [name, "--help"])
            assert f"Usage: accelkit {name}" in help_text
    every = {"devices", *(n for c in cli.COMMANDS.values() for n in c)}
    assert set(typer.main.get_command(whole).commands) == every
    for args in (["--help", "stats"], ["devices"], ["stat"], []):
        assert cli.capabilities_for(args) == cli.CAPABILITIES
