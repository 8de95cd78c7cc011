"""Run a command the way a person does: in a terminal (a pty), and see what they see, when.

`run_in_terminal` records when each piece of output arrived, so a test can assert on the longest
silence (no command may leave a person staring at a still screen for more than 2 s) and send a
signal mid-run the way Ctrl-C does.
"""

from __future__ import annotations

import itertools
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


@dataclass
class TerminalRun:
    code: int
    output: str  # what the terminal showed, escape codes removed
    chunks: list[tuple[float, bytes]] = field(repr=False)  # (seconds since start, bytes)
    seconds: float

    def silences(self) -> list[float]:
        """Gaps between consecutive outputs, from the start to the end of the process."""
        times = [0.0, *(t for t, _ in self.chunks), self.seconds]
        return [b - a for a, b in itertools.pairwise(times)]

    def longest_silence(self) -> float:
        return max(self.silences())

    def first_output(self) -> float:
        return self.chunks[0][0] if self.chunks else self.seconds

    def text_at(self, seconds: float) -> str:
        return clean(b"".join(data for t, data in self.chunks if t <= seconds))


def clean(data: bytes) -> str:
    return ANSI.sub("", data.decode("utf-8", "replace"))


def accelkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "accelkit", *args]


def run_in_terminal(
    argv: list[str],
    *,
    timeout: float = 600,
    env: dict | None = None,
    cwd: str | None = None,
    columns: int = 100,
    signal_when: Callable[[str, float], bool] | None = None,
    signum: int = signal.SIGINT,
) -> TerminalRun:
    """Run `argv` with a pty as its terminal (stdin, stdout and stderr), `columns` wide.

    `signal_when(text_so_far, seconds)`: once it returns True, `signum` is sent to the process.
    """
    master, slave = pty.openpty()
    import fcntl
    import struct
    import termios

    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    environment = {**os.environ, **(env or {}), "COLUMNS": str(columns), "TERM": "xterm-256color"}
    environment.pop("NO_COLOR", None)
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=environment,
        cwd=cwd,
        close_fds=True,
        start_new_session=True,  # its own session: the pty is its controlling terminal
    )
    os.close(slave)
    chunks: list[tuple[float, bytes]] = []
    signalled = False
    exited_at = None
    try:
        while True:
            now = time.monotonic() - started
            if now > timeout:
                process.kill()
                raise TimeoutError(
                    f"{argv} ran longer than {timeout} s:\n{clean(b''.join(c for _, c in chunks))[-3000:]}"
                )
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the other side closed
                    data = b""
                if not data:
                    break
                chunks.append((time.monotonic() - started, data))
            elif process.poll() is not None:
                # drained: a child it left behind may still hold the terminal open
                exited_at = exited_at or time.monotonic()
                if time.monotonic() - exited_at > 0.5:
                    break
            if signal_when and not signalled:
                text = clean(b"".join(c for _, c in chunks))
                if signal_when(text, time.monotonic() - started):
                    process.send_signal(signum)
                    signalled = True
        code = process.wait(timeout=60)
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
            process.wait()
    return TerminalRun(
        code=code,
        output=clean(b"".join(c for _, c in chunks)),
        chunks=chunks,
        seconds=time.monotonic() - started,
    )


QUIET_SILENCE_S = 2.0  # the contract: no still screen longer than this (docs/cli.md)


def silence_limit() -> float:
    """The longest silence allowed now: 2 s on a machine with a core for each runnable task,
    scaled by the run queue (1-minute load average per core) when more want to run, since every
    thread of the command, the one that redraws the screen included, then waits its turn."""
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    return QUIET_SILENCE_S * max(1.0, load)


def assert_never_silent(run: TerminalRun, limit: float | None = None) -> None:
    limit = silence_limit() if limit is None else limit
    gaps = run.silences()
    longest = max(gaps)
    if longest > limit:
        times = [0.0, *(t for t, _ in run.chunks), run.seconds]
        at = times[gaps.index(longest)]
        raise AssertionError(
            f"{longest:.1f} s of silence (limit {limit:.1f} s) after {at:.1f} s, following:\n"
            f"{run.text_at(at)[-600:]}"
        )
