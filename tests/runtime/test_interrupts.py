"""Ctrl-C and SIGTERM in every capability: a real child process in a terminal, signalled mid-run.

The contract (docs/cli.md, DESIGN.md): the command stops, prints one line saying what it kept,
exits 130 (SIGINT) or 143 (SIGTERM), and leaves no output, temporary file or folder behind. Until
this test existed, `accelkit stats` and `images embed` exited 0 without a word on SIGINT.
How fast it stops is not asserted (tests do not assert on time); the runtime guarantees it by a
watchdog (runtime/interrupts.py) that ends the process GRACE_S after the signal.
"""

import re
import signal
import subprocess
import sys

import pytest

from tests.support.interrupts import interrupt, leftovers
from tests.support.terminal import accelkit, run_in_terminal

# the tests of the big dataset run on one xdist worker (pyproject: --dist loadgroup): made once
BIG = "interrupts-big-dataset"


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory):
    """2M rows in LeRobot v3.0 files: each pass takes long enough to be interrupted in (the host
    kernel reads 1M rows in about a second on a quiet 2-core machine)."""
    path = tmp_path_factory.mktemp("interrupts") / "big"
    subprocess.run(
        [
            *accelkit("-q", "sample-dataset", str(path)),
            *("--episodes", "200", "--frames", "10000", "--layout", "v3.0"),
        ],
        check=True,
        timeout=600,
    )
    return path


def mid_steps(label: str):
    """True once the activity line shows `label done/total` with work left. The screen is
    redrawn 4 times a second, so a given count (1/37, say) may never be shown: on a fast
    machine the run once went from 0/37 to 29/37 between redraws and finished unsignalled."""
    pattern = re.compile(rf"{re.escape(label)} (\d+)/(\d+)")

    def started(text: str, seconds: float) -> bool:
        return any(int(done) < int(total) for done, total in pattern.findall(text))

    return started


def interrupt_when(argv, condition, signum=signal.SIGINT, **kwargs):
    return run_in_terminal(
        argv,
        signal_when=condition,
        signum=signum,
        timeout=600,
        **kwargs,
    )


@pytest.mark.xdist_group(BIG)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stats_mid_pass(big_dataset, tmp_path, signum):
    out = tmp_path / "norm_stats.json"
    run = interrupt(
        accelkit("stats", str(big_dataset), "-o", str(out)), "pass 1", signum, cwd=tmp_path
    )
    name = signal.Signals(signum).name
    assert run.code == 128 + signum, run.output[-2000:]
    assert f"interrupted ({name}); nothing written" in run.output
    assert run.output.count("interrupted (") == 1  # one line
    assert not out.exists() and leftovers(tmp_path) == []


@pytest.mark.xdist_group(BIG)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_stats_check_fix_mid_pass(big_dataset, signum):
    """`stats check --fix` stopped while it computes: the dataset's metadata as it was — no
    stats.json, no backup folder, nothing half-written."""
    meta = big_dataset / "meta"
    before = sorted(p.relative_to(meta) for p in meta.rglob("*"))
    run = interrupt(accelkit("stats", "check", str(big_dataset), "--fix"), "pass 1", signum)
    name = signal.Signals(signum).name
    assert run.code == 128 + signum, run.output[-2000:]
    assert f"interrupted ({name}); nothing written" in run.output
    assert sorted(p.relative_to(meta) for p in meta.rglob("*")) == before


def test_sample_dataset_leaves_no_half_dataset(tmp_path):
    target = tmp_path / "ds"
    run = interrupt(
        accelkit("sample-dataset", str(target), "--episodes", "400", "--frames", "3000"),
        "episodes",
    )
    assert run.code == 130, run.output[-2000:]
    assert "interrupted (SIGINT); nothing written" in run.output
    assert not target.exists() and leftovers(tmp_path) == []


def test_quant_eval(tmp_path):
    out = tmp_path / "eval.json"
    argv = accelkit("quant", "eval", "--methods", "rtn", "--bits", "w4a8", "--pairs", "16")
    run = interrupt_when([*argv, "--no-latency", "--output", str(out)], mid_steps("quant eval"))
    assert run.code == 130, run.output[-2000:]
    assert "interrupted (SIGINT); nothing written" in run.output
    assert not out.exists() and leftovers(tmp_path) == []


def test_bench(tmp_path):
    out = tmp_path / "bench.json"
    argv = accelkit("bench", "xla", "numpy,jax", "--matrix-size", "400", "--repeats", "50")
    run = interrupt([*argv, "--output", str(out)], "timing")
    assert run.code == 130, run.output[-2000:]
    assert "interrupted (SIGINT); nothing written" in run.output
    assert not out.exists() and leftovers(tmp_path) == []


def test_the_watchdog_ends_a_command_that_does_not_stop(tmp_path):
    """Work that cannot see the interrupt (a long native call, a library that swallows it) is
    ended GRACE_S after the signal, with the same line and exit code."""
    argv = [
        sys.executable,
        "-c",
        # a command stuck where it cannot see the first signal: the watchdog ends it
        "import time, accelkit.cli as c, accelkit.runtime.interrupts as i\n"
        "with i.handled():\n"
        "    try:\n"
        "        print('ready', flush=True)\n"
        "        time.sleep(30)\n"
        "    except BaseException:\n"
        "        time.sleep(30)  # ignores the interrupt: only the watchdog can end it\n",
    ]
    run = interrupt(argv, "ready", cwd=tmp_path)
    assert run.code == 130 and "interrupted (SIGINT); nothing written" in run.output
    assert run.seconds < 25  # ended by the watchdog GRACE_S after the signal, not by the sleep


def test_the_watchdog_line_reaches_the_terminal_while_stderr_points_at_a_log(tmp_path):
    """While Milvus Lite's engine starts, fd 2 points at its log file (images/store.py). A run
    the watchdog ended inside that block printed its line into the log: `images serve` exited
    130 with no word on the terminal."""
    log = tmp_path / "engine.log"
    argv = [
        sys.executable,
        "-c",
        "import os, time, accelkit.runtime.interrupts as i\n"
        "from accelkit.images.store.lite import _engine_output_to\n"
        "terminal = os.dup(1)\n"
        "with i.handled():\n"
        f"    with _engine_output_to({str(log)!r}):\n"
        "        try:\n"
        "            os.write(terminal, b'ready\\n')  # signalled inside the block\n"
        "            time.sleep(30)\n"
        "        except BaseException:\n"
        "            time.sleep(30)  # only the watchdog can end it, inside the block\n",
    ]
    run = interrupt(argv, "ready", cwd=tmp_path)
    assert run.code == 130 and "interrupted (SIGINT); nothing written" in run.output, run.output


SIGNALLED_CHILD = """
import importlib.machinery, os, signal, sys
import accelkit.runtime.interrupts as i
signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever this test worker inherited
sent = []
{setup}
try:
    with i.handled():
{body}
        print("not interrupted", sent, flush=True)
except i.Interrupted as exc:
    print("signalled in", sent, file=sys.stderr)
    i.report(exc.signum)
    sys.exit(exc.exit_code)
"""


def run_signalled(setup: str, body: str, tmp_path):
    script = SIGNALLED_CHILD.format(setup=setup, body=body)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )


def test_ctrl_c_while_a_native_module_initialises(tmp_path):
    """Ctrl-C during `import jax` once aborted a loaded trial's `images insert` (exit -6): the
    handler raised inside Python code that jaxlib's nanobind initialisation was running, and the
    C++ side ends the process on an exception it cannot carry (or the import fails with a
    traceback, or segfaults). Here the signal lands exactly there, every time: an audit hook
    sends it when jaxlib._jax's initialisation imports a Python module. The handler defers it
    until the import is done, then the command stops as always."""
    setup = """
def hook(event, args):
    if event != "import" or sent:
        return
    frame = sys._getframe(1)
    while frame is not None:
        loader = frame.f_locals.get("self")
        if (
            frame.f_code.co_name in ("create_module", "exec_module")
            and isinstance(loader, importlib.machinery.ExtensionFileLoader)
            and loader.name == "jaxlib._jax"
            and args[0] != loader.name
        ):
            sent.append(args[0])
            os.kill(os.getpid(), signal.SIGINT)
            return
        frame = frame.f_back
sys.addaudithook(hook)
"""
    body = "        import jax.numpy as jnp\n        jnp.zeros(3).block_until_ready()"
    done = run_signalled(setup, body, tmp_path)
    assert "signalled in ['" in done.stderr, done.stdout + done.stderr[-2000:]
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr.strip().endswith("interrupted (SIGINT); nothing written")
    assert "Traceback" not in done.stderr and "Error" not in done.stderr


def test_ctrl_c_while_typer_builds_the_commands(tmp_path):
    """The first ~0.2 s of every command is typer building the command tree from the functions'
    type hints. A Ctrl-C there, with our handler already installed, escaped as a traceback and
    exit 1 (found by signalling `accelkit stats` at random moments). Here it lands there every
    time: the real CLI, with typer's builder wrapped to signal the process first."""
    child = (
        "import os, signal, sys, typer.main\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)  # not the worker's SIG_IGN\n"
        "build = typer.main.get_command\n"
        "def signalled(app):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    sum(range(10**6))  # bytecode: where the handler runs\n"
        "    return build(app)\n"
        "typer.main.get_command = signalled\n"
        "from accelkit.cli import main\n"
        "sys.argv = ['accelkit', 'sample-dataset', 'out']\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr.strip() == "interrupted (SIGINT); nothing written", done.stderr[-2000:]
    assert not (tmp_path / "out").exists()


def test_ctrl_c_inside_a_garbage_collector_callback(tmp_path):
    """A signal handled while a gc callback runs (JAX registers one) raised an exception Python
    only prints as "ignored": the run went on as if never signalled. It is raised after. The
    callback is armed inside the block only: an automatic collection before it (CI's run once
    had one while `handled()` was entering) would signal a process with no handler yet."""
    setup = """
import gc
armed = []
def callback(phase, info):
    if phase == "start" and armed and not sent:
        sent.append(phase)
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(1000))  # bytecode inside the callback: where the handler runs
gc.callbacks.append(callback)
"""
    body = "        armed.append(1)\n        gc.collect()\n        sum(range(10**6))"
    done = run_signalled(setup, body, tmp_path)
    assert "signalled in ['start']" in done.stderr, done.stdout + done.stderr[-2000:]
    assert done.returncode == 130, done.stderr[-2000:]
    assert "ignored" not in done.stderr and "Traceback" not in done.stderr


def test_ctrl_c_inside_a_weakref_callback(tmp_path):
    """The same inside a weakref callback (importlib drops its module locks by one): a Lite 3 pass
    once signalled `images serve` just as an import ended, and the exception was printed as
    "ignored" with its traceback. Any exception Python would only print as unraisable is raised
    after, wherever it was swallowed."""
    setup = """
import weakref
class Thing:
    pass
def callback(ref):
    sent.append("weakref")
    os.kill(os.getpid(), signal.SIGINT)
    sum(range(1000))  # bytecode inside the callback: where the handler runs
"""
    body = (
        "        thing = Thing()\n        ref = weakref.ref(thing, callback)\n        del thing\n"
        "        sum(range(10**6))"
    )
    done = run_signalled(setup, body, tmp_path)
    assert "signalled in ['weakref']" in done.stderr, done.stdout + done.stderr[-2000:]
    assert done.returncode == 130, done.stderr[-2000:]
    assert "ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


def run_cli_child(tmp_path, setup: str, argv: list[str]):
    """`accelkit ARGV` as the command runs it, in a child whose `setup` code runs first."""
    child = (
        "import os, signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)  # not the worker's SIG_IGN\n"
        f"{setup}\n"
        f"sys.argv = ['accelkit', *{argv!r}]\n"
        "from accelkit.cli import main\n"
        "main()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )


def test_ctrl_c_while_the_capability_is_mounted(tmp_path):
    """Before typer builds the commands, `accelkit stats` imports its capability's commands: a
    Ctrl-C there escaped as a traceback and exit 1 (found by signalling at random moments). Here
    it lands there every time: an import hook signals the process as `accelkit.stats.cli` loads."""
    setup = (
        "class Hook:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'accelkit.stats.cli':\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "            sum(range(1000))  # bytecode: where the handler runs\n"
        "sys.meta_path.insert(0, Hook())"
    )
    done = run_cli_child(tmp_path, setup, ["stats", "missing"])
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr.strip() == "interrupted (SIGINT); nothing written", done.stderr[-2000:]


def test_a_signal_once_the_work_is_done_ends_with_the_commands_code(tmp_path):
    """A signal after the command's work, while the process winds down (here inside the last
    step of the interrupt block, then in an exit handler that takes seconds): no traceback, no
    silent -2 / -15 after a finished command; the process ends with the command's own code."""
    setup = (
        "import atexit, time\n"
        "import accelkit.runtime.interrupts as i\n"
        "real_close = os.close\n"
        "class OS:\n"
        "    def __getattr__(self, name):\n"
        "        return getattr(os, name)\n"
        "    def close(self, fd):\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        sum(range(1000))\n"
        "        return real_close(fd)\n"
        "i.os = OS()  # the interrupt block's teardown closes its copy of fd 2\n"
        "def slow_exit():\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(30)\n"
        "atexit.register(slow_exit)"
    )
    argv = ["-q", "sample-dataset", "ds", "--episodes", "1", "--frames", "4", "--json"]
    done = run_cli_child(tmp_path, setup, argv)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "interrupted" not in done.stderr, done.stderr
    assert '"ok": true' in done.stdout and (tmp_path / "ds" / "meta" / "info.json").exists()


def test_in_process_use_never_ends_the_host_program(tmp_path):
    """accelkit inside another program (a notebook, a test runner): a library call that connects
    Ray does not take over the host's SIGINT/SIGTERM, and a command called in process that was
    interrupted returns its exit code without its watchdog ending the host GRACE_S later."""
    script = (
        "import signal, sys, time\n"
        "import accelkit.runtime.interrupts as i\n"
        "from accelkit.cli import main\n"
        "host = signal.getsignal(signal.SIGINT)\n"
        "i.install()  # what runtime.ray_cluster.connect does after ray.init, here outside a command\n"
        "assert signal.getsignal(signal.SIGINT) is host, 'the host lost its SIGINT handler'\n"
        "with i.handled(process_exits=False):\n"
        "    try:\n"
        "        signal.raise_signal(signal.SIGTERM)\n"
        "    except i.Interrupted as exc:\n"
        "        code = exc.exit_code\n"
        "assert code == 143 and signal.getsignal(signal.SIGINT) is host\n"
        "try:\n"
        "    main(['devices', '--json'])\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "time.sleep(i.GRACE_S + 1.5)\n"
        "print('host still running', flush=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "host still running" in done.stdout
