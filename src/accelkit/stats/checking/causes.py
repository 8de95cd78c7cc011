"""Why a stored statistic is off — named only where a recomputation confirms it.

`stats check` compares stored numbers with exact ones (`stats/checking/compare.py`); a failing finding then
gets a cause from `CAUSES` only when redoing what the cause claims gives the stored number back —
within `REPRODUCED` (1e-6) of its unit, a count exactly: the rule `stats diff` follows too
(`stats/core/tolerance.py`):

* **binned quantiles / float32 (float64) moments** — LeRobot's own arithmetic
  (`stats/upstream/lerobot.py`: its 5000-bin histogram quantile, its one-pass E[x²] − E[x]², 0.3's
  numpy moments) on this episode's rows, re-read from the data, reproduces the stored number. A
  dataset-wide number: LeRobot's aggregate of the stored per-episode entries reproduces it and
  those entries' own cause was confirmed.
* **stale after an edit** — the whole stored entry equals the statistics of other frames: these
  frames numbered as before an edit (`index`, `episode_index` shifted by a constant, as LeRobot's
  `delete_episodes` and `merge_datasets` leave them), the episode's first or last k frames (an
  earlier frame count), or another episode's frames. A dataset-wide number is stale where it equals
  LeRobot's aggregate of per-episode entries that are.
* **mean of per-episode quantiles** — the count-weighted mean of the stored (or exact) per-episode
  quantiles reproduces it.
* **float32 rounding** — the stored number is the float32 rounding of the exact one.

A dataset-wide number no aggregate of the stored per-episode entries gives back is recomputed
from the rows where they are at hand (`recompute_global`: LeRobot's per-episode arithmetic on each
episode, aggregated, and its arithmetic over all frames). Where no rows are at hand (a
`norm_stats.json`, or no rows passed), a mean or std whose error lies within the rounding bound
of E[x²] − E[x]² for these values is only *consistent with* float32 (float64) moments: the finding
keeps the cause with `confirmed = False`, shown as "consistent with …". With the rows at hand,
a bound is no confirmation (any std from 0 to ~1.6 is within it for 1000 + N(0, 1)).
Anything else is "no known cause": a wrong cause sends a user after an edit nobody made.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from accelkit.stats.core.tolerance import MOMENTS, reproduces
from accelkit.stats.upstream import lerobot as lerobot_rules

F32 = 2.0**-24  # float32's unit roundoff
F64 = 2.0**-53
CONSISTENT = "consistent with"  # a cause not confirmed by a recomputation (no rows at hand)

# the causes a finding may name (docs/stats.md lists them with what each means)
CAUSES = {
    "float32": "float32 moments",
    "float64": "float64 moments",
    "float32-values": "float32 rounding",
    "averaged": "mean of per-episode quantiles",
    "binned": "binned quantiles",
    "stale": "stale after an edit",
    "counts": "counts do not add up",
    "gone": "episode is gone",
    "missing": "no statistics stored",
    "shape": "wrong number of values",
    "nan": "not a number stored",
    "unknown": "no known cause",
}

# what each cause means, printed once under the table
CAUSE_HELP = {
    "float32": "float32 moments: the mean and std were computed in float32 as E[x²] − E[x]², which"
    " keeps ~7 digits: a column far from 0 for its spread (|mean|/std large) loses its std",
    "float64": "float64 moments: E[x²] − E[x]² in float64 (LeRobot 0.4 on integer columns) loses the"
    " spread of values far from 0 for it (|mean|/std ≳ 1e6)",
    "float32-values": "float32 rounding: integers above 2^24 do not fit float32's 24-bit mantissa",
    "averaged": "mean of per-episode quantiles: LeRobot's aggregate_stats averages the episodes'"
    " quantiles (weighted by their frames); that is not the quantile of the dataset",
    "binned": "binned quantiles: LeRobot's 5000-bin histogram quantile, recomputed on the episode's"
    " rows, not numpy's linear interpolation; far off for short episodes, tails and 0/1 columns",
    "stale": "stale after an edit: the stored numbers are the statistics of other frames (renumbered,"
    " fewer, or another episode's) than the data holds now",
    "counts": "counts do not add up: the stored count is not the number of frames in the data",
    "gone": "episode is gone: statistics of an episode the data no longer holds",
    "missing": "no statistics stored for a feature or an episode the data holds",
    "shape": "wrong number of values: the stored entry does not match the feature's dimensions",
    "nan": "not a number stored: the file holds NaN or Inf for the statistic",
    "unknown": "no known cause: no recomputation (LeRobot's arithmetic, other frames, an average)"
    " gives the stored number back",
    "consistent": f"{CONSISTENT} …: not confirmed — no rows were at hand to recompute it; the"
    " error lies within that arithmetic's rounding bound for these values (so would others)",
}


def legend(labels: Iterable[str]) -> list[str]:
    """The lines explaining each cause among `labels` (as `label` writes them), in CAUSES' order;
    "consistent with …" explained once where one is not confirmed."""
    used = set(labels)
    out = [
        CAUSE_HELP[key]
        for key, name in CAUSES.items()
        if key in CAUSE_HELP and ({name, f"{CONSISTENT} {name}"} & used)
    ]
    if any(u.startswith(CONSISTENT) for u in used):
        out.append(CAUSE_HELP["consistent"])
    return out


def label(cause: str | None, confirmed: bool = True) -> str:
    """A cause as the table and --json name it: "consistent with …" where it is not confirmed."""
    if cause is None:
        return ""
    return CAUSES[cause] if confirmed else f"{CONSISTENT} {CAUSES[cause]}"


def scale(stat: str, exact: Mapping[str, np.ndarray]) -> np.ndarray:
    """What an error of `stat` is measured in: the std (moments) or the range; 1 where that is 0
    (a constant dimension: the error is then absolute)."""
    unit = exact["std"] if stat in MOMENTS else exact["max"] - exact["min"]
    return np.where(unit > 0, unit, 1.0)


def _near(value, target, exact, stat: str, d: int) -> bool:
    """`target` (a recomputation) gives the stored `value` back (`tolerance.reproduces`)."""
    return reproduces(target, value, float(scale(stat, exact)[d]), stat)


def exact_entry(x: np.ndarray, levels: list[float]) -> dict[str, np.ndarray]:
    """numpy's statistics of rows `x` [n, D], as the engine computes them (float64 moments,
    numpy.quantile at LeRobot's levels)."""
    wide = x.astype(np.float64)
    out = {
        "mean": wide.mean(axis=0),
        "std": wide.std(axis=0),
        "min": wide.min(axis=0),
        "max": wide.max(axis=0),
        "count": np.asarray([len(x)], np.float64),
    }
    quantiles = np.quantile(wide if x.dtype.kind == "f" else x, np.asarray(levels), axis=0)
    for q, values in zip(levels, quantiles, strict=True):
        out[f"q{int(q * 100):02d}"] = np.asarray(values, np.float64).reshape(-1)
    return out


@dataclass
class Recomputed:
    """One episode's feature, recomputed from its rows: LeRobot's arithmetic on them (`own`:
    precision, statistics) and the statistics of other frames the stored entry may hold
    (`others`: description, statistics)."""

    own: list[tuple[str, dict[str, np.ndarray]]] = field(default_factory=list)
    others: list[tuple[str, dict[str, np.ndarray]]] = field(default_factory=list)


def recompute(
    x: np.ndarray, stored: Mapping[str, np.ndarray], feature: str, levels: list[float]
) -> Recomputed:
    """What `stored` may be, from the episode's rows `x` (in the dtype the data holds)."""
    out = Recomputed(own=lerobot_rules.candidates(x, levels))
    n = len(x)

    def every_way(rows: np.ndarray, what: str) -> None:
        out.others.append((what, exact_entry(rows, levels)))
        out.others.extend((what, stats) for _, stats in lerobot_rules.candidates(rows, levels))

    if n and np.issubdtype(x.dtype, np.integer) and "min" in stored and stored["min"].size:
        shift = float(stored["min"][0]) - float(x[:, 0].min())
        if shift and shift.is_integer() and abs(shift) < 2**62:
            every_way(
                x + np.int64(shift),
                f"the statistics of these frames with {feature} {int(shift):+d}: numbered as"
                " before an edit that renumbered the dataset",
            )
    count = int(stored["count"][0]) if "count" in stored and stored["count"].size else n
    if 0 < count < n:
        every_way(x[:count], f"the statistics of the episode's first {count} of {n} frames")
        every_way(x[n - count :], f"the statistics of the episode's last {count} of {n} frames")
    return out


def _same(stored: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray], exact) -> bool:
    """Every statistic both hold is given back (counts exactly), and at least mean, min and max
    are."""
    shared = [s for s in stored if s in candidate]
    if not {"mean", "min", "max"} <= set(shared):
        return False
    for stat in shared:
        a, b = stored[stat], candidate[stat]
        if stat == "count":
            if a.size < 1 or b.size < 1 or float(a[0]) != float(b[0]):
                return False
            continue
        if a.shape != b.shape or a.shape != exact["mean"].shape:
            return False
        unit = scale(stat, exact)
        if not all(reproduces(b[d], a[d], float(unit[d])) for d in range(a.size)):
            return False
    return True


def _own(finding, recomputed: Recomputed | None, exact) -> str | None:
    """The precision of LeRobot's arithmetic that gives this stored number back, or None."""
    if recomputed is None or finding.stored is None:
        return None
    d = finding.dim or 0
    for precision, stats in recomputed.own:
        values = stats.get(finding.stat)
        if (
            values is not None
            and values.size > d
            and _near(finding.stored, values[d], exact, finding.stat, d)
        ):
            return precision
    return None


def moments_bound(stat: str, exact: Mapping[str, np.ndarray], d: int, count: float, unit: float):
    """How far E[x²] − E[x]² in a precision with unit roundoff `unit` may put the stored mean or
    std of these values (summation over `count` values, |x| ≤ max(|min|, |max|))."""
    largest = max(abs(float(exact["min"][d])), abs(float(exact["max"][d])))
    steps = math.log2(max(count, 2.0)) + 2
    if stat == "mean":
        return steps * unit * largest
    return (2 * steps + 2) * unit * largest**2  # on std², not std


def _within_rounding(finding, exact, count: float, unit: float) -> bool:
    d = finding.dim or 0
    bound = moments_bound(finding.stat, exact, d, count, unit)
    if finding.stat == "mean":
        return abs(finding.stored - finding.exact) <= bound
    return abs(finding.stored**2 - finding.exact**2) <= bound


def _float32_rounding(finding) -> bool:
    stored, truth = finding.stored, finding.exact
    if stored is None or truth is None or not np.isfinite(truth) or abs(truth) < 2**24:
        return False
    return stored == float(np.float32(truth)) and stored != truth


def _name(finding, cause: str, detail: str, confirmed: bool = True) -> None:
    finding.cause, finding.detail, finding.confirmed = cause, detail, confirmed


def _consistent(finding, count: float, kind: str) -> None:
    """A mean or std within `kind` rounding of E[x²] − E[x]², with no rows to recompute it."""
    _name(
        finding,
        kind,
        f"not confirmed (no rows recomputed): within {kind} rounding of E[x²] − E[x]² over"
        f" {count:,.0f} values this far from 0",
        confirmed=False,
    )


def explain_entry(
    findings: list,
    stored: Mapping[str, np.ndarray],
    exact: Mapping[str, np.ndarray],
    *,
    recomputed: Recomputed | None,
    others: Iterable[tuple[str, Mapping[str, np.ndarray]]] = (),
    integer: bool = False,
) -> None:
    """Causes for one episode's failing findings of one feature (sets `cause`, `detail`,
    `confirmed`).

    `recomputed`: LeRobot's arithmetic on the episode's rows (None: the rows are not at hand, and
    a moment within the rounding bound is only consistent with float32/float64 moments);
    `others`: (description, statistics) of other episodes' frames — what a moved entry would hold;
    `integer`: the feature is integer or bool (LeRobot's moments of it are float64)."""
    failing = [f for f in findings if f.fails and f.cause is None]
    if not failing:
        return
    count = float(exact["count"][0])
    own = {id(f): _own(f, recomputed, exact) for f in failing}
    if not all(own.values()):
        candidates = list(recomputed.others if recomputed else []) + list(others)
        for what, stats in candidates:
            if _same(stored, stats, exact):
                for f in failing:
                    _name(f, "stale", what)
                return
    kind, roundoff = ("float64", F64) if integer else ("float32", F32)
    for f in failing:
        precision = own[id(f)]
        if f.stat == "count":
            _name(f, "unknown", f"{f.stored:,.0f} counted, the data holds {f.exact:,.0f} frames")
        elif precision and f.stat.startswith("q"):
            _name(
                f,
                "binned",
                f"LeRobot's {lerobot_rules.BINS}-bin histogram quantile of this episode's"
                f" {count:,.0f} frames gives the stored number",
            )
        elif precision and f.stat in MOMENTS:
            _name(
                f, precision, f"LeRobot's {f.stat} in {precision} on this episode's rows gives it"
            )
        elif _float32_rounding(f):
            _name(f, "float32-values", f"{f.exact:.17g} stored as float32 ({f.stored:.17g})")
        elif (
            recomputed is None and f.stat in MOMENTS and _within_rounding(f, exact, count, roundoff)
        ):
            _consistent(f, count, kind)
        else:
            _name(f, "unknown", "")


@dataclass
class Aggregated:
    """What LeRobot's `aggregate_stats` makes of one feature's per-episode entries: `stored`, every
    way it may have aggregated the stored ones — all at once (after an edit, on loading) and
    folded after every episode while recording (`lerobot_rules.fold`), on the numbers in float64
    and, for a float feature, on the moments in float32, the dtype LeRobot's own arrays held;
    `exact`, its aggregate of the exact ones (quantiles averaged)."""

    stored: list[dict[str, np.ndarray]] = field(default_factory=list)
    exact: dict[str, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, stored: list, exact: list, integer: bool = False) -> Aggregated:
        variants = [list(stored)] if stored else []
        if stored and not integer:
            as_float32 = [
                {k: v.astype(np.float32) if k in MOMENTS else v for k, v in e.items()}
                for e in stored
            ]
            variants.append(as_float32)
        found = [way(v) for v in variants for way in (lerobot_rules.aggregate, lerobot_rules.fold)]
        return cls(
            [{k: np.asarray(v, np.float64).reshape(-1) for k, v in a.items()} for a in found if a],
            lerobot_rules.aggregate(list(exact)) if exact else {},
        )


def explain_global(
    finding,
    exact: Mapping[str, np.ndarray],
    *,
    frames: int,
    aggregated: Aggregated | None = None,
    episode_causes: Mapping[str, Mapping[str | None, bool]],
    integer: bool = False,
) -> None:
    """The cause of a failing dataset-wide finding (`stats.json`, a `norm_stats.json`).

    `aggregated`: LeRobot's aggregates of the feature's per-episode statistics (None: it has
    none); `episode_causes`: statistic -> cause named for its failing per-episode
    entries -> whether every one of them was confirmed."""
    if not finding.fails or finding.cause is not None:
        return
    stat, d = finding.stat, finding.dim or 0
    if stat == "count":
        _name(finding, "counts", f"{finding.stored:,.0f} counted, the data holds {frames:,} frames")
        return
    causes = dict(episode_causes.get(stat, {}))
    if stat == "std" and "stale" in episode_causes.get("mean", {}):
        # the aggregate's variance adds each episode's (stale) mean's spread
        causes["stale"] = causes.get("stale", True) and episode_causes["mean"]["stale"]
    aggregated = aggregated or Aggregated()
    given_back = any(
        stat in a and _near(finding.stored, a[stat][d], exact, stat, d) for a in aggregated.stored
    )
    if given_back:
        if "stale" in causes:
            _name(
                finding,
                "stale",
                "LeRobot's aggregate of the stored per-episode statistics, some of which are stale",
                causes["stale"],
            )
            return
        if stat.startswith("q"):
            _name(
                finding,
                "averaged",
                f"equals the count-weighted mean of the stored per-episode {stat}"
                " (LeRobot's aggregate_stats), not the dataset's quantile",
            )
            return
        inherited = [c for c in ("float32", "float64") if c in causes]
        if inherited:
            _name(
                finding,
                inherited[0],
                f"LeRobot's aggregate of per-episode {stat}s computed as E[x²] − E[x]² in"
                f" {inherited[0]}",
                causes[inherited[0]],
            )
            return
        if "unknown" in causes:
            _name(
                finding,
                "unknown",
                "LeRobot's aggregate of the stored per-episode statistics, which no recomputation"
                " gives back",
            )
            return
    if stat.startswith("q"):
        averaged = aggregated.exact
        if stat in averaged and _near(finding.stored, averaged[stat][d], exact, stat, d):
            _name(
                finding,
                "averaged",
                f"equals the count-weighted mean of the exact per-episode {stat}"
                " (LeRobot's aggregate_stats), not the dataset's quantile",
            )
            return
    if _float32_rounding(finding):
        _name(finding, "float32-values", f"{finding.exact:.17g} stored as float32")
        return
    if stat in MOMENTS:
        kind = "float64" if integer else "float32"
        if _within_rounding(finding, exact, float(frames), F64 if integer else F32):
            _consistent(finding, float(frames), kind)
            return
    _name(finding, "unknown", "")


# --- a dataset-wide number, recomputed from the rows -------------------------------------------


def doubtful(finding) -> bool:
    """A failing number whose cause a recomputation from the rows may still settle: no known
    cause, or only consistent with a rounding bound (stale entries are settled by their episodes)."""
    if finding.dim is None or finding.stat == "count" or finding.stored is None:
        return False
    return finding.cause == "unknown" or (finding.cause != "stale" and not finding.confirmed)


def recompute_global(
    episodes: list[np.ndarray], levels: list[float]
) -> list[tuple[str, str, dict[str, np.ndarray]]]:
    """What LeRobot may have stored dataset-wide for a feature whose rows per episode (in episode
    order, the data's dtype) are `episodes`: (precision, "aggregated" or "whole", statistics) —
    its `aggregate_stats` of its own per-episode statistics (all at once and folded after every
    episode, in float64 and in the data's dtype), and its arithmetic over all frames at once."""
    out: list[tuple[str, str, dict[str, np.ndarray]]] = []
    episodes = [x for x in episodes if len(x)]
    if not episodes:
        return out
    for native in (False, True):
        per = [lerobot_rules.candidates(x, levels, native) for x in episodes]
        for i, (precision, _) in enumerate(per[0]):
            entries = [p[i][1] for p in per]
            for way in (lerobot_rules.aggregate, lerobot_rules.fold):
                found = way(entries)
                if found:
                    flat = {k: np.asarray(v, np.float64).reshape(-1) for k, v in found.items()}
                    out.append((precision, "aggregated", flat))
    whole = np.concatenate(episodes)
    out.extend((p, "whole", stats) for p, stats in lerobot_rules.candidates(whole, levels))
    return out


def explain_recomputed(finding, exact: Mapping[str, np.ndarray], recomputed: list) -> None:
    """Name a doubtful dataset-wide number's cause from `recompute_global` where one of its
    recomputations gives it back; else it has no known cause (the rows were at hand)."""
    stat, d = finding.stat, finding.dim
    for precision, how, stats in recomputed:
        values = stats.get(stat)
        if values is None or values.size <= d:
            continue
        if not _near(finding.stored, values[d], exact, stat, d):
            continue
        frames = f"{float(stats['count'][0]):,.0f} frames"
        if stat.startswith("q") and how == "aggregated":
            _name(
                finding,
                "averaged",
                f"LeRobot's count-weighted mean of its binned per-episode {stat}, recomputed"
                " from the rows, gives it",
            )
        elif stat.startswith("q"):
            _name(
                finding,
                "binned",
                f"LeRobot's {lerobot_rules.BINS}-bin histogram quantile of all {frames} gives it",
            )
        elif stat in MOMENTS and how == "aggregated":
            _name(
                finding,
                precision,
                f"LeRobot's aggregate of its per-episode {stat}s in {precision}, recomputed from"
                " the rows, gives it",
            )
        elif stat in MOMENTS:
            _name(finding, precision, f"LeRobot's {stat} in {precision} over all {frames} gives it")
        else:
            continue
        return
    if finding.cause != "unknown":
        _name(
            finding,
            "unknown",
            "no recomputation from the rows (LeRobot's arithmetic per episode, aggregated, or over"
            " all frames) gives it back",
        )
