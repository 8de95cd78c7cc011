"""Why two statistics files differ — named only where recomputing on the dataset gives both
numbers back, the rule `stats check` follows (`stats/checking/causes.py`).

`stats diff --dataset` recomputes, from the dataset, what each file's numbers may be: a
`Hypothesis` is one way of computing them (exact, LeRobot's per-episode arithmetic aggregated,
openpi's RunningStats, ...) over one set of rows (frames or action chunks, with or without
openpi's DeltaActions, every frame or only some). A file's number at one statistic and dimension
is *reproduced* by the first hypothesis (simplest first) that gives it back — within 1e-6 of the
unit, a count exactly: `tolerance.reproduces`, the one rule `stats check` applies too. Where both files' numbers are reproduced, by `ha` and `hb`, the difference splits
exactly into three parts, each recomputed:

    A − B = (A − exact(rows of ha)) + (exact(rows of ha) − exact(rows of hb)) + (exact(rows of hb) − B)

the first and last the files' arithmetic (float32 moments, binned or averaged quantiles), the
middle their rows (action chunks vs frames, delta actions in one file only, other frames). A part
is named when it alone moves the number by more than half the tolerance, and the largest part
always; where either number is reproduced by nothing, the cause is "no known cause".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from accelkit.stats.core import tolerance
from accelkit.stats.core.tolerance import MOMENTS

# the causes a difference may name (docs/stats.md lists them)
DIFF_CAUSES = {
    "chunks": "action chunks vs frames",
    "horizon": "different action chunks",
    "delta": "delta actions in one file only",
    "frames": "other frames",
    "float32": "float32 moments",
    "float64": "float64 moments",
    "binned": "binned quantiles",
    "averaged": "mean of per-episode quantiles",
    "nan": "not a number stored",
    "shape": "different number of values",
    "unknown": "no known cause",
}

DIFF_CAUSE_HELP = {
    "chunks": "action chunks vs frames: one file counts each frame's H-step action chunk (openpi"
    " trains on chunks), the other each frame once",
    "horizon": "different action chunks: both files count action chunks, of another horizon or"
    " end-of-episode rule (truncate, clamp)",
    "delta": "delta actions in one file only: openpi's DeltaActions made those action dimensions"
    " relative to the frame's state in one file and not in the other",
    "frames": "other frames: one file was computed from some of the dataset's frames (an older,"
    " shorter dataset; openpi dropping the last partial batch)",
    "float32": "float32 moments: the mean and std were computed in float32 as E[x²] − E[x]² (LeRobot,"
    " openpi's RunningStats), which loses the spread of values far from 0",
    "float64": "float64 moments: E[x²] − E[x]² in float64 (LeRobot on integer columns) loses the"
    " spread of values far from 0 for it",
    "binned": "binned quantiles: a 5000-bin histogram's estimate (LeRobot per episode, openpi's"
    " RunningStats over the whole run), not numpy's linear interpolation",
    "averaged": "mean of per-episode quantiles: LeRobot's aggregate_stats averages the episodes'"
    " quantiles; that is not the quantile of the dataset",
    "nan": "not a number stored: the file holds NaN or Inf for the statistic",
    "shape": "different number of values: the two files describe columns of other widths",
    "unknown": "no known cause: no recomputation on the dataset gives the stored number back",
}


@dataclass
class Hypothesis:
    """One way a file's numbers may have been computed from the dataset: `rule` (exact,
    lerobot-0.4, lerobot-0.3, averaged, openpi) in `precision` over `data` (frames, or action
    chunks), with `delta` (action dimensions made relative to the state) over `frames` (""
    for every frame). `values`: statistic -> per dimension; `exact`: the exact statistics of the
    same rows (None: `values` are exact)."""

    rule: str
    describe: str
    values: Mapping[str, np.ndarray]
    data: str = "frames"
    delta: frozenset = field(default_factory=frozenset)
    frames: str = ""
    precision: str = "float64"
    exact: Mapping[str, np.ndarray] | None = None

    def value(self, stat: str, d: int, exact: bool = False) -> float | None:
        source = self.exact if exact and self.exact is not None else self.values
        values = source.get(stat)
        if values is None:
            return None
        if stat == "count":
            return float(np.max(values)) if values.size else None
        return float(values[d]) if values.size > d else None


def reproduces(h: Hypothesis, stat: str, d: int, stored: float, scale: float) -> bool:
    return tolerance.reproduces(h.value(stat, d), stored, scale, stat)


def first_reproducing(hypotheses, stat: str, d: int, stored: float, scale: float):
    return next((h for h in hypotheses if reproduces(h, stat, d, stored, scale)), None)


def _arithmetic(h: Hypothesis, stat: str) -> list[str]:
    """The causes a hypothesis' own arithmetic stands for, for this statistic."""
    if h.rule == "exact" or stat in ("min", "max", "count"):
        return []
    if stat in MOMENTS:
        return [] if h.rule == "averaged" else [h.precision]
    return {
        "lerobot-0.4": ["binned", "averaged"],
        "averaged": ["averaged"],
        "openpi": ["binned"],
    }.get(h.rule, [])


def _rows(ha: Hypothesis, hb: Hypothesis, d: int) -> list[tuple[str, str]]:
    """The causes in which rows the two hypotheses count: (cause, side)."""
    out = []
    if ha.data != hb.data:
        out.append(("chunks" if "frames" in (ha.data, hb.data) else "horizon", ""))
    if (d in ha.delta) != (d in hb.delta):
        out.append(("delta", "A" if d in ha.delta else "B"))
    if ha.frames != hb.frames:
        out.append(("frames", ""))
    return out


def render(causes: list[tuple[str, str]]) -> str:
    parts = []
    for cause, side in causes:
        name = DIFF_CAUSES[cause]
        if cause == "delta":
            name = f"delta actions in {side} only"
        elif side:
            name = f"{name} ({side})"
        parts.append(name)
    return "; ".join(parts)


def explain(
    stat: str,
    d: int,
    a: float,
    b: float,
    scale: float,
    hypotheses_a,
    hypotheses_b,
    tolerance: float,
) -> tuple[list[tuple[str, str]], str]:
    """The causes of the difference between A's `a` and B's `b` at (`stat`, `d`): a list of
    (cause, side), and one line saying what each number was found to be."""
    bad = [side for side, v in (("A", a), ("B", b)) if not np.isfinite(v)]
    if bad:
        return [
            ("nan", side) for side in bad
        ], f"{' and '.join(bad)} stores {a if bad[0] == 'A' else b}"
    ha = first_reproducing(hypotheses_a, stat, d, a, scale)
    hb = first_reproducing(hypotheses_b, stat, d, b, scale)
    found = f"A: {ha.describe if ha else 'no recomputation gives it back'}; B: {hb.describe if hb else 'no recomputation gives it back'}"
    if ha is None or hb is None:
        return [("unknown", "")], found
    xa, xb = ha.value(stat, d, exact=True), hb.value(stat, d, exact=True)
    if xa is None or xb is None:  # the rows' exact statistic is unknown: name what differs
        xa, xb = a, b
    unit = scale if stat != "count" else 1.0
    parts = [
        (abs(a - xa) / unit, [(c, "A") for c in _arithmetic(ha, stat)]),
        (abs(xa - xb) / unit, _rows(ha, hb, d)),
        (abs(xb - b) / unit, [(c, "B") for c in _arithmetic(hb, stat)]),
    ]
    named = [p for p in parts if p[1] and (p[0] > tolerance / 2 or stat == "count")]
    largest = max((p for p in parts if p[1]), key=lambda p: p[0], default=None)
    if largest is not None and largest not in named:
        named.append(largest)
    causes = [c for p in parts if p in named for c in p[1]]
    return (causes or [("unknown", "")]), found
