"""`accelkit images serve` as a real process for the tests and benchmarks: `Server` (started on a
free loopback port with its own config, stopped at the end), the API key it is started with and
the helpers every service test uses (base64 bodies, the error of an answer, a store config)."""

from __future__ import annotations

import base64
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

KEY = "test-key-123"
AUTH = {"Authorization": f"Bearer {KEY}"}
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python -m accelkit images serve` on a free port; stop() sends SIGTERM (graceful)."""

    def __init__(self, config: Path, log: Path):
        self.config, self.log = config, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = None

    def start(self) -> Server:
        handle = open(self.log, "ab")  # noqa: SIM115 - the child writes to it until it exits
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "accelkit",
                "images",
                "serve",
                "--config",
                str(self.config),
                "--port",
                str(self.port),
            ],
            cwd=ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"server did not start: {self.log.read_text()[-3000:]}")

    def stop(self) -> int:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


def store_yaml(settings: dict, base: Path) -> str:
    """The `store:` section for Milvus Lite (a file here) or the test server's database."""
    settings = settings if "db_name" in settings else {"uri": str(base / "images.db")}
    return "".join(f"  {key}: {value}\n" for key, value in settings.items())


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def error_of(response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and body["error"]["status"] == response.status_code, body
    return body["error"]
