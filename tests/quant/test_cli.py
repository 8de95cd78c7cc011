"""`accelkit quant` commands: bad input exits 2 with one line (a small real eval writing its JSON
is tests/quant/evaluation/test_report.py's run, which the report's tests share)."""

import pytest

from accelkit.cli import main
from tests.support.cli import result_of


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--methods", "gptq"], "gptq"),
        (["--bits", "w4x8"], "w4x8"),
        (["--bits", "w9a8"], "2..8"),
        (["--bits", "w4a8,w16a16"], "'w16a16' quantizes nothing"),  # that is the fp32 row
        (["--model", "llama"], "llama"),
        (["--pairs", "0"], "--pairs"),
        (["--weight-format", "groups"], "--weight-format 'groups'"),
    ],
)
def test_bad_inputs_exit_2(args, needle, capsys):
    with pytest.raises(SystemExit) as info:
        main(["quant", "eval", *args])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("env", "flag", "expected"),
    [
        ({}, [], True),
        ({"OPENPI_DISABLE_TORCH_COMPILE": "1"}, [], False),
        ({"OPENPI_DISABLE_TORCH_COMPILE": "1"}, ["--compile"], True),
        ({}, ["--no-compile"], False),
    ],
)
def test_compile_flag_beats_the_environment(monkeypatch, env, flag, expected):
    import typer

    from accelkit.quant.evaluation import sweep

    seen = []

    def record(*args, compiled, **kwargs):  # stands in for the slow eval: only the choice matters
        seen.append(compiled)
        raise typer.Exit(0)

    for name in ("OPENPI_DISABLE_TORCH_COMPILE", "ACCELKIT_QUANT_DISABLE_COMPILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sweep, "run_eval", record)
    with pytest.raises(SystemExit):
        main(["quant", "eval", "--methods", "fp32", "--bits", "w4a8", *flag])
    assert seen == [expected]


def test_library_chatter_is_hidden_unless_debug():
    import os
    import subprocess
    import sys

    env = {**os.environ, "XLA_FLAGS": ""}
    done = subprocess.run(
        [sys.executable, "-m", "accelkit", "quant", "eval", "--methods", "fp32", "--bits", "w4a8",
         "--pairs", "2", "--no-latency", "--json"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert result_of(done.stdout)["rows"][0]["method"] == "fp32"
    for noise in (
        "Failed to load",
        "Detected no triton",
        "LOAD REPORT",
        "_pytree",
        "Loading weights",
    ):
        assert noise not in done.stderr, done.stderr


def test_apply_that_quantizes_nothing_is_refused(tmp_path, capsys):
    """wbits 16 with abits 16 is the FP32 model under another name: refused, nothing written."""
    with pytest.raises(SystemExit) as info:
        main(["quant", "apply", "--wbits", "16", "--abits", "16", "--output", str(tmp_path / "q")])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1 and "quantizes nothing" in err, err
    assert not (tmp_path / "q").exists()


def test_repeated_settings_run_once():
    from accelkit.quant.api import _items

    assert _items("rtn, RTN,duquant,rtn", "methods", ("rtn", "duquant")) == ["rtn", "duquant"]
    assert _items(["w4a8", "W4A8 ", "w8a8"], "bits") == ["w4a8", "w8a8"]


def test_a_setting_written_two_ways_runs_once():
    """w04a8 is w4a8: the old dedupe compared spellings and ran the setting twice."""
    from accelkit.quant.api import _eval_inputs

    _, bits, _ = _eval_inputs("minilm", "rtn", "w4a8,w04a8,W8A08", 8, None, "auto", None)
    assert bits == ["w4a8", "w8a8"]


def test_an_unsupported_bits_entry_is_named_as_given(capsys):
    """It said `wbits=9 is not supported` (an option of `quant apply`, not of `eval`)."""
    from accelkit.cli import main

    with pytest.raises(SystemExit) as info:
        main(["quant", "eval", "--bits", "w4a8,w9a8", "--no-latency"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.count("\n") == 1, err
    assert "--bits entry 'w9a8'" in err and "9-bit weights" in err and "wbits" not in err, err
