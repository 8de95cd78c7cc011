"""`accelkit bench` end to end: one-line errors with exit 2, JSON that validates, PNG, the report."""

import json

import pytest

from accelkit.bench.schema import validate
from accelkit.cli import main
from tests.support.cli import result_of


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as info:
        main(args)
    out, err = capsys.readouterr()
    return info.value.code, out, err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["xla", "numpy,cupy"], "cupy"),
        (["xla", "--dtype", "float16"], "float16"),
        (["xla", "--matrix-size", "1"], "--matrix-size"),
        (["xla", "--repeats", "0"], "--repeats"),
        (["chain", "tensorflow"], "tensorflow"),
        (["jit", "--scale", "0"], "--scale"),
        (["scipy", "--array-length", "3"], "--array-length"),
        (["autograd", ","], "MODES"),
        (["mnist", "--data", "/no/such/folder"], "/no/such/folder"),
        (["mnist", "--epochs", "0"], "--epochs"),
        (["mnist", "--momentum", "1.5"], "--momentum"),
        (["mnist", "--learning-rate", "0"], "--learning-rate"),
        (["mnist", "--batch-size-validation", "0"], "--batch-size-validation"),
        (["train", "tensorflow"], "tensorflow"),
        (["train", "--samples", "100"], "--samples"),
        (["train", "--dropout", "1"], "--dropout"),
        (["train", "--epochs", "3", "--checkpoint-epoch", "3"], "--checkpoint-epoch"),
        (["parallel", "--devices", "1"], "--devices"),
        (["xla", "--matrix-size", "abc"], "--matrix-size"),
    ],
)
def test_bad_inputs_exit_2_with_one_line(args, needle, capsys):
    code, _, err = run_cli(["bench", *args], capsys)
    assert code == 2
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1


def test_xla_writes_valid_json_and_png(tmp_path, capsys):
    out, png = tmp_path / "xla.json", tmp_path / "xla.png"
    code, stdout, _ = run_cli(
        [
            "bench",
            "xla",
            "numpy,pytorch",
            "--matrix-size",
            "40",
            "--repeats",
            "3",
            "--threads",
            "1",
            "--output",
            str(out),
            "--plot",
            str(png),
        ],
        capsys,
    )
    assert code == 0
    doc = json.loads(out.read_text())
    validate(doc)
    result = doc["results"][0]
    assert result["passed"] and result["params"]["threads"] == 1
    assert {t["backend"] for t in result["timings"]} == {"numpy", "pytorch"}
    assert all(t["repeats"] == 3 for t in result["timings"])
    assert doc["environment"]["threads"]["torch_intra_op"] == 1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "product" in stdout


def test_one_process_per_backend_interleaved(tmp_path, capsys):
    out = tmp_path / "chain.json"
    code, _, _ = run_cli(
        [
            "bench",
            "chain",
            "numpy,jax-jit",
            "--matrix-size",
            "24",
            "--repeats",
            "2",
            "--processes",
            "--rounds",
            "2",
            "--output",
            str(out),
        ],
        capsys,
    )
    assert code == 0
    doc = json.loads(out.read_text())
    validate(doc)
    result = doc["results"][0]
    assert result["passed"] and "interleaved" in result["params"]["processes"]
    assert all(t["repeats"] == 4 for t in result["timings"])  # 2 rounds × 2 repeats pooled
    assert result["facts"]["jit(f) compiled matmuls"] == 10


def test_all_quick_writes_report_json_and_figure(tmp_path, capsys):
    report, out = tmp_path / "REPORT.md", tmp_path / "all.json"
    code, _, err = run_cli(
        ["bench", "all", "--quick", "--report", str(report), "--output", str(out)], capsys
    )
    assert code == 0, err
    doc = json.loads(out.read_text())
    validate(doc)
    names = [r["experiment"] for r in doc["results"]]
    assert names == ["xla", "chain", "jit", "scipy", "autograd", "mnist", "train", "parallel"]
    assert all(r["passed"] for r in doc["results"])
    text = report.read_text()
    for name in names:
        assert f"## {name}" in text
    assert "UNSYNCED" in text and "![timings](REPORT.png)" in text and "CPU 7" in text
    assert "resumed in a fresh process" in text and "pmap + pmean" in text and ".at[].set" in text
    assert "vjp_flops" in text  # the flax tabulate table, as a code block
    assert "**Quick run**" in text and "not measurements" in text  # tiny sizes say so
    assert (tmp_path / "REPORT.png").read_bytes()[:4] == b"\x89PNG"
    assert "bench all 8/8" in err or "bench all 7/8 (87%) · parallel" in err  # counted


def test_train_pytorch_alone_json(capsys):
    code, stdout, err = run_cli(
        ["bench", "train", "pytorch", "--samples", "400", "--epochs", "2", "--json"], capsys
    )
    assert code == 0, err
    doc = result_of(stdout)
    validate(doc)
    result = doc["results"][0]
    assert result["passed"] and result["params"]["checkpoint_epoch"] == 1
    names = [c["name"] for c in result["checks"]]
    assert any(n.startswith("pytorch: resumed in a fresh process") for n in names)
    assert not any("flax" in n or "keras" in n for n in names)  # only what was asked for
    assert [s["label"] for s in result["series"]] == ["pytorch", "pytorch (resumed at epoch 1)"]
    assert "bench train: resume from checkpoints" in err


def test_json_prints_the_document_on_stdout(capsys):
    code, stdout, _ = run_cli(["bench", "scipy", "numpy", "--repeats", "2", "--json"], capsys)
    assert code == 0
    doc = result_of(stdout)
    validate(doc)
    assert doc["results"][0]["experiment"] == "scipy"


def test_failed_check_exits_3(capsys):
    from accelkit.bench import harness
    from accelkit.bench.api import BenchRun
    from accelkit.bench.cli import render
    from accelkit.errors import CheckFailed

    result = harness.Result("scipy", {"modes": ["numpy"]})
    result.checks.append(harness.check_true("forced failure", False, "a check that fails"))
    with pytest.raises(
        CheckFailed, match="1 correctness check\\(s\\) failed: forced failure"
    ) as caught:
        render(BenchRun("scipy", [result], harness.environment()))
    assert caught.value.exit_code == 3
