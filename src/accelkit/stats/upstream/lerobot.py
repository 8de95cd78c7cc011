"""LeRobot's own statistics arithmetic, written out in numpy, so `stats check` can recompute what a
cause claims before it names it.

Read from LeRobot's source (`lerobot/datasets/compute_stats.py`), not imported (LeRobot is not a
dependency):

* **0.4.x** (`compute_episode_stats` → `get_feature_stats` → `RunningQuantileStats`, one `update`
  with the episode's rows): mean = `np.mean(x, axis=0)` and mean of squares = `np.mean(x**2,
  axis=0)` in the column's dtype, std = `sqrt(max(0, E[x²] − E[x]²))`; quantiles from a 5000-bin
  histogram per dimension whose edges are `linspace(min − 1e-10, max + 1e-10, 5001)`, read as the
  bin holding rank `q · n` (searchsorted of the cumulative counts) with linear interpolation inside
  it. An episode of one frame gets `np.min/max/mean/std` and every quantile = its mean.
* **0.3.x** (v2.1 datasets): `np.min`, `np.max`, `np.mean`, `np.std` of the episode in the column's
  dtype; no quantiles.
* **`aggregate_stats`** (both; every dataset-wide `stats.json` LeRobot writes, also after its own
  `delete_episodes` and `merge_datasets`): count-weighted mean of the means and of the quantiles,
  variance = the weighted mean of `std² + (mean − total mean)²`, min of mins, max of maxes.

The values LeRobot computed on are the frames as recorded: float32 features as float32, the
bookkeeping columns `index`, `frame_index`, `episode_index`, `task_index` as int64 and
`timestamp` as float64 (Python floats), though the file stores it as float32 — so each rule is
also tried on the values widened to float64 (`candidates`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

BINS = 5000  # RunningQuantileStats' num_quantile_bins
PAD = 1e-10  # its edge padding


def _name(level: float) -> str:
    return f"q{int(level * 100):02d}"  # LeRobot's quantile keys (q01, q10, q50, q90, q99)


def histogram_quantiles(x: np.ndarray, levels: list[float], lo, hi) -> dict[str, np.ndarray]:
    """RunningQuantileStats' quantiles of `x` [n, D] (n ≥ 2) with per-dimension extremes lo, hi.

    Its histogram counts value v in bin k where edges[k] ≤ v < edges[k+1] (the last bin closed),
    so the cumulative count of bin k is the number of values below edges[k+1]; the first bin whose
    cumulative count reaches t = q·n is the bin of the ⌈t⌉-th smallest value. Found by sorting
    instead of building 5000 counters; the arithmetic on the found bin is LeRobot's."""
    n, width = x.shape
    ordered = np.sort(x, axis=0)
    out = {_name(q): np.empty(width, np.float64) for q in levels}
    for d in range(width):
        edges = np.linspace(lo[d] - PAD, hi[d] + PAD, BINS + 1)
        column = ordered[:, d]
        for q in levels:
            target = q * n
            if target <= 0:
                idx = 0
            else:
                rank = min(int(np.ceil(target)), n)  # 1-based rank of the value reaching t
                idx = int(np.searchsorted(edges, column[rank - 1], side="right")) - 1
                idx = min(max(idx, 0), BINS - 1)
            if idx == 0:
                value = edges[0]
            else:
                before = np.float64(np.searchsorted(column, edges[idx], side="left"))
                upto = (
                    np.float64(n)
                    if idx == BINS - 1
                    else np.float64(np.searchsorted(column, edges[idx + 1], side="left"))
                )
                inside = upto - before
                if inside == 0:
                    value = edges[idx]
                else:
                    fraction = (target - before) / inside
                    value = edges[idx] + fraction * (edges[idx + 1] - edges[idx])
            out[_name(q)][d] = value
    return out


def lerobot_04(x: np.ndarray, levels: list[float], native: bool = False) -> dict[str, np.ndarray]:
    """LeRobot 0.4's per-episode statistics of the rows `x` [n, D] (in the dtype it computed in);
    float64 arrays, or with `native` in the dtypes LeRobot's own arrays have (what its
    `aggregate_stats` then computes with while recording)."""
    n = len(x)
    if n < 2:
        mean = np.mean(x, axis=0)
        out = {
            "min": np.min(x, axis=0),
            "max": np.max(x, axis=0),
            "mean": mean,
            "std": np.std(x, axis=0),
        }
        out.update({_name(q): mean for q in levels})
    else:
        lo, hi = np.min(x, axis=0), np.max(x, axis=0)
        mean = np.mean(x, axis=0)
        squares = np.mean(x**2, axis=0)
        out = {
            "min": lo,
            "max": hi,
            "mean": mean,
            "std": np.sqrt(np.maximum(0, squares - mean**2)),
            **histogram_quantiles(x, levels, lo, hi),
        }
    return _flat(out, n, native)


def lerobot_03(x: np.ndarray, native: bool = False) -> dict[str, np.ndarray]:
    """LeRobot 0.3's per-episode statistics: numpy's min, max, mean and std in x's dtype."""
    out = {
        "min": np.min(x, axis=0),
        "max": np.max(x, axis=0),
        "mean": np.mean(x, axis=0),
        "std": np.std(x, axis=0),
    }
    return _flat(out, len(x), native)


def _flat(stats: Mapping[str, np.ndarray], n: int, native: bool = False) -> dict[str, np.ndarray]:
    if native:
        return {
            **{k: np.asarray(v).reshape(-1) for k, v in stats.items()},
            "count": np.asarray([n]),
        }
    out = {k: np.asarray(v, np.float64).reshape(-1) for k, v in stats.items()}
    out["count"] = np.asarray([n], np.float64)
    return out


def candidates(
    x: np.ndarray, levels: list[float], native: bool = False
) -> list[tuple[str, dict[str, np.ndarray]]]:
    """Every way LeRobot may have computed an episode's entry from its stored rows `x`: (the
    arithmetic's name — "float32" or "float64" —, the statistics): 0.4's and 0.3's rules on `x`,
    then on `x` widened to float64."""
    out = []
    widened = x.astype(np.float64) if x.dtype != np.float64 else None
    for values in (x, widened):
        if values is None:
            continue
        precision = "float32" if values.dtype == np.float32 else "float64"
        out.append((precision, lerobot_04(values, levels, native)))
        out.append((precision, lerobot_03(values, native)))
    return out


def aggregate(entries: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """LeRobot's `aggregate_stats` of one feature's entries (those holding mean, std and count)."""
    usable = [e for e in entries if {"mean", "std", "count"} <= set(e)]
    shapes = {e["mean"].shape for e in usable}
    if not usable or len(shapes) != 1:
        return {}
    counts = np.asarray([float(e["count"][0]) for e in usable])
    total = counts.sum()
    if total <= 0:
        return {}
    weights = counts[:, None]
    means = np.stack([e["mean"] for e in usable])
    mean = (means * weights).sum(axis=0) / total
    squares = np.stack([e["std"] ** 2 for e in usable])  # each in its own dtype, as LeRobot squares
    variance = ((squares + (means - mean) ** 2) * weights).sum(axis=0) / total
    out = {"mean": mean, "std": np.sqrt(variance), "count": np.asarray([total])}
    for stat in ("min", "max"):
        if all(stat in e and e[stat].shape == mean.shape for e in usable):
            pick = np.min if stat == "min" else np.max
            out[stat] = pick(np.stack([e[stat] for e in usable]), axis=0)
    names = {k for k in usable[0] if k.startswith("q") and k[1:].isdigit()}
    for stat in sorted(names):
        if all(stat in e and e[stat].shape == mean.shape for e in usable):
            out[stat] = (np.stack([e[stat] for e in usable]) * weights).sum(axis=0) / total
    return out


def fold(entries: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """`meta/stats.json` as LeRobot 0.4 writes it while recording: after every episode,
    `stats = aggregate_stats([stats, episode])` (the first episode's statistics as they are), on
    the episodes' statistics in their own dtypes (`lerobot_04(..., native=True)`)."""
    out: dict[str, np.ndarray] = {}
    for entry in entries:
        out = dict(entry) if not out else aggregate([out, entry])
    return out
