"""Progress bars and time budgets for long work."""

from __future__ import annotations

import sys
import time
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
        disable=not enabled,
        transient=not sys.stderr.isatty(),
    )
