"""`accelkit stats --write-into` and `stats check --fix` killed outright (SIGKILL) at their writes
(the crash harness, benchmarks/reliability/faults.py, runs every writer at 20 kill points; this is the part
that found something, kept as a test)."""

import shutil
import subprocess

from tests.support.crash import killed_at
from tests.support.terminal import accelkit

STATS = ["stats", "ds", "--format", "lerobot", "--per-episode", "--write-into", "ds"]


def sampled(folder, layout="v3.0"):
    folder.mkdir()
    subprocess.run(
        [*accelkit("-q", "sample-dataset", str(folder / "ds")), "--episodes", "6", "--frames", "100",
         "--layout", layout],
        check=True,
        timeout=600,
    )  # fmt: skip
    return folder


def test_a_backup_killed_while_it_is_copied_is_whole_or_a_temporary_file(tmp_path):
    """`--write-into` backs the dataset's files up under meta/.accelkit-backup/STAMP/ before it
    replaces them. A kill just after the backup's file was opened left it empty (shutil.copy2
    writes in place): a backup that is no version of the file it keeps."""
    pristine = sampled(tmp_path / "pristine")
    killed = shutil.copytree(pristine, tmp_path / "killed")
    killed_at(STATS, killed, r"^(open|os\.open) .*\.accelkit-backup/.*file-000\.parquet")
    backups = killed / "ds" / "meta" / ".accelkit-backup"
    kept = [p for p in backups.rglob("*") if p.is_file()]
    for path in kept:
        if path.name.startswith(".") and path.name.endswith(".tmp"):
            continue  # the copy's temporary file, never read as a backup
        source = pristine / "ds" / path.relative_to(next(backups.iterdir()))
        assert path.read_bytes() == source.read_bytes(), f"{path} is not a whole copy of {source}"
    rerun = subprocess.run(
        accelkit(*STATS), cwd=killed, capture_output=True, text=True, timeout=600
    )
    assert rerun.returncode == 0, rerun.stderr[-2000:]


def test_a_norm_stats_backup_killed_while_it_is_copied_is_whole_or_a_temporary_file(tmp_path):
    """`stats check --fix --stats norm_stats.json` keeps the old file as
    `norm_stats.json.<time>.bak` before it rewrites it; a kill just after the copy was opened left
    an empty .bak (shutil.copy2 writes in place)."""
    import json

    pristine = sampled(tmp_path / "pristine")
    subprocess.run(
        [*accelkit("-q", "stats", "ds", "-o", "norm_stats.json"), "--no-progress"],
        cwd=pristine, check=True, timeout=600,
    )  # fmt: skip
    path = pristine / "norm_stats.json"
    stats = json.loads(path.read_text())
    stats["norm_stats"]["actions"]["mean"] = [v + 1 for v in stats["norm_stats"]["actions"]["mean"]]
    path.write_text(json.dumps(stats, indent=2))
    fix = ["stats", "check", "ds", "--stats", "norm_stats.json", "--fix"]
    killed = shutil.copytree(pristine, tmp_path / "killed")
    killed_at(fix, killed, r"^(open|os\.open) .*norm_stats\.json\.[^/]*(bak|tmp)$")
    for copy in killed.glob("norm_stats.json.*.bak"):
        assert copy.read_bytes() == path.read_bytes(), f"{copy} is not a whole copy"
