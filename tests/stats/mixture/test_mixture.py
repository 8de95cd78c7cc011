"""Exact statistics of dataset mixtures (`accelkit.stats.mixture.engine.compute_mixture_stats`), against
independent references: numpy on the concatenated frames (the union), numpy on frames repeated by
their weight and `numpy.quantile(..., weights=..., method="inverted_cdf")` (weighted mixtures),
and a brute-force reference in exact rational arithmetic (Python's Fraction) that decides the
boundary cases numpy's float64 cumulative sums get wrong. Adversarial data: ties across members,
point masses at quantile boundaries, members of one frame, very unequal sizes, int64 columns."""

from fractions import Fraction

import numpy as np
import pytest

from accelkit.errors import ConfigError, DataError
from accelkit.stats.core.weights import parse_weight
from accelkit.stats.engine.driver import compute_stats
from accelkit.stats.kernel import windows
from accelkit.stats.mixture import ranks as mixture
from accelkit.stats.mixture.engine import compute_mixture_stats
from tests.support.stats import assert_exact_where_numpy_is, exact_reference, numpy_weighted

LEVELS = [0.0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0]
TAILS = [0.0, 0.01, 0.02, 0.99, 1.0]


def as_batches(x: np.ndarray, split: int = 997) -> list[dict]:
    return [{"x": x[i : i + split]} for i in range(0, len(x), split)]


def quantiles_of(stats, levels) -> np.ndarray:
    return np.stack([stats.quantiles[float(q)] for q in levels])


def adversarial_members(rng, kind: str) -> list[np.ndarray]:
    if kind == "ties":  # few distinct values shared by every member: ties across members
        sizes = (400, 250, 100)
        return [rng.integers(-3, 4, size=(n, 3)).astype(np.float32) for n in sizes]
    if kind == "one-frame":  # members of a single frame beside a large one
        big = rng.standard_normal((3000, 2)).astype(np.float32)
        return [big, np.array([[7.5, -2.0]], np.float32), np.array([[0.0, 0.0]], np.float32)]
    if kind == "unequal":  # 20,000 frames and 3, far apart and overlapping
        a = rng.standard_normal((20_000, 2)).astype(np.float32)
        return [a, np.array([[100.0, 0.5], [100.0, 0.5], [-1e30, 1e-40]], np.float32)]
    if kind == "boundaries":  # point masses whose cumulative weight lands on the levels
        a = np.repeat(np.arange(10, dtype=np.float32), 10)[:, None]  # 100 frames
        b = np.repeat(np.array([2.0, 5.0], np.float32), 50)[:, None]
        return [a, b]
    if kind == "int64":  # above float32's 2**24: int64 keys
        base = 16_777_217
        return [
            (base + rng.integers(0, 50, size=(700, 2))).astype(np.int64),
            (base + rng.integers(25, 80, size=(300, 2))).astype(np.int64),
        ]
    raise ValueError(kind)


KINDS = ["ties", "one-frame", "unequal", "boundaries", "int64"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("levels", [LEVELS, TAILS], ids=["lerobot-like", "tails"])
def test_union_equals_numpy_on_the_concatenated_frames(rng, kind, levels):
    parts = adversarial_members(rng, kind)
    result = compute_mixture_stats([as_batches(p) for p in parts], quantiles=levels)
    stats = result.stats["x"]
    whole = np.concatenate(parts)
    np.testing.assert_array_equal(quantiles_of(stats, levels), np.quantile(whole, levels, axis=0))
    np.testing.assert_array_equal(stats.count, np.full(whole.shape[1], len(whole)))
    np.testing.assert_array_equal(stats.min, whole.min(axis=0))
    np.testing.assert_array_equal(stats.max, whole.max(axis=0))
    ref = whole.astype(np.float64)
    scale = np.maximum(np.abs(ref.mean(0)), ref.std(0))
    np.testing.assert_allclose(stats.mean, ref.mean(0), rtol=1e-12, atol=1e-12 * scale.max())
    np.testing.assert_allclose(stats.std, ref.std(0), rtol=1e-9, atol=1e-12 * scale.max())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("levels", [LEVELS, TAILS], ids=["lerobot-like", "tails"])
def test_weighted_mixture_equals_numpy_on_frames_repeated_by_weight(rng, kind, levels):
    """Weights w_m = k_m N_m: every frame of member m weighs k_m, as if repeated k_m times; numpy's
    float64 cumulative sums are then exact, so its inverted_cdf is the definition itself."""
    parts = adversarial_members(rng, kind)
    repeats = [3, 1, 2][: len(parts)]
    weights = [k * len(p) for k, p in zip(repeats, parts, strict=True)]
    result = compute_mixture_stats(
        [as_batches(p) for p in parts], quantiles=levels, weights=weights
    )
    stats = result.stats["x"]
    repeated = np.concatenate(
        [np.repeat(p, k, axis=0) for k, p in zip(repeats, parts, strict=True)]
    )
    got = quantiles_of(stats, levels)
    np.testing.assert_array_equal(got, np.quantile(repeated, levels, axis=0, method="inverted_cdf"))
    np.testing.assert_array_equal(
        got, numpy_weighted(parts, [Fraction(w) for w in weights], levels)
    )
    assert got.dtype == parts[0].dtype  # the values themselves, as numpy's inverted_cdf gives
    ref = repeated.astype(np.float64)
    scale = np.maximum(np.abs(ref.mean(0)), ref.std(0))
    np.testing.assert_allclose(stats.mean, ref.mean(0), rtol=1e-12, atol=1e-12 * scale.max())
    np.testing.assert_allclose(stats.std, ref.std(0), rtol=1e-9, atol=1e-12 * scale.max())
    np.testing.assert_array_equal(stats.min, repeated.min(axis=0))
    np.testing.assert_array_equal(stats.max, repeated.max(axis=0))
    np.testing.assert_array_equal(stats.count, np.full(ref.shape[1], sum(map(len, parts))))


@pytest.mark.parametrize(
    "weights", [["0.7", "0.2", "0.1"], ["1/3", "1/3", "1/3"], [5, 0.25, "2e-3"]]
)
def test_decimal_weights_equal_numpy_and_the_exact_definition(rng, weights):
    parts = [
        rng.standard_normal((1200, 3)).astype(np.float32),
        (2 + rng.standard_normal((333, 3))).astype(np.float32),
        np.round(rng.standard_normal((57, 3)) * 4).astype(np.float32) / 4,
    ]
    result = compute_mixture_stats(
        [as_batches(p) for p in parts], quantiles=LEVELS, weights=weights
    )
    stats = result.stats["x"]
    exact = [parse_weight(w, "w") for w in weights]
    got = quantiles_of(stats, LEVELS)
    np.testing.assert_array_equal(got, exact_reference(parts, exact, LEVELS))
    np.testing.assert_array_equal(got, numpy_weighted(parts, exact, LEVELS))
    values = np.concatenate(parts).astype(np.float64)
    w = np.concatenate(
        [np.full(len(p), float(e) / len(p)) for e, p in zip(exact, parts, strict=True)]
    )
    mean = np.average(values, axis=0, weights=w)
    std = np.sqrt(np.average((values - mean) ** 2, axis=0, weights=w))
    np.testing.assert_allclose(stats.mean, mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(stats.std, std, rtol=1e-10)


def test_boundary_cases_are_decided_exactly_where_numpy_rounds(rng):
    """Small mixtures of a few values with rational weights: F(x) lands exactly on a level
    often. Ours always equals the rational definition; numpy's float64 cumulative sums cross some
    of those boundaries on the wrong side (the cases exist: the test would prove nothing else)."""
    numpy_differs = 0
    for _ in range(300):
        sizes = rng.integers(1, 12, size=rng.integers(2, 4))
        weights = [Fraction(int(rng.integers(1, 10)), int(rng.integers(1, 10))) for _ in sizes]
        parts = [rng.integers(0, 6, size=(int(n), 1)).astype(np.float32) for n in sizes]
        stats = compute_mixture_stats(
            [[{"x": p}] for p in parts], quantiles=LEVELS, weights=weights
        ).stats["x"]
        exact = exact_reference(parts, weights, LEVELS)
        np.testing.assert_array_equal(quantiles_of(stats, LEVELS), exact)
        numpy_differs += not np.array_equal(numpy_weighted(parts, weights, LEVELS), exact)
    assert numpy_differs > 0


def test_scales_beyond_int64_stay_exact(rng):
    """Members of prime sizes and weights of nine decimals: the least common multiple that makes
    every scale an integer passes 2**62, so the sums run on Python integers; the answer is still
    the definition's."""
    levels = [0.0, 0.01, 0.5, 0.99, 1.0]
    primes = (101, 103, 107, 109)
    parts = [rng.integers(0, 4, size=(n, 2)).astype(np.float32) for n in primes]
    weights = ["0.123456789", "0.987654321", "1/3", "2/7"]
    exact = [parse_weight(w, "w") for w in weights]
    counts = np.array([[n, n] for n in primes])
    plan, _ = mixture.start_plan(counts, np.array(levels), 32, tuple(exact))
    assert int(plan.thresholds.max()) > mixture.SAFE
    stats = compute_mixture_stats(
        [[{"x": p}] for p in parts], quantiles=levels, weights=weights
    ).stats["x"]
    np.testing.assert_array_equal(
        quantiles_of(stats, levels), exact_reference(parts, exact, levels)
    )


@pytest.mark.parametrize("weights", [None, ["0.6", "0.4"]], ids=["union", "weighted"])
def test_windows_and_radix_passes_give_the_same_bits(rng, weights, monkeypatch):
    """Pass 1's windows, resolved across members, against the radix passes alone (windows off):
    the same quantiles; similar members are found in pass 1; members far apart too (a member
    with nothing below or above its window knows its count there)."""
    near = [
        rng.standard_normal((60_000, 3)).astype(np.float32),
        (0.2 + rng.standard_normal((20_000, 3))).astype(np.float32),
    ]
    apart = [near[0], (50 + rng.standard_normal((20_000, 3))).astype(np.float32)]
    for parts in (near, apart):
        members = [as_batches(p, 9_999) for p in parts]
        with_windows = compute_mixture_stats(members, quantiles=TAILS, weights=weights)
        assert with_windows.summary.passes == 1
        with monkeypatch.context() as patch:
            patch.setattr(windows, "worth_trying", lambda levels: False)
            passes = compute_mixture_stats(members, quantiles=TAILS, weights=weights)
        assert passes.summary.passes == 2
        for q in TAILS:
            a, b = with_windows.stats["x"].quantiles[q], passes.stats["x"].quantiles[q]
            assert a.tobytes() == b.tobytes(), q


@pytest.fixture
def small_windows(monkeypatch):
    """Windows of 64 entries: they narrow after a few dozen values, so resolving across members
    meets every case (covered, missed, a member with nothing below or above) on small data."""
    monkeypatch.setattr(windows, "MAX_CAPACITY", 64)
    monkeypatch.setattr(windows, "MIN_CAPACITY", 64)


@pytest.mark.parametrize("weights", [None, "repeats"], ids=["union", "weighted"])
def test_small_windows_resolve_or_fall_back_to_the_passes(rng, small_windows, weights):
    """Adversarial members with windows of 64 entries: whether the windows hold a target or the
    radix passes find it, the result is numpy's; one member drifts below its narrowed window
    after 3,000 values (the adversary of tests/stats/kernel/test_windows.py), so the passes run."""
    drift = np.concatenate([rng.standard_normal((6000, 1)), -10 - rng.random((2000, 1))])
    cases = [adversarial_members(rng, kind) for kind in KINDS]
    cases.append([drift.astype(np.float32), rng.standard_normal((500, 1)).astype(np.float32)])
    passes = []
    for parts in cases:
        repeats = [2, 1, 3][: len(parts)]
        w = None if weights is None else [k * len(p) for k, p in zip(repeats, parts, strict=True)]
        result = compute_mixture_stats(
            [as_batches(p, 500) for p in parts], quantiles=TAILS, weights=w
        )
        passes.append(result.summary.passes)
        if weights is None:
            expected = np.quantile(np.concatenate(parts), TAILS, axis=0)
        else:
            repeated = np.concatenate(
                [np.repeat(p, k, axis=0) for k, p in zip(repeats, parts, strict=True)]
            )
            expected = np.quantile(repeated, TAILS, axis=0, method="inverted_cdf")
        np.testing.assert_array_equal(quantiles_of(result.stats["x"], TAILS), expected)
    assert passes[-1] > 1 and min(passes) == 1, passes


def test_members_overlapping_in_the_tails_with_small_windows(rng, small_windows):
    """A member of another spread and offset overlaps the other's tails: each member's window
    narrows around its own rank, so a target often lies below one member's window (whose count
    there is unknown) or in windows of both; either way the result is the definition's."""
    for _ in range(12):
        a = rng.standard_normal((int(rng.integers(200, 5000)), 1)).astype(np.float32)
        spread, offset = rng.uniform(0.1, 2), rng.uniform(-4, 4)
        b = (rng.standard_normal((int(rng.integers(20, 2000)), 1)) * spread + offset).astype(
            np.float32
        )
        members = [as_batches(a, 300), as_batches(b, 300)]
        union = compute_mixture_stats(members, quantiles=TAILS).stats["x"]
        expected = np.quantile(np.concatenate([a, b]), TAILS, axis=0)
        np.testing.assert_array_equal(quantiles_of(union, TAILS), expected)
        weights = [Fraction(1), Fraction(1)]
        weighted = compute_mixture_stats(members, quantiles=TAILS, weights=weights).stats["x"]
        assert_exact_where_numpy_is(quantiles_of(weighted, TAILS), [a, b], weights, TAILS)


def test_a_cluster_at_another_members_window_edge(small_windows):
    """A small member clustered at a large member's tail level: the target's bucket holds values
    of the large member under (or over) its narrowed window and the cluster's, so the window
    alone does not know the large member's count there; resolving must see it (or leave the
    target to the passes). Seeds where a resolver that ignores this returns wrong keys."""
    for seed in range(60):
        rng = np.random.default_rng(seed)
        a = rng.standard_normal((int(rng.integers(500, 6000)), 1)).astype(np.float32)
        level = np.quantile(a, rng.choice([0.01, 0.02, 0.99]))
        spread, offset = rng.uniform(0.001, 0.05), rng.uniform(-0.05, 0.05)
        size = int(rng.integers(5, 300))
        b = (level + offset + rng.standard_normal((size, 1)) * spread).astype(np.float32)
        members = [as_batches(a, 250), [{"x": b}]]
        union = compute_mixture_stats(members, quantiles=TAILS).stats["x"]
        expected = np.quantile(np.concatenate([a, b]), TAILS, axis=0)
        np.testing.assert_array_equal(quantiles_of(union, TAILS), expected, err_msg=str(seed))
        weights = [Fraction(1), Fraction(1)]
        weighted = compute_mixture_stats(members, quantiles=TAILS, weights=weights).stats["x"]
        assert_exact_where_numpy_is(quantiles_of(weighted, TAILS), [a, b], weights, TAILS)


@pytest.mark.parametrize("weights", [None, ["0.6", "0.4"]], ids=["union", "weighted"])
def test_any_device_count_and_batch_size_give_identical_bits(rng, eight_devices, weights):
    """The XLA kernel on 1, 2 and 8 devices and the host loop, at several batch sizes."""
    parts = [
        np.stack([1e4 + 0.01 * rng.standard_normal(9_001), rng.standard_cauchy(9_001)], 1),
        np.stack([1e4 + 0.02 * rng.standard_normal(3_003), rng.standard_normal(3_003)], 1),
    ]
    members = [as_batches(p.astype(np.float32), 1_234) for p in parts]
    runs = {}
    for devices in (None, eight_devices[:1], eight_devices[:2], eight_devices):
        for batch in (256, 3_000):
            stats = compute_mixture_stats(
                members, quantiles=LEVELS, weights=weights, devices=devices, batch_size=batch
            ).stats["x"]
            runs[(len(devices or [0]), devices is None, batch)] = b"".join(
                a.tobytes()
                for a in (stats.mean, stats.std, stats.min, stats.max, quantiles_of(stats, LEVELS))
            )
    assert len(set(runs.values())) == 1, runs.keys()


def test_fast_mode_sketches_the_union_and_refuses_weights(rng):
    parts = [
        rng.standard_normal((30_000, 2)).astype(np.float32),
        (1 + rng.standard_normal((10_000, 2))).astype(np.float32),
    ]
    stats = compute_mixture_stats(
        [as_batches(p) for p in parts], quantiles=[0.01, 0.5, 0.99], fast=True
    ).stats["x"]
    whole = np.sort(np.concatenate(parts), axis=0)
    for q in (0.01, 0.5, 0.99):
        rank = np.array(
            [np.searchsorted(whole[:, d], stats.quantiles[q][d]) for d in range(2)]
        ) / len(whole)
        assert np.all(np.abs(rank - q) <= stats.rank_error_bound[q] + 1e-4)
        assert np.all(stats.rank_error_bound[q] < 2e-3)
    with pytest.raises(ConfigError, match="drop --fast or --weights"):
        compute_mixture_stats([as_batches(p) for p in parts], fast=True, weights=[1, 2])


def test_members_that_disagree_are_one_line_naming_both(rng):
    a = [{"x": np.zeros((10, 3), np.float32)}]
    b = [{"x": np.zeros((10, 4), np.float32)}]
    with pytest.raises(
        DataError,
        match=r"'x' holds 3 values per row in dataset 1 .* but 4 values per row in dataset 2",
    ) as info:
        compute_mixture_stats([a, b])
    assert "\n" not in str(info.value)
    c = [{"x": np.zeros((10, 3), np.int64) + 2**30}]
    with pytest.raises(
        DataError,
        match=r"3 float32 values per row in dataset 1 .* 3 int64 values per row in dataset 2",
    ):
        compute_mixture_stats([a, c])
    d = [{"y": np.zeros((10, 3), np.float32)}]
    with pytest.raises(DataError, match="same output keys"):
        compute_mixture_stats([a, d])


@pytest.mark.parametrize(
    "weights, message",
    [
        ([1], "1 value"),
        ([1, 0], "not positive"),
        ([1, -2], "not positive"),
        (["x", 1], "not a number"),
        ([float("nan"), 1], "not a number"),
        ([True, 1], "not a number"),
    ],
)
def test_bad_weights_are_refused(weights, message):
    members = [[{"x": np.ones((3, 1), np.float32)}]] * 2
    with pytest.raises(ConfigError, match=message):
        compute_mixture_stats(members, weights=weights)


@pytest.mark.parametrize("weights", [None, ["0.25", "0.75"]], ids=["union", "weighted"])
def test_a_dimension_empty_in_one_member_is_the_others(rng, weights, caplog):
    """Under --skip-nonfinite: dimension 1 is NaN in every row of the first member (the mixture's
    values there are the second's: its weight renormalized), dimension 2 in both (NaN, warned)."""
    a = rng.standard_normal((800, 3)).astype(np.float32)
    b = (3 + rng.standard_normal((300, 3))).astype(np.float32)
    a[:, 1:] = np.nan
    b[:, 2] = np.nan
    b[::7, 0] = np.inf  # skipped where it is
    stats = compute_mixture_stats(
        [as_batches(a), as_batches(b)], quantiles=LEVELS, weights=weights, skip_nonfinite=True
    ).stats["x"]
    finite = [a[:, :1], b[np.isfinite(b[:, 0]), :1]]
    if weights is None:
        expected = np.quantile(np.concatenate(finite), LEVELS, axis=0)[:, 0]
    else:
        expected = exact_reference(finite, [Fraction(1, 4), Fraction(3, 4)], LEVELS)[:, 0]
    np.testing.assert_array_equal(quantiles_of(stats, LEVELS)[:, 0], expected)
    method = "linear" if weights is None else "inverted_cdf"
    only_b = np.quantile(b[:, 1], LEVELS, method=method)
    np.testing.assert_array_equal(quantiles_of(stats, LEVELS)[:, 1], only_b)
    assert np.isnan(quantiles_of(stats, LEVELS)[:, 2]).all() and np.isnan(stats.mean[2])
    assert stats.count.tolist() == [800 + len(finite[1]), 300, 0]
    assert stats.mean[1] == pytest.approx(b[:, 1].astype(np.float64).mean(), rel=1e-12)
    assert "dimensions [2] hold no finite values" in caplog.text


def test_one_member_union_is_the_single_run(rng):
    x = rng.standard_normal((5_000, 3)).astype(np.float32)
    one = compute_mixture_stats([as_batches(x)], quantiles=LEVELS).stats["x"]
    single = compute_stats(as_batches(x), quantiles=LEVELS).stats["x"]
    for name in ("count", "mean", "std", "min", "max"):
        assert getattr(one, name).tobytes() == getattr(single, name).tobytes(), name
    np.testing.assert_array_equal(quantiles_of(one, LEVELS), quantiles_of(single, LEVELS))
