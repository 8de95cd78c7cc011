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

Compiled once per machine: numba compiles the loop's entry (`_entry`, a cfunc of pointers and
integers) and caches it beside this file; its machine code is also kept in the user's cache and
linked by later processes without numba (`native_cache.py`: 0.04 against ~0.3 CPU-s of start-up).
The first run says so while it compiles.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
import threading
from pathlib import Path

import numpy as np

from accelkit.stats.core.moments import BLOCK_ROWS, Extremes
from accelkit.stats.kernel import host_loop, windows
from accelkit.stats.kernel import native_cache as native_kernel
from accelkit.stats.kernel import state as pass_state
from accelkit.stats.kernel.state import PassSpec, PassState

_kernels: dict = {}  # integer data? -> the loop's native function (ctypes)
_kernel_lock = threading.Lock()
_warming: threading.Thread | None = None  # warm_up's thread
_NO_WINDOWS: dict = {}  # per key type: windows for no level (a pass without windows)
_quiet_blas = False  # set by warm_up(freeze=True): numba loads without its BLAS probe

# The entry's arguments after numba's two (return slot, exception slot): the arrays' addresses,
# their sizes, then the scalars (those typed like the keys as uint64).
POINTERS = [
    "x",
    "weight",
    "center",
    "prefixes",
    "counts",
    "count",
    "low",
    "high",
    "nonfinite",
    "s1",
    "s2",
    "w_levels",
    "w_lo",
    "w_hi",
    "w_partial",
    "w_keys",
    "w_weights",
    "w_merged",
    "w_fill",
    "spare_keys",
    "spare_ints",
]
SIZES = [
    "rows",
    "dim",
    "groups",
    "bins",
    "blocks",
    "levels",
    "windim",
    "capacity",
    "n_keys",
    "n_ints",
]
SCALARS = (
    ("float_keys", False), ("sign", True), ("magnitude", True), ("top_bit", True),
    ("low_shift", True), ("high_shift", True), ("digit_mask", True), ("grouped", False),
    ("with_moments", False), ("flag", False), ("w_total", False),
)  # fmt: skip
PROTOTYPE = ctypes.CFUNCTYPE(
    ctypes.c_int32,
    ctypes.c_void_p,
    ctypes.c_void_p,
    *[ctypes.c_void_p] * len(POINTERS),
    *[ctypes.c_int64] * len(SIZES),
    *[ctypes.c_uint64 if keyed else ctypes.c_int64 for _, keyed in SCALARS],
)


def kernel(integer: bool = False):
    """The loop's native function for float32 (or int64) batches: kept machine code linked
    without numba where the user's cache holds it (`native_cache.py`), else compiled (or loaded
    from numba's cache) by numba, which is imported then: a run that never reaches a host pass
    pays for neither."""
    with _kernel_lock:
        if integer not in _kernels:
            _kernels[integer] = _native(integer)
    return _kernels[integer]


def warm_up(freeze: bool = False) -> threading.Thread:
    """Load (or compile) the loop for float32 batches on a background thread (`kernel`), so that
    this start-up runs while the reader threads decode the first files instead of before the first
    batch. The loop is machine code that any later call finds ready; an error here is left for
    that call to raise. One thread per process: a second call returns the first one's.

    `freeze`, for a process that is this run (the CLI; never a library caller's process): once the
    loop is loaded, every object then alive goes to the collector's permanent generation
    (`gc.freeze`): by then ~125,000 long-lived objects (numba's, the imports') that each full
    collection of the run would walk again (a whole run is faster, with the same output bytes:
    docs/performance.md). Such a process
    also skips numba's BLAS probe if numba is needed (`_without_blas_probe`)."""
    global _warming, _quiet_blas

    def load():
        try:
            kernel(integer=False)
        except Exception:  # the run's own first call reports it
            return
        if freeze:
            gc.freeze()

    with _kernel_lock:
        _quiet_blas = _quiet_blas or freeze
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
    Loading the loop then takes less CPU and memory."""
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
    return _update(state, x, row_weight, spec, None)


def _update(state, x, row_weight, spec, function):
    """`update` through `function` (None: `kernel`'s)."""
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
    spare = w.spare_keys, w.spare_ints
    arrays = dict(
        x=x, weight=np.ascontiguousarray(row_weight, np.int64),
        center=state.center.astype(np.float64),
        prefixes=np.ascontiguousarray(state.prefixes, kind), counts=state.counts,
        count=e.count, low=e.min_key, high=e.max_key, nonfinite=state.nonfinite, s1=s1, s2=s2,
        w_levels=w.levels, w_lo=w.lo, w_hi=w.hi, w_partial=w.partial, w_keys=w.keys,
        w_weights=w.weights, w_merged=w.merged, w_fill=w.fill,
        spare_keys=spare[0], spare_ints=spare[1],
    )  # fmt: skip
    sizes = dict(
        rows=rows, dim=dim, groups=state.counts.shape[1], bins=state.counts.shape[2],
        blocks=blocks, levels=len(w.levels), windim=w.lo.shape[0], capacity=w.capacity,
        n_keys=len(spare[0]), n_ints=len(spare[1]),
    )  # fmt: skip
    scalars = dict(
        float_keys=not integer, sign=sign, magnitude=kind(sign - kind(1)), top_bit=bits - 1,
        low_shift=bits - spec.prefix_bits - spec.digit_bits, high_shift=bits - spec.prefix_bits,
        digit_mask=(1 << spec.digit_bits) - 1, grouped=spec.prefix_bits > 0,
        with_moments=spec.with_moments, flag=windows.FLAG, w_total=w.total,
    )  # fmt: skip
    _call(function or kernel(integer), arrays, sizes, scalars)
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
    assert sums is not None  # a pass with_moments has them
    return sums


def _native(integer: bool):
    """The loop's native function: kept machine code where it checks out, else numba's build
    (kept for the next process)."""

    variant = "int64" if integer else "float32"
    here = Path(__file__).parent
    try:
        name = native_kernel.key(variant, [here / "host.py", here / "host_loop.py"])
    except ImportError:  # no llvmlite: numba's own path, which reports what is missing
        name = None
    kept = native_kernel.load(name, PROTOTYPE) if name else None
    if kept is not None and _probe(kept[0], integer) == kept[1]:
        return kept[0]
    library, symbol = _compile(integer)
    function = PROTOTYPE(library.get_pointer_to_function(symbol))
    if (
        name
        and native_kernel.writable()
        and not native_kernel.store(name, library, symbol, _probe(function, integer))
    ):
        # numba's build came from numba's cache, which keeps no object code to hand on: built
        # afresh once, so that the next process links it without numba
        library, symbol = _compile(integer, cache=False)
        function = PROTOTYPE(library.get_pointer_to_function(symbol))
        native_kernel.store(name, library, symbol, _probe(function, integer))
    return function


def _compile(integer: bool, cache: bool = True):
    """numba's build of the entry for float32 (or int64) batches: (its code library, the name of
    its native function); `cache`: the entry from numba's cache where it has it."""
    import numba
    import numba.core.dispatcher
    from numba import types

    with _without_blas_probe(_quiet_blas):
        jit = numba.njit(cache=True, nogil=True, error_model="numpy")
        names = (
            "radix_sort",
            "lower_to",
            "unflag",
            "narrow_sorted",
            "aim",
            "narrow",
            "add",
            "loop",
        )
        for name in names:  # callees first (module globals to numba when it compiles a caller)
            if not isinstance(getattr(host_loop, name), numba.core.dispatcher.Dispatcher):
                setattr(host_loop, name, jit(getattr(host_loop, name)))
        signature = types.void(
            *[types.voidptr] * len(POINTERS),
            *[types.int64] * len(SIZES),
            *[types.uint64 if keyed else types.int64 for _, keyed in SCALARS],
        )
        value, key = (np.int64, np.uint64) if integer else (np.float32, np.uint32)
        # numba's cfunc takes these as **options, which its inferred signature loses
        entry = numba.cfunc(signature, nopython=True, error_model="numpy", cache=cache)(  # pyright: ignore[reportCallIssue]
            _entry(value, key)
        )
    return entry._library, entry.native_name[len("cfunc.") :]


def _entry(value, key):
    """The entry numba compiles for values of dtype `value` with keys of dtype `key`: arrays from
    the addresses and sizes it is given, then `host_loop.loop`."""

    def entry(
        x, weight, center, prefixes, counts, count, low, high, nonfinite, s1, s2, w_levels, w_lo,
        w_hi, w_partial, w_keys, w_weights, w_merged, w_fill, spare_keys, spare_ints, rows, dim,
        groups, bins, blocks, levels, windim, capacity, n_keys, n_ints, float_keys, sign,
        magnitude, top_bit, low_shift, high_shift, digit_mask, grouped, with_moments, flag,
        w_total,
    ):  # fmt: skip
        i8, f8 = np.int64, np.float64
        host_loop.loop(
            carray(x, (rows, dim), value), carray(x, (rows, dim), key), float_keys != 0,
            key(sign), key(magnitude), key(top_bit), carray(weight, (rows,), i8),
            carray(center, (dim,), f8), carray(prefixes, (dim, groups), key), key(low_shift),
            key(high_shift), key(digit_mask), grouped != 0, with_moments != 0,
            carray(counts, (dim, groups, bins), i8), carray(count, (dim,), i8),
            carray(low, (dim,), key), carray(high, (dim,), key), carray(nonfinite, (dim,), i8),
            carray(s1, (blocks, dim), f8), carray(s2, (blocks, dim), f8),
            carray(w_levels, (levels,), f8), carray(w_lo, (windim, levels), key),
            carray(w_hi, (windim, levels), key), carray(w_partial, (windim, levels), i8),
            carray(w_keys, (windim, levels, capacity), key),
            carray(w_weights, (windim, levels, capacity), i8),
            carray(w_merged, (windim, levels), i8), carray(w_fill, (windim, levels), i8), flag,
            carray(spare_keys, (n_keys,), key), carray(spare_ints, (n_ints,), i8), w_total,
        )  # fmt: skip

    from numba import carray  # pyright: ignore[reportPrivateImportUsage]  (numba exports it, unlisted in __all__)

    return entry


def _call(function, arrays: dict, sizes: dict, scalars: dict) -> None:
    """One call of the native function (numba's calling convention: a status, 0 when done)."""
    slots = (ctypes.c_int64 * 4)()
    for name, array in arrays.items():
        if not array.flags.c_contiguous:
            raise ValueError(f"{name} is not a C-contiguous array")
    status = function(
        ctypes.addressof(slots),
        ctypes.addressof(slots) + 16,
        *[arrays[name].ctypes.data for name in POINTERS],
        *[int(sizes[name]) for name in SIZES],
        *[int(scalars[name]) for name, _ in SCALARS],
    )
    if status != 0:
        raise RuntimeError(f"the statistics loop stopped with status {status}")


def _probe(function, integer: bool) -> str:
    """The digest of `function`'s outputs on fixed data (every branch: NaN, weights 0 and 3,
    windows that narrow by the histogram and by sorting, a point mass): a kept build must give
    numba's own build's digest."""
    import hashlib

    rng = np.random.default_rng(20261127)
    rows, dim = 4 * BLOCK_ROWS, 3
    if integer:
        x = rng.integers(-(2**40), 2**40, (rows, dim))
        x[:, 2] = rng.integers(0, 3, rows)
    else:
        x = rng.standard_normal((rows, dim)).astype(np.float32)
        x[::7, 1], x[:, 2] = np.nan, (rng.random(rows) > 0.5).astype(np.float32)
    weight = rng.integers(0, 4, rows)
    spec = PassSpec(dim, 1, 0, 16, True, integer=integer)
    near = windows.start([0.0, 0.01, 0.5, 0.99], dim, integer, total_rows=16)
    state = own(pass_state.init(spec, np.zeros((dim, 1)), np.zeros(dim, np.float32), near))
    digest = hashlib.sha256()
    for part in range(0, rows, 2 * BLOCK_ROWS):
        batch = slice(part, part + 2 * BLOCK_ROWS)
        _, sums = _update(state, x[batch], weight[batch], spec, function)
        assert sums is not None  # a pass with_moments has them
        digest.update(sums[0].tobytes() + sums[1].tobytes())
    for array in (*state.extremes, state.counts, state.nonfinite, near.lo, near.hi, near.partial):
        digest.update(np.ascontiguousarray(array).tobytes())
    for d in range(dim):
        for u in range(len(near.levels)):
            keys, weights = windows.contents(near, d, u)
            digest.update(keys.tobytes() + weights.tobytes())
    return digest.hexdigest()
