"""What a person sees in a terminal, at CI sizes: every command says what it is doing from its
first second, and the screen is never still for more than 2 s (scaled by the machine's run queue
when it is busy: tests/support/terminal.silence_limit)."""

import pytest

from tests.support.terminal import accelkit, assert_never_silent, run_in_terminal


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("terminal") / "ds"
    run = run_in_terminal(accelkit("sample-dataset", str(path), "--episodes", "40"))
    assert run.code == 0, run.output
    assert_never_silent(run)
    return path


@pytest.mark.parametrize(
    "args",
    [
        ("devices",),
        ("stats", "{dataset}", "-o", "{tmp}/norm_stats.json"),
        ("stats", "{dataset}", "--fast", "--json", "-o", "{tmp}/fast.json"),
        ("stats", "check", "{dataset}"),
        (
            "quant",
            "eval",
            "--methods",
            "fp32,rtn",
            "--bits",
            "w4a8",
            "--pairs",
            "16",
            "--no-latency",
        ),
        ("quant", "apply", "--output", "{tmp}/q.safetensors", "--method", "rtn"),
        ("bench", "xla", "numpy,jax", "--matrix-size", "300"),
        ("bench", "scipy", "numpy", "--repeats", "2"),
    ],
    ids=lambda args: " ".join(a for a in args[:2] if not a.startswith("{")),  # stats, stats1, …
)
def test_never_silent(args, dataset, tmp_path):
    argv = accelkit(*(a.format(dataset=dataset, tmp=tmp_path) for a in args))
    run = run_in_terminal(argv, timeout=900)
    assert run.code == 0, run.output[-3000:]
    assert_never_silent(run)


def test_a_bad_input_answers_at_once(tmp_path):
    """Input checks come before any import of JAX or a model: the error is the first thing shown."""
    run = run_in_terminal(accelkit("stats", str(tmp_path / "missing")))
    assert run.code == 2 and "does not exist" in run.output
    assert_never_silent(run)
