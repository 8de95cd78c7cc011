"""The crash harness (harness.py: kill a command, check what it left; cases.py: the commands and
their starting states; store.py: what a store holds; inject.py: kill points at file-system writes;
process.py: the child processes). benchmarks/reliability/faults.py runs all of it; the tests run
parts, and these helpers: a command killed (SIGKILL) just before or after one of its file-system
writes, found by name in a counting run."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.crash.process import accelkit, injected, run


def write_events(args: list[str], cwd: Path, log: Path) -> list[str]:
    """The write events of `accelkit ARGS` run to the end in `cwd` (one `kind path` a line)."""
    done = run(injected(accelkit(*args)), cwd, env={"ACCELKIT_FAULTS_EVENTS": str(log)})
    assert done.code == 0, done.output[-3000:]
    return log.read_text().splitlines()


def killed_at(args: list[str], cwd: Path, number: int, after: bool = True):
    """`accelkit ARGS` in `cwd`, SIGKILLed by itself just after (or before) its write event
    `number` (1-based, as `write_events` lists them)."""
    variable = "ACCELKIT_FAULTS_KILL_AFTER" if after else "ACCELKIT_FAULTS_KILL_AT"
    done = run(injected(accelkit(*args)), cwd, env={variable: str(number)})
    assert done.code == -9, f"not killed (exit {done.code}): {done.output[-3000:]}"
    return done


def event_number(events: list[str], pattern: str, nth: int = 1) -> int:
    """The 1-based number of the `nth` event matching `pattern`."""
    matching = [i + 1 for i, line in enumerate(events) if re.search(pattern, line)]
    assert len(matching) >= nth, f"no event {pattern!r} among:\n" + "\n".join(events)
    return matching[nth - 1]
