"""The exact passes' kernel for runs on the host CPU: one compiled loop (numba) over each batch,
taking the same `PassState` in and giving the same bits out as `passes.update` under XLA (a test
checks every field on adversarial data).

Why a second kernel. On a CPU, XLA runs the pass with every float64 and key intermediate of a
batch materialized (~30 ns per value here) and needs JAX started and its compiled programs loaded
first. This loop reads each value once — its order key, its histogram bin, its extremes and its
moment terms in one visit, a block of rows at a time in cache — at ~2 ns per value, so reading the
files, not the reduction, sets the pace; and a run that needs no accelerator never imports JAX.

Why the bits are equal. Everything but the moment sums is integer (weights, order keys, extremes,
histograms), exact in any order. The sums follow `moments.block_sums` operation for operation:
d = x - shift and w*d, w*d*d in float64, then per block of `BLOCK_ROWS` rows the runs of 16 rows
added left to right (starting from the first term, not from 0.0), then the runs left to right.
Without fast-math no compiler reorders or fuses these, and IEEE addition and multiplication round
the same everywhere. Fast mode (offsets from a center, which XLA's CPU flushes to zero below
float32's normal range) stays on the XLA kernel.

Compiled once per machine: numba caches the machine code beside this file (or in the user's cache
folder when that is read-only); the first run says so while it compiles.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading

import numpy as np

from accelkit.stats import pass_state, windows
from accelkit.stats.moments import BLOCK_ROWS, Extremes
from accelkit.stats.pass_state import PassSpec, PassState

RUN_ROWS = 16  # moments._in_order: runs of 16 rows, then the runs
_kernel = None
_kernel_lock = threading.Lock()
_warming: threading.Thread | None = None  # warm_up's thread
_NO_WINDOWS: dict = {}  # per key type: windows for no level (a pass without windows)


def kernel():
    """The compiled loop (numba is imported on first use: a run that never reaches a host pass
    does not pay for it)."""
    global _kernel
    with _kernel_lock:
        if _kernel is None:
            _kernel = _compile()
    return _kernel


def warm_up(freeze: bool = False) -> threading.Thread:
    """Import numba and load (or compile) the loop for float32 batches on a background thread, so
    that this start-up (about half a second of Python work) runs while the reader threads decode
    the first files instead of before the first batch. The loop is machine code that any later call
    finds ready; an error here is left for that call to raise. One thread per process: a second
    call returns the first one's.

    `freeze`, for a process that is this run (the CLI; never a library caller's process): once the
    loop is loaded, every object then alive goes to the collector's permanent generation
    (`gc.freeze`): by then ~125,000 long-lived objects (numba's, the imports') that each full
    collection of the run would walk again (v2.1, 2,165 files, 8 interleaved pairs of whole runs:
    median 3.94 s against 4.49 s, CPU 5.1 against 5.7 s, the same output bytes). Such a process
    also skips numba's BLAS probe (`_without_blas_probe`)."""
    global _warming

    def load():
        try:
            with _without_blas_probe(freeze):
                spec = PassSpec(
                    dim=1, groups=1, prefix_bits=0, digit_bits=16, with_moments=True, integer=False
                )
                state = own(pass_state.init(spec, np.zeros((1, 1)), np.zeros(1, np.float32)))
                update(state, np.zeros((BLOCK_ROWS, 1), np.float32), np.ones(BLOCK_ROWS), spec)
        except Exception:  # the run's own first call reports it
            return
        if freeze:
            gc.freeze()

    with _kernel_lock:
        if _warming is None:
            _warming = threading.Thread(target=load, name="accelkit-kernel-load", daemon=True)
            _warming.start()
    return _warming


@contextlib.contextmanager
def _without_blas_probe(active: bool):
    """numba's first compile or cache load imports `numba.np.arraymath`, which imports
    scipy.linalg (and with it scipy's array-API layer and numpy.f2py) only to learn whether
    np.correlate and np.convolve may call BLAS (`_HAVE_BLAS`). The loop calls neither: in the
    command's own process (`active`), the probe is answered "no BLAS" while the loop loads, and
    numba's own `ensure_blas` is put back after it (np.dot and np.linalg still find scipy).
    Whole-process CPU of loading the loop: 0.51 against 0.72-0.75 s, 16 MiB less."""
    if not active or "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        yield
        return
    import numba.np.linalg as linalg

    probe = linalg.ensure_blas

    def absent():
        raise ImportError("BLAS is not needed by accelkit's statistics loop")

    linalg.ensure_blas = absent
    try:
        yield
    finally:
        linalg.ensure_blas = probe


def own(state: PassState) -> PassState:
    """A copy of `state` that `update` may change in place (int64 counts)."""
    e = state.extremes
    counts = np.array(state.counts, np.int64)
    return PassState(
        Extremes(np.array(e.count, np.int64), np.array(e.min_key), np.array(e.max_key)),
        counts,
        np.asarray(state.prefixes),
        np.asarray(state.center, np.float32),
        np.array(state.nonfinite, np.int64),
        windows.marked(state.windows, counts),  # not copied: made for this state
    )


def update(
    state: PassState, x: np.ndarray, row_weight: np.ndarray, spec: PassSpec
) -> tuple[PassState, tuple[np.ndarray, np.ndarray] | None]:
    """`passes.update` for exact mode on host arrays, **in place**: `state` must come from `own`
    (its counters are updated and it is returned). x [B, D] float32 or int64, row weights [B]
    (B whole blocks of `BLOCK_ROWS` when the pass has moments). Returns the state and, with
    moments, the batch's block sums [B / BLOCK_ROWS, D] float64."""
    if spec.centered:
        raise ValueError("fast mode runs on the XLA kernel")
    x = np.ascontiguousarray(x)
    rows, dim = x.shape
    if spec.with_moments and rows % BLOCK_ROWS:
        raise ValueError(f"{rows} rows are not whole blocks of {BLOCK_ROWS}")
    integer = x.dtype.kind in "iu"
    kind = np.uint64 if integer else np.uint32
    bits = 64 if integer else 32
    sign = kind(1 << (bits - 1))
    blocks = rows // BLOCK_ROWS if spec.with_moments else 0
    s1, s2 = np.empty((blocks, dim)), np.empty((blocks, dim))
    e = state.extremes
    w = state.windows if spec.with_moments else None
    if w is None:  # no window: the same types, nothing to loop over
        w = _NO_WINDOWS.get(kind)
        if w is None:
            w = _NO_WINDOWS[kind] = windows.start([], 0, integer)
    if w.lo.shape[0] not in (0, dim):
        raise ValueError(f"windows for {w.lo.shape[0]} dimensions, rows of {dim}")
    kernel()(
        x,
        x.view(kind),
        not integer,
        sign,
        kind(sign - kind(1)),
        kind(bits - 1),
        np.ascontiguousarray(row_weight, np.int64),
        state.center.astype(np.float64),
        np.ascontiguousarray(state.prefixes, kind),
        kind(bits - spec.prefix_bits - spec.digit_bits),
        kind(bits - spec.prefix_bits),
        kind((1 << spec.digit_bits) - 1),
        spec.prefix_bits > 0,
        spec.with_moments,
        state.counts,
        e.count,
        e.min_key,
        e.max_key,
        state.nonfinite,
        s1,
        s2,
        w.levels,
        w.lo,
        w.hi,
        w.partial,
        w.keys,
        w.weights,
        w.merged,
        w.fill,
        windows.FLAG,
    )
    return state, ((s1, s2) if spec.with_moments else None)


def block_sums(
    x: np.ndarray, row_weight: np.ndarray, center: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The moments' block sums [B / BLOCK_ROWS, D] of whole blocks of rows assembled on a host
    (the rows of a block that straddles two Ray tasks): `update`'s sums, bit for bit."""
    x = np.ascontiguousarray(x)
    spec = PassSpec(
        dim=x.shape[1],
        groups=1,
        prefix_bits=0,
        digit_bits=1,
        with_moments=True,
        integer=x.dtype.kind in "iu",
    )
    state = own(pass_state.init(spec, np.zeros((spec.dim, 1)), center))
    _, sums = update(state, x, row_weight, spec)
    return sums


def _compile():
    import numba

    jit = numba.njit(cache=True, nogil=True, error_model="numpy")
    module = globals()
    callees = ("_radix_sort", "_lower_to", "_unflag", "_narrow_sorted", "_narrow", "_windows_add")
    for name in callees:  # the loop's callees, compiled first
        if not isinstance(module[name], numba.core.dispatcher.Dispatcher):
            module[name] = jit(module[name])
    return jit(_loop)


def _loop(
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
):
    """One batch, row by row (every argument a numpy array or scalar; the counters are updated in
    place): per value its weight, its moment terms (into the running runs and blocks), and, when
    counted, its histogram bin (under its group's prefix), its extremes and, on a pass with
    windows (`windows`), the values whose bin carries `flag` (a bin some window reaches), handed
    to `_windows_add` after each block of rows: the bin's count is loaded and stored anyway, so
    every other value costs one comparison more."""
    rows, dim = x.shape
    groups = counts.shape[1]
    block_keys = np.empty(BLOCK_ROWS, raw.dtype)  # a block's values in flagged bins
    block_weights = np.empty(BLOCK_ROWS, np.int64)
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
                    # the order key (`keys`): a float's bits with every bit flipped when negative
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
                    _windows_add(
                        block_keys, block_weights, flagged, d, count[d] + seen, low_shift,
                        counts, w_levels, w_lo, w_hi, w_partial, w_keys, w_weights, w_merged,
                        w_fill, flag,
                    )  # fmt: skip
                count[d] += seen
                low[d], high[d] = lo, hi
                nonfinite[d] += bad
                s1[start // BLOCK_ROWS, d] = total1
                s2[start // BLOCK_ROWS, d] = total2


# --- the windows of the speculative pass (`windows`): compiled with the loop --------------------


def _windows_add(
    block_keys, block_weights, n, d, seen, bin_shift, counts, levels, lo, hi, partial, keys,
    weights, merged, fill, flag,
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
                    _narrow(
                        keys, weights, lo, hi, partial, merged, fill, d, u, levels[u], seen,
                        bin_shift, counts, flag,
                    )  # fmt: skip
                    low, high, f, m = lo[d, u], hi[d, u], fill[d, u], merged[d, u]
                    low_bin, under = np.uint64(low) >> bin_shift, 0
        partial[d, u] += under
        fill[d, u] = f


BUCKETS = 4096  # a narrowing's histogram of a window's entries


def _narrow(
    keys, weights, lo, hi, partial, merged, fill, d, u, level, seen, bin_shift, counts, flag
):  # fmt: skip
    """Window (d, u) is full: keep what lies within about a quarter of its capacity on each side
    of the level's weighted rank among the `seen` values so far. The entries under the kept part
    count as below the window (in `partial` where they share the new lo's bin), those over it
    are dropped, and [lo, hi] shrinks to the gaps beside what stays (no value lies in a gap).
    The cut comes from a histogram of the entries (`BUCKETS` equal key ranges: three passes over
    them); where the target's range holds more than a quarter of the capacity (a point mass, or
    values closer than the ranges), the entries are sorted with equal keys merged (`_narrow_sorted`). Bins no
    window of the dimension reaches any more lose their flag."""
    size = keys.shape[2]
    n = fill[d, u]
    one = np.uint64(1)
    old_low, old_high = np.uint64(lo[d, u]), np.uint64(hi[d, u])
    old_low_bin, old_high_bin = old_low >> bin_shift, old_high >> bin_shift
    below = partial[d, u]  # under the window so far: partial + the counts of the bins under it
    for b in range(old_low_bin):
        below += counts[d, 0, b] & ~flag
    rank = level * (seen - 1) - below  # the level's rank inside the window, so far
    first, last = np.uint64(keys[d, u, 0]), np.uint64(keys[d, u, 0])
    for i in range(n):
        k = np.uint64(keys[d, u, i])
        first, last = min(first, k), max(last, k)
    shift = np.uint64(0)
    while (last - first) >> shift >= BUCKETS:
        shift += one
    count = np.zeros(BUCKETS, np.int64)
    mass = np.zeros(BUCKETS, np.int64)
    for i in range(n):
        b = np.int64((np.uint64(keys[d, u, i]) - first) >> shift)
        count[b] += 1
        mass[b] += weights[d, u, i]
    buckets = np.int64((last - first) >> shift) + 1
    target, total = 0, 0
    for b in range(buckets):
        if count[b]:
            target = b
            if total + mass[b] > rank:
                break
            total += mass[b]
    if count[target] > size // 4:  # (so what stays is at most 3/4 of the capacity)
        _narrow_sorted(keys, weights, lo, hi, partial, merged, fill, d, u, rank, bin_shift)
    else:
        a, b, left, right = target, target, 0, 0
        while a > 0 and left + count[a - 1] <= size // 4:
            a -= 1
            left += count[a]
        while b < buckets - 1 and right + count[b + 1] <= size // 4:
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
            _lower_to(lo, partial, d, u, under_max + one, under_bin, under, old_low_bin, bin_shift)
        if some_over:
            hi[d, u] = over_min - one
        fill[d, u], merged[d, u] = kept, 0
    _unflag(lo, hi, d, u, old_low_bin, old_high_bin, bin_shift, counts, flag)


def _lower_to(lo, partial, d, u, new_low, under_bin, under, old_low_bin, bin_shift):
    """Window (d, u)'s lo moves up to `new_low`; `under` is the weight cut off in `under_bin`,
    the highest bin of what was cut off. `partial` becomes the weight under lo in lo's bin."""
    low_bin = new_low >> bin_shift
    kept = partial[d, u] if low_bin == old_low_bin else 0  # under the old lo, in the same bin
    partial[d, u] = kept + (under if low_bin == under_bin else 0)
    lo[d, u] = new_low


def _unflag(lo, hi, d, u, old_low_bin, old_high_bin, bin_shift, counts, flag):
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


def _narrow_sorted(keys, weights, lo, hi, partial, merged, fill, d, u, rank, bin_shift):
    """`_narrow` where one histogram range holds too many entries: the appended entries are
    sorted into the sorted part (`merged` entries; equal keys merged, so a point mass is one
    entry), and the entries more than a quarter of the capacity from the one holding `rank`
    go."""
    size = keys.shape[2]
    m, f = merged[d, u], fill[d, u]
    tail_keys = keys[d, u, m:f].copy()
    tail_weights = weights[d, u, m:f].copy()
    _radix_sort(tail_keys, tail_weights)
    out_keys = np.empty(f, keys.dtype)
    out_weights = np.empty(f, np.int64)
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
        while t < n - 1 and total + out_weights[t] <= rank:
            total += out_weights[t]
            t += 1
        start, stop = max(0, t - size // 4), min(n, t + size // 4)
        if start:
            under_max = np.uint64(out_keys[start - 1])
            under_bin, under = under_max >> bin_shift, 0
            for x in range(start):
                if np.uint64(out_keys[x]) >> bin_shift == under_bin:
                    under += out_weights[x]
            old_low_bin = np.uint64(lo[d, u]) >> bin_shift
            _lower_to(
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


def _radix_sort(keys, weights):
    """Sort (keys, weights) by key in place: least significant byte first, stable; a byte all
    keys share (the high bytes of a narrow window) costs one counting pass."""
    n = keys.shape[0]
    if n < 2:
        return
    byte = np.uint64(255)
    src_keys, src_weights = keys, weights
    dst_keys, dst_weights = np.empty_like(keys), np.empty_like(weights)
    count = np.empty(256, np.int64)
    moved = False
    for step in range(keys.itemsize):
        shift = np.uint64(8 * step)
        count[:] = 0
        for i in range(n):
            count[(np.uint64(src_keys[i]) >> shift) & byte] += 1
        if count.max() == n:
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
        keys[:] = src_keys
        weights[:] = src_weights
