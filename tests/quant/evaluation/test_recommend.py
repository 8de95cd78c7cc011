"""`quant eval` recommends, per bit setting, the fastest of the rows as faithful as the best
(top-1 agreement first, then cosine or perplexity ratio) — from the user's own run."""

import pytest

from accelkit.quant.evaluation.recommend import recommend
from accelkit.quant.evaluation.sweep import EvalRow


def row(method, bits, top1, cos=None, ppl=None, ms=None):
    fp32_ms = None if ms is None else 100.0  # FP32's median in the same rounds
    return EvalRow(method, bits, 1.0, 8.0, mean_cosine=cos, top1_agreement=top1,
                   perplexity_ratio=ppl, compiled_ms=ms, compiled_fp32_ms=fp32_ms)  # fmt: skip


def test_the_fastest_of_the_equally_faithful_rows_per_bits():
    rows = [
        row("fp32", "w32a32", 1.0, 1.0, ms=100.0),
        row("rtn", "w4a8", 0.95, 0.9650, ms=30.0),  # fastest but less faithful
        row("smoothquant", "w4a8", 0.97, 0.9790, ms=90.0),
        row("duquant", "w4a8", 0.975, 0.9805, ms=60.0),  # as faithful as the best, faster
        row("rtn", "w4a4", 0.80, 0.90, ms=30.0),
        row("duquant", "w4a4", 0.91, 0.96, ms=60.0),
    ]
    advice = recommend(rows)
    picks = {p["bits"]: p["method"] for p in advice["per_bits"]}
    assert picks == {"w4a8": "duquant", "w4a4": "duquant"}
    assert "0.60× compiled FP32" in advice["text"]
    # top-1 decides before cosine: a higher cosine with lower agreement is not "as faithful"
    rows[3] = row("duquant", "w4a8", 0.90, 0.9900, ms=60.0)
    assert recommend(rows)["per_bits"][0]["method"] == "smoothquant"


def test_without_timings_the_most_faithful_and_causal_lms_by_perplexity():
    rows = [
        row("rtn", "w4a8", 0.90, ppl=1.10),
        row("duquant", "w4a8", 0.905, ppl=1.02),
    ]
    assert recommend(rows)["per_bits"][0]["method"] == "duquant"
    assert recommend([row("fp32", "w32a32", 1.0, 1.0)]) is None


def timed(method, bits, cos, batch, one):
    return EvalRow(method, bits, 1.0, 8.0, mean_cosine=cos, top1_agreement=1.0,
                   compiled_ms=100.0 * batch, compiled_fp32_ms=100.0, compiled_ratio=batch,
                   compiled_one_ms=10.0 * one, compiled_one_fp32_ms=10.0, compiled_one_ratio=one,
                   label=f"{method}/{bits}")  # fmt: skip


FP32 = EvalRow("fp32", "w32a32", 1.0, 8.0, mean_cosine=1.0, top1_agreement=1.0, label="fp32")


def test_the_verdict_is_the_fastest_setting_meeting_both_targets():
    rows = [
        FP32,
        timed("rtn", "w4a8", 0.9690, 0.30, 0.40),  # fastest, not faithful enough
        timed("duquant", "w4a8", 0.9826, 0.55, 0.70),  # meets both
        timed("smoothquant", "w4a8", 0.9830, 0.58, 0.75),  # meets both, slower
        timed("duquant", "w4a4", 0.9600, 0.50, 0.60),
    ]
    setting = recommend(rows)["setting"]
    assert setting["label"] == "duquant/w4a8" and setting["meets_targets"]
    assert setting["text"].startswith("duquant/w4a8 (mean cos 0.9826, 0.55× compiled FP32")
    assert "meets mean cosine ≥ 0.98" in setting["text"]


def test_when_no_setting_meets_both_the_line_says_so_first():
    rows = [
        FP32,
        timed("duquant", "w4a8", 0.9826, 0.65, 0.70),
        timed("rtn", "w4a8", 0.97, 0.3, 0.3),
    ]
    advice = recommend(rows)
    assert advice["text"].startswith("no setting reaches mean cosine ≥ 0.98 at ≤ 0.6× compiled")
    assert advice["setting"]["label"] == "duquant/w4a8" and not advice["setting"]["meets_targets"]
    # fast enough at the batch but not at one text: still not both
    rows[1] = timed("duquant", "w4a8", 0.9826, 0.55, 0.95)
    assert not recommend(rows)["setting"]["meets_targets"]


def test_a_setting_slower_than_fp32_is_never_recommended():
    """Every faithful setting slower than compiled FP32 (a decoder, where int8 loses): FP32 is
    recommended, and the line names the fastest faithful setting tried."""
    rows = [
        FP32,
        timed("duquant", "w4a8", 0.9826, 1.43, 1.80),
        timed("rtn", "w4a8", 0.96, 0.9, 0.9),  # faster, not faithful enough
    ]
    advice = recommend(rows)
    assert advice["setting"]["label"] == "fp32" and not advice["setting"]["meets_targets"]
    text = advice["text"]
    assert text.startswith("fp32 (the unquantized model): no setting with mean cosine ≥ 0.98")
    assert "duquant/w4a8 (mean cos 0.9826, 1.43× compiled FP32" in text and "is slower" in text
    # faster at the batch but slower at one text: not faster than FP32 either
    rows[1] = timed("duquant", "w4a8", 0.9826, 0.9, 1.1)
    assert recommend(rows)["setting"]["label"] == "fp32"


def test_the_fastest_faithful_setting_faster_than_fp32_wins_where_w4a8_loses():
    """W4A8 slower than FP32, W8A8 and a weight-only setting faithful and faster: the fastest
    of those is recommended, though no target is met."""
    rows = [
        FP32,
        timed("duquant", "w4a8", 0.9900, 1.31, 1.36),
        timed("duquant", "w8a8", 0.9990, 0.92, 0.95),
        timed("rtn", "w8a16", 0.9999, 0.97, 0.90),
    ]
    setting = recommend(rows)["setting"]
    assert setting["label"] == "duquant/w8a8" and not setting["meets_targets"]
    assert setting["time_ratio"] == pytest.approx(0.92)
    assert "faster than FP32" in setting["text"]


def test_nothing_faithful_enough_and_a_higher_bar():
    rows = [FP32, timed("rtn", "w4a8", 0.97, 0.3, 0.3), timed("duquant", "w4a8", 0.975, 0.5, 0.6)]
    advice = recommend(rows)
    # no quantized setting is faithful enough: FP32 is the one that meets the target, the
    # closest is named, never recommended (it misses the target)
    assert advice["text"].startswith(
        "fp32 (the unquantized model): no quantized setting reaches mean cosine ≥ 0.98; the most"
        " faithful is duquant/w4a8"
    )
    assert advice["setting"]["label"] == "fp32" and not advice["setting"]["meets_targets"]
    # --target-cosine raises the bar: 0.9826 is no longer enough
    rows[2] = timed("duquant", "w4a8", 0.9826, 0.5, 0.6)
    assert recommend(rows)["setting"]["meets_targets"]
    assert not recommend(rows, min_cosine=0.99)["setting"]["meets_targets"]


def lm_row(bits, cos, ppl, top1, batch, one):
    row = timed("duquant", bits, cos, batch, one)
    row.perplexity_ratio, row.top1_agreement = ppl, top1
    return row


def test_a_perplexity_target_is_met_by_the_recommendation_not_just_the_cosine():
    """Causal LMs: W4A8 meets the cosine bar and is the fastest, but misses
    --target-perplexity-ratio 1.05; W8A8 meets it, faster than FP32: W8A8 is recommended and the
    line names the target and the speed that decided."""
    from accelkit.quant.evaluation.recommend import Targets

    rows = [
        FP32,
        lm_row("w4a8", 0.9850, 1.30, 0.80, 0.70, 0.75),
        lm_row("w8a8", 0.9990, 1.01, 0.97, 0.90, 0.95),
        lm_row("w8a16", 0.9999, 1.001, 0.99, 0.97, 0.98),
    ]
    assert recommend(rows)["setting"]["label"] == "duquant/w4a8"  # the cosine bar alone
    setting = recommend(rows, targets=Targets.given(perplexity_ratio=1.05))["setting"]
    assert setting["label"] == "duquant/w8a8" and setting["perplexity_ratio"] == 1.01
    assert setting["targets"]["perplexity_ratio"] == 1.05
    assert setting["text"] == (
        "no setting reaches perplexity ratio ≤ 1.05 at ≤ 0.6× compiled FP32 (timing batch) and"
        " ≤ 0.8× (one text) on this machine; the fastest with perplexity ratio ≤ 1.05 is"
        " duquant/w8a8 (mean cos 0.9990, ppl ratio 1.0100, 0.90× compiled FP32 at the timing"
        " batch, 0.95× at one text), faster than FP32"
    )
    # a top-1 target: only W8A16 reaches 0.98, and it is still faster than FP32
    setting = recommend(rows, targets=Targets.given(top1=0.98))["setting"]
    assert setting["label"] == "duquant/w8a16" and "top-1 0.990" in setting["text"]
    # no quantized setting meeting it is faster than FP32: FP32 itself
    rows[3] = lm_row("w8a16", 0.9999, 1.001, 0.99, 1.05, 1.02)
    setting = recommend(rows, targets=Targets.given(top1=0.98))["setting"]
    assert setting["label"] == "fp32"
    assert setting["text"].startswith("fp32 (the unquantized model): no setting with top-1")


def test_none_meets_the_perplexity_target_the_closest_by_perplexity_is_named():
    from accelkit.quant.evaluation.recommend import Targets

    rows = [FP32, lm_row("w4a8", 0.99, 1.30, 0.8, 0.5, 0.5), lm_row("w4a4", 0.95, 1.2, 0.7, 1, 1)]
    setting = recommend(rows, targets=Targets.given(perplexity_ratio=1.05))["setting"]
    assert setting["label"] == "fp32" and not setting["meets_targets"]
    assert setting["text"].startswith(
        "fp32 (the unquantized model): no quantized setting reaches perplexity ratio ≤ 1.05; the"
        " most faithful is duquant/w4a4"
    )


def test_the_target_pass_from_an_8_bit_setting_moves_layers_to_float():
    """From W8A8 no layer gains at W8A8: the ladder's steps are the float moves alone (the
    attack's `--target-top1` from w8a8 moved nothing and said 'NOT reached')."""
    from accelkit.quant.evaluation.target import Ladder

    ladder = Ladder(None, None, None, ["a", "b", "c"], "w8a8", to_w8=[])
    assert ladder.steps == 3
    assert ladder.levels(1) == {"a": "float"} and ladder.levels(3) == dict.fromkeys("abc", "float")
    four = Ladder(None, None, None, ["a", "b"], "w8a8", to_w8=["b"])  # a is at 8 bits already
    assert four.steps == 3 and four.levels(1) == {"b": "w8a8"}
    assert four.levels(2) == {"b": "w8a8", "a": "float"}


def test_an_eager_only_run_says_the_speed_goal_was_not_measured():
    """--no-compile: the speed goal speaks of compiled FP32, so the line cannot say no setting
    reaches it — it was not measured."""
    eager = EvalRow("rtn", "w8a8", 1.0, 8.0, mean_cosine=0.99, top1_agreement=1.0, eager_ms=80.0,
                    eager_fp32_ms=100.0, label="rtn/w8a8")  # fmt: skip
    text = recommend([FP32, eager])["setting"]["text"]
    assert text.startswith("the speed goal, ≤ 0.6× compiled FP32 (timing batch) and ≤ 0.8× (one")
    assert "needs compiled times, which this run did not measure" in text
    assert "no setting reaches" not in text and "0.80× eager FP32" in text
