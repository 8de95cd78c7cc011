"""`quant eval`'s one timing table: every "× FP32" is the quotient of the two times shown beside it
(the setting's median and FP32's median in the same interleaved rounds), eager or compiled, and
the recommendation line under it quotes the same ratio — and never recommends a setting slower
than FP32. Properties over generated rows; the ratios a row carries
from elsewhere (`*_ratio`) are drawn independently, so a table that read them would fail."""

import re
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.quant.evaluation.recommend import MIN_COSINE, recommend
from accelkit.quant.evaluation.report import (
    TIMINGS,
    markdown,
    timing_cells,
    timing_header,
    timing_kinds,
)
from accelkit.quant.evaluation.sweep import EvalRow

KINDS = [kind for _, kind in TIMINGS]
times = st.one_of(st.none(), st.floats(0.01, 5000.0))


@st.composite
def eval_rows(draw):
    rows = [EvalRow("fp32", "w32a32", 8.0, 8.0, mean_cosine=1.0, top1_agreement=1.0, label="fp32")]
    compiled = draw(st.booleans())  # --no-compile: eager times only
    for i in range(draw(st.integers(1, 5))):
        row = EvalRow(
            draw(st.sampled_from(["rtn", "smoothquant", "duquant"])),
            draw(st.sampled_from(["w4a8", "w4a4", "w8a8", "w4a7"])),
            1.0,
            8.0,
            mean_cosine=draw(st.floats(0.95, 1.0)),
            top1_agreement=draw(st.floats(0.8, 1.0)),
            label=f"setting{i}",
        )
        for kind in KINDS:
            if kind != "eager" and not compiled:
                continue
            setattr(row, f"{kind}_ms", draw(times))
            setattr(row, f"{kind}_fp32_ms", draw(times))
            setattr(row, f"{kind}_ratio", draw(st.floats(0.1, 3.0)))  # not what is shown
        rows.append(row)
    return rows


def close(shown: str, exact: float) -> bool:
    return abs(float(shown) - exact) <= 0.005 + 1e-9


@settings(max_examples=150, deadline=None)
@given(eval_rows())
def test_every_ratio_is_the_quotient_of_the_times_shown_beside_it(rows):
    dicts = [vars(r) for r in rows]
    kinds = timing_kinds(dicts)
    header = timing_header(kinds)
    assert len(header) == 3 * len(kinds)
    for r in dicts:
        cells = timing_cells(r, kinds)
        for j in range(len(kinds)):
            ms, base, ratio = cells[3 * j : 3 * j + 3]
            if ratio == "-":
                continue
            assert ms != "-" and base != "-"  # a ratio only beside both of its times
            # the shown ratio is the quotient of the shown times, up to their rounding (.2f)
            lo = (float(ms) - 0.005) / (float(base) + 0.005)
            hi = (float(ms) + 0.005) / (float(base) - 0.005) if float(base) > 0.005 else 1e12
            assert lo - 0.005 <= float(ratio) <= hi + 0.005, (ms, base, ratio)


@settings(max_examples=150, deadline=None)
@given(eval_rows())
def test_the_recommendation_quotes_the_tables_ratio_and_is_never_slower_than_fp32(rows):
    dicts = [vars(r) for r in rows]
    kinds = timing_kinds(dicts)
    advice = recommend(rows)
    setting = advice["setting"]
    faithful = [r for r in rows[1:] if r.mean_cosine >= MIN_COSINE]

    def table_ratio(r, kind):
        names = [k for _, k in kinds]
        if kind not in names:
            return None
        cells = timing_cells(vars(r), kinds)
        j = names.index(kind)
        return None if cells[3 * j + 2] == "-" else float(cells[3 * j + 2])

    if setting["label"] == "fp32":
        # FP32 kept: every faithful setting that was timed is not faster in the table
        for r in faithful:
            for kind in ("compiled", "eager"):
                if table_ratio(r, kind) is not None:
                    batch = table_ratio(r, kind)
                    one = table_ratio(r, "compiled_one") if kind == "compiled" else None
                    assert batch >= 0.995 or (one is not None and one >= 0.995), r
                    break
        return
    pick = next(r for r in rows if r.label == setting["label"])
    if setting["timing"] is None:  # nothing faithful was timed
        return
    kind = setting["timing"]
    shown = table_ratio(pick, kind)
    assert shown is not None and close(f"{shown:.2f}", setting["time_ratio"])
    assert f"{shown:.2f}× {kind} FP32" in setting["text"]
    if pick.mean_cosine >= MIN_COSINE:  # a faithful pick is faster than FP32 in the table
        assert setting["time_ratio"] < 1.0


def test_eager_only_the_table_shows_the_ratio_the_recommendation_reads(monkeypatch, capsys):
    """--no-compile: FP32's eager ms beside each row and the quotient, the one
    the recommendation line quotes; nothing timed alone."""
    from accelkit.quant.api import EvalResult
    from accelkit.quant.cli import _print_eval_table

    fp32 = EvalRow("fp32", "w32a32", 8.0, 8.0, mean_cosine=1.0, top1_agreement=1.0, label="fp32")
    rtn = EvalRow("rtn", "w4a8", 1.0, 8.0, mean_cosine=0.99, top1_agreement=1.0, label="rtn/w4a8",
                  eager_ms=23.2, eager_fp32_ms=10.0, eager_ratio=0.41)  # fmt: skip
    rows = [fp32, rtn]
    result = EvalResult(
        model="m", kind="encoder", dtype="float32", texts=4, max_length=8, pairs=2, rows=rows,
        recommendation=recommend(rows), timing_batch=[2, 3],
    )  # fmt: skip
    monkeypatch.setenv("COLUMNS", "250")
    _print_eval_table(result)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "rtn/w4a8" in x)
    cells = [c.strip() for c in re.split(r"[│|]", line) if c.strip()]
    assert cells[-3:] == ["23.20", "10.00", "2.32"], line
    assert "2.32× eager FP32" in out and "recommended for this model: fp32" in out
    fp32_line = next(x for x in out.splitlines() if re.search(r"[│|]\s*fp32\s*[│|]", x))
    assert [c.strip() for c in re.split(r"[│|]", fp32_line) if c.strip()][-3:] == ["-"] * 3


def test_report_markdown_shows_the_same_timing_cells():
    rows = [
        EvalRow("fp32", "w32a32", 8.0, 8.0, mean_cosine=1.0, label="fp32"),
        EvalRow("rtn", "w4a8", 1.0, 8.0, mean_cosine=0.99, label="rtn/w4a8", eager_ms=20.0,
                eager_fp32_ms=10.0, eager_ratio=0.5, compiled_ms=3.0, compiled_fp32_ms=4.0),
    ]  # fmt: skip
    report = {"rows": [vars(r) for r in rows], "chosen": [], "kind": "encoder", "model": "m",
              "dtype": "float32", "texts": 4, "layers": []}  # fmt: skip
    md = markdown(report)
    line = next(x for x in md.splitlines() if x.startswith("| rtn"))
    assert line.rstrip(" |").endswith("20.00 | 10.00 | 2.00 | 3.00 | 4.00 | 0.75"), line
    assert "eager × FP32" in md and "compiled × FP32" in md


def test_rounds_stop_once_the_ratio_settles_and_not_before(monkeypatch):
    """Interleaved rounds: 3 when the per-round ratios agree within 10 %, more (up to the cap)
    while they do not; the ratio is always the quotient of the two medians of the same rounds."""
    import torch
    from torch import nn

    from accelkit.quant.evaluation import speed
    from accelkit.runtime import timing

    calls = []

    def fake(walls):
        def rounds(runs, n, **_kwargs):
            start = sum(calls)
            calls.append(n)
            wall = {k: walls[k][start : start + n] for k in runs}
            return timing.Rounds(wall, wall, {}, {})

        return rounds

    class Tiny(nn.Module):
        def forward(self, input_ids):
            return input_ids

    batch = {"input_ids": torch.zeros(2, 3)}
    steady = {"fp32": [0.010] * 10, "ours": [0.020, 0.021, 0.0205] + [0.5] * 7}
    monkeypatch.setattr(timing, "interleaved", fake(steady))
    bench = speed.SpeedBench(Tiny(), batch, speed.Phases(), rounds=10)
    ms, base, ratio = bench._pair(Tiny(), bench.fp32, batch, 10)
    assert calls == [3] and ratio == pytest.approx(2.05) and ms / base == ratio
    calls.clear()
    noisy = {"fp32": [0.010] * 10, "ours": [0.010, 0.020, 0.010, 0.020, 0.015] + [0.011] * 5}
    monkeypatch.setattr(timing, "interleaved", fake(noisy))
    ms, base, ratio = bench._pair(Tiny(), bench.fp32, batch, 5)
    assert calls == [3, 1, 1]  # never settled: up to the cap
    assert ratio == pytest.approx(statistics.median(noisy["ours"][:5]) / 0.010)


def tiny_decoder(folder):
    """A tiny Llama-style decoder folder (random weights, MiniLM's tokenizer)."""
    transformers = pytest.importorskip("transformers")
    import torch

    from tests.support.quant_eval import with_tokenizer

    torch.manual_seed(1)
    config = transformers.LlamaConfig(
        vocab_size=30522, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    return with_tokenizer(folder)


def test_a_real_decoder_run_never_recommends_a_setting_slower_than_fp32(tmp_path, capsys):
    """One real `quant eval --no-compile` on a tiny Llama-style decoder (random weights; int8 on
    its 64-wide layers usually loses to FP32): whatever the clock says, the recommended setting
    is FP32 or a faithful one whose table ratio is below 1, and it is the ratio the table shows."""
    from tests.support.cli import result_of, run_cli

    tiny_decoder(tmp_path)
    args = ["quant", "eval", "--model", str(tmp_path), "--methods", "fp32,rtn",
            "--bits", "w8a8,w4a8", "--pairs", "8", "--no-compile", "--json"]  # fmt: skip
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    doc = result_of(out)
    rows = {r["label"]: r for r in doc["rows"]}
    assert rows["fp32"]["eager_ms"] is None  # FP32 is timed only beside each setting
    setting = doc["recommendation"]["setting"]
    faithful = [r for r in doc["rows"][1:] if r["mean_cosine"] >= MIN_COSINE]
    assert faithful, [r["mean_cosine"] for r in doc["rows"]]  # W8A8 at least
    ratio = {
        label: r["eager_ms"] / r["eager_fp32_ms"] for label, r in rows.items() if r["eager_ms"]
    }
    if setting["label"] == "fp32":
        assert all(ratio[r["label"]] >= 1.0 for r in faithful), ratio
        assert "is slower" in setting["text"]
    else:
        assert ratio[setting["label"]] < 1.0 and setting["timing"] == "eager"
        assert f"{ratio[setting['label']]:.2f}× eager FP32" in setting["text"]


def test_apply_on_defaults_says_when_its_setting_is_slower_than_fp32(tmp_path, caplog):
    """`quant apply` with no setting asked for times what it wrote against FP32 (eager, the same
    rounds) and warns in one line when it is not faster; an asked-for setting is not timed."""
    import logging

    from accelkit.quant.api import apply

    tiny_decoder(tmp_path / "m")
    with caplog.at_level(logging.WARNING):
        done = apply(str(tmp_path / "m"), tmp_path / "q.safetensors").document()
    speed = done["speed"]
    assert speed["eager_ratio"] == pytest.approx(speed["eager_ms"] / speed["eager_fp32_ms"])
    slower = [r.getMessage() for r in caplog.records if "runs" in r.getMessage()]
    assert bool(slower) == (speed["eager_ratio"] >= 1.0), (speed, slower)
    if slower:
        assert f"{speed['eager_ratio']:.2f}× FP32's eager time" in slower[0]
    asked = apply(str(tmp_path / "m"), tmp_path / "r.safetensors", method="rtn").document()
    assert asked["speed"] is None
