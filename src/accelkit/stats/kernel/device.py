"""One data pass as a pure state machine: `init`, `update`, `merge` over a `PassState` pytree.

A pass sees batches `x` [B, D] float32 with integer row weights [B]. It histograms one key digit
(see `quantiles`), and on the first pass also counts non-finite values, tracks `Extremes` and returns
the moment sums of every fixed row block of the batch (see `moments`).

`sharded_update` runs `update` under `jax.shard_map` on a 1-D mesh: each device keeps its own
partial state for its slice of every batch (integers: they merge exactly at the end of the pass), and
the block sums of all devices come back in row order for the host to fold. One code path serves one
device and many, with identical results.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from accelkit.stats.core import moments as mom
from accelkit.stats.core.quantiles import digit_histogram_update
from accelkit.stats.core.sort_keys import float_keys, keys_of
from accelkit.stats.kernel.state import PassSpec, PassState, init, merge  # noqa: F401  (re-exported)


def update(
    state: PassState, x: jnp.ndarray, row_weight: jnp.ndarray, spec: PassSpec
) -> tuple[PassState, tuple[jnp.ndarray, jnp.ndarray] | None]:
    """The new state and, when the pass computes moments, the batch's block sums."""
    finite, x, weight = finite_only(x, row_weight)
    nonfinite = state.nonfinite
    if spec.with_moments:  # later passes see the same values; counting them once is enough
        bad = ((row_weight > 0)[:, None] & ~finite).sum(axis=0, dtype=jnp.int32)
        nonfinite = nonfinite + bad.astype(jnp.int64)
    # Exact keys are the raw bits: any arithmetic here could flush denormals to zero (XLA CPU runs
    # with flush-to-zero) and the selected order statistic would no longer be a data value.
    if spec.centered:  # fast mode sketches float32 offsets from the center, also for integers
        y = centered_offsets(x, state.center) if not spec.integer else integer_offsets(x, state)
        keys = float_keys(y)
    else:
        keys = keys_of(x)
    extremes, blocks = state.extremes, None
    if spec.with_moments:
        extremes = mom.update(state.extremes, x, weight, None if spec.centered else keys)
        blocks = mom.block_sums(x, weight, state.center)
        # The moments are finished before the histogram starts: fused into the scatter's loop,
        # XLA CPU made pass 1 several times slower than the histogram and the moments apart.
        extremes, blocks, keys, weight = jax.lax.optimization_barrier(
            (extremes, blocks, keys, weight)
        )
    counts = digit_histogram_update(
        state.counts, keys, weight, state.prefixes, spec.prefix_bits, spec.digit_bits
    )
    return PassState(extremes, counts, state.prefixes, state.center, nonfinite), blocks


def finite_only(x: jnp.ndarray, row_weight: jnp.ndarray):
    """(finite mask, x with non-finite values zeroed, int32 weights [B, D] that are 0 there)."""
    finite = jnp.isfinite(x)
    weight = jnp.where(finite, row_weight[:, None], 0).astype(jnp.int32)
    return finite, jnp.where(finite, x, jnp.zeros_like(x)), weight


@jax.jit
def moment_blocks(x: jnp.ndarray, row_weight: jnp.ndarray, center: jnp.ndarray):
    """The block sums `update` computes for the same rows: for blocks assembled on a host (the rows
    of a block that straddles two Ray tasks), bit for bit."""
    _, x, weight = finite_only(x, row_weight)
    return mom.block_sums(x, weight, center)


def centered_offsets(x: jnp.ndarray, center: jnp.ndarray) -> jnp.ndarray:
    """x - center, ordered like x, and 0 only where x equals center.

    XLA's CPU arithmetic flushes results below float32's normal range to 0, so a tiny x beside a
    center of 0 would look like the center itself and fast mode would call a mixed bucket exact.
    Such offsets become +-FLT_MIN instead (the bucket just off zero, whose bound is then honest);
    equality and direction come from integer keys, which no flushing touches. Overflow near float32's
    max is clamped so the offset keeps its order.
    """
    big = jnp.finfo(jnp.float32).max
    y = jnp.clip(x - center, -big, big)
    x_key, c_key = float_keys(x), float_keys(center)[None, :]

    def is_zero(key):  # +0.0 and -0.0
        return (key == jnp.uint32(0x80000000)) | (key == jnp.uint32(0x7FFFFFFF))

    equal = (x_key == c_key) | (is_zero(x_key) & is_zero(c_key))
    tiny = jnp.finfo(jnp.float32).tiny
    return jnp.where((y == 0) & ~equal, jnp.where(x_key > c_key, tiny, -tiny), y)


def integer_offsets(x: jnp.ndarray, state: PassState) -> jnp.ndarray:
    """float32 offsets of int64 values from the center (exact in float64, then rounded); 0 only
    where x equals the rounded center."""
    return (x.astype(jnp.float64) - state.center.astype(jnp.float64)).astype(jnp.float32)


# --- running a pass over a mesh of devices ----------------------------------------------------


def make_mesh(devices) -> Mesh:
    return Mesh(np.asarray(devices), ("data",))


def replicate_per_device(state: PassState, mesh: Mesh) -> PassState:
    """Stack one copy of `state` per device along a new leading axis, sharded over the mesh."""
    n = mesh.devices.size
    sharding = NamedSharding(mesh, P("data"))
    # numpy broadcast + device_put: no compiled program (a jnp op here costs a compile per shape)
    return jax.tree.map(
        lambda leaf: jax.device_put(
            np.ascontiguousarray(np.broadcast_to(np.asarray(leaf), (n, *np.shape(leaf)))), sharding
        ),
        state,
    )


@partial(jax.jit, static_argnames=("spec", "mesh"), donate_argnums=(0,))
def sharded_update(state: PassState, x, row_weight, *, spec: PassSpec, mesh: Mesh):
    """Each device updates its own partial state with its rows of the batch.

    Returns (new state, block sums or None, token). Block sums [B / BLOCK_ROWS, D] are in row order
    (device i's blocks follow device i-1's). The token is a small value computed from the new state:
    the state itself is donated to the next call, so the driver waits on tokens to bound how far
    dispatch runs ahead of the device.
    """

    def local(state, x, row_weight):
        squeezed = jax.tree.map(lambda leaf: leaf[0], state)
        new, blocks = update(squeezed, x, row_weight, spec)
        return jax.tree.map(lambda leaf: leaf[None], new), blocks

    new_state, blocks = jax.shard_map(
        local,
        mesh=mesh,
        in_specs=(P("data"), P("data"), P("data")),
        out_specs=(P("data"), None if not spec.with_moments else (P("data"), P("data"))),
    )(state, x, row_weight)
    return new_state, blocks, new_state.nonfinite.sum()


def gather_and_merge(state: PassState) -> PassState:
    """Pull per-device partial states to the host and merge them in device order (numpy, int64)."""
    host = jax.tree.map(np.asarray, jax.device_get(state))
    parts = [jax.tree.map(lambda leaf, i=i: leaf[i], host) for i in range(host.counts.shape[0])]
    merged = jax.tree.map(lambda leaf: leaf, parts[0])
    merged = merged._replace(counts=merged.counts.astype(np.int64))
    for part in parts[1:]:
        merged = merge(merged, part._replace(counts=part.counts.astype(np.int64)))
    return merged
