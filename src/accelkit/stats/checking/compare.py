"""How far the statistics stored in a dataset are from the exact ones, and why: the comparison
at the heart of `accelkit stats check`, on numbers already read (no files, no drawing).

The stored numbers (read by `stats/formats/stats_files.py`: LeRobot's `meta/stats.json`, its
per-episode statistics — v3.0 `stats/<feature>/<stat>` columns of `meta/episodes/`, v2.1
`meta/episodes_stats.jsonl` — and openpi `norm_stats.json` files) are compared with exact
statistics computed by the same engine as `accelkit stats` (`compare`, below), each error in the unit a
user can judge it by: moments (mean, std) in units of the exact std, min/max/quantiles in units of
the exact range (max − min), counts in frames. A cause is named only where recomputing it gives
the stored number back (`stats/checking/causes.py`); `stats/checking/api.py` reads the files,
computes the exact statistics and fixes; `stats/checking/plot.py` draws --plot.

The tolerance (default `TOLERANCE`, 1e-3) and what "gives the stored number back" means (1e-6 of
the unit) are one rule shared with `stats diff` (`stats/core/tolerance.py`). Exact statistics stored as
float64 JSON are ~1e-15 off; float32 storage ~1e-7.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from accelkit.stats.checking import causes
from accelkit.stats.checking.causes import scale
from accelkit.stats.core import tolerance as tolerance_rule
from accelkit.stats.core.tolerance import COUNTS, UNITS, sortable
from accelkit.stats.core.tolerance import TOLERANCE as TOLERANCE  # check's default, re-exported


@dataclass
class Finding:
    """One stored number (a statistic's dimension) of one feature in one file — every failing one,
    and the worst of a statistic within tolerance — or a structural problem (`dim` None)."""

    file: str  # where it is stored, relative to the dataset (or the path given)
    feature: str
    stat: str  # mean, std, min, max, count, q01, …; "-" for a structural finding
    error: float  # worst over dimensions, in `unit`; inf for a structural finding
    unit: str  # "std", "range", "frames" or ""
    cause: str | None = None  # a key of CAUSES, None when within tolerance
    detail: str = ""
    confirmed: bool = True  # False: no recomputation gave it back, only "consistent with" it
    dim: int | None = None
    stored: float | None = None
    exact: float | None = None
    episode: int | None = None
    errors: list[float] = field(default_factory=list)  # per dimension (for the plot)
    fails: bool = False

    def document(self) -> dict:
        out = {
            "file": self.file,
            "feature": self.feature,
            "statistic": self.stat,
            "episode": self.episode,
            "dimension": self.dim,
            "error": None if not math.isfinite(self.error) else self.error,
            "unit": self.unit,
            "stored": self.stored,
            "exact": self.exact,
            "fails": self.fails,
            "cause": causes.label(self.cause, self.confirmed) or None,
            "confirmed": None if self.cause is None else self.confirmed,
            "detail": self.detail,
        }
        return out


# --- comparing ---------------------------------------------------------------------------------


def compare(
    stored: Mapping[str, np.ndarray],
    exact: Mapping[str, np.ndarray],
    *,
    file: str,
    feature: str,
    tolerance: float,
    episode: int | None = None,
) -> list[Finding]:
    """One feature's stored statistics against the exact ones, for the statistics both have
    (statistics only one side holds are not compared: v2.1 keeps no quantiles per episode): a
    finding per failing number (its dimension), or, for a statistic within tolerance, one for its
    worst number; `errors` holds every dimension's error."""
    out = []
    for stat, values in stored.items():
        if stat not in exact:
            continue
        truth = exact[stat]
        problem = f"{values.size} values stored, the feature has {truth.size}"
        if stat == "count":
            values, truth, problem = _counts(values, exact)
        if values.shape != truth.shape:
            out.append(
                Finding(
                    file,
                    feature,
                    stat,
                    math.inf,
                    "",
                    "shape",
                    problem,
                    episode=episode,
                    fails=True,
                )
            )
            continue
        size = 1.0 if stat == "count" else scale(stat, exact)
        errors = tolerance_rule.errors(values, truth, size)
        unit = UNITS.get(stat, "range")
        every = [float(e) for e in errors]
        failing = [d for d, e in enumerate(every) if tolerance_rule.fails(e, tolerance, stat)]
        # every failing number its own finding; a statistic within tolerance, its worst number
        dims = failing or ([int(np.argmax(errors))] if errors.size else [])
        for dim in dims or [None]:
            stored_number = None if dim is None else float(values[dim])
            not_a_number = stored_number is not None and not math.isfinite(stored_number)
            out.append(
                Finding(
                    file,
                    feature,
                    stat,
                    0.0 if dim is None else every[dim],
                    unit,
                    "nan" if not_a_number else None,  # named as such, never "no known cause"
                    f"the file holds {stored_number}" if not_a_number else "",
                    dim=0 if dim is None else dim,
                    stored=stored_number,
                    exact=None if dim is None else float(truth[dim]),
                    episode=episode,
                    errors=every,
                    fails=bool(failing),
                )
            )
    return out


def _counts(values: np.ndarray, exact: Mapping[str, np.ndarray]):
    """A stored count and the exact one to compare it with: LeRobot's one number with the frames,
    one per dimension (openpi) each with its dimension's; any other number of values is wrong."""
    width = exact["mean"].size if "mean" in exact else 1
    if values.size == 1:
        return values, exact["count"], ""
    per_dimension = tolerance_rule.counts(exact.get(COUNTS, exact["count"]), width)
    if tolerance_rule.counts(values, width) is None or per_dimension is None:
        problem = f"{values.size} values stored, the feature has {width} (a count: 1, or 1 each)"
        return values, np.full(width, np.nan), problem
    return values, per_dimension, ""


def compared(found: list[Finding]) -> int:
    """How many stored numbers `compare` compared to give `found` (a wrong-shaped entry: one)."""
    return sum(len(f.errors) or 1 for f in {f.stat: f for f in found}.values())


# --- a whole dataset ---------------------------------------------------------------------------

RowsOf = Callable[[dict[int, set[str]]], Iterable[tuple[int, str, np.ndarray]]]
FeatureRows = Callable[[set[str]], Iterable[tuple[int, str, np.ndarray]]]


@dataclass
class Report:
    """Every finding of one check, and what was not compared (with why)."""

    dataset: str
    tolerance: float
    findings: list[Finding] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    numbers: int = 0  # stored numbers compared

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.fails]

    @property
    def numbers_off(self) -> int:
        """How many stored numbers are off (each failing finding of a number)."""
        return sum(f.dim is not None for f in self.failures)

    @property
    def ok(self) -> bool:
        return not self.failures


def check_global(
    report: Report,
    file: str,
    stored: Mapping[str, Mapping[str, np.ndarray]],
    exact: Mapping[str, Mapping[str, np.ndarray]],
    *,
    frames: int,
    episodes_stored: Mapping[int, Mapping] | None = None,
    episodes_exact: Mapping[int, Mapping] | None = None,
    expected: list[str] | None = None,
    episode_file: str | None = None,
    integers: frozenset[str] = frozenset(),
    rows_of: FeatureRows | None = None,
    levels: Sequence[float] = (),
) -> None:
    """A file of dataset-wide statistics (`stats.json`, a `norm_stats.json`): every feature in
    `exact` compared; `expected` features without an entry are named (cameras included).

    Check the per-episode file first (`episode_file`, already in the report): a dataset-wide
    number that is LeRobot's aggregate of per-episode entries takes their confirmed cause.
    `integers`: features whose values are integers or booleans. `rows_of({feature, …})` yields
    (episode, feature, rows) for every episode: a failing number no stored aggregate explains is
    then recomputed with LeRobot's arithmetic on the rows (`causes.recompute_global`) — named
    where that gives it back, else "no known cause" (a rounding bound is no confirmation)."""
    doubtful: dict[str, list[Finding]] = {}
    for feature in expected if expected is not None else list(exact):
        if feature not in stored:
            report.findings.append(Finding(file, feature, "-", math.inf, "", "missing", fails=True))
    for feature, entry in stored.items():
        if feature not in exact:
            continue
        per_stored = [e[feature] for e in (episodes_stored or {}).values() if feature in e]
        per_exact = [e[feature] for e in (episodes_exact or {}).values() if feature in e]
        episode_causes: dict[str, dict[str | None, bool]] = {}  # stat -> cause -> all confirmed
        for f in report.findings:
            if f.file == episode_file and f.feature == feature and f.fails:
                named = episode_causes.setdefault(f.stat, {})
                named[f.cause] = named.get(f.cause, True) and f.confirmed
        found = compare(
            entry, exact[feature], file=file, feature=feature, tolerance=report.tolerance
        )
        report.numbers += compared(found)
        if any(f.fails for f in found):  # LeRobot's aggregates, once per feature
            aggregated = causes.Aggregated.of(per_stored, per_exact, feature in integers)
            for finding in found:
                causes.explain_global(
                    finding,
                    exact[feature],
                    frames=frames,
                    aggregated=aggregated,
                    episode_causes=episode_causes,
                    integer=feature in integers,
                )
            again = [f for f in found if f.fails and causes.doubtful(f)]
            if again:
                doubtful[feature] = again
        report.findings.extend(found)
    if rows_of is None or not doubtful:
        return
    rows: dict[str, dict[int, np.ndarray]] = {}
    for episode, feature, values in rows_of(set(doubtful)):
        rows.setdefault(feature, {})[episode] = values
    for feature, found in doubtful.items():
        episodes = [rows[feature][e] for e in sorted(rows.get(feature, {}))]
        recomputed = causes.recompute_global(episodes, list(levels))
        for finding in found:
            causes.explain_recomputed(finding, exact[feature], recomputed)


def check_episodes(
    report: Report,
    file: str,
    stored: Mapping[int, Mapping[str, Mapping[str, np.ndarray]]],
    exact: Mapping[int, Mapping[str, Mapping[str, np.ndarray]]],
    lengths: Mapping[int, int],
    *,
    rows_of: RowsOf | None = None,
    levels: Sequence[float] = (),
    integers: frozenset[str] = frozenset(),
) -> None:
    """Per-episode statistics: each episode's against its frames; episodes the data no longer
    holds, and episodes of the data without statistics, are named.

    `rows_of({episode: {feature, …}})` yields (episode, feature, rows in the data's dtype) for the
    entries with a failing number, re-read so that a cause is named only where recomputing it
    gives the stored number back (`stats/checking/causes.py`); without it a failing mean or std within
    the rounding bound of LeRobot's arithmetic is only "consistent with" it (`confirmed` False)."""
    for episode in sorted(set(stored) - set(lengths)):
        report.findings.append(
            Finding(
                file,
                ", ".join(sorted(stored[episode])) or "-",
                "-",
                math.inf,
                "",
                "gone",
                f"statistics of episode {episode}, which the dataset no longer holds",
                episode=episode,
                fails=True,
            )
        )
    failing: dict[tuple[int, str], list[Finding]] = {}
    for episode in sorted(lengths):
        if lengths[episode] == 0:
            continue
        have = stored.get(episode, {})
        for feature, truth in exact.get(episode, {}).items():
            if feature not in have:
                report.findings.append(
                    Finding(
                        file, feature, "-", math.inf, "", "missing", episode=episode, fails=True
                    )
                )
                continue
            found = compare(
                have[feature],
                truth,
                file=file,
                feature=feature,
                tolerance=report.tolerance,
                episode=episode,
            )
            report.numbers += compared(found)
            report.findings.extend(found)
            if any(f.fails for f in found):
                failing[(episode, feature)] = found
    if not failing:
        return
    wanted: dict[int, set[str]] = {}
    for episode, feature in failing:
        wanted.setdefault(episode, set()).add(feature)
    recomputed: dict[tuple[int, str], causes.Recomputed] = {}
    pool: dict[tuple[str, float], list[tuple[int, str, Mapping]]] = {}
    for episode, truth in exact.items():  # other episodes' frames, as an edit may have moved them
        for feature, entry in truth.items():
            count = float(entry["count"][0])
            pool.setdefault((feature, count), []).append((episode, "exact", entry))
    for episode, feature, rows in rows_of(wanted) if rows_of is not None else ():
        entry = stored[episode][feature]
        recomputed[(episode, feature)] = again = causes.recompute(
            rows, entry, feature, list(levels)
        )
        for _, stats in again.own:
            pool.setdefault((feature, float(len(rows))), []).append((episode, "LeRobot", stats))
    for (episode, feature), found in failing.items():
        entry = stored[episode][feature]
        count = float(entry["count"][0]) if "count" in entry and entry["count"].size else -1.0
        others = [
            (f"the statistics of episode {other}'s frames (an edit moved the episodes)", stats)
            for other, _, stats in pool.get((feature, count), [])
            if other != episode
        ]
        causes.explain_entry(
            found,
            entry,
            exact[episode][feature],
            recomputed=recomputed.get((episode, feature)),
            others=others,
            integer=feature in integers,
        )


def summary_rows(report: Report) -> list[dict]:
    """The table: one row per (file, feature, statistic, cause) with a failing number — how many
    numbers, which dimensions, the worst one (its dimension, error and episode), the episodes."""
    groups: dict[tuple, list[Finding]] = {}
    for f in report.failures:
        groups.setdefault((f.file, f.feature, f.stat, f.cause, f.confirmed), []).append(f)
    rows = []
    for (file, feature, stat, cause, confirmed), found in groups.items():
        worst = max(found, key=lambda f: sortable(f.error))
        dims = sorted({f.dim for f in found if f.dim is not None})
        rows.append(
            {
                "file": file,
                "feature": feature,
                "statistic": None if stat == "-" else stat,
                "numbers": sum(f.dim is not None for f in found),
                "dimensions": dims,
                "worst": worst.stat if worst.dim is None else f"{worst.stat}[{worst.dim}]",
                "error": worst.error,
                "unit": worst.unit,
                "episodes": sorted({f.episode for f in found if f.episode is not None}),
                "worst_episode": worst.episode,
                "cause": causes.label(cause, confirmed),
                "confirmed": None if cause is None else confirmed,
                "detail": worst.detail,
            }
        )
    rows.sort(
        key=lambda r: (r["file"], r["feature"], _stat_order(r["statistic"] or "-"), r["cause"])
    )
    return rows


def _stat_order(stat: str) -> tuple:
    order = ("count", "min", "max", "mean", "std")
    return (order.index(stat), "") if stat in order else (len(order), stat)
