"""Which setting `quant eval` recommends for the model it ran on, from the rows of its own run."""

from __future__ import annotations

from accelkit.quant.sweep import EvalRow


def _quality(row: EvalRow) -> tuple[float, float]:
    """(top-1 agreement, cosine or −perplexity ratio): higher is better for both."""
    second = row.mean_cosine if row.mean_cosine is not None else -(row.perplexity_ratio or 0.0)
    return (row.top1_agreement or 0.0, second)


def recommend(rows: list[EvalRow], top1_slack: float = 0.01, second_slack: float = 0.002):
    """The setting to use on this model, from its own run, per bit setting: the rows whose top-1
    agreement is within `top1_slack` of the best and whose cosine (perplexity ratio) is within
    `second_slack` of the best of those count as equally faithful; of them, the fastest measured
    (compiled, else eager), else the most faithful. None when no quantized row ran."""
    quantized = [r for r in rows if r.method != "fp32"]
    if not quantized:
        return None
    fp32 = next((r for r in rows if r.method == "fp32"), None)
    picks = {}
    for bits in dict.fromkeys(r.bits for r in quantized):
        group = [r for r in quantized if r.bits == bits]
        best_top1 = max(_quality(r)[0] for r in group)
        close = [r for r in group if _quality(r)[0] >= best_top1 - top1_slack]
        best_second = max(_quality(r)[1] for r in close)
        close = [r for r in close if _quality(r)[1] >= best_second - second_slack]

        def speed(r: EvalRow):
            return r.compiled_ms if r.compiled_ms is not None else r.eager_ms

        timed = [r for r in close if speed(r) is not None]
        pick = min(timed, key=speed) if timed else max(close, key=_quality)
        why = f"top-1 {pick.top1_agreement:.3f}"
        why += (
            f", mean cos {pick.mean_cosine:.4f}"
            if pick.mean_cosine is not None
            else f", ppl ratio {pick.perplexity_ratio:.4f}"
        )
        base = fp32 and speed(fp32)
        if timed and base:
            why += f", {speed(pick) / base:.2f}× the unquantized model's time"
        picks[bits] = {"method": pick.method, "bits": bits, "why": why}
    text = "; ".join(f"{p['bits']}: {p['method']} ({p['why']})" for p in picks.values())
    return {"per_bits": list(picks.values()), "text": text}
