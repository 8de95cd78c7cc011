"""The crash harness (harness.py: kill a command, check what it left; cases.py: the commands and
their starting states; store.py: what a store holds; inject.py: kill points at file-system writes;
process.py: the child processes). benchmarks/reliability/faults.py runs all of it; the tests run
parts, and these helpers: a command killed (SIGKILL) just before or after one of its file-system
writes, found by what it writes (a pattern of its `kind path` line)."""

from __future__ import annotations

from pathlib import Path

from tests.support.crash.process import accelkit, injected, run


def write_events(args: list[str], cwd: Path, log: Path) -> list[str]:
    """The write events of `accelkit ARGS` run to the end in `cwd` (one `kind path` a line)."""
    done = run(injected(accelkit(*args)), cwd, env={"ACCELKIT_FAULTS_EVENTS": str(log)})
    assert done.code == 0, done.output[-3000:]
    return log.read_text().splitlines()


def killed_at(args: list[str], cwd: Path, pattern: str, nth: int = 1, after: bool = True):
    """`accelkit ARGS` in `cwd`, SIGKILLed by itself just after (or before) its `nth` write event
    whose line (`kind path`, as `write_events` lists them) matches `pattern`: found by what it
    writes, not by its place among the others (a cold cache adds writes to a counting run)."""
    variable = "ACCELKIT_FAULTS_KILL_AFTER" if after else "ACCELKIT_FAULTS_KILL_AT"
    env = {variable: str(nth), "ACCELKIT_FAULTS_KILL_MATCH": pattern}
    done = run(injected(accelkit(*args)), cwd, env=env)
    assert done.code == -9, f"not killed (exit {done.code}): {done.output[-3000:]}"
    return done
