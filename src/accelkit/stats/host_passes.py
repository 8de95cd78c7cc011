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

import gc
import threading

import numpy as np

from accelkit.stats import pass_state
from accelkit.stats.moments import BLOCK_ROWS, Extremes
from accelkit.stats.pass_state import PassSpec, PassState

RUN_ROWS = 16  # moments._in_order: runs of 16 rows, then the runs
_kernel = None
_kernel_lock = threading.Lock()
_warming: threading.Thread | None = None  # warm_up's thread


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
    median 3.94 s against 4.49 s, CPU 5.1 against 5.7 s, the same output bytes)."""
    global _warming

    def load():
        try:
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


def own(state: PassState) -> PassState:
    """A copy of `state` that `update` may change in place (int64 counts)."""
    e = state.extremes
    return PassState(
        Extremes(np.array(e.count, np.int64), np.array(e.min_key), np.array(e.max_key)),
        np.array(state.counts, np.int64),
        np.asarray(state.prefixes),
        np.asarray(state.center, np.float32),
        np.array(state.nonfinite, np.int64),
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

    return numba.njit(cache=True, nogil=True, error_model="numpy")(_loop)


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
):
    """One batch, row by row (every argument a numpy array or scalar; the counters are updated in
    place): per value its weight, its moment terms (into the running runs and blocks), and, when
    counted, its histogram bin (under its group's prefix) and its extremes."""
    rows, dim = x.shape
    groups = counts.shape[1]
    for start in range(0, rows, BLOCK_ROWS):  # a block of rows stays in cache for every column
        stop = min(rows, start + BLOCK_ROWS)
        for d in range(dim):
            shift = center[d]
            seen, lo, hi, bad = 0, low[d], high[d], 0
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
                    counts[d, group, (key >> low_shift) & digit_mask] += w
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
                count[d] += seen
                low[d], high[d] = lo, hi
                nonfinite[d] += bad
                s1[start // BLOCK_ROWS, d] = total1
                s2[start // BLOCK_ROWS, d] = total2
