"""Progress bars, status lines and time budgets for long work (one helper each, all on stderr)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)

stderr_console = Console(stderr=True)
_quiet = False


def set_quiet(quiet: bool) -> None:
    """`accelkit --quiet`: no progress bars, status lines or notes (errors and results still show)."""
    global _quiet
    _quiet = bool(quiet)


def note(text: str) -> None:
    """One line of progress on stderr (what is running), unless quiet."""
    if not _quiet:
        print(text, file=sys.stderr, flush=True)


@dataclass
class TimeBudget:
    """A wall-clock budget; `None` seconds means unlimited. Checked cooperatively between batches."""

    seconds: float | None
    started: float = field(default_factory=time.perf_counter)

    @classmethod
    def minutes(cls, minutes: float | None) -> TimeBudget:
        return cls(None if minutes is None else float(minutes) * 60.0)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def remaining(self) -> float:
        return float("inf") if self.seconds is None else self.seconds - self.elapsed()

    def expired(self) -> bool:
        return self.remaining() <= 0


class RateColumn(TextColumn):
    """Shows rows per second from the task's completed count and elapsed time."""

    def __init__(self, unit: str = "rows"):
        super().__init__("")
        self.unit = unit

    def render(self, task):
        elapsed = task.elapsed or 0.0
        rate = task.completed / elapsed if elapsed > 0 else 0.0
        return f"{rate / 1e6:.2f}M {self.unit}/s" if rate >= 1e5 else f"{rate:,.0f} {self.unit}/s"


def rows_progress(enabled: bool = True, unit: str = "rows") -> Progress:
    """A progress bar on stderr: description, bar, done/total, rate, elapsed. Hidden when disabled."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        RateColumn(unit),
        TimeElapsedColumn(),
        console=stderr_console,
        disable=not enabled or _quiet,
        transient=not sys.stderr.isatty(),
    )


@contextmanager
def status(first: str, enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A status line for work without a known total (quantizing layer by layer, a model export).

    Yields `update(text)`. On a terminal it is a rich spinner; in a log or pipe each new text is
    one line with the elapsed seconds, at most one line a second (the last one always shows).
    """
    if not enabled or _quiet:
        yield lambda text: None
        return
    if stderr_console.is_terminal:
        with stderr_console.status(first) as spinner:
            yield lambda text: spinner.update(text)
        return
    started = time.perf_counter()
    last = [0.0, None]

    def update(text: str, force: bool = False) -> None:
        now = time.perf_counter()
        if force or now - last[0] >= 1.0:
            print(f"[{now - started:6.1f} s] {text}", file=sys.stderr, flush=True)
            last[0], last[1] = now, None
        else:
            last[1] = text

    update(first, force=True)
    try:
        yield update
    finally:
        if last[1] is not None:
            update(last[1], force=True)
