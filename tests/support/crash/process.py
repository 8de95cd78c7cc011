"""Commands of the crash harness as child processes: accelkit's command line in a fresh session,
its output lines timed, killed outright (SIGKILL) at a moment or at a file-system write
(`injected`: inject.py's events), and what it left running reaped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def child_env() -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "COLUMNS": "100", "NO_COLOR": "1"}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")) if p
    )
    return env


def accelkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "accelkit", *args]


@dataclass
class Run:
    code: int | None
    seconds: float
    lines: list[tuple[float, str]]
    killed_at: float | None = None  # seconds since start, when SIGKILL was sent
    lingering: list[int] = field(default_factory=list)  # children killed after the wait

    @property
    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)


def session_members(sid: int) -> list[int]:
    """Processes of session `sid` (a child started with start_new_session: its own pid), read
    from /proc: what a killed command left running (a Milvus Lite engine, a worker)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[3]) == sid and fields[0] != "Z":
                    found.append(int(name))
    return found


def run(
    argv: list[str],
    cwd: Path,
    kill_at: float | None = None,
    timeout: float = 600,
    env: dict[str, str] | None = None,
) -> Run:
    """Run `argv` in `cwd`, output lines timed; SIGKILL it `kill_at` seconds after the start (if
    still running). Then wait for what it left running (an orphaned engine stops by itself once
    its owner is gone) up to 60 s, and kill what is still there."""
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env={**child_env(), **(env or {})},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    lines: list[tuple[float, str]] = []

    def read() -> None:
        for raw in process.stdout:
            lines.append((time.monotonic() - started, raw.decode("utf-8", "replace").rstrip()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    killed_at = None
    deadline = started + (kill_at if kill_at is not None else timeout)
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    if process.poll() is None:
        process.kill()
        killed_at = time.monotonic() - started
    code = process.wait()
    seconds = time.monotonic() - started
    lingering = []
    wait_until = time.monotonic() + 60
    while session_members(process.pid) and time.monotonic() < wait_until:
        time.sleep(0.1)
    for pid in session_members(process.pid):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            lingering.append(pid)
    reader.join(timeout=10)
    if code == -signal.SIGKILL and killed_at is None:
        killed_at = seconds  # it killed itself at a write (inject.py)
    return Run(code, seconds, lines, killed_at, lingering)


def injected(argv: list[str]) -> list[str]:
    """`argv` (an `accelkit(...)` command) run through inject.py's write events (the child's
    PYTHONPATH, `child_env`, holds the repository)."""
    return [sys.executable, "-m", "tests.support.crash.inject", *argv[3:]]
