"""`accelkit.bench.run`, the library API every `accelkit bench` command calls: options checked
once with the command's messages, a `BenchRun` whose document validates, the CLI's defaults the
same as the API's, and an import that stays cheap."""

import subprocess
import sys

import pytest

from accelkit.errors import CheckFailed, ConfigError


def test_run_returns_a_bench_run_the_cli_would_render(tmp_path):
    import accelkit.bench as bench

    steps = []
    done = bench.run(
        "scipy", ["numpy"], array_length=200, repeats=2, warmup=0, threads=1, progress=steps.append
    )
    assert isinstance(done, bench.BenchRun) and done.experiment == "scipy"
    assert done.passed and done.failed == [] and steps == ["running"]
    (result,) = done.results
    assert result.params["modes"] == ["numpy"] and result.params["array_length"] == 200
    assert result.params["threads"] == 1 and done.environment["dtype"] == "float64"
    assert all(len(t.times_s) == 2 for t in result.timings)
    doc = done.document()
    bench.validate(doc)
    assert doc["results"][0]["experiment"] == "scipy"
    import json

    written = json.loads(done.write_json(tmp_path / "r.json").read_text())
    assert written == json.loads(json.dumps(doc))
    assert done.write_plot(tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    report = done.write_report(tmp_path / "r.md").read_text()
    assert "## scipy" in report and "![timings](r.png)" in report


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda run: run("nope"), "experiment 'nope' is not known"),
        (lambda run: run("xla", matrix_sizes=4), "has no option 'matrix_sizes'"),
        (lambda run: run("jit", "numpy"), "takes no MODES"),
        (lambda run: run("jit", processes=True), "has no option 'processes'"),
        (lambda run: run("mnist", repeats=2), "has no option 'repeats'"),
        (lambda run: run("xla", []), "MODES is empty"),
        (lambda run: run("xla", "numpy", matrix_size=1), "--matrix-size 1 must be at least 2"),
        (lambda run: run("train", "pytorch", samples=10), "--samples 10 is too few"),
    ],
)
def test_bad_options_raise_one_line_config_errors(call, needle):
    from accelkit.bench import run

    with pytest.raises(ConfigError) as caught:
        call(run)
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_failed_checks_are_a_result_until_raised():
    from accelkit.bench import BenchRun, Result
    from accelkit.bench.harness import check_true

    ok, bad = Result("a", {}), Result("b", {})
    ok.checks.append(check_true("holds", True))
    bad.checks.append(check_true("breaks", False))
    BenchRun("a", [ok], {}).raise_for_failures()  # nothing failed: nothing raised
    failing = BenchRun("all", [ok, bad], {})
    assert not failing.passed and failing.failed == ["breaks"]
    with pytest.raises(CheckFailed, match=r"1 correctness check\(s\) failed: breaks"):
        failing.raise_for_failures()


def test_every_command_has_the_api_defaults():
    """One experiment, two faces: each `accelkit bench` option defaults to what `run` does (the
    MODES argument to every backend the experiment knows)."""
    import typer

    from accelkit.bench.api import PLANS, defaults, parse_modes
    from accelkit.cli import app

    group = typer.main.get_command(app).commands["bench"]
    assert set(group.commands) == set(PLANS)
    for name, command in group.commands.items():
        api = defaults(name)
        for param in command.params:
            if param.name == "modes":
                module = name if name != "scipy" else "scipy_opt"
                import importlib

                modes = importlib.import_module(f"accelkit.bench.experiments.{module}").MODES
                assert parse_modes(param.default, modes) == list(modes), name
                assert api["modes"] is None
            elif param.name in api:
                assert param.default == api[param.name], (name, param.name)
            else:  # rendering: not the library's business
                assert param.name in ("output", "as_json", "plot", "report", "help"), param.name


def test_importing_the_package_stays_cheap():
    code = (
        "import sys, accelkit.bench as b; assert b.run.__module__ == 'accelkit.bench.api';"
        "print(sorted(m for m in ('jax', 'torch', 'numpy', 'matplotlib') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
