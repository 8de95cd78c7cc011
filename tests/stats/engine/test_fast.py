"""Fast mode: one pass, and its rank error is what it says (<= 1e-3 on continuous data)."""

import numpy as np
import pytest

from accelkit.stats.engine.driver import compute_stats

LEVELS = [0.01, 0.1, 0.5, 0.9, 0.99]


def rank_error(sorted_values: np.ndarray, estimate: float, q: float) -> float:
    """Distance from q to the interval of ranks [#x < v, #x <= v] / n that the estimate occupies."""
    n = len(sorted_values)
    lo = np.searchsorted(sorted_values, estimate, side="left") / n
    hi = np.searchsorted(sorted_values, estimate, side="right") / n
    return 0.0 if lo <= q <= hi else min(abs(q - lo), abs(q - hi))


@pytest.mark.parametrize(
    "name",
    [
        "gaussian",
        "uniform01",
        "offset_uniform",
        "narrow_far_from_zero",
        "lognormal",
        "drifting",
        "student_t3",
    ],
)
def test_fast_mode_rank_error_at_most_1e3_and_within_its_bound(rng, name):
    n = 200_000
    column = {
        "gaussian": rng.standard_normal(n),
        "uniform01": rng.random(n),
        "offset_uniform": 1000 + rng.random(n),
        "narrow_far_from_zero": 3 + 0.05 * rng.standard_normal(n),
        "lognormal": np.exp(2 * rng.standard_normal(n)),
        "drifting": np.linspace(-5, 5, n) + 0.1 * rng.standard_normal(n),
        "student_t3": rng.standard_t(3, n),
    }[name]
    x = column.astype(np.float32)[:, None]
    result = compute_stats(
        [{"x": x[i : i + 50_000]} for i in range(0, n, 50_000)], quantiles=LEVELS, fast=True
    )
    assert result.summary.passes == 1
    stats = result.stats["x"]
    ordered = np.sort(x[:, 0])
    for q in LEVELS:
        err = rank_error(ordered, stats.quantiles[q][0], q)
        assert err <= 1e-3, f"{name} q={q}: rank error {err:.2e}"
        assert err <= stats.rank_error_bound[q][0] + 1.0 / n, (
            f"{name} q={q}: error {err:.2e} above reported bound"
        )
        # the reported bound is the bucket's whole share, looser than the error itself
        assert stats.rank_error_bound[q][0] <= 1.5e-3, f"{name} q={q}: bound"


def test_fast_mode_returns_point_masses_at_the_range_ends_exactly(rng):
    gripper = (rng.random(100_000) > 0.4).astype(np.float32)
    stats = compute_stats([{"x": gripper[:, None]}], quantiles=[0.01, 0.99], fast=True).stats["x"]
    assert stats.quantiles[0.01][0] == 0.0 and stats.quantiles[0.99][0] == 1.0
    assert stats.rank_error_bound[0.01][0] == 0.0


def test_fast_mode_moments_are_exact_as_in_exact_mode(rng):
    x = (1e4 + rng.standard_normal((100_000, 2))).astype(np.float32)
    fast = compute_stats([{"x": x}], fast=True).stats["x"]
    np.testing.assert_allclose(fast.mean, x.astype(np.float64).mean(0), rtol=1e-12)
    np.testing.assert_allclose(fast.std, x.astype(np.float64).std(0), rtol=1e-9)
    np.testing.assert_array_equal(fast.min, x.min(0))


def test_fast_mode_point_mass_at_the_center_is_exact(rng):
    # the first chunk is all zeros, so the center is 0 and half the data sits exactly on it
    gripper = np.concatenate([np.zeros(10_000), (rng.random(90_000) > 0.5)]).astype(np.float32)[
        :, None
    ]
    stats = compute_stats(
        [{"x": gripper[:10_000]}, {"x": gripper[10_000:]}], quantiles=[0.01, 0.3, 0.99], fast=True
    ).stats["x"]
    assert (
        stats.quantiles[0.01][0] == 0.0
        and stats.quantiles[0.3][0] == 0.0
        and stats.quantiles[0.99][0] == 1.0
    )
    assert max(float(b[0]) for b in stats.rank_error_bound.values()) == 0.0


def test_fast_mode_extremes_are_min_and_max_with_bound_zero(rng):
    x = rng.standard_normal((20_000, 2)).astype(np.float32)
    stats = compute_stats([{"x": x}], quantiles=[0.0, 0.5, 1.0], fast=True).stats["x"]
    np.testing.assert_array_equal(stats.quantiles[0.0], x.min(axis=0))
    np.testing.assert_array_equal(stats.quantiles[1.0], x.max(axis=0))
    assert np.all(stats.rank_error_bound[0.0] == 0) and np.all(stats.rank_error_bound[1.0] == 0)


def test_fast_mode_does_not_claim_exactness_for_tiny_values_around_zero(rng):
    # Denormal offsets from a center at 0 flush to 0 in XLA's CPU arithmetic; they must not be
    # mistaken for the point mass at the center, and the bound must cover the true rank error.
    x = np.concatenate([np.zeros(1000), rng.standard_normal(1000) * 1e-40]).astype(np.float32)[
        :, None
    ]
    levels = [0.1, 0.25, 0.5, 0.75, 0.9]
    stats = compute_stats([{"x": x}], quantiles=levels, fast=True).stats["x"]
    ordered = np.sort(x[:, 0])
    for q in levels:
        assert rank_error(ordered, stats.quantiles[q][0], q) <= stats.rank_error_bound[q][
            0
        ] + 1 / len(x)
    assert stats.rank_error_bound[0.1][0] > 0 and stats.rank_error_bound[0.9][0] > 0
    assert stats.quantiles[0.5][0] == 0.0
