"""Which setting `quant eval` recommends for the model it ran on, from the rows of its own run.

One verdict, by fidelity *and* speed on this machine. A setting is faithful when it meets every
fidelity target in `Targets` (the command line gives one: `--target-cosine`,
`--target-perplexity-ratio` or `--target-top1`;
none given: mean cosine ≥ `MIN_COSINE`, 0.98, of embeddings for encoders and last hidden states for
causal LMs). Of the faithful settings, those whose compiled time is at most `SPEED_BATCH` (0.6×)
FP32's at the timing batch and `SPEED_ONE` (0.8×) at one text meet the speed goal too, and the
fastest of them is recommended. When none meets both, the line says so first and recommends the
fastest faithful setting that is faster than FP32 (at the timing batch, and at one text where
timed); when every faithful setting measured is slower than FP32, FP32 itself (the unquantized
model: quantizing would cost time here), naming the fastest that was tried; when none is faithful
enough, FP32 too (the only setting that meets them), naming the closest by the first target. Speed is the compiled ratio when compiled times were
measured, else the eager one — always the quotient of the row's median and FP32's median in the
same interleaved rounds, the numbers the table shows. The line names the targets met and the
speed that decided.

Beside it, per bit setting (for the report): the rows whose top-1 agreement is within 0.01 of the
best and whose cosine (perplexity ratio) is within 0.002 of the best of those count as equally
faithful; of them, the fastest measured, else the most faithful.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accelkit.quant.evaluation.report import time_ratio
from accelkit.quant.evaluation.sweep import FLOAT_PATH, EvalRow

MIN_COSINE = 0.98
SPEED_BATCH = 0.6  # compiled time over FP32's at the timing batch
SPEED_ONE = 0.8  # ... at one text


# each fidelity metric a target can bound: (its short name in a line, True when higher is better)
METRICS = {
    "mean_cosine": ("mean cosine", "mean cos", True),
    "perplexity_ratio": ("perplexity ratio", "ppl ratio", False),
    "top1_agreement": ("top-1 agreement", "top-1", True),
}


@dataclass(frozen=True)
class Targets:
    """The fidelity targets a recommended setting meets, each None when not asked: mean cosine to
    FP32 at least, perplexity ratio (quantized / FP32) at most, top-1 agreement at least."""

    mean_cosine: float | None = MIN_COSINE
    perplexity_ratio: float | None = None
    top1_agreement: float | None = None

    @classmethod
    def given(
        cls,
        cosine: float | None = None,
        perplexity_ratio: float | None = None,
        top1: float | None = None,
    ) -> Targets:
        """The targets asked for (`--target-*`); none asked: mean cosine ≥ `MIN_COSINE`."""
        if cosine is None and perplexity_ratio is None and top1 is None:
            return cls()
        return cls(cosine, perplexity_ratio, top1)

    def items(self) -> list[tuple[str, float]]:
        return [(m, v) for m in METRICS if (v := getattr(self, m)) is not None]

    def met(self, figures: dict) -> bool:
        """Whether measured `figures` (a row's fields) meet every target; unmeasured: not met."""
        for metric, value in self.items():
            got = figures.get(metric)
            if got is None or (got < value if METRICS[metric][2] else got > value):
                return False
        return True

    def closeness(self, row: EvalRow) -> float:
        """The first target's metric of `row`, higher is closer (a sort key for `max`)."""
        metric = self.items()[0][0]
        got = getattr(row, metric)
        if got is None:
            return -math.inf
        return got if METRICS[metric][2] else -got

    def text(self) -> str:
        return " and ".join(
            f"{METRICS[m][0]} {'≥' if METRICS[m][2] else '≤'} {v:g}" for m, v in self.items()
        )

    def document(self) -> dict[str, float]:
        return dict(self.items())


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


def _figures(row: EvalRow, targets: Targets) -> str:
    """The row's mean cosine, and each other metric a target bounds."""
    shown = ["mean_cosine", *(m for m, _ in targets.items() if m != "mean_cosine")]
    parts = []
    for metric in shown:
        got = getattr(row, metric)
        if got is not None:
            parts.append(f"{METRICS[metric][1]} {got:.{3 if metric == 'top1_agreement' else 4}f}")
    return ", ".join(parts)


def _describe(row: EvalRow, targets: Targets | None = None) -> str:
    batch, one, kind = ratios(row)
    text = f"{row.label or row.method + '/' + row.bits} ({_figures(row, targets or Targets())}"
    if batch is not None:
        text += f", {batch:.2f}× {kind} FP32 at the timing batch"
    if one is not None:
        text += f", {one:.2f}× at one text"
    return text + ")"


def faster_than_fp32(row: EvalRow) -> bool:
    """Below FP32's time in its own rounds at the timing batch, and at one text where timed."""
    batch, one, _ = ratios(row)
    return batch is not None and batch < 1.0 and (one is None or one < 1.0)


def verdict(
    rows: list[EvalRow], min_cosine: float = MIN_COSINE, targets: Targets | None = None
) -> dict | None:
    """The one recommended setting and whether it meets the fidelity targets and the speed goal
    (see the module doc); `targets` default: mean cosine ≥ `min_cosine`."""
    targets = targets or Targets(mean_cosine=min_cosine)
    quantized = [r for r in rows if r.method != "fp32"]
    if not quantized:
        return None
    faithful = [r for r in quantized if targets.met(vars(r))]
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

    def describe(r: EvalRow) -> str:
        return _describe(r, targets)

    meeting = [r for r in timed if fast(r)]
    faster = [r for r in timed if faster_than_fp32(r)]
    # faithful, not timed: FP32's GEMMs and more (`sweep.FLOAT_PATH`), so not faster than FP32
    slower = [r.label or f"{r.method}/{r.bits}" for r in faithful if r.not_timed == FLOAT_PATH]
    fidelity = targets.text()
    speed = f"≤ {SPEED_BATCH}× compiled FP32 (timing batch) and ≤ {SPEED_ONE}× (one text)"
    goal = f"{fidelity} at {speed}"
    pick: EvalRow | None
    if meeting:
        pick = min(meeting, key=_batch_ratio)
        text = f"{describe(pick)}: meets {goal} on this machine, the fastest that does"
    elif faster:
        pick = min(faster, key=_batch_ratio)
        if any(ratios(r)[2] == "compiled" for r in timed):
            text = f"no setting reaches {goal} on this machine; the fastest with {fidelity} is"
        else:  # eager times only: the speed goal was not measured, not missed
            text = (
                f"the speed goal, {speed}, needs compiled times, which this run did not"
                f" measure; the fastest with {fidelity} is"
            )
        text += f" {describe(pick)}, faster than FP32"
    elif timed or slower:  # every faithful setting is slower than FP32 here: keep FP32
        pick = None
        best = min(timed, key=_batch_ratio) if timed else None
        text = f"fp32 (the unquantized model): no setting with {fidelity} is faster than"
        if best is not None:
            text += (
                f" {ratios(best)[2]} FP32 on this machine; the fastest of them, {describe(best)},"
                " is slower"
            )
        else:
            text += " FP32 on this machine"
        if slower:
            text += (
                f"; {', '.join(slower)} run every quantized layer on the float path (FP32's"
                " GEMMs and more: not timed)"
            )
    elif faithful:
        pick = max(faithful, key=targets.closeness)
        text = f"{describe(pick)}: the most faithful with {fidelity} (speed not measured)"
    else:  # none faithful: FP32 is the only setting that meets the targets
        measured = [r for r in quantized if targets.closeness(r) > -math.inf]
        if not measured:
            return None
        pick, best = None, None
        closest = max(measured, key=targets.closeness)
        text = (
            f"fp32 (the unquantized model): no quantized setting reaches {fidelity}; the most"
            f" faithful is {describe(closest)}"
        )
    goals = {**targets.document(), "compiled_ratio": SPEED_BATCH, "compiled_one_ratio": SPEED_ONE}
    if pick is None:
        return {
            "method": "fp32",
            "bits": "w32a32",
            "label": "fp32",
            "mean_cosine": 1.0,
            "perplexity_ratio": None,
            "top1_agreement": 1.0,
            "time_ratio": 1.0,
            "time_ratio_one": 1.0 if best is None or ratios(best)[1] is not None else None,
            "timing": ratios(best)[2] if best is not None else "",
            "meets_targets": False,
            "targets": goals,
            "text": text,
        }
    batch, one, kind = ratios(pick)
    return {
        "method": pick.method,
        "bits": pick.bits,
        "label": pick.label or f"{pick.method}/{pick.bits}",
        "mean_cosine": pick.mean_cosine,
        "perplexity_ratio": pick.perplexity_ratio,
        "top1_agreement": pick.top1_agreement,
        "time_ratio": batch,
        "time_ratio_one": one,
        "timing": kind or None,
        "meets_targets": pick in meeting,
        "targets": goals,
        "text": text,
    }


def recommend(
    rows: list[EvalRow],
    top1_slack: float = 0.01,
    second_slack: float = 0.002,
    min_cosine: float = MIN_COSINE,
    targets: Targets | None = None,
):
    """The verdict (`setting`, its `text` first in `text`) and the pick per bit setting; None
    when no quantized row ran. `targets`: the fidelity targets given (default: mean cosine ≥
    `min_cosine`)."""
    quantized = [r for r in rows if r.method != "fp32"]
    if not quantized:
        return None
    plain = [r for r in quantized if r.label in ("", f"{r.method}/{r.bits}")]  # no variants
    picks = _per_bits(plain or quantized, top1_slack, second_slack)
    per_bits = "; ".join(f"{p['bits']}: {p['method']} ({p['why']})" for p in picks.values())
    setting = verdict(rows, min_cosine, targets)
    text = per_bits if setting is None else f"{setting['text']}. Per bit setting: {per_bits}"
    return {"setting": setting, "per_bits": list(picks.values()), "text": text}
