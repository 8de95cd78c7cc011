"""Exact mode's speculative single pass (`stats/kernel/windows.py`): the values kept near each tail
quantile during pass 1 give numpy's order statistics without a second read; where the data moved
after a window narrowed, the radix passes run and the result is still numpy's, bit for bit."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from accelkit.stats.engine.driver import compute_stats
from accelkit.stats.formats.sources import FileReader, open_source
from accelkit.stats.kernel import host as host_passes
from accelkit.stats.kernel import windows
from accelkit.stats.kernel.state import PassSpec, init
from tests.stats.helpers import assert_matches_numpy
from tests.support.stats import adversarial_columns

TAILS = [0.0, 0.001, 0.01, 0.99, 0.999, 1.0]


@pytest.fixture
def small_windows(monkeypatch):
    """Windows of 64 entries: they narrow after a few dozen values, so every path of the
    narrowing (ties, point masses, both ends) runs on small data, and some windows miss."""
    monkeypatch.setattr(windows, "MAX_CAPACITY", 64)
    monkeypatch.setattr(windows, "MIN_CAPACITY", 64)
    monkeypatch.setattr(windows, "GUARANTEED_CAPACITY", 64)


@pytest.fixture
def reads(monkeypatch):
    """The files the run decodes, in order."""
    seen = []
    real = FileReader.read_pieces

    def counting(self, path, *args, **kwargs):
        seen.append(path)
        return real(self, path, *args, **kwargs)

    monkeypatch.setattr(FileReader, "read_pieces", counting)
    return seen


def write_files(folder, x: np.ndarray, files: int) -> None:
    """`x` [N, D] float32 as `files` parquet files of a fixed-size-list column "x"."""
    folder.mkdir()
    for i, part in enumerate(np.array_split(x, files)):
        values = pa.array(part.reshape(-1), pa.float32())
        column = pa.FixedSizeListArray.from_arrays(values, x.shape[1])
        pq.write_table(pa.table({"x": column}), folder / f"part_{i:03d}.parquet")


def test_tail_levels_are_the_decimals_they_are_written_as():
    """1 - 0.98 is 0.020000000000000018 in floats: q02/q98 are tail levels all the same."""
    assert windows.worth_trying([0.02, 0.98]) and windows.worth_trying([0.0, 1.0])
    assert not windows.worth_trying([0.01, 0.021]) and not windows.worth_trying([0.5])


def test_tail_quantiles_of_files_come_from_one_read(tmp_path, rng, reads):
    n = 60_000
    x = np.stack(
        [
            rng.standard_normal(n),
            rng.standard_cauchy(n),
            (rng.random(n) > 0.3).astype(float),  # a gripper: two point masses
            rng.integers(-3, 4, n).astype(float),  # ties
            1e4 + 1e-2 * rng.standard_normal(n),  # one 16-bit bucket holds every value
        ],
        1,
    ).astype(np.float32)
    write_files(tmp_path / "data", x, 12)
    levels = [0.01, 0.99]
    result = compute_stats(open_source(tmp_path / "data", keys={"x": "x"}), quantiles=levels)
    assert result.summary.passes == 1
    assert len(reads) == 12  # each file decoded once, nothing kept for a second pass
    assert_matches_numpy(result.stats["x"], x, levels)


def drifting_columns(rng, n: int) -> np.ndarray:
    """Columns whose tails arrive in an order the data so far does not foretell: the values
    sorted up and down, a mean that drifts over 'episodes', a tail that only comes at the end,
    point masses whose share changes half-way, 1e6 + noise, Student-t tails."""
    ramp = np.linspace(0, 1, n)
    steps = np.repeat(np.arange(max(1, n // 500)), 500)[:n] if n >= 500 else np.zeros(n)
    late = np.where(ramp > 0.9, -10 - rng.random(n), rng.standard_normal(n))
    return np.stack(
        [
            np.sort(rng.standard_normal(n)),
            -np.sort(rng.standard_cauchy(n)),
            -2 + 4 * ramp + 0.1 * rng.standard_normal(n),  # drift over episodes
            np.r_[np.zeros(n // 2), np.ones(n - n // 2)],  # gripper closed, then open
            np.where(ramp < 0.5, 0.25, np.where(rng.random(n) < 0.1, 0.0, 0.25)),
            rng.choice([-1.0, 0.0, 0.5, 2.0], n, p=[0.005, 0.49, 0.5, 0.005]),
            1e6 + np.cumsum(rng.normal(0, 0.05, n)),  # float32 steps of 0.0625
            late,
            0.1 * rng.standard_t(2, n) + steps * 1e-3,
        ],
        1,
    ).astype(np.float32)


@pytest.mark.parametrize("n", [1, 3, 1_000, 50_000])
def test_drift_and_point_masses_come_from_one_read(tmp_path, rng, reads, monkeypatch, n):
    """With the row count known, each tail window keeps every rank its level's value can still
    have (`host_loop.aim`): whatever order the rows come in, one read, numpy's values. (Windows
    of 256 entries where the count is not known: there, these columns miss.)"""
    monkeypatch.setattr(windows, "MAX_CAPACITY", 256)
    monkeypatch.setattr(windows, "MIN_CAPACITY", 256)
    x = drifting_columns(rng, n)
    files = min(n, 7)
    write_files(tmp_path / "data", x, files)
    levels = [0.001, 0.01, 0.99, 0.999]
    result = compute_stats(open_source(tmp_path / "data", keys={"x": "x"}), quantiles=levels)
    assert result.summary.passes == 1
    assert len(reads) == files
    assert_matches_numpy(result.stats["x"], x, levels)


def test_drift_with_small_windows_is_exact(rng, small_windows):
    """Windows too small for the range `aim` would keep: they aim at the rank so far (moved into
    that range), some miss, and the radix passes give numpy's values all the same."""
    x = drifting_columns(rng, 20_000)
    batches = [{"x": x[a : a + 1500]} for a in range(0, len(x), 1500)]
    result = compute_stats(batches, quantiles=TAILS)
    assert result.summary.passes >= 2
    assert_matches_numpy(result.stats["x"], x, TAILS)


def test_a_window_that_misses_falls_back_to_reading_again(tmp_path, rng, reads, small_windows):
    """The adversary: after 3,000 values the q01 window has narrowed around N(0, 1)'s 1 %; then
    2,000 values far below it arrive, so the final q01 lies under the window."""
    x = np.concatenate([rng.standard_normal(6000), -10 - rng.random(2000)])[:, None]
    x = x.astype(np.float32)
    write_files(tmp_path / "data", x, 8)
    levels = [0.01, 0.99]
    result = compute_stats(open_source(tmp_path / "data", keys={"x": "x"}), quantiles=levels)
    assert result.summary.passes == 2
    assert len(reads) == 16  # the files again, for the key whose window missed
    assert_matches_numpy(result.stats["x"], x, levels)


@pytest.mark.parametrize("n", [1, 5, 700, 40_000])
@pytest.mark.parametrize("weighted", [False, True])
def test_small_windows_give_numpys_order_statistics(rng, small_windows, n, weighted):
    """Adversarial columns (ties, point masses, signed zeros, denormals, +-1e30), in batches, with
    windows of 64 entries: whether a window holds a value or the radix passes find it, every
    quantile equals numpy's."""
    from accelkit.stats.types import Column, Stream

    x = np.stack(list(adversarial_columns(rng, n).values()), axis=1).astype(np.float32)
    weight = rng.integers(0, 4, n).astype(np.int32) if weighted else np.ones(n, np.int32)

    class Weighted(Stream):
        def chunks(self):
            for a in range(0, n, 997):
                yield {
                    "x": Column(x[a : a + 997], weight[a : a + 997], np.arange(a, min(n, a + 997)))
                }

    if weighted and weight.sum() == 0:
        return
    got = compute_stats(Weighted(), quantiles=TAILS).stats["x"]
    assert_matches_numpy(got, np.repeat(x, weight, axis=0), TAILS)


def test_integer_columns_with_small_windows(rng, small_windows):
    n = 20_011
    x = np.stack(
        [
            rng.integers(-(2**62), 2**62, n),
            2**40 + rng.integers(-1000, 1000, n),
            rng.integers(-5, 5, n) * 1_000_000_007,
            np.r_[rng.integers(0, 100, n // 2), rng.integers(-(2**50), -(2**49), n - n // 2)],
        ],
        1,
    ).astype(np.int64)
    batches = [{"x": x[a : a + 3001]} for a in range(0, n, 3001)]
    result = compute_stats(batches, quantiles=TAILS).stats["x"]
    expected = np.quantile(x, np.asarray(TAILS), axis=0)
    for i, q in enumerate(TAILS):
        np.testing.assert_array_equal(result.quantiles[q], expected[i])
    np.testing.assert_array_equal(result.min, x.min(0))


def test_speculation_changes_no_bit_of_the_result(rng, monkeypatch):
    """Windows add to pass 1; its moments, extremes and histogram stay the same bits."""
    x = np.concatenate(
        [rng.standard_normal((30_000, 3)), 5 + rng.standard_normal((30_000, 3))]
    ).astype(np.float32)
    batches = [{"x": x[a : a + 7000]} for a in range(0, len(x), 7000)]
    levels = [0.01, 0.99]
    one = compute_stats(batches, quantiles=levels)
    monkeypatch.setattr(windows, "worth_trying", lambda levels: False)
    two = compute_stats(batches, quantiles=levels)
    assert (one.summary.passes, two.summary.passes) == (1, 2)
    a, b = one.stats["x"], two.stats["x"]
    for field in ("count", "mean", "std", "min", "max", "nonfinite"):
        assert getattr(a, field).tobytes() == getattr(b, field).tobytes(), field
    for q in levels:
        assert a.quantiles[q].tobytes() == b.quantiles[q].tobytes()
    for field in ("edges", "counts", "at_min", "at_max", "coarse"):
        assert getattr(a.histogram, field).tobytes() == getattr(b.histogram, field).tobytes()


def test_the_loop_with_windows_counts_what_it_counts_without(rng):
    """Flags ride on the histogram's counts during the pass; settled, the counts, extremes and
    block sums equal the loop's without windows."""
    x = np.concatenate([rng.standard_normal((4096, 4)), np.full((4096, 4), 3.0)]).astype(np.float32)
    x[::7, 1] = np.nan
    weight = rng.integers(0, 3, len(x)).astype(np.int64)
    spec = PassSpec(4, 1, 0, 16, True)
    outs = []
    for near in (None, windows.start([0.01, 0.99], 4, False)):
        state = host_passes.own(init(spec, np.zeros((4, 1)), np.zeros(4, np.float32), near))
        sums = [host_passes.update(state, x[a : a + 1024], weight[a : a + 1024], spec)[1]
                for a in range(0, len(x), 1024)]  # fmt: skip
        if near is not None:
            assert (state.counts >= windows.FLAG).any()  # flagged during the pass
            windows.settled(state.counts)
        outs.append((state, sums))
    (a, sums_a), (b, sums_b) = outs
    np.testing.assert_array_equal(a.counts, b.counts)
    for field in a.extremes._fields:
        np.testing.assert_array_equal(getattr(a.extremes, field), getattr(b.extremes, field))
    for (s1, s2), (t1, t2) in zip(sums_a, sums_b, strict=True):
        assert s1.tobytes() == t1.tobytes() and s2.tobytes() == t2.tobytes()


def test_middle_levels_keep_the_two_pass_plan(rng):
    """Mid-distribution levels move with every episode of episode-by-episode data; windows are
    not tried for them (`windows.worth_trying`)."""
    x = rng.standard_normal((5000, 2)).astype(np.float32)
    result = compute_stats([{"x": x}], quantiles=[0.01, 0.5, 0.99])
    assert result.summary.passes == 2
    assert_matches_numpy(result.stats["x"], x, [0.01, 0.5, 0.99])
