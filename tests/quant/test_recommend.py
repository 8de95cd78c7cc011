"""`quant eval` recommends, per bit setting, the fastest of the rows as faithful as the best
(top-1 agreement first, then cosine or perplexity ratio) — from the user's own run."""

from accelkit.quant.recommend import recommend
from accelkit.quant.sweep import EvalRow


def row(method, bits, top1, cos=None, ppl=None, ms=None):
    return EvalRow(method, bits, 1.0, 8.0, mean_cosine=cos, top1_agreement=top1,
                   perplexity_ratio=ppl, compiled_ms=ms)  # fmt: skip


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
    assert "0.60× the unquantized model's time" in advice["text"]
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
