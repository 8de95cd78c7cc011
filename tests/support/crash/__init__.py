"""The crash harness (benchmarks/faults.py) from the tests: its modules imported by path, and a
command killed (SIGKILL) just before or after one of its file-system writes, found by name in a
counting run (benchmarks/faults_inject.py)."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def harness():
    """benchmarks/faults.py as a module (its siblings importable by name, as when it runs)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module("faults")


def write_events(args: list[str], cwd: Path, log: Path) -> list[str]:
    """The write events of `accelkit ARGS` run to the end in `cwd` (one `kind path` a line)."""
    faults = harness()
    done = faults.run(
        faults.injected(faults.accelkit(*args)), cwd, env={"ACCELKIT_FAULTS_EVENTS": str(log)}
    )
    assert done.code == 0, done.output[-3000:]
    return log.read_text().splitlines()


def killed_at(args: list[str], cwd: Path, number: int, after: bool = True):
    """`accelkit ARGS` in `cwd`, SIGKILLed by itself just after (or before) its write event
    `number` (1-based, as `write_events` lists them)."""
    faults = harness()
    variable = "ACCELKIT_FAULTS_KILL_AFTER" if after else "ACCELKIT_FAULTS_KILL_AT"
    done = faults.run(faults.injected(faults.accelkit(*args)), cwd, env={variable: str(number)})
    assert done.code == -9, f"not killed (exit {done.code}): {done.output[-3000:]}"
    return done


def event_number(events: list[str], pattern: str, nth: int = 1) -> int:
    """The 1-based number of the `nth` event matching `pattern`."""
    matching = [i + 1 for i, line in enumerate(events) if re.search(pattern, line)]
    assert len(matching) >= nth, f"no event {pattern!r} among:\n" + "\n".join(events)
    return matching[nth - 1]
