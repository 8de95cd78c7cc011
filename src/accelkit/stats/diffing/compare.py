"""How far two statistics files are apart: the pure core of `accelkit stats diff`.

Keys are paired by the dataset column they describe (openpi's `state` is LeRobot's
`observation.state`, `stats/formats/stats_read.py`), statistics by name; every statistic both files hold
is compared dimension by dimension. A difference is measured as `stats check` measures an error
(`stats/checking/compare.py`): the moments (mean, std) in units of the std, min, max and the quantiles in
units of the range (max − min), counts in frames. The unit is the smaller of the two files' own
(a file that says std 0.01 where the other says 3 is not excused by the larger), positive and
finite; a file without min/max (openpi's own) gives its range as its highest quantile minus its
lowest; where neither file gives one (a constant dimension), the difference is absolute. The unit
comes from the two files only, so the verdict never depends on `--dataset`, which only names
causes (`stats/diffing/causes.py`).

A value that is NaN or infinite in either file differs by infinitely much (its cause: "not a
number stored"); a statistic whose number of values differs between the files is one structural
difference. Statistics or keys that only one file holds are listed, not compared: an openpi file
has no q10, a LeRobot file has `timestamp`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from accelkit.stats.core import tolerance as tolerance_rule
from accelkit.stats.core.tolerance import MOMENTS, sortable
from accelkit.stats.core.tolerance import TOLERANCE as TOLERANCE  # stats check's, re-exported


@dataclass
class Difference:
    """One statistic of one pair of keys, every dimension: both files' values, the difference
    in `unit` (inf where a value is not a number or the shapes differ) and, once explained, the
    cause of each failing dimension."""

    key: str  # A's key
    key_b: str  # B's key (the same, unless one file is openpi's and the other LeRobot's)
    column: str  # the dataset column both describe
    stat: str
    unit: str  # "std", "range" or "frames"
    a: np.ndarray
    b: np.ndarray
    errors: np.ndarray
    scale: np.ndarray  # the unit's size per dimension (1 where the difference is absolute)
    fails: np.ndarray  # bool per dimension
    problem: str = ""  # a structural difference ("A holds 6 values, B 7")
    in_std: np.ndarray | None = None  # the difference in units of the std, every statistic
    in_range: np.ndarray | None = None  # and of the range
    causes: dict[int, str] = field(default_factory=dict)  # dimension -> cause (rendered)
    details: dict[int, str] = field(default_factory=dict)

    @property
    def failing(self) -> list[int]:
        return [int(d) for d in np.flatnonzero(self.fails)]

    @property
    def worst(self) -> int:
        return int(np.argmax(np.where(np.isfinite(self.errors), self.errors, 1e300)))

    def document(self) -> dict:
        return {
            "key": self.key,
            "key_b": self.key_b,
            "column": self.column,
            "statistic": self.stat,
            "unit": self.unit,
            "a": _floats(self.a),
            "b": _floats(self.b),
            "errors": _floats(self.errors),
            "in_std": None if self.in_std is None else _floats(self.in_std),
            "in_range": None if self.in_range is None else _floats(self.in_range),
            "failing": self.failing,
            "problem": self.problem,
            "causes": {str(d): c for d, c in sorted(self.causes.items())},
            "details": {str(d): t for d, t in sorted(self.details.items())},
        }


def _floats(values: np.ndarray) -> list:
    return [float(v) if math.isfinite(v) else None for v in np.asarray(values, float).tolist()]


@dataclass
class Pair:
    """Two keys that describe the same column, and what each file holds of it."""

    key: str
    key_b: str
    column: str
    a: dict[str, np.ndarray]
    b: dict[str, np.ndarray]


def pairs(a, b) -> tuple[list[Pair], list[str], list[str]]:
    """(the keys both files describe, paired by column; A's keys alone; B's keys alone)."""
    by_column = {}
    for key, column in b.columns.items():
        by_column.setdefault(column, key)
    out, alone_a = [], []
    used = set()
    for key, column in a.columns.items():
        other = by_column.get(column)
        if other is None or other in used:
            alone_a.append(key)
            continue
        used.add(other)
        out.append(Pair(key, other, column, a.entries[key], b.entries[other]))
    alone_b = [k for k in b.entries if k not in used]
    return out, alone_a, alone_b


def _width(entry: dict[str, np.ndarray]) -> int:
    """How many dimensions the feature of `entry` has (its mean's, else any other statistic's)."""
    sizes = [v.size for k, v in entry.items() if k != "count"]
    return entry["mean"].size if "mean" in entry else max(sizes, default=1)


def _counts(pair: Pair) -> tuple[np.ndarray, np.ndarray, str]:
    """Both files' counts, comparable: one number each where both hold one (LeRobot's [n]), one per
    dimension where either holds one per dimension (openpi); a problem where either holds another
    number of values."""
    a, b = pair.a["count"], pair.b["count"]
    if a.size == 1 and b.size == 1:
        return a, b, ""
    width = _width(pair.a)
    wide_a, wide_b = tolerance_rule.counts(a, width), tolerance_rule.counts(b, width)
    if wide_a is None or wide_b is None:
        return a, b, f"A holds {a.size} counts, B {b.size}, for a feature of {width} values"
    return wide_a, wide_b, ""


def _range(entry: dict[str, np.ndarray], n: int) -> np.ndarray | None:
    if all(s in entry and entry[s].shape == (n,) for s in ("min", "max")):
        return entry["max"] - entry["min"]
    names = sorted(
        (s for s in entry if s.startswith("q") and entry[s].shape == (n,)),
        key=lambda s: float(s[1:]) if s[1:].replace(".", "", 1).isdigit() else -1,
    )
    names = [s for s in names if s[1:].replace(".", "", 1).isdigit()]
    if len(names) >= 2:
        return entry[names[-1]] - entry[names[0]]
    return None


def unit_scale(pair: Pair, stat: str, n: int) -> np.ndarray:
    """The size of the unit `stat` is measured in, per dimension: the smaller positive finite of
    the two files' std (moments) or range (the rest); 1 where neither has one."""
    sides = [
        (e["std"] if "std" in e and e["std"].shape == (n,) else None)
        if stat in MOMENTS
        else _range(e, n)
        for e in (pair.a, pair.b)
    ]
    with np.errstate(invalid="ignore"):
        usable = [np.where(np.isfinite(s) & (s > 0), s, np.inf) for s in sides if s is not None]
    if not usable:
        return np.ones(n)
    smaller = np.minimum.reduce(usable)
    return np.where(np.isfinite(smaller), smaller, 1.0)


def compare_pair(pair: Pair, stat: str, tolerance: float) -> Difference:
    """One statistic both files hold for `pair`, dimension by dimension."""
    a, b = pair.a[stat], pair.b[stat]
    unit = "frames" if stat == "count" else ("std" if stat in MOMENTS else "range")
    problem = ""
    if stat == "count":
        a, b, problem = _counts(pair)

    def found(errors, scale, fails, **more) -> Difference:
        key, other, column = pair.key, pair.key_b, pair.column
        return Difference(key, other, column, stat, unit, a, b, errors, scale, fails, **more)

    if a.shape != b.shape or problem:
        problem = problem or f"A holds {a.size} values, B {b.size}"
        return found(np.asarray([math.inf]), np.ones(1), np.asarray([True]), problem=problem)
    n = a.size

    def measured(scale: np.ndarray) -> np.ndarray:
        return tolerance_rule.errors(a, b, scale)

    if stat == "count":
        errors = measured(np.ones(n))
        return found(errors, np.ones(n), tolerance_rule.fails(errors, tolerance, stat))
    in_std, in_range = measured(unit_scale(pair, "std", n)), measured(unit_scale(pair, "min", n))
    errors = in_std if stat in MOMENTS else in_range
    scale = unit_scale(pair, stat, n)
    fails = tolerance_rule.fails(errors, tolerance, stat)
    return found(errors, scale, fails, in_std=in_std, in_range=in_range)


@dataclass
class Comparison:
    """Every difference between two files, and what was not compared."""

    differences: list[Difference]
    only_in_a: list[str]
    only_in_b: list[str]
    not_compared: list[str]
    tolerance: float

    @property
    def compared(self) -> int:
        return sum(d.errors.size for d in self.differences)

    @property
    def differing(self) -> int:
        return sum(len(d.failing) for d in self.differences)

    @property
    def ok(self) -> bool:
        return self.differing == 0


def compare_files(a, b, tolerance: float = TOLERANCE) -> Comparison:
    """Both files' statistics, key pair by key pair (A's order), statistic by statistic."""
    found, alone_a, alone_b = pairs(a, b)
    differences, not_compared = [], []
    for pair in found:
        for stat in pair.a:
            if stat in pair.b:
                differences.append(compare_pair(pair, stat, tolerance))
        name = pair.key if pair.key == pair.key_b else f"{pair.key} (B: {pair.key_b})"
        for side, mine, other in (("A", pair.a, pair.b), ("B", pair.b, pair.a)):
            alone = [s for s in mine if s not in other]
            if alone:
                not_compared.append(f"{name}: {', '.join(alone)} only in {side}")
    return Comparison(differences, alone_a, alone_b, not_compared, tolerance)


def verdict(comparison: Comparison) -> str:
    if comparison.ok:
        return f"all {comparison.compared:,} compared numbers within {comparison.tolerance:g}"
    return (
        f"{comparison.differing:,} of {comparison.compared:,} compared numbers differ by more"
        f" than {comparison.tolerance:g}"
    )


def summary_rows(comparison: Comparison) -> list[dict]:
    """The table: one row per (key, statistic, cause) with failing dimensions — which, the
    worst one's values and difference."""
    rows = []
    for diff in comparison.differences:
        groups: dict[str, list[int]] = {}
        for d in diff.failing:
            groups.setdefault(diff.causes.get(d, ""), []).append(d)
        for cause, dims in groups.items():
            worst = max(dims, key=lambda d: sortable(diff.errors[d]))
            rows.append(
                {
                    "key": diff.key,
                    "statistic": diff.stat,
                    "dimensions": dims,
                    "worst": diff.stat if diff.problem else f"{diff.stat}[{worst}]",
                    "a": None if diff.problem else _floats(diff.a[worst : worst + 1])[0],
                    "b": None if diff.problem else _floats(diff.b[worst : worst + 1])[0],
                    "error": _floats(diff.errors[worst : worst + 1])[0],
                    "unit": diff.unit,
                    "cause": cause,
                    "detail": diff.problem or diff.details.get(worst, ""),
                }
            )
    return rows
