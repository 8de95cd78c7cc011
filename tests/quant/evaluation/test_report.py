"""`accelkit quant eval --report DIR` on the shipped MiniLM: the Markdown tables carry report.json's
numbers, and the per-layer relative errors equal an independent computation (FP32 and quantized
models run here with their own forward hooks, errors summed in numpy float64). The same run is
the small real eval whose `--output` file is what `--json` prints (one MiniLM eval, not two)."""

import copy
import json
import re

import numpy as np
import pytest

from tests.support.cli import result_of, run_cli

pytest.importorskip("transformers")
pytest.importorskip("matplotlib")
torch = pytest.importorskip("torch")
# one xdist worker runs this module (pyproject: --dist loadgroup), so its real run is made once
pytestmark = pytest.mark.xdist_group("quant-report")

ARGS = ["--methods", "fp32,rtn", "--bits", "w4a8", "--pairs", "16", "--no-latency"]
RTN = 1  # the rtn/w4a8 row (FP32's is first)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One real run: (report folder, report.json, the --json result printed on stdout, the
    --output file's rows)."""
    base = tmp_path_factory.mktemp("quant-report")
    folder, output = base / "report", base / "eval.json"
    import contextlib
    import io

    from accelkit.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as info:
        main(["quant", "eval", *ARGS, "--report", str(folder), "--output", str(output), "--json"])
    assert info.value.code in (0, None)
    report = json.loads((folder / "report.json").read_text())
    return folder, report, result_of(out.getvalue()), json.loads(output.read_text())["rows"]


def test_output_is_what_json_prints_and_the_rows_are_sane(run):
    _, _, printed, rows = run
    assert printed["rows"] == rows  # --json prints what --output writes
    assert [(r["method"], r["bits"]) for r in rows] == [("fp32", "w32a32"), ("rtn", "w4a8")]
    assert rows[0]["mean_cosine"] > 0.9999 and rows[0]["top1_agreement"] == 1.0
    assert 0.8 < rows[1]["mean_cosine"] < 0.9999
    assert rows[1]["quant_layers_mb"] < 0.2 * rows[1]["fp32_layers_mb"]


def table(md: str, heading: str) -> list[list[str]]:
    """The cells of the Markdown table under `heading` (header row first), `\\|` unescaped."""
    section = md.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in re.split(r"(?<!\\)\|", r.strip()[1:-1])] for r in rows]
    return [[c.replace("\\|", "|") for c in row] for i, row in enumerate(cells) if i != 1]


def test_report_files_and_json(run):
    folder, report, printed, _ = run
    assert sorted(p.name for p in folder.iterdir()) == ["report.json", "report.md", "report.png"]
    assert report["schema"] == "accelkit.quant.report/1" and report["extra_passes"] == 0
    assert report["rows"] == printed["rows"]  # the same run as the table on stdout
    assert report["chosen"] == ["rtn/w4a8"]
    assert report["recommendation"] == printed["recommendation"]
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in fp32_model().modules())
    assert [layer["index"] for layer in report["layers"]] == list(range(n_linear))
    errors = [layer["relative_error"]["rtn/w4a8"] for layer in report["layers"]]
    assert all(0 < e < 1 for e in errors)
    import matplotlib.image

    image = matplotlib.image.imread(folder / "report.png")
    assert image.shape[0] > 300 and image.shape[1] > 800


def test_markdown_tables_equal_the_json(run):
    folder, report, _, _ = run
    md = (folder / "report.md").read_text()
    fidelity = table(md, "## Fidelity")
    header, body = fidelity[0], fidelity[1:]
    assert header == ["method", "bits", "mean cos", "min cos", "top-1 agree", "layers MB"]
    assert len(body) == len(report["rows"]) == 2
    for i, (cells, row) in enumerate(zip(body, report["rows"], strict=True)):
        bold = [c.startswith("**") and c.endswith("**") for c in cells]
        assert bold == [i == RTN] * len(cells)  # the chosen row, and only it
        cells = [c.strip("*") for c in cells]
        assert cells[:2] == [row["method"], row["bits"]]
        keys = ["mean_cosine", "min_cosine", "top1_agreement", "quant_layers_mb"]
        for text, key, spec in zip(cells[2:], keys, [".4f", ".4f", ".3f", ".2f"], strict=True):
            assert text == format(row[key], spec), key
    assert "**Chosen for w4a8: rtn**" in md
    layers = table(md, "## Per-layer relative error")
    assert layers[0] == ["#", "layer", "**rtn/w4a8**"]
    by_name = {layer["name"]: layer for layer in report["layers"]}
    shown = layers[1:]
    assert len(shown) == min(20, len(report["layers"]))
    worst = sorted(report["layers"], key=lambda x: -x["relative_error"]["rtn/w4a8"])[:20]
    assert [c[1] for c in shown] == [layer["name"] for layer in worst]  # worst first
    for index, name, value in shown:
        assert int(index) == by_name[name]["index"]
        assert value == format(by_name[name]["relative_error"]["rtn/w4a8"], ".4f")


def fp32_model():
    from accelkit.quant.evaluation.fidelity import load_subject

    return load_subject("minilm", n_pairs=16).model


@torch.no_grad()
def outputs(model, names, batch) -> dict[str, np.ndarray]:
    """Each named Linear's output on `batch`, its real tokens only, float64."""
    got, mask = {}, batch["attention_mask"].bool()
    handles = [
        model.get_submodule(n).register_forward_hook(
            lambda _m, _i, out, n=n: got.__setitem__(n, out[mask].double().numpy())
        )
        for n in names
    ]
    try:
        model(**batch)
    finally:
        for h in handles:
            h.remove()
    return got


def test_layer_errors_equal_an_independent_computation(run):
    _, report, _, _ = run
    from accelkit.quant.config import QuantConfig, config_for_run
    from accelkit.quant.evaluation.fidelity import load_subject, subject_fidelity, subject_reference
    from accelkit.quant.method.convert import quantize

    subject = load_subject("minilm", n_pairs=16)
    fp32 = subject.model
    base = config_for_run(None, None).model_dump(
        exclude={"method", "wbits", "abits", "disable_compile"}
    )
    qmodel = quantize(
        copy.deepcopy(fp32),
        QuantConfig(method="rtn", wbits=4, abits=8, **base),
        subject.calibration,
    )
    # the same quantized model as the run's: its fidelity equals the report's row
    fid = subject_fidelity(subject, qmodel, subject_reference(subject))
    assert fid["mean_cosine"] == pytest.approx(report["rows"][RTN]["mean_cosine"], rel=1e-12)

    names = [n for n, m in fp32.named_modules() if isinstance(m, torch.nn.Linear) and n]
    assert names == [layer["name"] for layer in report["layers"]]
    err = dict.fromkeys(names, 0.0)
    ref = dict.fromkeys(names, 0.0)
    for batch in subject.data:
        y, yq = outputs(fp32, names, batch), outputs(qmodel, names, batch)
        for n in names:
            err[n] += float(np.sum((yq[n] - y[n]) ** 2))
            ref[n] += float(np.sum(y[n] ** 2))
    expected = np.array([np.sqrt(err[n] / ref[n]) for n in names])
    got = np.array([layer["relative_error"]["rtn/w4a8"] for layer in report["layers"]])
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_a_folder_with_other_files_is_refused_before_the_run(tmp_path, capsys):
    folder = tmp_path / "busy"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    code, _, err = run_cli(["quant", "eval", *ARGS, "--report", str(folder)], capsys)
    assert code == 2 and "--report" in err and err.count("\n") == 1
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def test_a_previous_report_is_replaced_and_pipes_in_names_are_escaped(run, tmp_path):
    from accelkit.quant.evaluation.report import markdown, write_report

    _, report, _, _ = run
    target = tmp_path / "again"
    write_report(target, report)
    odd = copy.deepcopy(report)
    odd["layers"][0]["name"] = "weird|name\\x"
    odd["layers"][0]["relative_error"]["rtn/w4a8"] = 9.0  # the worst: first in the table
    write_report(target, odd)  # a previous report: replaced whole
    assert json.loads((target / "report.json").read_text()) == odd
    assert sorted(p.name for p in tmp_path.iterdir()) == ["again"]  # nothing left beside
    md = markdown(odd)
    assert "| 0 | weird\\|name\\\\x | 9.0000 |" in md
    first = table(md, "## Per-layer relative error")[1]
    assert len(first) == 3 and first[1] == "weird|name\\\\x"


@pytest.fixture
def tiny_llama(tmp_path):
    """A 2-layer Llama with random weights (MiniLM's tokenizer) and a file of evaluation texts."""
    import transformers

    from tests.support.quant_eval import TEXTS, with_tokenizer

    torch.manual_seed(1)
    config = transformers.LlamaConfig(
        vocab_size=30522, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
    )  # fmt: skip
    folder = tmp_path / "tiny-llama"
    transformers.LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    (tmp_path / "eval.txt").write_text("\n".join(TEXTS))
    return with_tokenizer(folder), tmp_path / "eval.txt"


def test_a_causal_lm_report(tiny_llama, tmp_path, capsys):
    """A causal LM's report: next-token agreement and perplexity ratio in the table and the
    bars; every Linear (lm_head included) has its relative error."""
    folder, (model, texts) = tmp_path / "lm-report", tiny_llama
    code, _, _ = run_cli(
        ["quant", "eval", "--model", str(model), "--methods", "fp32,rtn", "--bits", "w4a8",
         "--eval-data", str(texts), "--no-latency", "--report", str(folder)],
        capsys,
    )  # fmt: skip
    assert code in (0, None)
    report = json.loads((folder / "report.json").read_text())
    assert report["kind"] == "causal-lm" and report["chosen"] == ["rtn/w4a8"]
    assert len(report["layers"]) == 15 and report["layers"][-1]["name"] == "lm.lm_head"
    assert all(0 < layer["relative_error"]["rtn/w4a8"] < 1 for layer in report["layers"])
    fidelity = table((folder / "report.md").read_text(), "## Fidelity")
    assert fidelity[0][2:4] == ["next-token agree", "ppl ratio"]
    rtn = report["rows"][1]
    assert fidelity[2][2:4] == [
        f"**{rtn['top1_agreement']:.3f}**",
        f"**{rtn['perplexity_ratio']:.4f}**",
    ]


def test_eval_times_and_ratios_come_from_the_same_rounds(monkeypatch, capsys):
    """A setting whose median over its rounds is twice FP32's median in those same rounds is
    shown as 2.00× — never as faster (the median of per-round ratios said 0.91×); FP32 is never
    timed alone (a window of its own, 175.6 ms under other load, is what made the table read
    faster than the line under it). Timings injected, no clock."""
    from torch import nn

    from accelkit.quant.api import EvalResult
    from accelkit.quant.cli import _print_eval_table
    from accelkit.quant.evaluation import speed
    from accelkit.quant.evaluation.recommend import recommend
    from accelkit.quant.evaluation.sweep import EvalRow
    from accelkit.runtime import timing

    ours = [0.001, 0.001, 0.010, 0.010, 0.010]  # median 10 ms
    fp32_paired = [0.002, 0.002, 0.011, 0.011, 0.005]  # median 5 ms; per-round ratios' median 0.91

    done = {"rounds": 0}  # the rounds of the current measurement so far (5 in all)

    def rounds(runs, n, **_kwargs):
        assert set(runs) == {"fp32", "ours"}  # FP32 is never timed alone
        start = done["rounds"] % 5
        done["rounds"] += n
        wall = {"fp32": fp32_paired[start : start + n], "ours": ours[start : start + n]}
        return timing.Rounds(wall, {k: v for k, v in wall.items()}, {}, {})

    class Tiny(nn.Module):
        def forward(self, input_ids):
            return input_ids

    monkeypatch.setattr(timing, "interleaved", rounds)
    monkeypatch.setattr(speed, "compile_model", lambda model: model)
    fp32, quantized = Tiny(), Tiny()
    bench = speed.SpeedBench(fp32, {"input_ids": torch.zeros(2, 3)}, speed.Phases(), rounds=5)
    base, timed = vars(bench.measure(fp32, True)), vars(bench.measure(quantized, True))
    assert timed["compiled_ms"] == pytest.approx(10.0)
    assert all(v is None for v in base.values())  # FP32 alone: not timed
    for kind in ("eager", "compiled", "compiled_one"):
        assert timed[f"{kind}_fp32_ms"] == pytest.approx(5.0)  # FP32 in the same rounds
        assert timed[f"{kind}_ratio"] == pytest.approx(2.0)  # = the two medians shown

    sizes = {
        "quant_layers_mb": 1.0,
        "fp32_layers_mb": 8.0,
        "mean_cosine": 0.99,
        "top1_agreement": 1.0,
    }
    rows = [
        EvalRow("fp32", "w32a32", **sizes, label="fp32", **base),
        EvalRow("duquant", "w4a8", **sizes, label="duquant/w4a8", **timed),
    ]
    result = EvalResult(
        model="m", kind="encoder", dtype="float32", texts=4, max_length=8, pairs=2, rows=rows,
        recommendation=recommend(rows), timing_batch=[2, 3],
    )  # fmt: skip
    assert "2.00× compiled FP32" in result.recommendation["text"]
    assert result.recommendation["setting"]["label"] == "fp32"  # slower: FP32 is kept
    assert "same" in result.document()["timing"]["ratio"]
    monkeypatch.setenv("COLUMNS", "250")
    _print_eval_table(result)
    line = next(x for x in capsys.readouterr().out.splitlines() if "duquant/w4a8" in x)
    cells = [c.strip() for c in re.split(r"[│|]", line) if c.strip()]
    # eager, compiled and at one text: ms, FP32 ms (same rounds), × FP32
    assert cells[-9:] == ["10.00", "5.00", "2.00"] * 3, line
