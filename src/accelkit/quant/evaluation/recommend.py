"""Which setting `quant eval` recommends for the model it ran on, from the rows of its own run.

One verdict, by fidelity *and* speed on this machine: of the settings whose mean cosine to FP32
reaches `min_cosine` (0.98; embeddings for encoders, last hidden states for causal LMs), those
whose compiled time is at most `SPEED_BATCH` (0.6×) FP32's at the timing batch and `SPEED_ONE`
(0.8×) at one text meet the targets, and the fastest of them is recommended. When none meets both,
the line says so first and recommends the fastest faithful setting (saying so again when it is
slower than FP32); when none is faithful enough, the most faithful. Speed is the compiled ratio
when compiled times were measured, else the eager one.

Beside it, per bit setting (for the report): the rows whose top-1 agreement is within 0.01 of the
best and whose cosine (perplexity ratio) is within 0.002 of the best of those count as equally
faithful; of them, the fastest measured, else the most faithful.
"""

from __future__ import annotations

from accelkit.quant.evaluation.sweep import EvalRow

MIN_COSINE = 0.98
SPEED_BATCH = 0.6  # compiled time over FP32's at the timing batch
SPEED_ONE = 0.8  # ... at one text


def _quality(row: EvalRow) -> tuple[float, float]:
    """(top-1 agreement, cosine or −perplexity ratio): higher is better for both."""
    second = row.mean_cosine if row.mean_cosine is not None else -(row.perplexity_ratio or 0.0)
    return (row.top1_agreement or 0.0, second)


def ratios(row: EvalRow, fp32: EvalRow | None) -> tuple[float | None, float | None, str]:
    """(time over FP32 at the timing batch, at one text, which timing): the interleaved ratios
    when measured, else the quotient of the medians."""
    if row.compiled_ratio is not None:
        return row.compiled_ratio, row.compiled_one_ratio, "compiled"
    if row.compiled_ms is not None and fp32 is not None and fp32.compiled_ms:
        return row.compiled_ms / fp32.compiled_ms, None, "compiled"
    if row.eager_ratio is not None:
        return row.eager_ratio, None, "eager"
    if row.eager_ms is not None and fp32 is not None and fp32.eager_ms:
        return row.eager_ms / fp32.eager_ms, None, "eager"
    return None, None, ""


def _per_bits(quantized: list[EvalRow], fp32, top1_slack: float, second_slack: float) -> dict:
    picks = {}
    for bits in dict.fromkeys(r.bits for r in quantized):
        group = [r for r in quantized if r.bits == bits]
        best_top1 = max(_quality(r)[0] for r in group)
        close = [r for r in group if _quality(r)[0] >= best_top1 - top1_slack]
        best_second = max(_quality(r)[1] for r in close)
        close = [r for r in close if _quality(r)[1] >= best_second - second_slack]
        # like with like: compiled when every candidate was compiled, else eager; the ratio to
        # FP32 of the same interleaved rounds where measured, else the quotient of the medians
        kind = "compiled" if all(r.compiled_ms is not None for r in close) else "eager"

        def speed(r: EvalRow, kind=kind) -> float | None:
            ratio, ms = getattr(r, f"{kind}_ratio"), getattr(r, f"{kind}_ms")
            base = fp32 and getattr(fp32, f"{kind}_ms")
            return ratio if ratio is not None else (ms / base if ms and base else None)

        timed = [r for r in close if speed(r) is not None]
        pick = min(timed, key=speed) if timed else max(close, key=_quality)
        why = f"top-1 {pick.top1_agreement:.3f}"
        why += (
            f", mean cos {pick.mean_cosine:.4f}"
            if pick.mean_cosine is not None
            else f", ppl ratio {pick.perplexity_ratio:.4f}"
        )
        if timed:
            why += f", {speed(pick):.2f}× the unquantized model's time"
        picks[bits] = {"method": pick.method, "bits": bits, "why": why}
    return picks


def _describe(row: EvalRow, fp32) -> str:
    batch, one, kind = ratios(row, fp32)
    text = f"{row.label or row.method + '/' + row.bits} (mean cos {row.mean_cosine:.4f}"
    if batch is not None:
        text += f", {batch:.2f}× {kind} FP32 at the timing batch"
    if one is not None:
        text += f", {one:.2f}× at one text"
    return text + ")"


def verdict(rows: list[EvalRow], min_cosine: float = MIN_COSINE) -> dict | None:
    """The one recommended setting and whether it meets both targets (see the module doc)."""
    quantized = [r for r in rows if r.method != "fp32"]
    if not quantized:
        return None
    fp32 = next((r for r in rows if r.method == "fp32"), None)
    faithful = [r for r in quantized if (r.mean_cosine or 0.0) >= min_cosine]
    timed = [r for r in faithful if ratios(r, fp32)[0] is not None]

    def fast(r: EvalRow) -> bool:
        batch, one, kind = ratios(r, fp32)
        return kind == "compiled" and batch <= SPEED_BATCH and one is not None and one <= SPEED_ONE

    meeting = [r for r in timed if fast(r)]
    goal = (
        f"mean cosine ≥ {min_cosine} at ≤ {SPEED_BATCH}× compiled FP32 (timing batch) and"
        f" ≤ {SPEED_ONE}× (one text)"
    )
    if meeting:
        pick = min(meeting, key=lambda r: ratios(r, fp32)[0])
        text = f"{_describe(pick, fp32)}: meets {goal} on this machine"
    elif timed:
        pick = min(timed, key=lambda r: ratios(r, fp32)[0])
        slower = ratios(pick, fp32)[0] > 1.0
        text = f"no setting reaches {goal} on this machine; the fastest with mean cosine ≥"
        text += f" {min_cosine} is {_describe(pick, fp32)}"
        if slower:
            text += " — slower than the unquantized model"
    elif faithful:
        pick = max(faithful, key=lambda r: r.mean_cosine)
        text = f"{_describe(pick, fp32)}: the most faithful with mean cosine ≥ {min_cosine}"
        text += " (speed not measured)"
    else:
        with_cos = [r for r in quantized if r.mean_cosine is not None]
        if not with_cos:
            return None
        pick = max(with_cos, key=lambda r: r.mean_cosine)
        text = f"no setting reaches mean cosine ≥ {min_cosine}; the most faithful is"
        text += f" {_describe(pick, fp32)}"
    batch, one, kind = ratios(pick, fp32)
    return {
        "method": pick.method,
        "bits": pick.bits,
        "label": pick.label or f"{pick.method}/{pick.bits}",
        "mean_cosine": pick.mean_cosine,
        "time_ratio": batch,
        "time_ratio_one": one,
        "timing": kind or None,
        "meets_targets": pick in meeting,
        "targets": {
            "mean_cosine": min_cosine,
            "compiled_ratio": SPEED_BATCH,
            "compiled_one_ratio": SPEED_ONE,
        },
        "text": text,
    }


def recommend(
    rows: list[EvalRow],
    top1_slack: float = 0.01,
    second_slack: float = 0.002,
    min_cosine: float = MIN_COSINE,
):
    """The verdict (`setting`, its `text` first in `text`) and the pick per bit setting; None
    when no quantized row ran."""
    quantized = [r for r in rows if r.method != "fp32"]
    if not quantized:
        return None
    fp32 = next((r for r in rows if r.method == "fp32"), None)
    plain = [r for r in quantized if r.label in ("", f"{r.method}/{r.bits}")]  # no variants
    picks = _per_bits(plain or quantized, fp32, top1_slack, second_slack)
    per_bits = "; ".join(f"{p['bits']}: {p['method']} ({p['why']})" for p in picks.values())
    setting = verdict(rows, min_cosine)
    text = per_bits if setting is None else f"{setting['text']}. Per bit setting: {per_bits}"
    return {"setting": setting, "per_bits": list(picks.values()), "text": text}
