"""The exact passes' loop as numba compiles it (`kernel/host.py` drives it): `loop`, one batch of
rows, and the windows of the speculative pass (`stats/kernel/windows.py`) it fills: `add` takes a
block's values that fell in a flagged bin (one some window reaches), `narrow` cuts a full window
to about half its capacity around the level's rank so far, `unflag` clears the flag of bins no
window reaches any more.

Written to be kept as machine code (`native_cache.py`): nothing here allocates (the caller hands
its spare room: `spare`), and there is no array method or whole-array copy (numba implements
those with its runtime's allocations, which kept machine code cannot call): loops instead. One
file, so that numba's cache, which tells a change by the file's stamp, never loads a function
with a stale callee.
"""

from __future__ import annotations

import numpy as np

from accelkit.stats.core.moments import BLOCK_ROWS

RUN_ROWS = 16  # moments._in_order: runs of 16 rows, then the runs
BUCKETS = 4096  # a narrowing's histogram of a window's entries
SLACK = 2 * BLOCK_ROWS  # `aim`'s margin: a block's values are counted before they reach a window


def loop(
    x,
    raw,
    float_keys,
    sign,
    magnitude,
    top_bit,
    weight,
    center,
    prefixes,
    low_shift,
    high_shift,
    digit_mask,
    grouped,
    with_moments,
    counts,
    count,
    low,
    high,
    nonfinite,
    s1,
    s2,
    w_levels,
    w_lo,
    w_hi,
    w_partial,
    w_keys,
    w_weights,
    w_merged,
    w_fill,
    flag,
    spare_keys,
    spare_ints,
    w_total,
):
    """One batch, row by row (every argument a numpy array or scalar; the counters are updated in
    place): per value its weight, its moment terms (into the running runs and blocks), and, when
    counted, its histogram bin (under its group's prefix), its extremes and, on a pass with
    windows (`windows`), the values whose bin carries `flag` (a bin some window reaches), handed
    to `add` after each block of rows (a run of equal values as one entry): the bin's count is
    loaded and stored anyway, so every other value costs one comparison more. `w_total`: the rows the pass will read (0 when
    not known), which `narrow` aims the windows with."""
    rows, dim = x.shape
    groups = counts.shape[1]
    block_keys = spare_keys[-BLOCK_ROWS:]  # a block's values in flagged bins
    block_weights = spare_ints[-BLOCK_ROWS:]
    spare_keys, spare_ints = spare_keys[:-BLOCK_ROWS], spare_ints[:-BLOCK_ROWS]
    for start in range(0, rows, BLOCK_ROWS):  # a block of rows stays in cache for every column
        stop = min(rows, start + BLOCK_ROWS)
        for d in range(dim):
            shift = center[d]
            seen, lo, hi, bad, flagged = 0, low[d], high[d], 0, 0
            total1, total2 = 0.0, 0.0
            for run in range(start, stop, RUN_ROWS):
                run1, run2 = 0.0, 0.0
                for row in range(run, min(stop, run + RUN_ROWS)):
                    w = weight[row]
                    v = x[row, d]
                    finite = np.isfinite(v)
                    counted = finite and w > 0
                    if with_moments:
                        if counted:
                            dev = np.float64(v) - shift
                            wd = np.float64(w) * dev
                            wdd = wd * dev
                        else:
                            bad += not finite and w > 0
                            wd, wdd = 0.0, 0.0
                        if row == run:  # a run starts from its first term, as written out
                            run1, run2 = wd, wdd
                        else:
                            run1 += wd
                            run2 += wdd
                    if not counted:
                        continue
                    # the order key (`core/sort_keys.py`): a float's bits with every bit flipped when negative
                    # and the sign bit set otherwise; an integer's bits with the sign bit flipped
                    b = raw[row, d]
                    key = b ^ (((b >> top_bit) * magnitude) | sign) if float_keys else b ^ sign
                    group = 0
                    if grouped:
                        prefix = key >> high_shift
                        group = -1
                        for u in range(groups):
                            if prefixes[d, u] == prefix:
                                group = u
                                break
                        if group < 0:
                            continue
                    bin_ = (key >> low_shift) & digit_mask
                    c = counts[d, group, bin_] + w
                    counts[d, group, bin_] = c
                    if c >= flag:  # a bin a window reaches: the value goes to the windows
                        if flagged and block_keys[flagged - 1] == key:
                            # a run of one value (a gripper, a constant joint, a mode, 1e6 +
                            # noise under float32's 0.0625 steps): one entry of its total weight
                            block_weights[flagged - 1] += w
                        else:
                            block_keys[flagged] = key
                            block_weights[flagged] = w
                            flagged += 1
                    if with_moments:
                        seen += w
                        lo = min(lo, key)
                        hi = max(hi, key)
                if run == start:  # the block's runs, left to right from the first
                    total1, total2 = run1, run2
                else:
                    total1 += run1
                    total2 += run2
            if with_moments:
                if flagged:
                    add(
                        block_keys, block_weights, flagged, d, count[d] + seen, low_shift,
                        counts, w_levels, w_lo, w_hi, w_partial, w_keys, w_weights, w_merged,
                        w_fill, flag, spare_keys, spare_ints, w_total,
                    )  # fmt: skip
                count[d] += seen
                low[d], high[d] = lo, hi
                nonfinite[d] += bad
                s1[start // BLOCK_ROWS, d] = total1
                s2[start // BLOCK_ROWS, d] = total2


def spare(capacity: int, key_dtype) -> tuple[np.ndarray, np.ndarray]:
    """The spare room the functions here need for windows of `capacity` entries: (keys of the
    windows' key type [2 * capacity], int64 [2 * capacity + 2 * BUCKETS + 256])."""
    return (
        np.empty(2 * capacity, key_dtype),
        np.empty(2 * capacity + 2 * BUCKETS + 256, np.int64),
    )


def add(
    block_keys, block_weights, n, d, seen, bin_shift, counts, levels, lo, hi, partial, keys,
    weights, merged, fill, flag, spare_keys, spare_ints, total,
):  # fmt: skip
    """A block's `n` values of dimension d in flagged bins into its windows: inside a window,
    appended (or added to the last entry, a run of one value); under it in lo's own bin, its
    weight goes to `partial` (under lo's bin, the histogram counts it). A full window is narrowed.
    `seen`: the dimension's weight so far. One window at a time, its bounds in registers."""
    capacity = keys.shape[2]
    for u in range(levels.shape[0]):
        low, high, f, m = lo[d, u], hi[d, u], fill[d, u], merged[d, u]
        low_bin, under = np.uint64(low) >> bin_shift, 0
        for i in range(n):
            key, w = block_keys[i], block_weights[i]
            if key < low:
                if np.uint64(key) >> bin_shift == low_bin:
                    under += w
            elif key <= high:
                if f > m and keys[d, u, f - 1] == key:
                    weights[d, u, f - 1] += w
                    continue
                keys[d, u, f] = key
                weights[d, u, f] = w
                f += 1
                if f == capacity:
                    partial[d, u] += under
                    fill[d, u] = f
                    narrow(
                        keys, weights, lo, hi, partial, merged, fill, d, u, levels[u], seen,
                        bin_shift, counts, flag, spare_keys, spare_ints, total,
                    )  # fmt: skip
                    low, high, f, m = lo[d, u], hi[d, u], fill[d, u], merged[d, u]
                    low_bin, under = np.uint64(low) >> bin_shift, 0
        partial[d, u] += under
        fill[d, u] = f


def aim(level, seen, below, total, size):
    """The ranks inside window (d, u) a narrowing keeps: (first, last), weighted, 0-based.

    Where the pass's row count `total` is known, the level's final order statistics (ranks
    r = level * (total - 1) and r + 1 among all rows) have, among the `seen` values so far, ranks
    between r - (total - seen) (every value still to come falls under them) and r + 1 (none
    does): when that range fits in half the window, the window keeps all of it and holds those
    values whatever order the rows come in (a drift over episodes, sorted data). A tail level of
    a dataset up to ~`capacity` / (2 * min(level, 1 - level)) rows fits from the first narrowing.
    Else the window keeps the level's rank in the data so far (each part of the dataset like the
    whole), moved into that range."""
    rank = level * (seen - 1) - below
    if total < seen or total <= 0:  # not known (or the rows were more than said)
        return rank, rank
    final = np.floor(level * (total - 1))
    first = max(0.0, final - (total - seen) - SLACK) - below
    last = min(seen - 1.0, final + 1 + SLACK) - below
    if last - first <= size // 2:
        return first, last
    rank = min(max(rank, first), last)
    return rank, rank


def narrow(
    keys, weights, lo, hi, partial, merged, fill, d, u, level, seen, bin_shift, counts, flag,
    spare_keys, spare_ints, total,
):  # fmt: skip
    """Window (d, u) is full: keep the ranks `aim` chooses (for one rank, what lies within about a
    quarter of the capacity on each side of it; for a range, the range: nothing outside it can
    be needed, and a tighter window hands fewer values to `add`). The entries under the kept part count as below the window
    (in `partial` where they share the new lo's bin), those over it are dropped, and [lo, hi]
    shrinks to the gaps beside what stays (no value lies in a gap). The cut comes from a
    histogram of the entries (`BUCKETS` equal key ranges: three passes over them); where the
    target ranks' ranges hold more than half the capacity (a point mass, or values closer than
    the ranges), the entries are sorted with equal keys merged (`narrow_sorted`): a point mass is
    then one entry of its whole weight, however many rows hold it. Bins no window of the
    dimension reaches any more lose their flag."""
    size = keys.shape[2]
    n = fill[d, u]
    one = np.uint64(1)
    old_low, old_high = np.uint64(lo[d, u]), np.uint64(hi[d, u])
    old_low_bin, old_high_bin = old_low >> bin_shift, old_high >> bin_shift
    below = partial[d, u]  # under the window so far: partial + the counts of the bins under it
    for b in range(old_low_bin):
        below += counts[d, 0, b] & ~flag
    first_rank, last_rank = aim(level, seen, below, total, size)
    first, last = np.uint64(keys[d, u, 0]), np.uint64(keys[d, u, 0])
    for i in range(n):
        k = np.uint64(keys[d, u, i])
        first, last = min(first, k), max(last, k)
    shift = np.uint64(0)
    while (last - first) >> shift >= BUCKETS:
        shift += one
    count, mass = spare_ints[:BUCKETS], spare_ints[BUCKETS : 2 * BUCKETS]
    count[:] = 0
    mass[:] = 0
    for i in range(n):
        b = np.int64((np.uint64(keys[d, u, i]) - first) >> shift)
        count[b] += 1
        mass[b] += weights[d, u, i]
    buckets = np.int64((last - first) >> shift) + 1
    # the buckets holding the first and the last rank (or the last bucket with entries)
    start, stop, total_mass, started = 0, 0, 0, False
    for b in range(buckets):
        if count[b]:
            if not started:
                start = b
            stop = b
            total_mass += mass[b]
            started = started or total_mass > first_rank
            if total_mass > last_rank:
                break
    core = 0
    for b in range(start, stop + 1):
        core += count[b]
    if core > size // 4 and (first_rank == last_rank or core > size // 2):
        narrow_sorted(
            keys, weights, lo, hi, partial, merged, fill, d, u, first_rank, last_rank,
            bin_shift, spare_keys, spare_ints,
        )  # fmt: skip
    else:
        side = size // 4 if first_rank == last_rank else 0  # a range: all it can need
        a, b, left, right = start, stop, 0, 0
        while a > 0 and left + count[a - 1] <= side:
            a -= 1
            left += count[a]
        while b < buckets - 1 and right + count[b + 1] <= side:
            b += 1
            right += count[b]
        cut_low = first + (np.uint64(a) << shift)
        cut_high = first + (np.uint64(b + 1) << shift) - one if b < buckets - 1 else last
        kept, under_max, over_min, under_bin, under = 0, first, last, first, 0
        some_under, some_over = False, False
        for i in range(n):
            k, w = np.uint64(keys[d, u, i]), weights[d, u, i]
            if k < cut_low:  # the weight under in the highest bin with some (the new lo's)
                kb = k >> bin_shift
                if not some_under or kb > under_bin:
                    under_bin, under = kb, w
                elif kb == under_bin:
                    under += w
                under_max = max(under_max, k) if some_under else k
                some_under = True
            elif k > cut_high:
                over_min = min(over_min, k) if some_over else k
                some_over = True
            else:
                keys[d, u, kept], weights[d, u, kept] = k, w
                kept += 1
        if some_under:
            lower_to(lo, partial, d, u, under_max + one, under_bin, under, old_low_bin, bin_shift)
        if some_over:
            hi[d, u] = over_min - one
        fill[d, u], merged[d, u] = kept, 0
    unflag(lo, hi, d, u, old_low_bin, old_high_bin, bin_shift, counts, flag)


def lower_to(lo, partial, d, u, new_low, under_bin, under, old_low_bin, bin_shift):
    """Window (d, u)'s lo moves up to `new_low`; `under` is the weight cut off in `under_bin`,
    the highest bin of what was cut off. `partial` becomes the weight under lo in lo's bin."""
    low_bin = new_low >> bin_shift
    kept = partial[d, u] if low_bin == old_low_bin else 0  # under the old lo, in the same bin
    partial[d, u] = kept + (under if low_bin == under_bin else 0)
    lo[d, u] = new_low


def unflag(lo, hi, d, u, old_low_bin, old_high_bin, bin_shift, counts, flag):
    """Bins window (d, u) reached before narrowing, and no window of the dimension reaches now,
    lose their flag."""
    low_bin, high_bin = np.uint64(lo[d, u]) >> bin_shift, np.uint64(hi[d, u]) >> bin_shift
    for b in range(old_low_bin, old_high_bin + np.uint64(1)):
        if b < low_bin or b > high_bin:
            reached = False
            for v in range(lo.shape[1]):
                low, high = np.uint64(lo[d, v]) >> bin_shift, np.uint64(hi[d, v]) >> bin_shift
                if v != u and low <= b <= high:
                    reached = True
                    break
            if not reached:
                counts[d, 0, b] &= ~flag


def narrow_sorted(
    keys, weights, lo, hi, partial, merged, fill, d, u, first_rank, last_rank, bin_shift,
    spare_keys, spare_ints,
):  # fmt: skip
    """`narrow` where the target ranges hold too many entries: the appended entries are
    sorted into the sorted part (`merged` entries; equal keys merged, so a point mass is one
    entry), and the entries further than a quarter of the capacity (for one rank; for a range,
    any) from those holding `first_rank`..`last_rank` go."""
    size = keys.shape[2]
    m, f = merged[d, u], fill[d, u]
    size_tail = f - m
    tail_keys, tail_weights = spare_keys[:size_tail], spare_ints[:size_tail]
    for i in range(size_tail):  # element by element: an array copy may allocate (numba's NRT)
        tail_keys[i], tail_weights[i] = keys[d, u, m + i], weights[d, u, m + i]
    radix_sort(
        tail_keys, tail_weights, spare_keys[size : size + size_tail],
        spare_ints[size : size + size_tail], spare_ints[2 * size : 2 * size + 256],
    )  # fmt: skip
    out_keys, out_weights = spare_keys[size : size + f], spare_ints[size : size + f]
    i, j, n = 0, 0, 0
    while i < m or j < f - m:
        if j >= f - m or (i < m and keys[d, u, i] <= tail_keys[j]):
            k, v = keys[d, u, i], weights[d, u, i]
            i += 1
        else:
            k, v = tail_keys[j], tail_weights[j]
            j += 1
        if n and out_keys[n - 1] == k:
            out_weights[n - 1] += v
        else:
            out_keys[n], out_weights[n] = k, v
            n += 1
    start, stop = 0, n
    if n > size // 2:
        total, t = 0, 0
        while t < n - 1 and total + out_weights[t] <= first_rank:
            total += out_weights[t]
            t += 1
        t_first = t
        while t < n - 1 and total + out_weights[t] <= last_rank:
            total += out_weights[t]
            t += 1
        t_last = min(t, t_first + size // 2)
        side = size // 4 if first_rank == last_rank else 0
        start, stop = max(0, t_first - side), min(n, t_last + 1 + side)
        if start:
            under_max = np.uint64(out_keys[start - 1])
            under_bin, under = under_max >> bin_shift, 0
            for x in range(start):
                if np.uint64(out_keys[x]) >> bin_shift == under_bin:
                    under += out_weights[x]
            old_low_bin = np.uint64(lo[d, u]) >> bin_shift
            lower_to(
                lo, partial, d, u, under_max + np.uint64(1), under_bin, under, old_low_bin,
                bin_shift,
            )  # fmt: skip
        if stop < n:
            hi[d, u] = np.uint64(out_keys[stop]) - np.uint64(1)
    for x in range(start, stop):
        keys[d, u, x - start] = out_keys[x]
        weights[d, u, x - start] = out_weights[x]
    merged[d, u] = stop - start
    fill[d, u] = stop - start


def radix_sort(keys, weights, other_keys, other_weights, count):
    """Sort (keys, weights) by key in place, `other_*` (as long) and `count` (256) its spare
    room: least significant byte first, stable; a byte all keys share (the high bytes of a
    narrow window) costs one counting pass."""
    n = keys.shape[0]
    if n < 2:
        return
    byte = np.uint64(255)
    src_keys, src_weights = keys, weights
    dst_keys, dst_weights = other_keys, other_weights
    moved = False
    for step in range(keys.itemsize):
        shift = np.uint64(8 * step)
        count[:] = 0
        for i in range(n):
            count[(np.uint64(src_keys[i]) >> shift) & byte] += 1
        shared = False  # one byte value for every key: nothing to move
        for b in range(256):
            shared = shared or count[b] == n
        if shared:
            continue
        total = 0
        for b in range(256):
            c = count[b]
            count[b] = total
            total += c
        for i in range(n):
            b = (np.uint64(src_keys[i]) >> shift) & byte
            dst_keys[count[b]] = src_keys[i]
            dst_weights[count[b]] = src_weights[i]
            count[b] += 1
        src_keys, dst_keys = dst_keys, src_keys
        src_weights, dst_weights = dst_weights, src_weights
        moved = not moved
    if moved:
        for i in range(n):
            keys[i], weights[i] = src_keys[i], src_weights[i]
