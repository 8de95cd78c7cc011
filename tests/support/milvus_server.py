"""A real Milvus server for tests and benchmarks, reachable from loopback only.

The PyPI package `milvus` (2.3.x) ships the standalone Milvus binary with embedded etcd. That
binary listens on all interfaces (gRPC 19530, metrics 9091 and the coordinators' ports), so it runs
inside a network namespace of its own that has nothing but a loopback device: no address outside
that namespace can reach it. A small forwarder process, listening on 127.0.0.1 of *this*
namespace, carries each TCP connection into the namespace's 127.0.0.1:19530 (it opens its
listening socket first, then enters the namespace with setns(2), so every socket it opens after
that lives in there).

    with MilvusServer(tmp_dir) as server:
        client = MilvusClient(server.uri)          # http://127.0.0.1:<forwarded port>

Needs root (or CAP_SYS_ADMIN) for `ip netns`; `MilvusServer.unavailable()` says why it cannot
run here, for tests to skip on. Both processes are stopped by PID and the namespace deleted.
Run `python -m tests.support.milvus_server DIR` to keep one up by hand (Ctrl-C stops it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

CLONE_NEWNET = 0x40000000
PREFIX = "accelkit-milvus-"
SERVER_PORT = 19530
MODULE = "tests.support.milvus_server"  # run as `python -m` from the repository root


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


def unavailable() -> str | None:
    """Why a loopback-only server cannot run here (None when it can)."""
    if importlib.util.find_spec("milvus") is None:
        return "the PyPI package `milvus` (a standalone Milvus server) is not installed"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is missing, so no network namespace can be made"
    probe = f"{PREFIX}probe-{os.getpid()}"
    try:
        _run("ip", "netns", "add", probe)
    except (subprocess.SubprocessError, OSError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        return f"cannot create a network namespace (needs root): {detail.decode().strip() or exc}"
    _run("ip", "netns", "del", probe)
    return None


def _remove_stale_namespaces() -> None:
    """Namespaces left by a test run that died: their owner's PID is gone."""
    try:
        names = subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, timeout=30
        ).stdout.split()
    except (subprocess.SubprocessError, OSError):
        return
    for name in names:
        if not name.startswith(PREFIX):
            continue
        owner = name[len(PREFIX) :].split("-")[0]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def _stop(process: subprocess.Popen | None, grace: float = 5.0) -> None:
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


class MilvusServer:
    """Start with `start()` (or `with`); `uri` is the loopback address to give clients."""

    def __init__(self, data_dir: str | os.PathLike, name: str | None = None):
        self.data_dir = Path(data_dir).resolve()
        self.netns = name or f"{PREFIX}{os.getpid()}-{int(time.time() * 1000) % 10**8}"
        self.server: subprocess.Popen | None = None
        self.forwarder: subprocess.Popen | None = None
        self.port: int | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 240.0) -> MilvusServer:
        _remove_stale_namespaces()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        _run("ip", "netns", "add", self.netns)
        try:
            _run("ip", "netns", "exec", self.netns, "ip", "link", "set", "lo", "up")
            log = self._launch_server()
            port_file = self.data_dir / "forwarder.port"
            port_file.unlink(missing_ok=True)
            self.forwarder = subprocess.Popen(
                [sys.executable, "-m", MODULE, "--forward", self.netns, str(port_file)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=Path(__file__).resolve().parents[2],
            )
            self._wait_ready(port_file, timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _launch_server(self):
        """Start the Milvus binary inside the namespace on `data_dir`; returns its log file."""
        log = open(self.data_dir / "milvus-server.log", "ab")  # noqa: SIM115 - the child owns it
        self.server = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                self.netns,
                sys.executable,
                "-m",
                MODULE,
                "--exec",
                str(self.data_dir),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        return log

    def kill(self) -> None:
        """SIGKILL the Milvus process only (a crash: no shutdown, nothing flushed by it); the
        forwarder stays, so clients keep the same address and meet a dead server behind it."""
        if self.server is not None and self.server.poll() is None:
            os.kill(self.server.pid, signal.SIGKILL)
            self.server.wait(timeout=60)

    def restart(self, timeout: float = 240.0) -> float:
        """Start Milvus again on the same `data_dir`, behind the same forwarded port; returns the
        seconds until it answered a real RPC."""
        self.kill()
        started = time.monotonic()
        self._launch_server().close()  # the child holds its own copy
        self._wait_ready(self.data_dir / "forwarder.port", timeout)
        return time.monotonic() - started

    def _wait_ready(self, port_file: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for process, what in ((self.server, "milvus"), (self.forwarder, "forwarder")):
                if process.poll() is not None:
                    tail = (self.data_dir / "milvus-server.log").read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"the {what} process exited ({process.returncode}): {tail}")
            if self.port is None and port_file.exists() and port_file.read_text().strip():
                self.port = int(port_file.read_text())
            if self.port is not None and self._healthy():
                return
            time.sleep(0.5)
        raise TimeoutError(
            f"Milvus did not become healthy in {timeout:.0f} s (log: {self.data_dir})"
        )

    def _healthy(self) -> bool:
        """A real RPC through the forwarder: list collections."""
        probe = (
            "import sys; from pymilvus import MilvusClient;"
            f"c = MilvusClient(uri={self.uri!r}, timeout=5); c.list_collections(); c.close()"
        )
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=60)
        return done.returncode == 0

    def stop(self) -> None:
        _stop(self.forwarder)
        _stop(self.server)
        self.forwarder = self.server = None
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, timeout=30)

    def __enter__(self) -> MilvusServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# -- the two child processes ---------------------------------------------------------------------


def _try_bind_port(port: int) -> socket.socket | None:
    """The `milvus` package's port probe with SO_REUSEADDR, as Milvus itself binds: without it, a
    restarted server finds 19530 taken by the killed one's connections in TIME_WAIT and moves its
    gRPC port to 19532, where the forwarder does not look."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()
        return sock
    except OSError:
        sock.close()
        return None


def _exec_milvus(data_dir: str) -> None:
    """Inside the namespace: write the config the `milvus` package would, then become the binary
    (so the PID the parent holds is Milvus itself)."""
    import milvus

    config = milvus.MilvusServerConfig(data_dir=data_dir)
    config.try_bind_port = _try_bind_port
    config.resolve()
    milvus._initialize_data_files(config.base_data_dir)
    binary = os.path.join(config.base_data_dir, "bin", "milvus")
    env = dict(os.environ)
    env.update(
        DEPLOY_MODE="STANDALONE",
        METRICS_PORT="9091",
        MILVUS_RUN_DIR=os.path.join(config.base_data_dir, "run"),
        LD_LIBRARY_PATH=os.path.dirname(binary) + ":" + env.get("LD_LIBRARY_PATH", ""),
    )
    os.chdir(config.base_data_dir)
    os.execve(binary, [binary, "run", "standalone"], env)


def _setns(name: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    with open(f"/var/run/netns/{name}", "rb") as handle:
        if libc.setns(handle.fileno(), CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into {name}: {os.strerror(errno)}")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


def _forward(name: str, port_file: str) -> None:
    """Listen on 127.0.0.1 here, then enter the namespace: connections opened from then on
    reach the namespace's loopback."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    _setns(name)

    async def handle(reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", SERVER_PORT)
        except OSError:
            writer.close()
            return
        for sock in (writer.get_extra_info("socket"), up_writer.get_extra_info("socket")):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    async def main():
        server = await asyncio.start_server(handle, sock=listener)
        tmp = port_file + ".tmp"
        Path(tmp).write_text(str(listener.getsockname()[1]))
        os.replace(tmp, port_file)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir", nargs="?", help="keep a server up on DATA_DIR until Ctrl-C")
    parser.add_argument("--exec", dest="exec_dir", help=argparse.SUPPRESS)
    parser.add_argument(
        "--forward", nargs=2, metavar=("NETNS", "PORT_FILE"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.exec_dir:
        _exec_milvus(args.exec_dir)
    elif args.forward:
        _forward(*args.forward)
    elif args.data_dir:
        reason = unavailable()
        if reason:
            sys.exit(f"error: {reason}")
        # Ctrl-C, or SIGTERM (a background job ignores SIGINT): leave through stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        with MilvusServer(args.data_dir) as server:
            print(f"Milvus at {server.uri} (namespace {server.netns}); Ctrl-C stops it", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                while True:
                    time.sleep(3600)
    else:
        parser.error("give DATA_DIR")


if __name__ == "__main__":
    main()


def server_database(server, name: str) -> str:
    """A fresh database on the server: test modules do not see each other's collections."""
    from accelkit.runtime.logs import import_library

    MilvusClient = import_library("pymilvus", "images").MilvusClient

    client = MilvusClient(uri=server.uri, timeout=30)
    try:
        if name in client.list_databases():
            # made again (a module-scoped fixture torn down and set up once more, as random test
            # order does): empty it through a client opened on it — `use_database` asks the
            # server DescribeDatabase, which pymilvus 3 calls and Milvus 2.3 does not implement
            inside = MilvusClient(uri=server.uri, db_name=name, timeout=30)
            try:
                for collection in inside.list_collections():
                    inside.drop_collection(collection)
            finally:
                inside.close()
            client.drop_database(name)
        client.create_database(name)
    finally:
        client.close()
    return name
