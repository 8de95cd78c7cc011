"""Order-preserving integer keys of float32 values.

Flip every bit of a negative float and set the sign bit of a non-negative one: unsigned order of the
keys is then the numeric order of the floats (with -0.0 just below +0.0). Integer keys are how exact
results avoid float arithmetic entirely: XLA on CPU flushes denormals to zero in float operations,
even in min/max, while integer compares and bit casts keep every value as it was.
"""

import jax
import jax.numpy as jnp
import numpy as np

EMPTY_MIN_KEY = np.uint32(0xFFFFFFFF)  # above every key: the min of nothing
EMPTY_MAX_KEY = np.uint32(0)  # below every key: the max of nothing


def float_keys(x: jnp.ndarray) -> jnp.ndarray:
    """Order-preserving uint32 keys of float32 values (on device)."""
    u = jax.lax.bitcast_convert_type(x, jnp.uint32)
    return jnp.where(u >> 31 == 1, ~u, u | jnp.uint32(0x80000000))


def keys_to_floats(keys: np.ndarray) -> np.ndarray:
    """Inverse of `float_keys` (on host)."""
    k = np.asarray(keys, np.uint32)
    u = np.where(k >> 31 == 1, k & np.uint32(0x7FFFFFFF), ~k).astype(np.uint32)
    return u.view(np.float32)
