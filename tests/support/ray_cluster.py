"""A real Ray cluster on 127.0.0.1: a head node and one worker node, each a `ray start --block`
process in its own session, stopped by PID (their process groups) at the end.

Every port is a free loopback port picked here and the cluster keeps its files in its own temporary
folder, so it shares nothing with another cluster on the machine (`ray stop` would stop theirs
too: it is never used). Dashboard off, usage statistics off, 1 CPU and a 200 MB object store per
node. The nodes' environment carries `env` (the package's source folder on PYTHONPATH, object
storage credentials), which their worker processes inherit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.moto_server import ROOT, free_port

OBJECT_STORE_BYTES = 200_000_000
# Ray turns 127.0.0.1 (a node's address, the address a driver connects to) into the machine's
# outward address unless its "clusters" switch is off, as on macOS and Windows. Off for every
# process here; the worker node's `ray start` goes through tests.support.ray_node (see there).
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def _node_ports() -> list[str]:
    ports = {
        "--node-manager-port": free_port(),
        "--object-manager-port": free_port(),
        "--metrics-export-port": free_port(),
        "--dashboard-agent-listen-port": free_port(),
        "--dashboard-agent-grpc-port": free_port(),
        "--runtime-env-agent-port": free_port(),
    }
    return [f"{flag}={port}" for flag, port in ports.items()]


def client_env() -> dict[str, str]:
    """What a driver of the test cluster needs in its environment **before it imports ray** (Ray
    reads these at import): loopback addresses, no usage statistics, and token authentication
    (Ray's default) with a token of this test run's own, not ~/.ray's. conftest sets them first."""
    import secrets

    keys = (*LOOPBACK, "RAY_USAGE_STATS_ENABLED", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN")
    if all(key in os.environ for key in keys):
        return {key: os.environ[key] for key in keys}
    return {
        **LOOPBACK,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
    }


class RayCluster:
    def __init__(self, env: dict[str, str] | None = None):
        self.client_env = client_env()
        self.env = {**dict(env or {}), **self.client_env}
        self.port: int | None = None
        self.processes: list[subprocess.Popen] = []
        self.folder: str | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, args: list[str], log: Path, head: bool = False) -> subprocess.Popen:
        # the ray beside this interpreter first: its workers run this environment's Python (a
        # `ray` found first on PATH may belong to another one, without accelkit or its extras)
        beside = Path(sys.executable).with_name("ray")
        ray = [str(beside) if beside.is_file() else shutil.which("ray") or "ray"]
        if not head:
            ray = [sys.executable, "-m", "tests.support.ray_node"]
        env = {**os.environ, **self.env}
        env.pop("XLA_FLAGS", None)  # workers: one CPU device, as a user's node has
        env.pop("RAY_ADDRESS", None)
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [
                    *ray,
                    "start",
                    "--block",
                    "--node-ip-address=127.0.0.1",
                    "--num-cpus=1",
                    f"--object-store-memory={OBJECT_STORE_BYTES}",
                    "--disable-usage-stats",
                    *_node_ports(),
                    *args,
                ],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.processes.append(process)
        return process

    def start(self, timeout: float = 120.0) -> RayCluster:
        self.folder = tempfile.mkdtemp(prefix="akray")  # short: Ray's socket paths must stay short
        self.port = free_port()
        folder = Path(self.folder)
        self._start(
            [
                "--head",
                f"--port={self.port}",
                "--include-dashboard=false",
                f"--ray-client-server-port={free_port()}",
                f"--temp-dir={folder / 'ray'}",
            ],
            folder / "head.log",
            head=True,
        )
        self._wait_for_nodes(1, timeout)
        self._start([f"--address={self.address}"], folder / "worker.log")
        self._wait_for_nodes(2, timeout)
        return self

    def _wait_for_nodes(self, count: int, timeout: float) -> None:
        ray = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
        deadline = time.monotonic() + timeout
        env = {**os.environ, **self.env}
        while time.monotonic() < deadline:
            for process in self.processes:
                if process.poll() is not None:
                    logs = " | ".join(
                        log.read_text(errors="replace").strip().splitlines()[-1]
                        for log in sorted(Path(self.folder).glob("*.log"))
                    )
                    self.stop()
                    raise RuntimeError(f"a Ray node exited ({process.returncode}): {logs}")
            probe = subprocess.run(
                [sys.executable, "-c", _COUNT_NODES, self.address],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
                check=False,
            )
            if (
                probe.returncode == 0
                and probe.stdout.strip().isdigit()
                and int(probe.stdout) >= count
            ):
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the Ray cluster did not reach {count} nodes in {timeout} s ({ray})")

    def worker_processes(self, name: str) -> list:
        """Live processes below our nodes whose title is `ray::<name>` (a task running)."""
        import psutil

        found = []
        for process in self.processes:
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(process.pid).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        if any(part.startswith(f"ray::{name}") for part in child.cmdline()):
                            found.append(child)
        return found

    def stop(self) -> None:
        for process in reversed(self.processes):  # the worker node first, then the head
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    process.wait(timeout=30)
            with contextlib.suppress(ProcessLookupError):  # what its session left behind
                os.killpg(process.pid, signal.SIGKILL)
        self.processes.clear()
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)


_COUNT_NODES = """
import sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print(sum(1 for n in ray.nodes() if n["Alive"]))
"""
