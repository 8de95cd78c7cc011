"""Streaming per-dimension moments: count, mean, M2 (sum of squared deviations), min, max.

A pure `init` / `update` / `merge` / `finalize` quartet over an immutable NamedTuple, in the shape of
optax's states. Accumulators are float64 (call under `jax.enable_x64(True)`); each batch is reduced
about a shift near the data and combined with Chan et al.'s parallel formula, so the standard
deviation stays accurate when |mean| >> std (the float32 E[x^2] - E[x]^2 of the reference tool does
not).

Weights are integer counts per element: 0 excludes an element (padding, non-finite values, frames not
sampled), k > 1 counts it k times (an action that appears in k action chunks).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from accelkit.stats.keys import EMPTY_MAX_KEY, EMPTY_MIN_KEY, float_keys, keys_to_floats


class Moments(NamedTuple):
    count: jnp.ndarray  # int64 [D]: total weight
    mean: jnp.ndarray  # float64 [D]
    m2: jnp.ndarray  # float64 [D]: sum of weight * (x - mean)^2
    min_key: jnp.ndarray  # uint32 [D]: order key of the minimum (see `keys`); integer, so exact
    max_key: jnp.ndarray  # uint32 [D]


def init(dim: int) -> Moments:
    return Moments(
        count=jnp.zeros(dim, jnp.int64),
        mean=jnp.zeros(dim, jnp.float64),
        m2=jnp.zeros(dim, jnp.float64),
        min_key=jnp.full(dim, EMPTY_MIN_KEY, jnp.uint32),
        max_key=jnp.full(dim, EMPTY_MAX_KEY, jnp.uint32),
    )


def of_batch(x: jnp.ndarray, weight: jnp.ndarray, shift: jnp.ndarray) -> Moments:
    """Moments of one batch `x` [B, D] (float32) with integer element weights [B, D].

    `shift` [D] is any value near the data (the driver uses the first chunk's median). Sums of
    deviations from a fixed shift need one reduction pass, not two, and carry no large offset, so
    the std stays accurate when |mean| >> std. Float64 throughout: float32 inputs cannot overflow
    their squares, and the float32 -> float64 convert keeps denormals that float32 arithmetic on
    XLA CPU would flush to zero.
    """
    keys = float_keys(x)
    present = weight > 0
    w = weight.astype(jnp.float64)
    d = jnp.where(present, x.astype(jnp.float64) - shift.astype(jnp.float64), 0.0)
    count = weight.sum(axis=0, dtype=jnp.int64)
    s1 = (w * d).sum(axis=0)
    s2 = (w * d * d).sum(axis=0)
    n = jnp.maximum(count, 1).astype(jnp.float64)
    return Moments(
        count=count,
        mean=shift.astype(jnp.float64) + s1 / n,
        m2=jnp.maximum(s2 - s1 * s1 / n, 0.0),
        min_key=jnp.where(present, keys, EMPTY_MIN_KEY).min(axis=0),
        max_key=jnp.where(present, keys, EMPTY_MAX_KEY).max(axis=0),
    )


def merge(a: Moments, b: Moments) -> Moments:
    """Chan's parallel combination; exact in count/min/max, float64-rounded in mean/m2."""
    xp = np if isinstance(a.mean, np.ndarray) else jnp  # the same formula merges host-side results
    count = a.count + b.count
    n = xp.maximum(count, 1).astype(xp.float64)
    na, nb = a.count.astype(xp.float64), b.count.astype(xp.float64)
    delta = b.mean - a.mean
    mean = xp.where(a.count == 0, b.mean, xp.where(b.count == 0, a.mean, a.mean + delta * (nb / n)))
    m2 = a.m2 + b.m2 + delta * delta * (na * nb / n)
    m2 = xp.where((a.count == 0) | (b.count == 0), a.m2 + b.m2, m2)
    return Moments(
        count, mean, m2, xp.minimum(a.min_key, b.min_key), xp.maximum(a.max_key, b.max_key)
    )


def update(state: Moments, x: jnp.ndarray, weight: jnp.ndarray, shift: jnp.ndarray) -> Moments:
    # (x must be the raw float32 input: min/max keys are taken of its bits)
    return merge(state, of_batch(x, weight, shift))


def finalize(state: Moments) -> dict[str, np.ndarray]:
    """Host-side results: count, mean, population std (ddof 0, as openpi), min, max."""
    count = np.asarray(state.count, np.int64)
    m2 = np.asarray(state.m2, np.float64)
    std = np.sqrt(np.where(count > 0, m2 / np.maximum(count, 1), np.nan))
    return {
        "count": count,
        "mean": np.where(count > 0, np.asarray(state.mean, np.float64), np.nan),
        "std": std,
        "min": np.where(count > 0, keys_to_floats(state.min_key), np.nan).astype(np.float32),
        "max": np.where(count > 0, keys_to_floats(state.max_key), np.nan).astype(np.float32),
    }
