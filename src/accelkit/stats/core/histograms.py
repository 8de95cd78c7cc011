"""The distributions the passes already counted, as histograms a person can look at, and the
dimensions that look broken.

Exact mode's first pass histograms the top 16 bits of every value's order-preserving key (see
`quantiles`): 65,536 buckets per dimension whose width is 2**-7 of the value's magnitude (and
finer near 0). Fast mode's pass histograms the top 18 bits of the key of `x - center`. Either way
the run holds, per dimension, integer counts of values between two known floats: `Buckets` keeps
the non-empty ones (clipped to the dimension's [min, max]), with no second read of the data.

`summarize` keeps what a figure needs, a few numbers per dimension (`Histogram`): `bars` merges
buckets into equal-width bars (a bucket wider than a bar is spread evenly over the bars it covers;
the total count is kept) and `end_shares` the values at each end. `flag_dimensions` names what
looks wrong:
constant, lowest level == highest level quantile, most values at one end, |mean| >> std, NaN/Inf
skipped. All pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accelkit.stats.core.quantiles import quantile_name
from accelkit.stats.core.sort_keys import keys_to_floats, keys_to_ints

BARS = 40  # bars per panel
POINT_MASS_SHARE = 0.8  # flag a dimension with at least this share of its values at one end
END_WIDTH = 0.01  # "at the end": within this fraction of the range from min or max
MEAN_OVER_STD = 1e3  # flag |mean| > this x std: normalizing divides by a tiny spread


@dataclass(frozen=True)
class Buckets:
    """A pass's histogram `counts` [D, 1, 2**bits] of the top bits of `key_bits`-bit keys (of
    `x - center` in fast mode). `of(d)` gives dimension d's non-empty buckets, one dimension at a
    time (a wide key's buckets would not all fit in memory at once)."""

    counts: np.ndarray
    key_bits: int
    integer: bool
    center: np.ndarray  # float64 [D]; zeros in exact mode
    vmin: np.ndarray
    vmax: np.ndarray

    @property
    def dim(self) -> int:
        return self.counts.shape[0]

    def of(self, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lower, upper, count): `lower[i] <= values <= upper[i]` for `count[i]` values, float64
        bounds clipped to the dimension's min and max, in value order."""
        row = self.counts[d].reshape(-1)
        shift = self.key_bits - (int(row.shape[0]).bit_length() - 1)
        bins = np.flatnonzero(row)
        if self.integer:
            low_keys = bins.astype(np.uint64) << np.uint64(shift)
            high_keys = low_keys | np.uint64((1 << shift) - 1)
            lo, hi = keys_to_ints(low_keys), keys_to_ints(high_keys)
        else:
            low_keys = bins.astype(np.uint32) << np.uint32(shift)
            high_keys = low_keys | np.uint32((1 << shift) - 1)
            lo, hi = keys_to_floats(low_keys), keys_to_floats(high_keys)
        center = float(self.center[d])
        floor, ceiling = float(self.vmin[d]), float(self.vmax[d])
        with np.errstate(invalid="ignore"):  # buckets of NaN key patterns never hold values
            lower = np.clip(lo.astype(np.float64) + center, floor, ceiling)
            upper = np.clip(hi.astype(np.float64) + center, floor, ceiling)
        return lower, upper, row[bins].astype(np.int64)


@dataclass(frozen=True)
class Histogram:
    """What a figure and the flags need of a key's histogram, a few numbers per dimension: BARS
    equal-width bars between min and max (`bars`), and the shares of values at each end
    (`end_shares`). Small whatever the bucket count, so every result can carry it."""

    edges: np.ndarray  # float64 [D, BARS + 1] (two edges, one bar, for a constant dimension)
    counts: np.ndarray  # float64 [D, BARS]
    at_min: np.ndarray  # float64 [D]
    at_max: np.ndarray  # float64 [D]
    coarse: np.ndarray  # float64 [D]: share of values in buckets wider than a bar (spread flat)


def summarize(buckets: Buckets, n: int = BARS) -> Histogram:
    """The `Histogram` of `buckets`, one dimension at a time."""
    edges = np.full((buckets.dim, n + 1), np.nan)
    counts = np.zeros((buckets.dim, n))
    at_min, at_max, coarse = (np.zeros(buckets.dim) for _ in range(3))
    for d in range(buckets.dim):
        lo, hi = float(buckets.vmin[d]), float(buckets.vmax[d])
        lower, upper, count = buckets.of(d)
        e, c = bars(lower, upper, count, lo, hi, n)
        edges[d, : len(e)], counts[d, : len(c)] = e, c
        at_min[d], at_max[d] = end_shares(lower, upper, count, lo, hi)
        if hi > lo and count.sum():
            coarse[d] = count[(upper - lower) > (hi - lo) / n].sum() / count.sum()
    return Histogram(edges, counts, at_min, at_max, coarse)


def dimension_bars(histogram: Histogram, d: int) -> tuple[np.ndarray, np.ndarray]:
    """(edges, counts) of dimension d, without the padding of a constant dimension."""
    edges = histogram.edges[d][np.isfinite(histogram.edges[d])]
    return edges, histogram.counts[d][: len(edges) - 1]


def from_exact_pass(counts: np.ndarray, vmin: np.ndarray, vmax: np.ndarray) -> Buckets:
    """Buckets of exact mode's first pass: `counts` [D, 1, 2**16] of the top 16 key bits (uint32
    keys of float32 data, or uint64 keys of int64 data: `vmin`'s dtype says which)."""
    integer = np.asarray(vmin).dtype == np.int64
    dim = np.shape(counts)[0]
    return Buckets(np.asarray(counts), 64 if integer else 32, integer, np.zeros(dim), vmin, vmax)


def from_fast_pass(
    counts: np.ndarray, center: np.ndarray, vmin: np.ndarray, vmax: np.ndarray
) -> Buckets:
    """Buckets of fast mode's pass: `counts` [D, 1, 2**bits] of the top bits of float32 keys of
    `x - center`."""
    return Buckets(np.asarray(counts), 32, False, np.asarray(center, np.float64), vmin, vmax)


def bars(
    lower: np.ndarray, upper: np.ndarray, count: np.ndarray, vmin: float, vmax: float, n=BARS
) -> tuple[np.ndarray, np.ndarray]:
    """(edges [n+1], counts [n]) of equal-width bars over [vmin, vmax] holding the buckets' counts.

    A bucket inside one bar adds its whole count there; a wider one is spread evenly over the bars
    it covers (float counts); a zero-width bucket adds to the bar that holds its value (the last
    bar holds vmax). A constant dimension is one bar of width 1 around its value. Buckets are in
    value order and do not overlap (they are key ranges), so the mass below each edge is a
    cumulative sum plus a share of the one bucket the edge cuts: O(buckets), whatever `n`."""
    lower, upper = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
    count = np.asarray(count, np.float64)
    if not np.isfinite(vmin) or not np.isfinite(vmax) or len(count) == 0:
        return np.array([0.0, 1.0]), np.array([0.0])
    if vmax <= vmin:
        return np.array([vmin - 0.5, vmin + 0.5]), np.array([count.sum()])
    edges = np.linspace(vmin, vmax, n + 1)
    below = np.concatenate([[0.0], np.cumsum(count)])
    whole = np.searchsorted(upper, edges, side="left")  # buckets entirely below each edge
    mass = below[whole]
    cut = np.minimum(whole, len(count) - 1)
    inside = (whole < len(count)) & (lower[cut] < edges)  # the edge falls inside that bucket
    with np.errstate(divide="ignore", invalid="ignore"):
        part = count[cut] * (edges - lower[cut]) / (upper[cut] - lower[cut])
    mass = mass + np.where(inside, part, 0.0)
    mass[0], mass[-1] = 0.0, below[-1]  # every bucket lies inside [vmin, vmax]
    return edges, np.diff(mass)


def end_shares(lower, upper, count, vmin: float, vmax: float) -> tuple[float, float]:
    """Shares of the values within END_WIDTH of the range from min and from max (whole buckets
    only, so never overstated)."""
    total = count.sum()
    if total == 0 or not vmax > vmin:
        return 0.0, 0.0
    reach = END_WIDTH * (vmax - vmin)
    low = count[upper <= vmin + reach].sum()
    high = count[lower >= vmax - reach].sum()
    return float(low / total), float(high / total)


def _number(v: float) -> str:
    return f"{v:.6g}"


def flag_dimensions(stats, names=None) -> dict[int, list[str]]:
    """What looks wrong with each dimension of a `KeyStats`: {dim: [short reasons]}, flagged ones
    only (the point-mass check needs its `histogram`). `names` maps quantile levels to their
    names (q01, q99) for the messages."""
    levels = sorted(stats.quantiles)
    names = names or {q: quantile_name(q) for q in levels}
    flags: dict[int, list[str]] = {}
    for d in range(stats.dim):
        found = []
        count = int(np.asarray(stats.count)[d])
        skipped = int(np.asarray(stats.nonfinite)[d])
        if skipped:
            found.append(f"{skipped:,} NaN/Inf skipped")
        if count == 0:
            found.append("no finite values")
            flags[d] = found
            continue
        lo, hi = float(stats.min[d]), float(stats.max[d])
        mean, std = float(stats.mean[d]), float(stats.std[d])
        if lo == hi:
            found.append(f"constant ({_number(lo)})")
        else:
            if len(levels) > 1:
                q_lo, q_hi = stats.quantiles[levels[0]][d], stats.quantiles[levels[-1]][d]
                if float(q_lo) == float(q_hi):
                    found.append(f"{names[levels[0]]} == {names[levels[-1]]} ({_number(q_lo)})")
            if stats.histogram is not None:
                at_min, at_max = stats.histogram.at_min[d], stats.histogram.at_max[d]
                for share, where, value in ((at_min, "min", lo), (at_max, "max", hi)):
                    if share >= POINT_MASS_SHARE:
                        found.append(f"{share:.0%} of values at the {where} ({_number(value)})")
            if std > 0 and abs(mean) > MEAN_OVER_STD * std:
                found.append(f"|mean| = {abs(mean) / std:.3g} x std")
        if found:
            flags[d] = found
    return flags
