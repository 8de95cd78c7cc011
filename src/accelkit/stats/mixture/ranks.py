"""Exact statistics of a mixture of datasets, from each member's own integer histograms.

A mixture reads several streams (its *members*) as one distribution, in one of two ways:

* **union**: every counted value once, as if the members' rows were concatenated; quantiles are
  numpy's default ("linear") quantile of the concatenation;
* **weighted**: member m has a weight w_m (any positive rational, normalized by their sum W) and
  each of its N_m counted values weighs w_m / (W N_m), the distribution a weighted sampler draws
  from. The quantile at level q is numpy's `quantile(x, q, weights=…, method="inverted_cdf")`:
  the smallest value x whose cumulative weight F(x) (the weight of the values <= x) is >= q.

Both locate a target as **the smallest key k with S(k) >= tau**, where S(k) = sum over members of
s_m c_m(k), c_m(k) is how many of member m's values have a key <= k (integers, from its
histograms: exact) and s_m an integer scale. Union: s_m = 1 and tau = rank + 1 for numpy's
floor/next ranks. Weighted: s_m = L w_m / (W N_m) and tau = L q, with L the least common
multiple of every denominator, so that all are integers, and q taken as the decimal it is written
as (0.01 is 1/100; `exact_level`). No float takes part in the comparison: a boundary case (F(x) ==
q exactly) is decided exactly.

Each member keeps its own pass states — integer, merged over batches, devices and Ray tasks as
for one dataset — and the scales combine them only where a rank is located: `advance` (the radix
passes' next digit) and `resolve_windows` (pass 1's windows, `stats.windows`). S can exceed int64
(L is a common multiple of frame counts); sums are int64 where they fit, Python integers beyond.

Pure numpy and `fractions`; the passes themselves are `stats/mixture/engine.py`'s.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from accelkit.errors import DataError
from accelkit.stats.core import quantiles as qt
from accelkit.stats.core.moments import Sums
from accelkit.stats.core.sort_keys import keys_to_values
from accelkit.stats.kernel import windows as win

SAFE = 1 << 62  # sums below this are taken in int64


def exact_level(q: float) -> Fraction:
    """A quantile level as the decimal it is written as: 0.01 -> 1/100 (not the binary double
    just above it, which would put F(x) == 0.01 on the wrong side of the level)."""
    return Fraction(repr(float(q)))


# --- locating the targets ---------------------------------------------------------------------


class MixturePlan(NamedTuple):
    """The radix selection of a mixture between passes (host side). M members, D dimensions,
    T targets per dimension (union: each level's floor and next ranks; weighted: one per level)."""

    scale: tuple  # D tuples of M Python ints: what one counted value of member m adds to S
    thresholds: np.ndarray  # object [D, T] Python ints: the target is the first key with S >= it
    prefixes: np.ndarray  # uint64 [D, T]: key bits fixed so far
    below: np.ndarray  # int64 [M, D, T]: member m's values below the prefix's key range
    inside: np.ndarray  # int64 [M, D, T]: member m's values inside it
    prefix_bits: int
    key_bits: int
    top: tuple = ()  # D Python ints: S at the largest key (every value counted)


def start_plan(
    counts: np.ndarray, levels: np.ndarray, key_bits: int, weights: tuple[Fraction, ...] | None
) -> tuple[MixturePlan, qt.Targets | None]:
    """The plan before any digit is known, from each member's counted values per dimension
    (`counts` [M, D]); and the union's interpolation targets (None for a weighted mixture)."""
    counts = np.asarray(counts, np.int64)
    members, dims = counts.shape
    targets = None
    if weights is None:
        targets = qt.linear_targets(counts.sum(axis=0), levels)
        ranks = np.concatenate([targets.previous, targets.next], axis=1)
        thresholds = np.array([[int(r) + 1 for r in row] for row in ranks], dtype=object)
        scale = tuple((1,) * members for _ in range(dims))
    else:
        exact = [exact_level(q) for q in levels]
        thresholds = np.empty((dims, len(exact)), dtype=object)
        scales = []
        for d in range(dims):
            present = [m for m in range(members) if counts[m, d] > 0]
            total = sum(weights[m] for m in present) or Fraction(1)
            share = [
                weights[m] / (total * int(counts[m, d])) if m in present else Fraction(0)
                for m in range(members)
            ]
            common = math.lcm(*(f.denominator for f in share + exact))
            scales.append(tuple(int(f * common) for f in share))
            thresholds[d] = [max(int(q * common), 1) for q in exact]  # q = 0: the minimum
        scale = tuple(scales)
    shape = (dims, thresholds.shape[1])
    inside = np.broadcast_to(counts[:, :, None], (members, *shape)).copy()
    top = tuple(
        sum(s * int(n) for s, n in zip(scale[d], counts[:, d], strict=True)) for d in range(dims)
    )
    return (
        MixturePlan(
            scale,
            thresholds,
            np.zeros(shape, np.uint64),
            np.zeros((members, *shape), np.int64),
            inside,
            0,
            key_bits,
            top,
        ),
        targets,
    )


def _weighted_sum(parts: list[np.ndarray], scale: tuple) -> np.ndarray:
    """sum_m scale[m] * parts[m] (non-decreasing int64 arrays): int64 where the total fits,
    else Python integers (an object array, which `np.searchsorted` compares exactly)."""
    peak = sum(s * int(p[-1]) for s, p in zip(scale, parts, strict=True)) if len(parts[0]) else 0
    if peak < SAFE:
        total = np.zeros(len(parts[0]), np.int64)
        for s, p in zip(scale, parts, strict=True):
            if s:
                total += np.int64(s) * p
        return total
    total = np.zeros(len(parts[0]), dtype=object)
    for s, p in zip(scale, parts, strict=True):
        if s:
            total = total + np.asarray(p, dtype=object) * s
    return total


def _changed() -> Exception:

    return DataError(
        "the data changed between passes (a value range held a different number of values when"
        " read again); exact quantiles need data that stays the same while they are computed"
    )


def advance(
    plan: MixturePlan, member_counts: list[np.ndarray], group: np.ndarray, digit_bits: int
) -> MixturePlan:
    """Fix the next digit of every target from each member's histograms [D, U, 2**digit_bits]
    of the values inside the targets' prefixes (group[d, t]: the histogram of target t)."""
    below, inside = plan.below.copy(), plan.inside.copy()
    digit = np.zeros(plan.prefixes.shape, np.int64)
    for d in range(plan.prefixes.shape[0]):
        if not plan.inside[:, d].any():  # no values in this dimension: nothing to locate
            continue
        scale = plan.scale[d]
        for u in np.unique(group[d]):
            cumulative = [np.cumsum(c[d, u], dtype=np.int64) for c in member_counts]
            combined = _weighted_sum(cumulative, scale)
            for t in np.flatnonzero(group[d] == u):
                if any(int(c[-1]) != int(plan.inside[m, d, t]) for m, c in enumerate(cumulative)):
                    raise _changed()
                base = sum(s * int(b) for s, b in zip(scale, plan.below[:, d, t], strict=True))
                need = int(plan.thresholds[d, t]) - base
                k = int(np.searchsorted(combined, need, side="left"))
                if need <= 0 or k >= len(combined):
                    raise _changed()
                digit[d, t] = k
                for m, c in enumerate(cumulative):
                    before = int(c[k - 1]) if k else 0
                    below[m, d, t] += before
                    inside[m, d, t] = int(c[k]) - before
    prefixes = (plan.prefixes << np.uint64(digit_bits)) | digit.astype(np.uint64)
    return plan._replace(
        prefixes=prefixes, below=below, inside=inside, prefix_bits=plan.prefix_bits + digit_bits
    )


def view(plan: MixturePlan) -> qt.RadixPlan:
    """The plan as one stream's `RadixPlan` (the members' counts added up), for the steps that
    only read prefixes and presence (`quantiles.skip_common_prefix`, `group_prefixes`,
    `finish_plan`; the engine's `_known`)."""
    return qt.RadixPlan(
        plan.thresholds,
        plan.prefixes,
        plan.below.sum(axis=0),
        plan.inside.sum(axis=0),
        plan.prefix_bits,
        plan.key_bits,
    )


def with_prefixes(plan: MixturePlan, radix: qt.RadixPlan) -> MixturePlan:
    """`plan` with the prefixes a `view` of it was given."""
    return plan._replace(prefixes=radix.prefixes, prefix_bits=radix.prefix_bits)


def finish(plan: MixturePlan, targets: qt.Targets | None) -> np.ndarray:
    """Values [D, Q] once every bit is fixed: the union's numpy interpolation of its floor and
    next order statistics, or a weighted mixture's values themselves (as numpy's inverted_cdf
    takes them: in the data's dtype; NaN where a dimension has no values)."""
    if targets is not None:
        return qt.finish_plan(view(plan), targets)
    if plan.prefix_bits != plan.key_bits:
        raise RuntimeError(f"plan incomplete: {plan.prefix_bits} of {plan.key_bits} bits fixed")
    kind = np.uint64 if plan.key_bits == 64 else np.uint32
    values = keys_to_values(plan.prefixes.astype(kind))
    present = plan.inside.sum(axis=0) > 0
    if present.all():
        return values
    return np.where(present, values, np.nan)


# --- pass 1's windows -------------------------------------------------------------------------


def resolve_windows(
    plan: MixturePlan,
    member_windows: list,
    member_counts: list[np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """The keys of the targets that the members' windows (`stats.windows`, one per level) hold
    together: (keys [D, T] uint64, covered [D, T] bool). `plan` has pass 1's digits (each target's
    bucket, and each member's count below and inside it); `member_counts` are the members' settled
    pass-1 histograms [D, 1, K] (they count what lies below a window).

    Inside a target's bucket member m knows its cumulative count c_m(k) exactly where its window
    holds every value of the bucket up to k: from the bucket's start where none of its bucket
    values lie under the window (else from the window's lo) to the bucket's end where none lie
    above it (else to hi). Inside the intersection I of those ranges (members without values in
    the bucket add a constant) every value is a window entry, so S is known there: the target is
    covered when S(just below I) < tau <= S(top of I), and its key is the first entry in I with
    S >= tau. Only entries inside the bucket are sorted (a tail bucket holds few values)."""
    dims, targets = plan.prefixes.shape
    found = np.zeros((dims, targets), np.uint64)
    covered = np.zeros((dims, targets), bool)
    if any(w is None for w in member_windows):
        return found, covered
    levels = len(member_windows[0].levels)
    width = plan.key_bits - plan.prefix_bits
    for d in range(dims):
        if not plan.inside[:, d].any():
            covered[d] = True  # no values: no quantiles
            continue
        scale, small = plan.scale[d], plan.top[d] < SAFE  # int64 sums, else Python integers
        for t in range(targets):
            u = t % levels  # `start_plan` lists every level's targets, then again (union)
            b_lo = int(plan.prefixes[d, t]) << width
            b_hi = b_lo | ((1 << width) - 1)
            start, stop, parts = b_lo, b_hi, []
            for m, w in enumerate(member_windows):
                below_plan, inside_plan = int(plan.below[m, d, t]), int(plan.inside[m, d, t])
                if not inside_plan:
                    continue  # a constant below_plan across the bucket
                shift = win.bin_shift(w, member_counts[m])
                lo, hi = int(w.lo[d, u]), int(w.hi[d, u])
                below = int(member_counts[m][d, 0, : lo >> shift].sum()) + int(w.partial[d, u])
                fill = int(w.fill[d, u])
                keys, weights = w.keys[d, u, :fill], w.weights[d, u, :fill]
                inside = int(weights.sum())
                if below > below_plan:  # some of its bucket values lie under the window
                    start = max(start, lo)
                if below_plan + inside_plan > below + inside:  # some lie above it
                    stop = min(stop, hi)
                parts.append((m, below, keys, weights))
            if start > stop:
                continue
            before = sum(s * int(b) for s, b in zip(scale, plan.below[:, d, t], strict=True))
            keys_in, weights_in = [], []
            for m, below, keys, weights in parts:
                before += scale[m] * (
                    below + int(weights[keys < start].sum()) - int(plan.below[m, d, t])
                )
                kept = (keys >= start) & (keys <= stop)
                keys_in.append(keys[kept])
                held = weights[kept] if small else weights[kept].astype(object)
                weights_in.append(held * scale[m])
            keys_in = np.concatenate(keys_in)
            if not len(keys_in):
                continue
            order = np.argsort(keys_in, kind="stable")
            cumulative = np.cumsum(np.concatenate(weights_in)[order]) + before
            tau = int(plan.thresholds[d, t])
            if before < tau <= cumulative[-1]:  # else the target lies outside I
                found[d, t] = keys_in[order[int(np.searchsorted(cumulative, tau, side="left"))]]
                covered[d, t] = True
    return found, covered


# --- moments ----------------------------------------------------------------------------------


def weighted_moments(
    counts: np.ndarray, sums: list[Sums], center: np.ndarray, weights: tuple[Fraction, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population std [D] of a weighted mixture, from each member's count [M, D] and
    sums about the common `center`: mean = c + sum_m p_m d_m, var = sum_m p_m (v_m + (d_m -
    d)^2), with p_m = w_m / W, d_m and v_m member m's mean offset and variance (within plus
    between: no cancellation when the members lie far apart). float64, members in order."""
    counts = np.asarray(counts, np.int64)
    members, dims = counts.shape
    share = np.zeros((members, dims))
    for d in range(dims):
        present = [m for m in range(members) if counts[m, d] > 0]
        total = sum(weights[m] for m in present)
        for m in present:
            share[m, d] = float(weights[m] / total)
    n = np.maximum(counts, 1).astype(np.float64)
    s1 = np.stack([np.asarray(s.s1, np.float64) for s in sums])
    s2 = np.stack([np.asarray(s.s2, np.float64) for s in sums])
    offset = s1 / n
    within = np.maximum(s2 - s1 * s1 / n, 0.0) / n
    mean_offset = np.zeros(dims)
    for m in range(members):
        mean_offset = mean_offset + share[m] * offset[m]
    variance = np.zeros(dims)
    for m in range(members):
        variance = variance + share[m] * (within[m] + (offset[m] - mean_offset) ** 2)
    present = counts.sum(axis=0) > 0
    mean = np.asarray(center, np.float32).astype(np.float64) + mean_offset
    return np.where(present, mean, np.nan), np.sqrt(np.where(present, variance, np.nan))


def display_counts(counts: list[np.ndarray], counted: np.ndarray, weights) -> np.ndarray:
    """A histogram to draw (`--plot`): the members' pass-1 counts added up (union), or weighted
    by w_m / (W N_m) and scaled to the frames counted (int64: bars need relative heights only)."""
    if weights is None:
        return sum(counts[1:], counts[0].astype(np.int64))
    counted = np.asarray(counted, np.float64)
    members, dims = counted.shape
    out = np.zeros(counts[0].shape, np.float64)
    for d in range(dims):
        present = [m for m in range(members) if counted[m, d] > 0]
        total = float(sum(weights[m] for m in present) or 1)
        frames = counted[:, d].sum()
        for m in present:
            out[d] += counts[m][d] * (float(weights[m]) / total / counted[m, d] * frames)
    return np.rint(out).astype(np.int64)
