"""Exact mode's speculative single pass: the values near each quantile, kept while pass 1 reads.

Exact quantiles are a radix select (`quantiles`): pass 1 histograms the top 16 bits of every value's
order key and finds the bucket holding each target rank; pass 2 reads the data again to order the
values inside it. Pass 1 can instead keep the values that will matter. For each dimension and
quantile level, a **window** is a range of keys [lo, hi] with every value that fell in it (its key
and weight, equal keys merged) and `below`, the weight of every value under lo. The window starts
as every key; when its buffer is full (`capacity` entries) the compiled loop (`kernel/host.py`) sorts
it and keeps the half centred on the level's rank in the data so far, counting the cut-off values
under it as below and dropping those above. A window only ever narrows, so from the first row to
the last it holds every value inside its range.

What is below a window needs no counting of its own: the pass's histogram counts every value by
its top key bits (its bin), so below = the counts of the bins under lo's bin + `partial`, the
weight under lo inside lo's bin. The loop looks at a value's windows only when its bin carries
`FLAG` (set on the histogram's count itself, `marked`; removed at the end, `settled`): one
comparison per value, on a count it loads and stores anyway.

After the pass, a target rank r is **covered** when below <= r < below + (weight inside): its value
is then read from the window, exactly, and no second pass is needed for it. Where a rank fell
outside its window (the data drifted after the window narrowed), the run makes the radix passes
as before, for that key — so exactness never depends on the guess, only the speed does. Memory is
the buffers, `BYTES_PER_KEY` per key whatever the dataset's size.

Pure numpy here; the loop that fills and narrows the windows is `host.py`'s.
"""

from __future__ import annotations

from fractions import Fraction
from typing import NamedTuple

import numpy as np

from accelkit.stats.core.moments import BLOCK_ROWS
from accelkit.stats.core.sort_keys import key_dtype
from accelkit.stats.kernel.host_loop import SLACK, spare

BYTES_PER_KEY = 16 << 20  # the buffers of one key's windows (untouched pages cost nothing)
FLAG = np.int64(1 << 62)  # on a pass-1 histogram count: some window reaches this bin
MIN_CAPACITY = 1024
MAX_CAPACITY = 1 << 15
GUARANTEED_CAPACITY = 1 << 17  # (`capacity`): 1.5 MiB per window of float32 keys
TAIL = 0.02  # levels this close to 0 or 1 are tried (`worth_trying`)


def worth_trying(levels) -> bool:
    """Whether windows are likely to hold every level's value: all levels in the tails.

    A window narrows around the level's rank in the data read so far; in episode-by-episode data
    (each episode's values have an offset of their own) that rank moves with every episode, by
    ~sqrt(episodes) episodes' worth at the middle of the distribution and much less at its ends.
    On the benchmarks' datasets of thousands of episodes, windows of this size hold the tail
    levels (q01/q99, q02/q98, q05/q95) but miss some of LeRobot's middle levels (q10, q50, q90),
    also at twice the size, which costs loop time: there, a second pass would follow anyway. Levels are compared as the decimals they are
    written as (in floats, 1 - 0.98 is just above 0.02)."""
    tail = Fraction(repr(TAIL))
    return all(min(d, 1 - d) <= tail for d in (Fraction(repr(float(q))) for q in levels))


class Windows(NamedTuple):
    """The windows of one key's D dimensions x W levels, updated in place by the compiled loop."""

    levels: np.ndarray  # float64 [W]: the quantile levels, sorted
    lo: np.ndarray  # key dtype [D, W]: lowest key inside
    hi: np.ndarray  # key dtype [D, W]: highest key inside
    partial: np.ndarray  # int64 [D, W]: weight of the values under lo in lo's histogram bin
    keys: np.ndarray  # key dtype [D, W, C]: [0, merged) sorted distinct, then as they came
    weights: np.ndarray  # int64 [D, W, C]
    merged: np.ndarray  # int64 [D, W]: entries sorted by the last narrowing
    fill: np.ndarray  # int64 [D, W]: entries in use
    spare_keys: np.ndarray  # the loop's room to narrow these windows in (`host_loop.spare`)
    spare_ints: np.ndarray
    total: int = 0  # the rows the pass will read (0: not known), which narrowing aims with

    @property
    def capacity(self) -> int:
        return self.keys.shape[2]


def capacity(
    dim: int, levels: int, integer: bool, total_rows: int | None = None, tail: float = 0.0
) -> int:
    """Entries per window: `BYTES_PER_KEY` over the key's windows, within [MIN, MAX]_CAPACITY,
    and no more than a window could ever hold (each row adds at most one entry). With the row
    count known, up to `GUARANTEED_CAPACITY` entries where that lets every window keep the whole
    range its level's values can still be in (`host_loop.aim`; `tail`: the largest
    min(level, 1 - level)): the window then holds them whatever the order of the rows."""
    entry = np.dtype(key_dtype(integer)).itemsize + 8
    size = BYTES_PER_KEY // max(1, dim * levels * entry)
    size = int(min(MAX_CAPACITY, max(MIN_CAPACITY, size)))
    if total_rows:
        wanted = 2 * (int(tail * total_rows) + 2 * SLACK) + MIN_CAPACITY
        size = max(size, min(wanted, GUARANTEED_CAPACITY))
    if total_rows is not None:
        size = min(size, max(4, int(total_rows) + 2))
    return size + size % 2


def start(levels, dim: int, integer: bool, total_rows: int | None = None) -> Windows:
    """Windows over every key, one per dimension and level (buffers allocated, not touched)."""
    levels = np.asarray(sorted({float(q) for q in levels}), np.float64)
    kind = key_dtype(integer)
    width = len(levels)
    tail = float(np.max(np.minimum(levels, 1 - levels), initial=0.0))
    size = capacity(dim, width, integer, total_rows, tail)
    spare_keys, spare_ints = spare(size + BLOCK_ROWS, kind)  # the loop's: a block, then these
    return Windows(
        levels=levels,
        lo=np.zeros((dim, width), kind),
        hi=np.full((dim, width), np.iinfo(kind).max, kind),
        partial=np.zeros((dim, width), np.int64),
        keys=np.empty((dim, width, size), kind),
        weights=np.empty((dim, width, size), np.int64),
        merged=np.zeros((dim, width), np.int64),
        fill=np.zeros((dim, width), np.int64),
        spare_keys=spare_keys,
        spare_ints=spare_ints,
        total=int(total_rows or 0),
    )


def contents(windows: Windows, d: int, u: int) -> tuple[np.ndarray, np.ndarray]:
    """Window (d, u)'s values: sorted distinct keys and their total weights."""
    fill = int(windows.fill[d, u])
    keys = windows.keys[d, u, :fill]
    weights = windows.weights[d, u, :fill]
    order = np.argsort(keys)  # equal keys are merged below: their order does not matter
    keys, weights = keys[order], weights[order]
    if not len(keys):
        return keys, weights
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return keys[starts], np.add.reduceat(weights, starts)


def bin_shift(windows: Windows, counts: np.ndarray) -> int:
    """How far a key shifts to its bin of the pass-1 histogram `counts` [D, 1, 2**bits]."""
    return windows.keys.dtype.itemsize * 8 - (int(counts.shape[-1]).bit_length() - 1)


def marked(windows: Windows | None, counts: np.ndarray) -> Windows | None:
    """Set `FLAG` on every bin of `counts` (int64, the pass's histogram) a window reaches: the
    compiled loop hands those bins' values to the windows and counts the others only."""
    if windows is None:
        return None
    shift = bin_shift(windows, counts)
    for d in range(windows.lo.shape[0]):
        for low, high in zip(windows.lo[d], windows.hi[d], strict=True):
            counts[d, 0, int(low) >> shift : (int(high) >> shift) + 1] |= FLAG
    return windows


def settled(counts: np.ndarray) -> np.ndarray:
    """The histogram without its flags (in place)."""
    counts &= ~FLAG
    return counts


def resolve(
    windows: Windows, counts: np.ndarray, ranks: np.ndarray, count: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The keys at `ranks` [D, T] (0-based, weighted), where the windows cover them.

    `counts`: the pass's settled histogram, which counts the values under each window's bin.
    Target t of a plan belongs to level t % W (`quantiles.start_plan` lists the lower order
    statistics of every level, then the upper ones). Returns (keys [D, T] uint64, covered [D, T]
    bool); a dimension with no values counts as covered (it has no quantiles)."""
    dims, targets = ranks.shape
    width = len(windows.levels)
    shift = bin_shift(windows, counts)
    found = np.zeros((dims, targets), np.uint64)
    covered = np.zeros((dims, targets), bool)
    for d in range(dims):
        if int(count[d]) == 0:
            covered[d] = True
            continue
        for u in range(width):
            fill = int(windows.fill[d, u])
            keys, weights = windows.keys[d, u, :fill], windows.weights[d, u, :fill]
            low_bin = int(windows.lo[d, u]) >> shift
            below = int(counts[d, 0, :low_bin].sum()) + int(windows.partial[d, u])
            inside = int(weights.sum())
            wanted = [t for t in range(u, targets, width) if below <= ranks[d, t] < below + inside]
            if not wanted:
                continue
            within = [int(ranks[d, t]) - below for t in wanted]
            if int(weights.max()) == 1:  # one entry per value: select, no sort (O(entries))
                chosen = np.partition(keys, within)[within]
            else:
                keys, weights = contents(windows, d, u)
                chosen = keys[np.searchsorted(np.cumsum(weights), within, side="right")]
            found[d, wanted] = chosen
            covered[d, wanted] = True
    return found, covered
