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


def with_default_signals(argv: list[str]) -> list[str]:
    """`argv` run with SIGINT and SIGTERM at their defaults and unblocked, whatever this worker's
    state — for a child started with pipes (subprocess), as `Spawned` does for one on a pty. A
    trial started as a background job has SIGINT ignored, and a child inherits that: it would
    rightly ignore the test's Ctrl-C, as a background job should. `argv[0]` is an absolute path."""
    code = (
        "import os, signal, sys; watched = (signal.SIGINT, signal.SIGTERM); "
        "[signal.signal(s, signal.SIG_DFL) for s in watched]; "
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, watched); os.execv(sys.argv[1], sys.argv[1:])"
    )
    return [sys.executable, "-c", code, *argv]


class Spawned:
    """A child started the way a shell starts a foreground job: its own session (the pty its
    controlling terminal), stdin/stdout/stderr on the pty, and SIGINT/SIGTERM at their defaults
    and unblocked whatever this test worker's state (posix_spawn's setsigdef/setsigmask, safe
    with threads, unlike preexec_fn). The part of subprocess.Popen the tests use."""

    def __init__(self, argv: list[str], tty: int, env: dict, cwd: str | None):
        import shutil

        program = argv[0] if os.sep in argv[0] else shutil.which(argv[0]) or argv[0]
        if cwd is not None:  # posix_spawn has no cwd: the child changes into it itself
            argv = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', str(cwd), *argv]
            program = "/bin/sh"
        self.returncode: int | None = None
        self.pid = os.posix_spawn(
            program,
            argv,
            env,
            file_actions=[(os.POSIX_SPAWN_DUP2, tty, fd) for fd in (0, 1, 2)],
            setsid=True,
            setsigdef=(signal.SIGINT, signal.SIGTERM),
            setsigmask=(),
        )

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


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
    process = Spawned(argv, slave, environment, cwd)
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


def assert_interrupted(run: TerminalRun, signum: int, kept: str = "nothing written") -> None:
    """The interrupt contract (docs/cli.md): exit 128 + the signal, one line saying what was kept."""
    name = signal.Signals(signum).name
    assert run.code == 128 + signum, run.output[-2000:]
    assert f"interrupted ({name}); {kept}" in run.output
    assert run.output.count("interrupted (") == 1
