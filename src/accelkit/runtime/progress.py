"""What a person sees while a command works: one activity line, progress bars with a count and an
ETA, and time budgets (one helper each, all on stderr).

The contract (docs/cli.md): no command leaves the screen still for more than 2 s. From its first
moment a command has an *activity line* — what it is doing now ("starting: loading JAX",
"opening the store", "calibrating layer 3/36") and for how long. On a terminal it is a spinner
kept moving by rich's refresh thread, so it moves while the main thread imports, compiles or waits;
in a log or pipe it is one timestamped line per change, at most one a second. Work with a count
shows a bar instead (`rows_progress`): done/total, rate, elapsed and time left. Only one of them is
on screen at a time: a bar, a result or a table first takes the activity line down (`pause`).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import TaskID

_quiet = False
STARTUP_DELAY_S = 0.3  # a command that answers faster shows no startup line at all
LOG_INTERVAL_S = 1.0  # in a log: at most one activity line a second
LOG_HEARTBEAT_S = 10.0  # ... and one every 10 s while the same thing goes on


def _stderr_console() -> Console:
    """rich's console on stderr, made on first use: rich costs a command's start-up a few
    hundredths of a second, and `--help` or a command that prints nothing never needs it."""
    console = globals().get("stderr_console")
    if console is None:
        from rich.console import Console

        console = globals()["stderr_console"] = Console(stderr=True)
    return console


def __getattr__(name: str) -> Any:
    if name == "stderr_console":  # `from accelkit.runtime.progress import stderr_console`
        return _stderr_console()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def set_quiet(quiet: bool) -> None:
    """`accelkit --quiet`: no progress bars, status lines or notes (errors and results still show)."""
    global _quiet
    _quiet = bool(quiet)


def is_quiet() -> bool:
    return _quiet


def note(text: str) -> None:
    """One line of progress on stderr (what is running), unless quiet. On a terminal it stays on
    as the activity line until the next one, so the screen keeps moving."""
    if _quiet:
        return
    if _stderr_console().is_terminal:
        _cancel_startup()
        _activity.note(text)
    else:
        print(text, file=sys.stderr, flush=True)


class _Line:
    """The activity text with the seconds it has run, rendered afresh at every refresh."""

    def __init__(self, text: str):
        self.text, self.since = text, time.perf_counter()

    def __rich__(self):
        from rich.text import Text

        return Text(f"{self.text} ({time.perf_counter() - self.since:.0f} s)")


class Activity:
    """The command's one activity line (see the module's docstring). Thread-safe: the startup
    timer, the main thread and workers may all set it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._live = None
        self._line: _Line | None = None
        self._logged = (0.0, None)  # (when, text) of the last line written to a log
        self._pending: str | None = None
        self._heartbeat: threading.Thread | None = None
        self._started = time.perf_counter()
        self.enabled = False  # only while a command runs (library calls stay silent)

    def reset(self) -> None:
        self.pause()
        with self._lock:
            self._started = time.perf_counter()
            self._logged = (0.0, None)
            self.enabled = True

    def set(self, text: str, log: bool = True) -> None:
        if _quiet or not self.enabled:
            return
        with self._lock:
            if _stderr_console().is_terminal:
                self._show(text)
            elif log:
                self._log(text)

    def _show(self, text: str) -> None:
        from rich.live import Live
        from rich.spinner import Spinner

        if self._line is None or self._line.text != text:
            self._line = _Line(text)
        spinner = Spinner("dots", self._line)
        if self._live is None:
            self._live = Live(
                spinner,
                console=_stderr_console(),
                refresh_per_second=4,  # light: benchmarks time while it runs
                transient=True,
                # a line printed meanwhile shows above the activity line instead of through it;
                # stdout only when it is the terminal too (a piped result never goes to stderr)
                redirect_stdout=_stdout_is_terminal(),
                redirect_stderr=True,
            )
            self._live.start()
        else:
            self._live.update(spinner)

    def note(self, text: str) -> None:
        """A line kept above the activity line, which then says the same."""
        if not self.enabled:
            print(text, file=sys.stderr, flush=True)
            return
        with self._lock:
            self.pause()
            print(text, file=sys.stderr, flush=True)
            self._show(text)

    def _log(self, text: str, force: bool = False) -> None:
        now = time.perf_counter()
        when, last = self._logged
        if text == last and not force:
            return
        if force or now - when >= LOG_INTERVAL_S:
            print(f"[{now - self._started:6.1f} s] {text}", file=sys.stderr, flush=True)
            self._logged = (now, text)
            self._pending = None
        else:
            self._pending = text
        if self._heartbeat is None:
            self._heartbeat = threading.Thread(
                target=self._beat, name="accelkit-activity", daemon=True
            )
            self._heartbeat.start()

    def _beat(self) -> None:
        """In a log: the change that came too soon after the last line, and a line every
        LOG_HEARTBEAT_S while one thing goes on."""
        while True:
            time.sleep(LOG_INTERVAL_S / 2)
            with self._lock:
                if not self.enabled:
                    self._heartbeat = None
                    return
                when, last = self._logged
                now = time.perf_counter()
                if self._pending is not None and now - when >= LOG_INTERVAL_S:
                    self._log(self._pending, force=True)
                elif last is not None and now - when >= LOG_HEARTBEAT_S:
                    print(
                        f"[{now - self._started:6.1f} s] {last} (still)",
                        file=sys.stderr,
                        flush=True,
                    )
                    self._logged = (now, last)

    def pause(self, wait: float = -1) -> None:
        """Take the line down (a bar, a result or a table comes next). `wait`: give up after this
        many seconds if another thread holds the line (the interrupt watchdog must not block)."""
        if not self._lock.acquire(timeout=wait):
            return
        try:
            if self._live is not None:
                live, self._live = self._live, None
                with contextlib.suppress(Exception):  # a console closed under it
                    live.stop()
            self._line = None
            if self._pending is not None:
                self._log(self._pending, force=True)
            self._logged = (self._logged[0], None)  # no heartbeat for what has ended
        finally:
            self._lock.release()


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


_activity = Activity()
_startup: dict = {"timer": None}


def activity(text: str, log: bool = True) -> None:
    """Say what the command is doing now (replaces the previous activity). `log=False`: on a
    terminal only (a short phase: "starting JAX"), not as a line in a log."""
    _cancel_startup()
    _activity.set(text, log)


def pause(wait: float = -1) -> None:
    """Take the activity line down before a bar, a table or a result is printed."""
    _cancel_startup()
    _activity.pause(wait)


def start_command(name: str) -> None:
    """A command begins: on a terminal, unless it has something of its own to show within
    STARTUP_DELAY_S, its activity line says it is starting (imports, devices and models come
    first)."""
    _activity.reset()
    _cancel_startup()
    if _quiet or not name or not _stderr_console().is_terminal:
        return  # a log gets the command's own lines only, not a line per start
    timer = threading.Timer(STARTUP_DELAY_S, _activity.set, args=(f"accelkit {name}: starting",))
    timer.daemon = True
    _startup["timer"] = timer
    timer.start()


def end_command() -> None:
    _cancel_startup()
    _activity.pause()
    _activity.enabled = False


def _cancel_startup() -> None:
    timer = _startup.pop("timer", None)
    _startup["timer"] = None
    if timer is not None:
        timer.cancel()


class Steps:
    """Countable work on the activity line: `label done/total (percent) · what now · time left`.

    Time left is the average time of the steps done so far times the steps left; a step may be
    any unit the caller counts (layers quantized, experiments run, episodes written)."""

    def __init__(self, total: int, label: str):
        self.total, self.label, self.done = max(int(total), 1), label, 0
        self.started = time.perf_counter()

    def text(self, what: str = "") -> str:
        done = min(self.done, self.total)
        parts = [f"{self.label} {done}/{self.total} ({100 * done // self.total}%)"]
        if what:
            parts.append(what)
        if 0 < done < self.total:
            elapsed = time.perf_counter() - self.started
            parts.append(f"{_clock(elapsed / done * (self.total - done))} left")
        return " · ".join(parts)

    def show(self, what: str = "") -> None:
        activity(self.text(what))

    def advance(self, what: str = "", by: int = 1) -> None:
        self.done += by
        self.show(what)


def _clock(seconds: float) -> str:
    seconds = round(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60}:{seconds % 60:02d}"
    )


def phase(text: str) -> None:
    """A short step before the command's own progress (reading metadata, starting JAX, opening
    the store, loading the model): on the activity line of a terminal, not in a log."""
    activity(text, log=False)


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

    def will_expire(self, work_seconds: float, repeats: float = 0) -> bool:
        """Whether doing the work done so far (`work_seconds`) `repeats` more times would run
        past the budget: a first pass that later passes replay stops in time for them."""
        return self.seconds is not None and self.elapsed() + repeats * work_seconds >= self.seconds

    @classmethod
    def since_process_start(cls, minutes: float | None) -> TimeBudget:
        """A budget counted from the start of this process, as the person who typed the
        command counts it (imports and device start-up included)."""
        import psutil

        age = max(0.0, time.time() - psutil.Process().create_time())
        return cls(None if minutes is None else float(minutes) * 60.0, time.perf_counter() - age)


class LogBar:
    """A bar in a log or pipe: the same calls as rich's `Progress` (add_task, update, advance),
    shown as activity lines (at most one a second): `pass 1: 1,048,576/4,099,106 rows (25%) ·
    2.1M rows/s · 0:01 left`. (rich's bar draws nothing there, and printed a stray blank line.)"""

    def __init__(self, unit: str, enabled: bool):
        self.unit, self.enabled = unit, enabled
        self.tasks: list[dict] = []

    def __enter__(self) -> LogBar:
        return self

    def __exit__(self, *exc) -> None:
        pause()

    def add_task(self, description: str, total: float | None = None, **_) -> TaskID:
        self.tasks.append(
            {"description": description, "total": total, "done": 0, "since": time.perf_counter()}
        )
        return cast("TaskID", len(self.tasks) - 1)  # rich's task id: the two bars are used alike

    def update(self, task: int, *, advance: float = 0, description: str | None = None, **_):
        state = self.tasks[task]
        state["done"] += advance
        if description is not None:
            state["description"] = description
        self._show(state)

    def advance(self, task: int, advance: float = 1) -> None:
        self.update(task, advance=advance)

    def _show(self, state: dict) -> None:
        if not self.enabled:
            return
        done, total = state["done"], state["total"]
        elapsed = time.perf_counter() - state["since"]
        rate = done / elapsed if elapsed > 0 else 0.0
        text = f"{state['description']}: {done:,.0f}"
        if total:
            text += f"/{total:,.0f} {self.unit} ({100 * done / total:.0f}%)"
        else:
            text += f" {self.unit}"
        text += (
            f" · {rate / 1e6:.2f}M {self.unit}/s"
            if rate >= 1e5
            else f" · {rate:,.0f} {self.unit}/s"
        )
        if total and 0 < done < total and rate > 0:
            text += f" · {_clock((total - done) / rate)} left"
        activity(text)


def rows_progress(enabled: bool = True, unit: str = "rows"):
    """A progress bar on stderr: description, bar, done/total, rate, elapsed, time left (a
    `LogBar` in a log or pipe). Hidden when disabled; takes the activity line down first."""
    pause()
    if not _stderr_console().is_terminal:
        return LogBar(unit, enabled and not _quiet)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    class RateColumn(TextColumn):
        """Rows per second from the task's completed count and elapsed time."""

        def __init__(self, unit: str = "rows"):
            super().__init__("")
            self.unit = unit

        def render(self, task):
            elapsed = task.elapsed or 0.0
            rate = task.completed / elapsed if elapsed > 0 else 0.0
            per_s = f"{rate / 1e6:.2f}M" if rate >= 1e5 else f"{rate:,.0f}"
            return f"{per_s} {self.unit}/s"

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        RateColumn(unit),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=_stderr_console(),
        disable=not enabled or _quiet,
        transient=False,
    )


@contextmanager
def status(first: str, enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """The activity line for a block of work without a known total (quantizing layer by layer, a
    model export): yields `update(text)`; the line comes down when the block ends."""
    if not enabled or _quiet:
        yield lambda text: None
        return
    activity(first)
    try:
        yield activity
    finally:
        pause()
