"""Which setting `quant eval` recommends for the model it ran on, from the rows of its own run.

One verdict, by fidelity *and* speed on this machine: of the settings whose mean cosine to FP32
reaches `min_cosine` (0.98; embeddings for encoders, last hidden states for causal LMs), those
whose compiled time is at most `SPEED_BATCH` (0.6×) FP32's at the timing batch and `SPEED_ONE`
(0.8×) at one text meet the targets, and the fastest of them is recommended. When none meets both,
the line says so first and recommends the fastest faithful setting that is faster than FP32 (at
the timing batch, and at one text where timed); when every faithful setting measured is slower
than FP32, FP32 itself (the unquantized model: quantizing would cost time here), naming the
fastest that was tried; when none is faithful enough, the most faithful. Speed is the compiled
ratio when compiled times were measured, else the eager one — always the quotient of the row's
median and FP32's median in the same interleaved rounds, the numbers the table shows.

Beside it, per bit setting (for the report): the rows whose top-1 agreement is within 0.01 of the
best and whose cosine (perplexity ratio) is within 0.002 of the best of those count as equally
faithful; of them, the fastest measured, else the most faithful.
"""

from __future__ import annotations

import math

from accelkit.quant.evaluation.report import time_ratio
from accelkit.quant.evaluation.sweep import EvalRow

MIN_COSINE = 0.98
SPEED_BATCH = 0.6  # compiled time over FP32's at the timing batch
SPEED_ONE = 0.8  # ... at one text


def _quality(row: EvalRow) -> tuple[float, float]:
    """(top-1 agreement, cosine or −perplexity ratio): higher is better for both."""
    second = row.mean_cosine if row.mean_cosine is not None else -(row.perplexity_ratio or 0.0)
    return (row.top1_agreement or 0.0, second)


def ratios(row: EvalRow) -> tuple[float | None, float | None, str]:
    """(time over FP32 at the timing batch, at one text, which timing): compiled where measured,
    else eager; each the quotient of the row's median and FP32's median in the same rounds, as
    the table shows them (`report.time_ratio`)."""
    times = vars(row)
    for kind in ("compiled", "eager"):
        batch = time_ratio(times, kind)
        if batch is not None:
            one = time_ratio(times, "compiled_one") if kind == "compiled" else None
            return batch, one, kind
    return None, None, ""


def _unmeasured_last(value: float | None) -> float:
    """A sort key for `min`: a value not measured after every measured one."""
    return math.inf if value is None else value


def _batch_ratio(row: EvalRow) -> float:
    """The time over FP32 at the timing batch (`ratios`), as a sort key for `min`."""
    return _unmeasured_last(ratios(row)[0])


def _cosine(row: EvalRow) -> float:
    """The mean cosine, as a sort key for `max` (not measured: below every measured one)."""
    return -math.inf if row.mean_cosine is None else row.mean_cosine


def _per_bits(quantized: list[EvalRow], top1_slack: float, second_slack: float) -> dict:
    picks = {}
    for bits in dict.fromkeys(r.bits for r in quantized):
        group = [r for r in quantized if r.bits == bits]
        best_top1 = max(_quality(r)[0] for r in group)
        close = [r for r in group if _quality(r)[0] >= best_top1 - top1_slack]
        best_second = max(_quality(r)[1] for r in close)
        close = [r for r in close if _quality(r)[1] >= best_second - second_slack]
        # like with like: compiled when every candidate was compiled, else eager; the ratio to
        # FP32 of the same interleaved rounds where measured, else the quotient of the medians
        compiled = all(time_ratio(vars(r), "compiled") is not None for r in close)
        kind = "compiled" if compiled else "eager"

        def speed(r: EvalRow, kind=kind) -> float | None:
            return time_ratio(vars(r), kind)

        timed = [r for r in close if speed(r) is not None]
        pick = (
            min(timed, key=lambda r: _unmeasured_last(speed(r)))
            if timed
            else max(close, key=_quality)
        )
        why = f"top-1 {pick.top1_agreement:.3f}"
        why += (
            f", mean cos {pick.mean_cosine:.4f}"
            if pick.mean_cosine is not None
            else f", ppl ratio {pick.perplexity_ratio:.4f}"
        )
        if timed:
            why += f", {speed(pick):.2f}× {kind} FP32"
        picks[bits] = {"method": pick.method, "bits": bits, "why": why}
    return picks


def _describe(row: EvalRow) -> str:
    batch, one, kind = ratios(row)
    text = f"{row.label or row.method + '/' + row.bits} (mean cos {row.mean_cosine:.4f}"
    if batch is not None:
        text += f", {batch:.2f}× {kind} FP32 at the timing batch"
    if one is not None:
        text += f", {one:.2f}× at one text"
    return text + ")"


def faster_than_fp32(row: EvalRow) -> bool:
    """Below FP32's time in its own rounds at the timing batch, and at one text where timed."""
    batch, one, _ = ratios(row)
    return batch is not None and batch < 1.0 and (one is None or one < 1.0)


def verdict(rows: list[EvalRow], min_cosine: float = MIN_COSINE) -> dict | None:
    """The one recommended setting and whether it meets both targets (see the module doc)."""
    quantized = [r for r in rows if r.method != "fp32"]
    if not quantized:
        return None
    faithful = [r for r in quantized if (r.mean_cosine or 0.0) >= min_cosine]
    timed = [r for r in faithful if ratios(r)[0] is not None]

    def fast(r: EvalRow) -> bool:
        batch, one, kind = ratios(r)
        return (
            kind == "compiled"
            and batch is not None
            and batch <= SPEED_BATCH
            and one is not None
            and one <= SPEED_ONE
        )

    meeting = [r for r in timed if fast(r)]
    faster = [r for r in timed if faster_than_fp32(r)]
    goal = (
        f"mean cosine ≥ {min_cosine} at ≤ {SPEED_BATCH}× compiled FP32 (timing batch) and"
        f" ≤ {SPEED_ONE}× (one text)"
    )
    pick: EvalRow | None
    if meeting:
        pick = min(meeting, key=_batch_ratio)
        text = f"{_describe(pick)}: meets {goal} on this machine"
    elif faster:
        pick = min(faster, key=_batch_ratio)
        text = f"no setting reaches {goal} on this machine; the fastest with mean cosine ≥"
        text += f" {min_cosine} is {_describe(pick)}, faster than FP32"
    elif timed:  # every faithful setting is slower than FP32 here: keep FP32
        best = min(timed, key=_batch_ratio)
        pick = None
        text = (
            f"fp32 (the unquantized model): no setting with mean cosine ≥ {min_cosine} is faster"
            f" than {ratios(best)[2]} FP32 on this machine; the fastest of them, {_describe(best)},"
            " is slower"
        )
    elif faithful:
        pick = max(faithful, key=_cosine)
        text = f"{_describe(pick)}: the most faithful with mean cosine ≥ {min_cosine}"
        text += " (speed not measured)"
    else:
        with_cos = [r for r in quantized if r.mean_cosine is not None]
        if not with_cos:
            return None
        pick = max(with_cos, key=_cosine)
        text = f"no setting reaches mean cosine ≥ {min_cosine}; the most faithful is"
        text += f" {_describe(pick)}"
    targets = {
        "mean_cosine": min_cosine,
        "compiled_ratio": SPEED_BATCH,
        "compiled_one_ratio": SPEED_ONE,
    }
    if pick is None:
        return {
            "method": "fp32",
            "bits": "w32a32",
            "label": "fp32",
            "mean_cosine": 1.0,
            "time_ratio": 1.0,
            "time_ratio_one": 1.0 if ratios(best)[1] is not None else None,
            "timing": ratios(best)[2],
            "meets_targets": False,
            "targets": targets,
            "text": text,
        }
    batch, one, kind = ratios(pick)
    return {
        "method": pick.method,
        "bits": pick.bits,
        "label": pick.label or f"{pick.method}/{pick.bits}",
        "mean_cosine": pick.mean_cosine,
        "time_ratio": batch,
        "time_ratio_one": one,
        "timing": kind or None,
        "meets_targets": pick in meeting,
        "targets": targets,
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
    plain = [r for r in quantized if r.label in ("", f"{r.method}/{r.bits}")]  # no variants
    picks = _per_bits(plain or quantized, top1_slack, second_slack)
    per_bits = "; ".join(f"{p['bits']}: {p['method']} ({p['why']})" for p in picks.values())
    setting = verdict(rows, min_cosine)
    text = per_bits if setting is None else f"{setting['text']}. Per bit setting: {per_bits}"
    return {"setting": setting, "per_bits": list(picks.values()), "text": text}
