"""The distributions the passes already counted, as histograms a person can look at, and the
dimensions that look broken.

Exact mode's first pass histograms the top 16 bits of every value's order-preserving key (see
`quantiles`): 65,536 buckets per dimension whose width is 2**-7 of the value's magnitude (and
finer near 0). Fast mode's pass histograms the top 18 bits of the key of `x - center`. Either way
the run holds, per dimension, integer counts of values between two known floats: `Buckets` keeps
the non-empty ones (clipped to the dimension's [min, max]), with no second read of the data.

`bars` merges buckets into equal-width bars for drawing (a bucket wider than a bar is spread evenly
over the bars it covers; the total count is kept), and `flag_dimensions` names what looks wrong:
constant, lowest level == highest level quantile, most values at one end, |mean| >> std, NaN/Inf
skipped. All pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from accelkit.stats.keys import keys_to_floats, keys_to_ints

BARS = 40  # bars per panel
POINT_MASS_SHARE = 0.8  # flag a dimension with at least this share of its values at one end
END_WIDTH = 0.01  # "at the end": within this fraction of the range from min or max
MEAN_OVER_STD = 1e3  # flag |mean| > this x std: normalizing divides by a tiny spread


@dataclass(frozen=True)
class Buckets:
    """Per dimension, the non-empty buckets of a pass's histogram: `lower[d][i] <= values <=
    upper[d][i]` for `count[d][i]` values (float64 bounds clipped to the dimension's min and max)."""

    lower: tuple[np.ndarray, ...]
    upper: tuple[np.ndarray, ...]
    count: tuple[np.ndarray, ...]

    @property
    def dim(self) -> int:
        return len(self.count)


def from_exact_pass(counts: np.ndarray, vmin: np.ndarray, vmax: np.ndarray) -> Buckets:
    """Buckets of exact mode's first pass: `counts` [D, 1, 2**16] of the top 16 key bits (uint32
    keys of float32 data, or uint64 keys of int64 data: `vmin`'s dtype says which)."""
    integer = np.asarray(vmin).dtype == np.int64
    key_bits = 64 if integer else 32
    return _buckets(counts, key_bits, integer, 0.0, vmin, vmax)


def from_fast_pass(
    counts: np.ndarray, center: np.ndarray, vmin: np.ndarray, vmax: np.ndarray
) -> Buckets:
    """Buckets of fast mode's pass: `counts` [D, 1, 2**bits] of the top bits of float32 keys of
    `x - center`."""
    return _buckets(counts, 32, False, np.asarray(center, np.float64), vmin, vmax)


def _buckets(counts, key_bits, integer, center, vmin, vmax) -> Buckets:
    counts = np.asarray(counts)
    counts = counts.reshape(counts.shape[0], -1)
    digit_bits = int(counts.shape[1]).bit_length() - 1
    shift = key_bits - digit_bits
    center = np.broadcast_to(np.asarray(center, np.float64), (counts.shape[0],))
    lower, upper, count = [], [], []
    for d in range(counts.shape[0]):
        bins = np.flatnonzero(counts[d])
        if integer:
            low_keys = bins.astype(np.uint64) << np.uint64(shift)
            high_keys = low_keys | np.uint64((1 << shift) - 1)
            lo, hi = keys_to_ints(low_keys), keys_to_ints(high_keys)
        else:
            low_keys = bins.astype(np.uint32) << np.uint32(shift)
            high_keys = low_keys | np.uint32((1 << shift) - 1)
            lo, hi = keys_to_floats(low_keys), keys_to_floats(high_keys)
        lo = lo.astype(np.float64) + center[d]
        hi = hi.astype(np.float64) + center[d]
        floor, ceiling = float(vmin[d]), float(vmax[d])
        with np.errstate(invalid="ignore"):  # buckets of NaN key patterns never hold values
            lower.append(np.clip(lo, floor, ceiling))
            upper.append(np.clip(hi, floor, ceiling))
        count.append(counts[d, bins].astype(np.int64))
    return Buckets(tuple(lower), tuple(upper), tuple(count))


def bars(
    lower: np.ndarray, upper: np.ndarray, count: np.ndarray, vmin: float, vmax: float, n=BARS
) -> tuple[np.ndarray, np.ndarray]:
    """(edges [n+1], counts [n]) of equal-width bars over [vmin, vmax] holding the buckets' counts.

    A bucket inside one bar adds its whole count there; a wider one is spread evenly over the bars
    it covers (float counts); a zero-width bucket adds to the bar that holds its value (the last
    bar holds vmax). A constant dimension is one bar of width 1 around its value."""
    lower, upper = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
    count = np.asarray(count, np.float64)
    if not np.isfinite(vmin) or not np.isfinite(vmax) or len(count) == 0:
        return np.array([0.0, 1.0]), np.array([0.0])
    if vmax <= vmin:
        return np.array([vmin - 0.5, vmin + 0.5]), np.array([count.sum()])
    edges = np.linspace(vmin, vmax, n + 1)
    width = upper - lower
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(
            width[None, :] > 0,
            np.clip((edges[:, None] - lower[None, :]) / width[None, :], 0.0, 1.0),
            (edges[:, None] > lower[None, :]).astype(np.float64),
        )
    share[0], share[-1] = 0.0, 1.0  # every bucket lies inside [vmin, vmax]
    below = share @ count
    return edges, np.diff(below)


def end_shares(buckets: Buckets, d: int, vmin: float, vmax: float) -> tuple[float, float]:
    """Shares of dimension d's values within END_WIDTH of the range from its min and its max
    (whole buckets only, so never overstated)."""
    total = buckets.count[d].sum()
    if total == 0 or not vmax > vmin:
        return 0.0, 0.0
    reach = END_WIDTH * (vmax - vmin)
    low = buckets.count[d][buckets.upper[d] <= vmin + reach].sum()
    high = buckets.count[d][buckets.lower[d] >= vmax - reach].sum()
    return float(low / total), float(high / total)


def _number(v: float) -> str:
    return f"{v:.6g}"


def flag_dimensions(stats, buckets: Buckets | None = None, names=None) -> dict[int, list[str]]:
    """What looks wrong with each dimension of a `KeyStats`: {dim: [short reasons]}, flagged ones
    only. `names` maps quantile levels to their names (q01, q99) for the messages."""
    from accelkit.stats.formats import quantile_name

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
            if buckets is not None:
                at_min, at_max = end_shares(buckets, d, lo, hi)
                for share, where, value in ((at_min, "min", lo), (at_max, "max", hi)):
                    if share >= POINT_MASS_SHARE:
                        found.append(f"{share:.0%} of values at the {where} ({_number(value)})")
            if std > 0 and abs(mean) > MEAN_OVER_STD * std:
                found.append(f"|mean| = {abs(mean) / std:.3g} x std")
        if found:
            flags[d] = found
    return flags
