"""Independent references for the stats tests: plain numpy float64 over all rows."""

import numpy as np

from accelkit.stats.engine.driver import compute_stats


def numpy_reference(x: np.ndarray, levels) -> dict:
    x = np.asarray(x, np.float32)
    x64 = x.astype(np.float64)
    return {
        "count": np.full(x.shape[1], len(x)),
        "mean": x64.mean(axis=0),
        "std": x64.std(axis=0),
        "min": x.min(axis=0),
        "max": x.max(axis=0),
        "quantiles": np.quantile(x, np.asarray(levels, np.float64), axis=0),
    }


def stats_of(x: np.ndarray, levels, *, split: int | None = None, **kwargs):
    """accelkit's stats of `x` fed as dict batches of `split` rows (one batch by default)."""
    split = split or max(1, len(x))
    batches = [{"x": x[i : i + split]} for i in range(0, len(x), split)]
    return compute_stats(batches, quantiles=levels, **kwargs).stats["x"]


def assert_matches_numpy(stats, x: np.ndarray, levels, rtol: float = 1e-10) -> None:
    ref = numpy_reference(x, levels)
    got = np.stack([stats.quantiles[float(q)] for q in levels])
    np.testing.assert_array_equal(
        got, ref["quantiles"], err_msg="exact quantiles differ from numpy.quantile"
    )
    np.testing.assert_array_equal(stats.count, ref["count"])
    np.testing.assert_array_equal(stats.min, ref["min"])
    np.testing.assert_array_equal(stats.max, ref["max"])
    scale = np.maximum(np.abs(ref["mean"]), ref["std"])
    np.testing.assert_allclose(
        stats.mean, ref["mean"], rtol=rtol, atol=rtol * scale.max(initial=0) + 1e-300
    )
    np.testing.assert_allclose(stats.std, ref["std"], rtol=1e-7, atol=1e-12 * scale.max(initial=0))
