"""Exact and sketched quantiles from histograms of order-preserving float keys.

Every float32 maps to a uint32 key whose unsigned order is the float order (flip all bits of
negatives, set the sign bit of positives). Counting keys digit by digit is a radix select:

* **Exact mode** histograms the top 16 key bits in pass 1; the bucket holding each target rank is then
  known, and pass 2 histograms the low 16 bits of only the values in those buckets. After the last
  digit, the full 32-bit key of the value at every target rank is known exactly: the same order
  statistics `numpy.quantile` picks, whatever the distribution (ties, point masses, heavy tails,
  values near +-1e30). Memory is the histograms only, independent of dataset size, and histograms of
  integers merge exactly, across batches, devices and hosts.
* **Fast mode** histograms the top 18 bits of the key of `x - center` in one pass: buckets of relative
  width 2^-9 around a per-dimension center (the first chunk's median), and a quantile is read by
  interpolating inside its bucket. Its rank error is at most the bucket's share of the data, which is
  returned with every estimate (`rank_error_bound`), so the run can say how good its answer is.

The interpolation reproduces numpy's default ("linear", Hyndman & Fan type 7) bit for bit: the
virtual index `(n - 1) * q`, floor and next order statistics, and numpy's `_lerp`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:  # JAX is imported where a device kernel runs, not here
    import jax.numpy as jnp

from accelkit.errors import DataError, InputError
from accelkit.stats.core.sort_keys import float_keys, keys_to_floats, keys_to_values  # noqa: F401

KEY_BITS = 32  # float32 keys; int64 data has 64-bit keys (plans carry their own width)
NO_PREFIX = np.uint64(0xFFFFFFFFFFFFFFFF)  # pads prefix tables: above every shorter prefix


def quantile_name(q: float) -> str:
    """0.01 -> "q01", 0.5 -> "q50", 0.995 -> "q99.5", 0.001 -> "q00.1", 1e-7 -> "q00.00001"."""
    percent = round(q * 100, 10)  # 0.07 * 100 = 7.000000000000001; ten digits is finer than any use
    text = np.format_float_positional(percent, trim="-")
    whole, _, frac = text.partition(".")
    return f"q{int(whole):02d}" + (f".{frac}" if frac else "")


def check_quantile_names(levels) -> None:
    """Two levels that print the same name would overwrite each other in the output file."""
    names: dict[str, float] = {}
    for q in levels:
        name = quantile_name(q)
        if name in names and names[name] != q:
            raise InputError(
                f"quantile levels {names[name]} and {q} both write the entry {name!r}; drop one of them"
            )
        names[name] = q


def digit_histogram_update(
    counts: jnp.ndarray,
    keys: jnp.ndarray,
    weight: jnp.ndarray,
    prefixes: jnp.ndarray,
    prefix_bits: int,
    digit_bits: int,
) -> jnp.ndarray:
    """Add one batch to per-(dimension, group) histograms of the next key digit.

    counts:   int32 [D, U, 2**digit_bits], the running histograms;
    keys:     uint32 [B, D];  weight: int32 [B, D] (0 = not counted);
    prefixes: uint32 [D, U], the `prefix_bits` high key bits each group is restricted to.
    A value is counted in the group whose prefix its high bits equal (groups are distinct per
    dimension), at its next `digit_bits` bits; values in no group are dropped.
    """
    import jax.numpy as jnp

    dim, groups, bins = counts.shape
    bits = keys.dtype.itemsize * 8
    kind = keys.dtype.type
    low_shift = bits - prefix_bits - digit_bits
    digit = ((keys >> kind(low_shift)) & kind(bins - 1)).astype(jnp.int32)
    dims = jnp.arange(dim, dtype=jnp.int32)[None, :]
    if prefix_bits == 0:
        group = jnp.zeros_like(digit)
        member = weight > 0
    else:
        high = keys >> kind(bits - prefix_bits)
        # Prefixes are distinct within a dimension, so at most one matches: the sums below are
        # the matching group's index and membership, as element-wise ops XLA fuses (an argmax over
        # a [B, D, U] tensor is several times slower on CPU).
        group = jnp.zeros_like(digit)
        matched = jnp.zeros_like(digit)
        for u in range(groups):
            hit = (high == prefixes[None, :, u]).astype(jnp.int32)
            group, matched = group + u * hit, matched + hit
        member = (matched > 0) & (weight > 0)
    flat = (dims * groups + group) * bins + digit
    # Out-of-range indices are dropped rather than piled on a sink bin: on GPUs a shared sink
    # would serialize every atomic add onto one address.
    flat = jnp.where(member, flat, dim * groups * bins)
    updated = counts.reshape(-1).at[flat.reshape(-1)].add(weight.reshape(-1), mode="drop")
    return updated.reshape(counts.shape)


# --- numpy's "linear" quantile, reproduced exactly ------------------------------------------


class Targets(NamedTuple):
    """Which order statistics each quantile needs, per dimension (all [D, Q])."""

    previous: np.ndarray  # int64 rank of the lower order statistic
    next: np.ndarray  # int64 rank of the upper order statistic
    gamma: np.ndarray  # float64 interpolation weight


def linear_targets(count: np.ndarray, quantiles: np.ndarray) -> Targets:
    """numpy's virtual indexes for method='linear', for per-dimension counts [D]."""
    n = np.asarray(count, np.int64)[:, None]
    q = np.asarray(quantiles, np.float64)[None, :]
    virtual = (n - 1) * q  # numpy's get_virtual_index for 'linear', evaluated the same way
    previous = np.floor(virtual).astype(np.int64)
    nxt = previous + 1
    above = virtual >= n - 1
    previous = np.where(above, n - 1, previous)
    nxt = np.where(above, n - 1, nxt)
    below = virtual < 0
    previous = np.where(below, 0, previous)
    nxt = np.where(below, 0, nxt)
    gamma = (virtual - np.floor(virtual)).astype(np.float64)
    gamma = np.where(above | below, virtual - previous, gamma)
    return Targets(previous, nxt, gamma)


def numpy_lerp(a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    """numpy's `_lerp` with float32 (or int64) endpoints and float64 weights, as `np.quantile`
    evaluates it (int64 endpoints: the difference in int64, the result float64)."""
    kind = np.int64 if np.asarray(a).dtype == np.int64 else np.float32
    a = np.asarray(a, kind)
    b = np.asarray(b, kind)
    t = np.asarray(t, np.float64)
    diff = b - a
    out = np.add(a, diff * t)
    np.subtract(b, diff * (1 - t), out=out, where=t >= 0.5, casting="unsafe")
    return out


# --- exact mode: planning the radix passes on the host ---------------------------------------


class RadixPlan(NamedTuple):
    """State of the exact selection between passes (host side, numpy)."""

    ranks: np.ndarray  # int64 [D, T]: 0-based rank of each target order statistic
    prefixes: np.ndarray  # uint64 [D, T]: key bits fixed so far for each target
    below: np.ndarray  # int64 [D, T]: how many values have a key below the target's prefix range
    inside: np.ndarray  # int64 [D, T]: how many values have a key inside the target's prefix range
    prefix_bits: int
    key_bits: int = KEY_BITS  # 32 (float32 data) or 64 (int64 data)


def start_plan(
    count: np.ndarray, quantiles: np.ndarray, key_bits: int = KEY_BITS
) -> tuple[RadixPlan, Targets]:
    targets = linear_targets(count, quantiles)
    ranks = np.concatenate([targets.previous, targets.next], axis=1)
    zeros = np.zeros_like(ranks)
    everything = np.broadcast_to(np.asarray(count, np.int64)[:, None], ranks.shape).copy()
    return RadixPlan(ranks, zeros.astype(np.uint64), zeros, everything, 0, key_bits), targets


def skip_common_prefix(plan: RadixPlan, min_key: np.ndarray, max_key: np.ndarray) -> RadixPlan:
    """Fix at once the key bits every value shares (the common prefix of the minimum and maximum).

    An int64 column's keys share most of their 64 bits (a range of 1,000 leaves 10 to find), so
    this saves the passes that would each have found one 16-bit digit every value has.
    """
    bits = plan.key_bits
    lo = np.asarray(min_key).astype(np.uint64)
    hi = np.asarray(max_key).astype(np.uint64)
    present = np.all(plan.inside > 0, axis=1)
    if not present.any():
        return plan
    differing = np.array([int(v).bit_length() for v in (lo ^ hi)[present]])
    shared = bits - int(differing.max())
    if shared <= plan.prefix_bits:
        return plan
    prefixes = np.where(
        present[:, None], (lo >> np.uint64(bits - shared))[:, None], np.uint64(0)
    ).astype(np.uint64)
    return plan._replace(
        prefixes=np.broadcast_to(prefixes, plan.prefixes.shape).copy(), prefix_bits=shared
    )


def group_prefixes(plan: RadixPlan) -> tuple[np.ndarray, np.ndarray]:
    """Distinct prefixes per dimension, padded to a common width U with a prefix no key has.

    Returns (prefixes [D, U] uint64, group_of_target [D, T] int64).
    """
    dims, _ = plan.prefixes.shape
    uniques = [np.unique(plan.prefixes[d]) for d in range(dims)]
    width = max(len(u) for u in uniques)
    table = np.stack(
        [np.concatenate([u, np.full(width - len(u), NO_PREFIX, np.uint64)]) for u in uniques]
    )
    group = np.stack([np.searchsorted(uniques[d], plan.prefixes[d]) for d in range(dims)])
    kind = np.uint64 if plan.key_bits == 64 else np.uint32  # the pad keeps its all-ones meaning
    return table.astype(kind), group.astype(np.int64)


def advance_plan(
    plan: RadixPlan, counts: np.ndarray, group: np.ndarray, digit_bits: int
) -> RadixPlan:
    """Given a pass's histograms [D, U, 2**digit_bits], fix the next digit of every target.

    One histogram's running total at a time ([K] int64, not all [D, U, K] and a [D, T, K] copy:
    that transient was the largest allocation of a whole exact run)."""
    dims = plan.ranks.shape[0]
    within = plan.ranks - plan.below  # rank inside the prefix range
    digit = np.empty_like(plan.ranks)
    before = np.zeros(plan.ranks.shape, np.int64)
    through = np.zeros(plan.ranks.shape, np.int64)
    last = counts.shape[-1] - 1
    for d in range(dims):  # D*U running totals and D*T searches on K-long rows: tiny next to a pass
        for u in np.unique(group[d]):
            cumulative = np.cumsum(counts[d, u], dtype=np.int64)  # [K]
            for t in np.flatnonzero(group[d] == u):
                # Each pass must see exactly the values the previous pass counted in each
                # target's range; if the data changed between passes, the selected "order
                # statistic" would silently be wrong.
                if cumulative[-1] != plan.inside[d, t]:
                    raise DataError(
                        "the data changed between passes (a value range held a different number of values when read "
                        "again); exact quantiles need data that stays the same while they are computed"
                    )
                k = min(int(np.searchsorted(cumulative, within[d, t], side="right")), last)
                digit[d, t] = k
                before[d, t] = cumulative[k - 1] if k > 0 else 0
                through[d, t] = cumulative[k]
    prefixes = (plan.prefixes.astype(np.uint64) << np.uint64(digit_bits)) | digit.astype(np.uint64)
    return RadixPlan(
        plan.ranks,
        prefixes.astype(np.uint64),
        plan.below + before,
        through - before,
        plan.prefix_bits + digit_bits,
        plan.key_bits,
    )


def finish_plan(plan: RadixPlan, targets: Targets) -> np.ndarray:
    """After all digits: values at the target ranks, interpolated as numpy does. Returns [D, Q]."""
    if plan.prefix_bits != plan.key_bits:
        raise RuntimeError(
            f"radix plan incomplete: {plan.prefix_bits} of {plan.key_bits} bits fixed"
        )
    kind = np.uint64 if plan.key_bits == 64 else np.uint32
    values = keys_to_values(plan.prefixes.astype(kind))
    q = targets.previous.shape[1]
    out = numpy_lerp(values[:, :q], values[:, q:], targets.gamma)
    # a dimension with no (finite) values has no quantiles
    return np.where(plan.inside[:, :q] > 0, out, out.dtype.type(np.nan))


# --- fast mode: one-pass estimate ----------------------------------------------------------


# 18 bits: 9 mantissa bits per octave. 20 bits is 4x more precise but its 4 MiB-per-dimension
# tables make the pass slower than exact mode's first pass on CPU (measured in benchmarks/).
FAST_DIGIT_BITS = 18


def sketch_quantiles(
    counts: np.ndarray,
    center: np.ndarray,
    count: np.ndarray,
    minimum: np.ndarray,
    maximum: np.ndarray,
    quantiles: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Estimate quantiles from a one-pass histogram of keys of `x - center`.

    counts [D, 1, 2**bits]; returns (estimates [D, Q] float64, rank_error_bound [D, Q]): the bound is
    the share of the data in the bucket the estimate was read from.
    """
    hist = counts[:, 0, :].astype(np.int64)
    bits = int(hist.shape[1]).bit_length() - 1
    cumulative = np.cumsum(hist, axis=-1)
    targets = linear_targets(count, quantiles)
    virtual = targets.previous + targets.gamma  # position in the sorted data, [D, Q]
    dims, nq = virtual.shape
    est = np.full((dims, nq), np.nan)
    bound = np.full((dims, nq), np.nan)
    low_fill = np.uint32((1 << (KEY_BITS - bits)) - 1)
    for d in range(dims):
        if count[d] == 0:
            continue
        bucket = np.searchsorted(cumulative[d], targets.previous[d], side="right")
        bucket = np.minimum(bucket, hist.shape[1] - 1)
        start = np.where(bucket > 0, cumulative[d][np.maximum(bucket - 1, 0)], 0)
        mass = hist[d, bucket]
        # Bucket edges in value space, then clipped to the observed range: a point mass at the
        # minimum or maximum (a gripper's 0 or 1) is returned exactly.
        key_low = bucket.astype(np.uint32) << np.uint32(KEY_BITS - bits)
        y_low = keys_to_floats(key_low).astype(np.float64)
        y_high = keys_to_floats(key_low | low_fill).astype(np.float64)
        # The buckets at +-0 hold exactly the values equal to `center` (a point mass, e.g. a
        # gripper whose first chunk was all closed): the kernel moves offsets that float32
        # arithmetic flushed to 0 into the buckets at +-FLT_MIN (`passes.centered_offsets`).
        shift = KEY_BITS - bits
        at_zero = (bucket == (0x80000000 >> shift)) | (bucket == (0x7FFFFFFF >> shift))
        y_low = np.where(at_zero, 0.0, y_low)
        y_high = np.where(at_zero, 0.0, y_high)
        # ...so the buckets at +-FLT_MIN also hold offsets anywhere between them and 0.
        y_low = np.where(bucket == (0x80800000 >> shift), 0.0, y_low)  # key of +FLT_MIN
        y_high = np.where(bucket == (0x7F7FFFFF >> shift), 0.0, y_high)  # key of -FLT_MIN
        lo = np.clip(np.minimum(y_low, y_high) + center[d], minimum[d], maximum[d])
        hi = np.clip(np.maximum(y_low, y_high) + center[d], minimum[d], maximum[d])
        frac = np.clip((virtual[d] - start + 0.5) / np.maximum(mass, 1), 0.0, 1.0)
        est[d] = lo + frac * (hi - lo)
        bound[d] = np.where(lo == hi, 0.0, mass / count[d])
        # q = 0 and q = 1 are the minimum and maximum, which the pass tracked exactly.
        est[d] = np.where(quantiles <= 0, minimum[d], np.where(quantiles >= 1, maximum[d], est[d]))
        bound[d] = np.where((quantiles <= 0) | (quantiles >= 1), 0.0, bound[d])
    return est, bound
