"""Streaming per-dimension moments, reproducible to the bit: count, shifted sums, min, max.

Two parts with different merge rules:

* `Extremes` (count, min key, max key) are integers: they merge exactly in any order, so each device
  keeps its own partial state and the partial states are merged at the end of a pass.
* `Sums` (sum of w(x - shift), sum of w(x - shift)^2, float64) round, so their bits depend on the
  order of additions. They are summed over **fixed row blocks** of `BLOCK_ROWS` consecutive rows of
  the stream, each by the same fixed order of additions (`block_sums`), and the block sums are folded
  on the host one after another in stream order (`fold`). Neither the batch size (a multiple of the
  block) nor the number of devices (each holds whole blocks) changes any addition, so results are
  identical bytes for any device count and batch size.

The shift is a value near the data (the first chunk's median): sums of deviations from it carry no
large offset, so the std stays accurate when |mean| >> std (the float32 E[x^2] - E[x]^2 of openpi's
RunningStats does not). Float64 throughout: float32 inputs cannot overflow their squares, and the
float32 -> float64 convert keeps denormals that float32 arithmetic on XLA CPU would flush to zero.

Weights are integer counts per element: 0 excludes an element (padding, non-finite values, frames not
sampled), k > 1 counts it k times (an action that appears in k action chunks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import numpy as np

if TYPE_CHECKING:  # JAX is imported where a device kernel runs, not here
    import jax.numpy as jnp

from accelkit.stats.core.sort_keys import empty_keys, keys_of, keys_to_values

# a numpy array on the host, a jax.Array on a device (a tracer under jit): one code serves both
HostOrDevice: TypeAlias = Any

BLOCK_ROWS = 256  # rows per fixed block of the moment sums; batches hold whole blocks per device


class Extremes(NamedTuple):
    count: HostOrDevice  # int64 [D]: total weight
    # uint32 [D] (uint64 for int64 data): order key of the minimum (`sort_keys.py`)
    min_key: HostOrDevice
    max_key: HostOrDevice


class Sums(NamedTuple):
    s1: np.ndarray  # float64 [D]: sum of w * (x - shift)
    s2: np.ndarray  # float64 [D]: sum of w * (x - shift)^2


def init(dim: int, integer: bool = False) -> Extremes:
    """Host (numpy) arrays: placing them on devices needs no compiled program."""
    lowest, highest = empty_keys(integer)
    return Extremes(
        count=np.zeros(dim, np.int64),
        min_key=np.full(dim, lowest, lowest.dtype),
        max_key=np.full(dim, highest, highest.dtype),
    )


def update(
    state: Extremes, x: jnp.ndarray, weight: jnp.ndarray, keys: jnp.ndarray | None = None
) -> Extremes:
    """Add a batch `x` [B, D] (the raw float32 or int64 input: keys are taken of its bits, or
    given as `keys`) with int weights [B, D]."""
    import jax.numpy as jnp

    keys = keys_of(x) if keys is None else keys
    lowest, highest = empty_keys(keys.dtype == jnp.uint64)
    present = weight > 0
    rows = x.shape[0]
    # Reduced in two steps (runs of rows by written-out element-wise ops, then a small reduce):
    # XLA CPU turns one big column reduction into a slow reduce-window beside the other work.
    block = BLOCK_ROWS if rows % BLOCK_ROWS == 0 else rows
    return merge(
        state,
        Extremes(
            # int32 within a block (the driver keeps weights per flush below 2**31), int64 after
            count=_in_order(weight, block, jnp.add).astype(jnp.int64).sum(axis=0),
            min_key=_in_order(jnp.where(present, keys, lowest), block, jnp.minimum).min(axis=0),
            max_key=_in_order(jnp.where(present, keys, highest), block, jnp.maximum).max(axis=0),
        ),
    )


def merge(a: Extremes, b: Extremes) -> Extremes:
    """Exact in any order; host or device."""
    if isinstance(a.count, np.ndarray):
        xp = np
    else:
        import jax.numpy as xp
    return Extremes(
        a.count + b.count, xp.minimum(a.min_key, b.min_key), xp.maximum(a.max_key, b.max_key)
    )


def block_sums(
    x: jnp.ndarray, weight: jnp.ndarray, shift: jnp.ndarray, block_rows: int = BLOCK_ROWS
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Per-block sums of w(x - shift) and w(x - shift)^2: two float64 arrays [B / block_rows, D].

    Each block is summed in the same written-out order whatever the number of blocks: the additions,
    and so the bits, depend only on the block's rows. The products are
    materialized behind an optimization barrier so no compiler can fuse a multiply into an add (an
    FMA rounds once, not twice) differently for different shapes.
    """
    rows = x.shape[0]
    if rows % block_rows or block_rows % min(16, block_rows):
        raise ValueError(f"{rows} rows are not whole blocks of {block_rows} (a multiple of 16)")
    import jax
    import jax.numpy as jnp

    w = weight.astype(jnp.float64)
    d = jnp.where(weight > 0, x.astype(jnp.float64) - shift.astype(jnp.float64), 0.0)
    wd = w * d
    wdd = wd * d
    wd, wdd = jax.lax.optimization_barrier((wd, wdd))
    return _in_order(wd, block_rows), _in_order(wdd, block_rows)


def _in_order(values: jnp.ndarray, block_rows: int, op=None) -> jnp.ndarray:
    """`op` (add, minimum, maximum) over each block of rows as written-out element-wise ops: runs of
    16 rows left to right, then the runs left to right. Explicit ops are never reordered, and XLA
    fuses them into one loop (faster on CPU than a halving tree or a reduce, whose order is the
    backend's choice)."""
    if op is None:
        import jax.numpy as jnp

        op = jnp.add
    rows, dim = values.shape
    run = 16 if block_rows % 16 == 0 else 1
    v = values.reshape(rows // block_rows, block_rows // run, run, dim)
    runs = v[:, :, 0]
    for i in range(1, run):
        runs = op(runs, v[:, :, i])
    total = runs[:, 0]
    for i in range(1, block_rows // run):
        total = op(total, runs[:, i])
    return total


def empty_sums(dim: int) -> Sums:
    return Sums(np.zeros(dim, np.float64), np.zeros(dim, np.float64))


def fold(sums: Sums, s1_blocks: np.ndarray, s2_blocks: np.ndarray) -> Sums:
    """Add block sums [N, D] to the running sums one block after another, in order (host)."""

    def sequential(total, blocks):
        stacked = np.concatenate([total[None], np.asarray(blocks, np.float64)])
        return np.add.accumulate(stacked, axis=0)[-1]  # strictly left to right

    return Sums(sequential(sums.s1, s1_blocks), sequential(sums.s2, s2_blocks))


def finalize(extremes: Extremes, sums: Sums, shift: np.ndarray) -> dict[str, np.ndarray]:
    """Host-side results: count, mean, population std (ddof 0, as openpi), min, max (float32, or
    int64 for integer data)."""
    count = np.asarray(extremes.count, np.int64)
    n = np.maximum(count, 1).astype(np.float64)
    s1, s2 = np.asarray(sums.s1, np.float64), np.asarray(sums.s2, np.float64)
    mean = np.asarray(shift, np.float32).astype(np.float64) + s1 / n
    m2 = np.maximum(s2 - s1 * s1 / n, 0.0)
    present = count > 0
    return {
        "count": count,
        "mean": np.where(present, mean, np.nan),
        "std": np.sqrt(np.where(present, m2 / n, np.nan)),
        "min": _values(extremes.min_key, present),
        "max": _values(extremes.max_key, present),
    }


def _values(keys, present: np.ndarray) -> np.ndarray:
    values = keys_to_values(keys)
    if values.dtype == np.int64:
        return values if present.all() else np.where(present, values, np.nan)
    return np.where(present, values, np.nan).astype(np.float32)
