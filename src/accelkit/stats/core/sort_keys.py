"""Order-preserving unsigned integer keys of float32 and int64 values.

float32 -> uint32: flip every bit of a negative float and set the sign bit of a non-negative one:
unsigned order of the keys is then the numeric order of the floats (with -0.0 just below +0.0).
int64 -> uint64: flip the sign bit (two's complement order becomes unsigned order).
Integer keys are how exact results avoid float arithmetic entirely: XLA on CPU flushes denormals
to zero in float operations, even in min/max, while integer compares and bit casts keep every value
as it was; and an int64 above 2**24 keeps every digit instead of its float32 rounding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # JAX is imported where a device kernel runs, not here
    import jax.numpy as jnp

EMPTY_MIN_KEY = np.uint32(0xFFFFFFFF)  # above every key: the min of nothing
EMPTY_MAX_KEY = np.uint32(0)  # below every key: the max of nothing
SIGN64 = np.uint64(1 << 63)


def key_bits(integer: bool) -> int:
    return 64 if integer else 32


def key_dtype(integer: bool):
    return np.uint64 if integer else np.uint32


def empty_keys(integer: bool) -> tuple[np.unsignedinteger, np.unsignedinteger]:
    """(min of nothing, max of nothing) in the key type."""
    kind = key_dtype(integer)
    return kind(np.iinfo(kind).max), kind(0)


def float_keys(x: jnp.ndarray) -> jnp.ndarray:
    """Order-preserving uint32 keys of float32 values (on device)."""
    import jax
    import jax.numpy as jnp

    u = jax.lax.bitcast_convert_type(x, jnp.uint32)
    return jnp.where(u >> 31 == 1, ~u, u | jnp.uint32(0x80000000))


def int_keys(x: jnp.ndarray) -> jnp.ndarray:
    """Order-preserving uint64 keys of int64 values (on device)."""
    import jax
    import jax.numpy as jnp

    return jax.lax.bitcast_convert_type(x.astype(jnp.int64), jnp.uint64) ^ jnp.uint64(SIGN64)


def keys_of(x: jnp.ndarray) -> jnp.ndarray:
    import jax.numpy as jnp

    return int_keys(x) if jnp.issubdtype(x.dtype, jnp.integer) else float_keys(x)


def keys_to_floats(keys: np.ndarray) -> np.ndarray:
    """Inverse of `float_keys` (on host)."""
    k = np.asarray(keys, np.uint32)
    u = np.where(k >> 31 == 1, k & np.uint32(0x7FFFFFFF), ~k).astype(np.uint32)
    return u.view(np.float32)


def keys_to_ints(keys: np.ndarray) -> np.ndarray:
    """Inverse of `int_keys` (on host)."""
    return (np.asarray(keys, np.uint64) ^ SIGN64).view(np.int64)


def keys_to_values(keys: np.ndarray) -> np.ndarray:
    """float32 values of uint32 keys, int64 values of uint64 keys."""
    keys = np.asarray(keys)
    return keys_to_ints(keys) if keys.dtype == np.uint64 else keys_to_floats(keys)
