"""`accelkit quant` commands: bad input exits 2 with one line; a small real eval writes its JSON."""

import json

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


def test_small_eval_writes_json(tmp_path, capsys):
    out = tmp_path / "eval.json"
    try:
        main(
            [
                "quant",
                "eval",
                "--methods",
                "fp32,rtn",
                "--bits",
                "w4a8",
                "--pairs",
                "16",
                "--no-latency",
                "--output",
                str(out),
                "--json",
            ]
        )
    except SystemExit as exc:  # typer may end a successful command with exit code 0
        assert exc.code in (0, None)
    printed = capsys.readouterr().out
    rows = json.loads(out.read_text())["rows"]
    assert result_of(printed)["rows"] == rows  # --json prints what --output writes
    assert [(r["method"], r["bits"]) for r in rows] == [("fp32", "w32a32"), ("rtn", "w4a8")]
    assert rows[0]["mean_cosine"] > 0.9999 and rows[0]["top1_agreement"] == 1.0
    assert 0.8 < rows[1]["mean_cosine"] < 0.9999
    assert rows[1]["quant_layers_mb"] < 0.2 * rows[1]["fp32_layers_mb"]


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
