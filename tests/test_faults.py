"""Crash consistency, the short version of benchmarks/reliability/faults.py: every command that
writes runs as a real subprocess and is killed outright (SIGKILL) at 3 of its writes, spread over
them (tests/support/crash/inject.py), and after each kill every file is the old one or
the new one, every store holds each item at most once and whole, every acknowledged item is there,
and the command run again leaves what a clean run leaves (DESIGN.md: "Crashes are part of the
contract"). The benchmark does 20 kills per command (docs/reliability.md)."""

import pytest

from tests.support.crash.cases import cases
from tests.support.crash.harness import measure

KILLS = 3
CASES = {case.name: case for case in cases()}
# one case per command, kills at writes only; the benchmark runs stats-v21 and both inserts, and
# tests/images/test_faults.py kills `images insert` at each of its store writes that found a bug
SHORT = ["stats-v30", "stats-check-fix", "images-delete", "quant-apply", "bench"]


@pytest.mark.parametrize("name", SHORT)
def test_a_killed_command_leaves_the_old_state_or_the_new_and_a_rerun_finishes_it(name, tmp_path):
    result = measure(
        CASES[name], KILLS, tmp_path / name, log=lambda line: None, clean=1, time_share=0
    )
    failed = [t for t in result["trials"] if t["problems"]]
    assert not failed, "\n".join(f"{t['kill']}: {t['problems']}" for t in failed)
    assert sum(t["killed"] for t in result["trials"]) >= 1, result["trials"]
