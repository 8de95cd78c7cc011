"""Test session setup: 8 virtual CPU devices, configured before JAX starts.

Tests that want one device pass `devices=jax.devices()[:1]`; everything else sees all eight, so
multi-device sharding runs in every test that does not opt out.
"""

import os
import sys

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from tests.support.threads import worker_threads

os.environ.update(worker_threads(os.environ))  # before numpy and torch load OpenMP and BLAS

from tests.support.groups import SERVERS
from tests.support.milvus_server import server_database
from tests.support.ray_cluster import client_env
from tests.support.require import absent, failure_for_skip

# the test Ray cluster's driver settings: Ray reads them when it is imported, so before any test
os.environ.update(client_env())

import numpy as np
import pytest


def pytest_configure(config):
    """An xdist worker that dies (a crash in native code, a fatal signal) leaves its last stack in
    .pytest-crash/<worker>.log; .ci/run prints those files when the run fails. A worker that ends
    normally leaves an empty file.

    A signal the worker started with ignored (a run started in the background of a script: `cmd &`
    in a non-interactive shell, nohup, some CI runners) stays ignored: registering faulthandler for
    it would un-ignore it in the kernel behind Python's back (Python still reports SIG_IGN), the
    first in-process command then puts SIG_IGN back, and the per-test signal guard reported that
    as the test's doing."""
    import signal

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    import faulthandler
    from pathlib import Path

    folder = Path(config.rootpath) / ".pytest-crash"
    folder.mkdir(exist_ok=True)
    log = open(folder / f"{worker}.log", "w")  # noqa: SIM115  (open for the worker's life)
    config._crash_log = log
    faulthandler.enable(file=log, all_threads=True)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        if signal.getsignal(signum) is not signal.SIG_IGN:
            faulthandler.register(signum, file=log, all_threads=True, chain=True)


# Set by tests/images/store/test_engines.py for its run of the images tests on Milvus Lite 3:
# the tests of the Milvus server and the Ray cluster (one xdist group) are the outer run's.
LITE_PASS = "ACCELKIT_TEST_LITE_PASS"


def pytest_collection_modifyitems(config, items):
    if os.environ.get(LITE_PASS) != "1":
        return
    kept, left = [], []
    for item in items:
        group = item.get_closest_marker("xdist_group")
        name = (group.kwargs.get("name") or (group.args or [None])[0]) if group else None
        (left if name == SERVERS else kept).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In a run that requires every real component (.ci/run), a skipped test fails instead,
    unless it skipped as not applicable (tests/support/require.py)."""
    outcome = yield
    _fail_a_required_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """The same rule for a whole module skipped at collection (a module-level importorskip)."""
    outcome = yield
    _fail_a_required_skip(outcome.get_result())


def _fail_a_required_skip(report) -> None:
    if not report.skipped or getattr(report, "wasxfail", None) is not None:
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    failure = failure_for_skip(reason.removeprefix("Skipped: "))
    if failure is not None:
        report.outcome = "failed"
        report.longrepr = failure


def _kernel_signal_state() -> dict[str, int]:
    """SIGINT/SIGTERM as the kernel sees this process's main thread: ignored and blocked bits
    (/proc/self/status), which children inherit — whatever Python's signal.getsignal says, since
    native code can change them behind it."""
    import signal

    bits = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
    state = {}
    try:
        with open(f"/proc/self/task/{os.getpid()}/status") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name in ("SigIgn", "SigBlk"):
                    state[name] = int(value.strip(), 16) & bits
    except OSError:
        pass
    return state


@pytest.fixture(autouse=True)
def signal_handlers_stay():
    """No test, and nothing a test runs in this worker, may leave SIGINT or SIGTERM ignored or
    blocked, or accelkit's handler installed: children inherit an ignored or blocked signal (a
    random-order trial's interrupt tests failed so: their `accelkit` children never answered
    SIGINT), and our handler left behind answers the next signal with a hard exit. A test that
    leaves our handler fails; an ignored or blocked signal (which native code can set behind
    Python's back) is named in a warning in the run's summary. Everything is put back for the
    tests after it."""
    import signal
    import warnings

    from accelkit.runtime import interrupts

    watched = (signal.SIGINT, signal.SIGTERM)
    before = {s: signal.getsignal(s) for s in watched}
    kernel = _kernel_signal_state()
    yield
    after = {s: signal.getsignal(s) for s in watched}
    kernel_after = _kernel_signal_state()
    ours = [signal.Signals(s).name for s in watched if after[s] is interrupts._handler]
    if after != before or kernel_after != kernel:  # put back (also the kernel's view)
        for s, handler in before.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)
    if kernel_after.get("SigBlk", 0) != kernel.get("SigBlk", 0):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, watched)
    if kernel_after != kernel:
        warnings.warn(
            f"this test left SIGINT/SIGTERM ignored or blocked in the worker: {kernel} -> "
            f"{kernel_after} (put back)",
            stacklevel=1,
        )
    assert not ours, f"this test left accelkit's handler installed for {', '.join(ours)}"


@pytest.fixture(autouse=True, scope="module")
def streams_stay_open():
    """No test, and nothing a test starts, may close or replace this worker's output streams or
    remove the root logger's handlers: once that happened, every later test on the worker errored
    ("I/O operation on closed file"). Checked after each module, so the culprit is named."""
    import logging

    streams = (sys.stdout, sys.stderr)  # the worker's capture files while no test captures
    root = logging.getLogger()
    handlers = [h for h in root.handlers if not type(h).__module__.startswith("_pytest")]
    yield
    for stream in (*streams, sys.stdout, sys.stderr):
        assert not stream.closed, f"{stream!r} was closed during this module"
    for fd in (1, 2):
        os.fstat(fd)  # raises if a test closed the descriptor
    assert all(h in root.handlers for h in handlers), "a root logging handler was removed"
    for handler in root.handlers:
        stream = getattr(handler, "stream", None)
        assert stream is None or not stream.closed, f"{handler!r} writes to a closed stream"


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def one_device():
    import jax

    return jax.devices("cpu")[:1]


@pytest.fixture(scope="session")
def eight_devices():
    import jax

    devices = jax.devices("cpu")
    assert len(devices) == 8, "conftest must configure 8 virtual CPU devices before JAX starts"
    return devices


# -- object storage: a real S3 API (moto's server mode) on loopback ------------------------------


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on 127.0.0.1 for the whole run (per xdist worker); stopped by PID."""
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    from tests.support.moto_server import MotoServer

    server = MotoServer().start()
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """The process environment of an S3 client of `s3_server` (credentials, endpoint)."""
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    return s3_server


# -- a real Ray cluster on loopback: head + one worker node ------------------------------------
# Tests that use it run on one xdist worker (tests.support.groups.SERVERS, with the Milvus
# server's tests, since some need both): one cluster and one server per run.


@pytest.fixture(scope="session")
def ray_cluster(s3_server):
    """A Ray head and worker node on 127.0.0.1 whose workers import this checkout's accelkit and
    reach `s3_server`; the test process connects to it as the driver. Stopped by PID at the end."""
    pytest.importorskip("ray", reason="ray is in the ray extra")
    from pathlib import Path

    from tests.support.ray_cluster import RayCluster

    source = str(Path(__file__).resolve().parents[1] / "src")
    path = os.pathsep.join(p for p in (source, os.environ.get("PYTHONPATH", "")) if p)
    env = {**s3_server.env, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu"}
    cluster = RayCluster(env).start()  # this process is its driver (client_env set above)
    yield cluster
    import ray

    if ray.is_initialized():
        ray.shutdown()
    cluster.stop()


# -- Milvus: Lite in a file, and a real server on loopback ----------------------------------------

SERVER = "server"
# Tests that use the server run on one xdist worker (pyproject: --dist loadgroup), so one server
# process serves the whole run.
STORE_KINDS = ["lite", pytest.param(SERVER, marks=pytest.mark.xdist_group(SERVERS))]


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory):
    """A real Milvus standalone server in a loopback-only network namespace, for the whole run;
    stopped by PID at the end. Skips (with the reason) where namespaces cannot be made."""
    from tests.support.milvus_server import MilvusServer, unavailable

    reason = unavailable()
    if reason:
        absent("a Milvus server", reason)
    server = MilvusServer(tmp_path_factory.mktemp("milvus-server")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module", params=STORE_KINDS)
def store_settings(request, tmp_path_factory) -> dict:
    """`store:` settings for a Milvus Lite file, or for a database of its own on the server."""
    if request.param == SERVER:
        server = request.getfixturevalue("milvus_server")
        module = request.module.__name__.rsplit(".", 1)[-1]
        return {"uri": server.uri, "db_name": server_database(server, module), "timeout": 60}
    return {"uri": str(tmp_path_factory.mktemp("milvus-lite") / "store.db")}
