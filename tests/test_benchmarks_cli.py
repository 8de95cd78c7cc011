"""The benchmarks keep the house's rules for bad input, as the product does: a bad argument or
input path is one line on stderr naming the argument and the fix, exit 2, no traceback, before any
long work; and a result JSON is never rewritten by a run that failed.

Each case runs a benchmark as a user does (`python -m benchmarks...`, never imported) from a copy
of benchmarks/ in a temporary folder, so a regression can touch no committed result: the copy's
results/ must be byte-identical afterwards."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """A folder holding a copy of benchmarks/ (its results/ included), to run them from."""
    root = tmp_path_factory.mktemp("bench-copy")
    shutil.copytree(
        ROOT / "benchmarks", root / "benchmarks", ignore=shutil.ignore_patterns("__pycache__")
    )
    return root


@pytest.fixture(scope="module")
def a_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("inputs") / "a_file"
    path.write_text("not a folder\n")
    return path


def results(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / "benchmarks" / "results").iterdir())}


def run_bad(root: Path, module: str, *args: str) -> str:
    """Run `python -m benchmarks.MODULE ARGS` from `root`; assert the one-line exit 2 and the
    results untouched; return the line."""
    before = results(root)
    # the copy's benchmarks first; accelkit and tests/support from this checkout
    paths = [str(root), str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    ran = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", *args],
        cwd=root, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert results(root) == before, "a result file changed"
    assert "Traceback" not in ran.stderr + ran.stdout, ran.stderr[-3000:]
    assert ran.returncode == 2, (ran.returncode, ran.stderr[-3000:])
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


def test_an_unknown_outage_phase_is_refused_with_the_valid_ones(copy):
    line = run_bad(copy, "reliability.outage", "--phases", "server,bogus")
    assert "--phases" in line and "bogus" in line
    assert all(phase in line for phase in ("server", "cli", "service", "migrate"))


def test_a_missing_interpreter_is_refused_before_any_worker(copy):
    line = run_bad(
        copy, "images.lite_engines", "--lite3-python", "/nonexistent/python",
        "--engines", "3", "--sizes", "10", "--queries", "2",
    )  # fmt: skip
    assert "--lite3-python" in line and "/nonexistent/python" in line


def test_an_unknown_lite_engine_is_refused(copy):
    line = run_bad(copy, "images.lite_engines", "--engines", "2,4")
    assert "--engines" in line and "'4'" in line


def test_a_data_dir_that_is_a_file_is_refused(copy, a_file):
    line = run_bad(copy, "stats.stats_bench", "--quick", "--data-dir", str(a_file))
    assert "--data-dir" in line and str(a_file) in line


def test_an_unknown_docs_page_is_refused_with_the_valid_ones(copy):
    line = run_bad(copy, "docs", "--page", "nosuch.md")
    assert "--page" in line and "nosuch.md" in line and "docs/quant.md" in line


def test_an_unknown_docs_block_is_refused(copy):
    line = run_bad(copy, "docs", "--check", "--block", "nosuch")
    assert "--block" in line and "nosuch" in line


def test_an_out_that_cannot_be_written_is_refused_before_the_run(copy, a_file):
    out = a_file / "mixture.json"  # under a regular file: not writable, even by root
    line = run_bad(copy, "stats.mixture_bench", "--quick", "--out", str(out))
    assert "--out" in line and str(out) in line


def test_an_out_that_is_a_folder_is_refused(copy, tmp_path):
    line = run_bad(copy, "images.delete_burst", "--output", str(tmp_path))
    assert "--output" in line and "folder" in line


def test_a_baseline_src_that_does_not_exist_is_refused(copy, tmp_path):
    missing = tmp_path / "nonexistent"
    line = run_bad(copy, "stats.startup_bench", "--quick", "--baseline-src", str(missing))
    assert "--baseline-src" in line and str(missing) in line


def test_a_baseline_src_without_accelkit_is_refused(copy, tmp_path):
    line = run_bad(copy, "machine.limits_bench", "--quick", "--baseline-src", str(tmp_path))
    assert "--baseline-src" in line and "accelkit" in line


@pytest.mark.parametrize(
    ("module", "flag", "value"),
    [
        ("machine.limits_bench", "--only", "stats_v30,bogus"),
        ("reliability.faults", "--only", "bogus"),
        ("quant.quant_contention", "--modes", "default,bogus"),
        ("quant.quant_eval_phases", "--methods", "bogus"),
    ],
)
def test_an_unknown_choice_in_a_list_is_refused(copy, module, flag, value):
    line = run_bad(copy, module, flag, value)
    assert flag in line and "bogus" in line


@pytest.mark.parametrize(
    ("module", "args", "flag"),
    [
        ("stats.startup_bench", ["--rounds", "0"], "--rounds"),
        ("images.lite_engines", ["--sizes", "10,x"], "--sizes"),
        ("reliability.soak", ["--minutes", "-1"], "--minutes"),
    ],
)
def test_a_bad_number_is_refused(copy, module, args, flag):
    assert flag in run_bad(copy, module, *args)


def test_docs_only_without_its_json_is_refused(copy, tmp_path):
    missing = tmp_path / "missing.json"
    line = run_bad(copy, "images.resample_bench", "--docs", "--out", str(missing))
    assert "--out" in line and str(missing) in line


@pytest.mark.parametrize(
    ("module", "uri"),
    [
        ("images.filtered_fields_bench", "/nonexistent/dir/x.db"),  # was made, then a traceback
        ("images.service_bench", "/etc/hostname"),
        ("images.filtered_fields_bench", "http://"),
    ],
)
def test_a_server_uri_that_is_not_one_is_refused_before_anything_is_made(copy, module, uri):
    line = run_bad(copy, module, "--uri", uri)
    assert "--uri" in line and "http://host:19530" in line
    assert not Path("/nonexistent").exists()


def test_a_negative_wait_is_refused(copy):
    line = run_bad(copy, "images.delete_burst", "--settle", "-1")
    assert "--settle" in line and "0 or more" in line


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("--group-size", "-8"), "--group-size"),
        (("--compile-rows", "duqant/w4a8"), "--compile-rows"),
    ],
)
def test_a_quant_bench_argument_it_cannot_use_is_refused(copy, args, flag):
    """A bad group size was a traceback after the model loaded; a misspelt row was taken and
    its compiled latency silently not measured."""
    line = run_bad(copy, "quant.quant_bench", *args)
    assert flag in line


@pytest.mark.parametrize(
    ("module", "args", "flag"),
    [
        ("reliability.soak", ("--warmup-s", "-5"), "--warmup-s"),
        ("research.quant_matrix", ("--texts", "nope:3"), "--texts"),  # was taken and ignored
        ("research.quant_matrix", ("--texts", "minilm:abc"), "--texts"),
        ("reliability.outage", ("--merge", "--out", "/nonexistent/x.json"), "--merge"),
    ],
)
def test_more_arguments_are_checked_before_any_work(copy, module, args, flag):
    assert flag in run_bad(copy, module, *args)


@pytest.mark.parametrize("runs", ["warm", "warm,cold", "cold,cold"])
def test_a_warm_run_without_a_cold_one_before_it_is_refused(copy, runs):
    """A warm run is measured on the caches the cold run before it left: alone or first, it was
    a cold run recorded as warm, over the committed result."""
    line = run_bad(copy, "quant.quant_eval_time", "--runs", runs)
    assert "--runs" in line and "cold,warm" in line


def test_a_group_size_that_divides_no_layer_is_refused_before_the_model_loads(copy):
    """7 divides no MiniLM layer: a traceback after the model loaded (a size that divides only
    the 1536-wide layers, 512, is refused alike: the rest would be left in float)."""
    line = run_bad(copy, "quant.quant_bench", "--group-size", "7")
    assert "--group-size" in line and "384, 1536" in line


@pytest.mark.parametrize(
    "module", ["reliability.soak", "reliability.fuzz_service", "images.lite_engines"]
)
def test_a_negative_seed_is_refused(copy, module):
    """numpy's generators refuse it, after the model was built and the service started."""
    line = run_bad(copy, module, "--seed", "-1")
    assert "--seed" in line and "0 or more" in line


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("module", ["images.service_bench", "images.filtered_fields_bench"])
def test_a_server_that_cannot_be_reached_is_refused_before_any_work(copy, module, closed_port):
    uri = f"http://127.0.0.1:{closed_port}"
    line = run_bad(copy, module, "--uri", uri)
    assert "--uri" in line and uri in line and "cannot connect" in line


def test_an_empty_only_is_refused_not_taken_as_every_case(copy):
    line = run_bad(copy, "reliability.faults", "--only", "")
    assert "--only" in line and "empty" in line


def run_from(root: Path, *command: str, env: dict | None = None, **kwargs):
    paths = [str(root), str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    return subprocess.run(
        [sys.executable, *command], cwd=root, env=env, capture_output=True, text=True,
        timeout=120, **kwargs,
    )  # fmt: skip


def test_the_floors_help_exits_0_and_bad_usage_is_one_line(copy):
    ran = run_from(copy, "-m", "benchmarks.machine.floors", "--help")
    assert ran.returncode == 0, ran.stderr
    assert "read-lean DATASET" in ran.stdout and not ran.stderr
    assert "IMAGES" in run_bad(copy, "machine.floors")
    assert "BATCH" in run_bad(copy, "machine.floors", "model", "x.npy", "8", "many")


def test_delete_burst_removes_its_work_folder_on_error(copy, tmp_path):
    """Its mkdtemp folder (the Milvus Lite database, the service's log) was never removed; here
    the store fails at once (a stand-in that raises), and the folder must go with the error."""
    work = tmp_path / "tmp"
    work.mkdir()
    script = (
        "import runpy, accelkit.images.store as store\n"
        "class Broken:\n"
        "    def __init__(self, *a, **k): raise RuntimeError('the store fails')\n"
        "store.VectorStore = Broken\n"
        "runpy.run_module('benchmarks.images.delete_burst', run_name='__main__')\n"
    )
    out = tmp_path / "out.json"
    ran = run_from(copy, "-c", script, "--output", str(out), env={"TMPDIR": str(work)})
    assert ran.returncode != 0 and "the store fails" in ran.stderr, ran.stderr[-3000:]
    assert list(work.iterdir()) == [] and not out.exists()


def test_sigterm_runs_the_cleanup_of_a_benchmark(copy, tmp_path):
    """A benchmark stopped with SIGTERM (its parser turns it into SystemExit(143)) removes its
    temporary folder and stops what it started, as after Ctrl-C: an outage run left its Milvus
    server, the port forwarder and ~0.5 GB in /tmp behind."""
    import signal

    script = (
        "import sys, tempfile, time\n"
        "from benchmarks.common import ArgumentParser\n"
        "ArgumentParser().parse_args([])\n"
        "with tempfile.TemporaryDirectory(prefix='stopped-') as tmp:\n"
        "    print(tmp, flush=True)\n"
        "    time.sleep(60)\n"
    )
    paths = [str(copy), str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    env["TMPDIR"] = str(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-c", script], cwd=copy, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        folder = Path(process.stdout.readline().strip())
        assert folder.is_dir()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 143, err
    assert "Traceback" not in err and not folder.exists()
