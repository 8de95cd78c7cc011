"""Exact mode equals numpy.quantile (and numpy float64 moments) on adversarial data."""

import itertools

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from accelkit.errors import DataError
from accelkit.stats.core.quantiles import float_keys, keys_to_floats
from accelkit.stats.engine.driver import compute_stats
from tests.stats.helpers import assert_matches_numpy, stats_of
from tests.support.stats import adversarial_columns

LEVELS = [0.0, 0.01, 0.1, 0.25, 0.5, 1 / 3, 0.9, 0.99, 1.0]


@pytest.mark.parametrize("n", [1, 2, 3, 1000, 40_000])
def test_exact_quantiles_equal_numpy_on_adversarial_columns(rng, n):
    cols = adversarial_columns(rng, n)
    x = np.stack(list(cols.values()), axis=1).astype(np.float32)
    stats = stats_of(x, LEVELS, split=max(1, n // 3))
    assert_matches_numpy(stats, x, LEVELS)


def test_std_accurate_when_mean_much_larger_than_std(rng):
    # N(3, 0.05^2) scaled: the reference tool's float32 E[x^2]-E[x]^2 loses 0.4-2 % of the std here.
    x = np.stack(
        [3 + 0.05 * rng.standard_normal(500_000), 1e5 + 1e-3 * rng.standard_normal(500_000)], 1
    ).astype(np.float32)
    stats = stats_of(x, [0.5], split=70_001)
    ref = x.astype(np.float64).std(axis=0)
    np.testing.assert_allclose(stats.std, ref, rtol=1e-9)


def test_constant_dimension_has_zero_std_and_exact_quantiles():
    x = np.full((100, 2), 5.0, np.float32)
    stats = stats_of(x, [0.01, 0.99])
    assert np.all(stats.std == 0) and np.all(np.isfinite(stats.std))
    assert np.all(stats.quantiles[0.01] == 5.0)


def test_keys_preserve_order_for_every_kind_of_float(rng):
    special = np.array(
        [-np.inf, -3.4e38, -1.0, -1e-45, 0.0, 1e-45, 1e-38, 1.0, 3.4e38, np.inf], np.float32
    )
    values = np.sort(np.concatenate([special, rng.standard_normal(1000).astype(np.float32)]))
    keys = np.asarray(float_keys(values)).astype(np.int64)
    assert np.all(np.diff(keys) >= 0)
    assert np.all((np.diff(keys) > 0) == (np.diff(values) > 0))
    np.testing.assert_array_equal(keys_to_floats(keys).view(np.uint32), values.view(np.uint32))
    signed_zeros = np.asarray(float_keys(np.array([-0.0, 0.0], np.float32))).astype(np.int64)
    assert signed_zeros[1] - signed_zeros[0] == 1  # -0.0 sorts just below +0.0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=hnp.arrays(
        np.float32,
        st.tuples(st.integers(1, 300), st.integers(1, 3)),
        elements=st.one_of(
            st.floats(-1e6, 1e6, width=32),
            st.sampled_from([0.0, -0.0, 1.0, 1e30, -1e30]),
        ),
    ),
    cuts=st.lists(st.integers(0, 300), max_size=6),
    seed=st.integers(0, 2**16),
)
def test_batch_splitting_and_merge_order_never_change_results(data, cuts, seed):
    levels = [0.01, 0.5, 0.99]
    bounds = sorted({0, len(data), *[c for c in cuts if c < len(data)]})
    pieces = [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    order = np.random.default_rng(seed).permutation(len(pieces))
    shuffled = [pieces[i] for i in order]
    # batch_size fixed so every example reuses the same compiled kernels
    whole = compute_stats([{"x": data}], quantiles=levels, batch_size=64).stats["x"]
    split = compute_stats([{"x": p} for p in shuffled], quantiles=levels, batch_size=64).stats["x"]
    for q in levels:
        np.testing.assert_array_equal(split.quantiles[q], whole.quantiles[q])
        np.testing.assert_array_equal(whole.quantiles[q], np.quantile(data, [q], axis=0)[0])
    np.testing.assert_array_equal(split.min, whole.min)
    np.testing.assert_array_equal(split.max, whole.max)
    np.testing.assert_array_equal(split.count, whole.count)
    ref = data.astype(np.float64)
    scale = np.abs(ref).max(initial=1.0)
    np.testing.assert_allclose(split.mean, ref.mean(0), rtol=1e-12, atol=1e-12 * scale)
    np.testing.assert_allclose(split.std, ref.std(0), rtol=1e-6, atol=1e-9 * scale)


@pytest.mark.parametrize("fast", [False, True], ids=["exact", "fast"])
def test_any_device_count_and_batch_size_give_identical_bytes(rng, eight_devices, tmp_path, fast):
    """1, 2, 3 and 8 devices x three batch sizes: the written files are byte for byte the same."""
    from accelkit.stats.formats.stats_files import write_stats

    n = 50_001
    x = np.stack(
        [
            1e4 + 0.01 * rng.standard_normal(n),  # |mean| >> std: the sums' low bits matter
            rng.standard_cauchy(n),
            rng.random(n) > 0.5,
            rng.standard_normal(n) * np.exp(rng.uniform(-20, 20, n)),
        ],
        1,
    ).astype(np.float32)
    x[::97, 3] = np.nan  # non-finite values excluded per element
    weights_of_rows = [{"x": x[i : i + 7_777]} for i in range(0, n, 7_777)]
    outputs = {}
    for count in (1, 2, 3, 8):
        for batch in (768, 3_000, 24_576):
            result = compute_stats(
                weights_of_rows,
                quantiles=LEVELS,
                devices=eight_devices[:count],
                batch_size=batch,
                fast=fast,
                skip_nonfinite=True,
            )
            assert len(result.summary.devices) == count
            path = write_stats(tmp_path / f"{count}-{batch}.json", result.stats, "lerobot", {})
            outputs[(count, batch)] = path.read_bytes()
    first = outputs[(1, 768)]
    different = [k for k, v in outputs.items() if v != first]
    assert not different, f"outputs differ from 1 device, batch 768: {different}"
    if not fast:
        finite = x[:, :3]
        stats = result.stats["x"]
        ref = finite.astype(np.float64)
        np.testing.assert_allclose(stats.mean[:3], ref.mean(0), rtol=1e-13)
        np.testing.assert_allclose(stats.std[:3], ref.std(0), rtol=1e-9)
        expected = np.quantile(finite, np.asarray(LEVELS, np.float64), axis=0)
        for i, q in enumerate(LEVELS):
            np.testing.assert_array_equal(stats.quantiles[q][:3], expected[i])


def test_eight_devices_equal_one_device_in_fast_mode(rng, one_device, eight_devices):
    x = rng.standard_normal((30_000, 2)).astype(np.float32)
    one = compute_stats(
        [{"x": x}], quantiles=[0.01, 0.99], fast=True, devices=one_device, batch_size=2048
    ).stats["x"]
    eight = compute_stats(
        [{"x": x}], quantiles=[0.01, 0.99], fast=True, devices=eight_devices, batch_size=2048
    ).stats["x"]
    for q in (0.01, 0.99):
        np.testing.assert_array_equal(one.quantiles[q], eight.quantiles[q])


def test_out_of_memory_halves_the_batch_and_gives_the_same_answer(
    rng, one_device, monkeypatch, caplog
):
    from accelkit.stats.kernel import device as passes

    x = rng.standard_normal((20_000, 3)).astype(np.float32)
    expected = compute_stats(
        [{"x": x}], quantiles=[0.01, 0.99], devices=one_device, batch_size=8192
    ).stats["x"]
    real = passes.sharded_update

    def limited(state, values, *args, **kwargs):
        if values.shape[0] > 2048:  # stands in for a device that cannot hold the batch
            raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate")
        return real(state, values, *args, **kwargs)

    monkeypatch.setattr(passes, "sharded_update", limited)
    with caplog.at_level("WARNING"):
        result = compute_stats(
            [{"x": x}], quantiles=[0.01, 0.99], devices=one_device, batch_size=8192
        )
    assert result.summary.batch_size == 2048
    assert any("out of device memory" in r.message for r in caplog.records)
    for q in (0.01, 0.99):
        np.testing.assert_array_equal(result.stats["x"].quantiles[q], expected.quantiles[q])
    np.testing.assert_array_equal(result.stats["x"].mean, expected.mean)
    np.testing.assert_array_equal(result.stats["x"].std, expected.std)


def test_weighted_rows_equal_repeated_rows(rng):
    # Action-chunk multiplicities are weights; they must act exactly like repeated rows.
    from accelkit.stats.types import Column, Stream

    x = rng.standard_normal((500, 2)).astype(np.float32)
    w = rng.integers(0, 5, 500).astype(np.int32)

    class Weighted(Stream):
        def chunks(self):
            yield {"x": Column(x, w, np.arange(500))}

    got = compute_stats(Weighted(), quantiles=LEVELS).stats["x"]
    assert_matches_numpy(got, np.repeat(x, w, axis=0), LEVELS)


def test_platform_request_for_missing_gpu_falls_back_to_cpu(rng):
    x = rng.standard_normal((100, 1)).astype(np.float32)
    result = compute_stats([{"x": x}], platform="gpu")
    assert result.summary.platform == "cpu"
    assert jax.devices()[0].platform == "cpu"


def test_data_is_read_once_so_every_pass_sees_the_same_values(rng):
    reads = []

    def batches():  # every read of the data would return different values
        reads.append(rng.standard_normal((5000, 3)).astype(np.float32))
        return [{"x": reads[-1]}]

    levels = [0.01, 0.5, 0.99]
    result = compute_stats(batches, quantiles=levels).stats["x"]
    assert len(reads) == 1  # pass 2 replayed pass 1's decoded chunks
    assert_matches_numpy(result, reads[0], levels)


@pytest.mark.parametrize("budget", [0, 150_000, None], ids=["all-spilled", "part", "memory"])
def test_spilled_replay_gives_identical_results(rng, one_device, budget):
    x = rng.standard_cauchy((40_000, 3)).astype(np.float32)
    batches = [{"x": x[i : i + 3000]} for i in range(0, len(x), 3000)]
    levels = [0.0, 0.01, 0.5, 0.99, 1.0]
    got = compute_stats(
        batches, quantiles=levels, devices=one_device, batch_size=4096, cache_bytes=budget
    ).stats["x"]
    assert_matches_numpy(got, x, levels)


def test_passes_that_disagree_are_an_error_not_a_wrong_answer():
    from accelkit.stats.core import quantiles as qt

    count = np.array([10])
    plan, _ = qt.start_plan(count, np.array([0.5]))
    first = np.zeros((1, 1, 16), np.int64)
    first[0, 0, 3] = 10
    plan = qt.advance_plan(plan, first, np.zeros_like(plan.ranks), 4)
    second = np.zeros((1, 1, 16), np.int64)
    second[0, 0, 5] = 9  # one value fewer in the selected range than pass 1 counted
    with pytest.raises(DataError, match="data changed between passes"):
        qt.advance_plan(plan, second, np.zeros_like(plan.ranks), 4)


def test_advancing_a_plan_matches_the_whole_table_formula_without_its_memory():
    """`advance_plan` walks one histogram's running total at a time; the whole-table formula
    (all [D, U, K] totals, then a [D, T, K] copy) was the largest allocation of an exact run.
    Same digits and ranges as that formula, on histograms shared by several targets, and a peak
    of a few K-long rows, not the tables."""
    import tracemalloc

    from accelkit.stats.core import quantiles as qt

    rng = np.random.default_rng(7)
    dims, groups, k = 14, 3, 1 << 16
    counts = rng.integers(0, 3, size=(dims, groups, k)).astype(np.int64)
    counts[:, :, rng.integers(0, k, 40)] = 0  # empty bins, where "right" matters
    group = rng.integers(0, groups, size=(dims, 4))
    inside = counts.sum(-1)[np.arange(dims)[:, None], group]
    ranks = (rng.random((dims, 4)) * inside).astype(np.int64)
    ranks[0, 0], ranks[1, 1] = 0, inside[1, 1] - 1  # the ends of a range
    plan = qt.RadixPlan(ranks, np.zeros((dims, 4), np.uint64), np.zeros_like(ranks), inside, 0, 32)

    cumulative = np.cumsum(counts, axis=-1)  # the whole-table formula, written out
    per_target = cumulative[np.arange(dims)[:, None], group]
    digit = np.array(
        [
            [np.searchsorted(per_target[d, t], ranks[d, t], "right") for t in range(4)]
            for d in range(dims)
        ]
    ).clip(max=k - 1)
    through = np.take_along_axis(per_target, digit[..., None], -1)[..., 0]
    before = np.where(
        digit > 0, np.take_along_axis(per_target, (digit - 1).clip(0)[..., None], -1)[..., 0], 0
    )
    del cumulative, per_target

    tracemalloc.start()
    got = qt.advance_plan(plan, counts, group, 16)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert np.array_equal(got.prefixes, digit.astype(np.uint64))
    assert np.array_equal(got.below, before) and np.array_equal(got.inside, through - before)
    assert got.prefix_bits == 16
    assert peak < 4 * k * 8, peak  # the tables: dims * (groups + 4) * k * 8 bytes = 50 MB


def test_all_nan_dimension_under_skip_gets_null_statistics(caplog):
    x = np.stack([np.arange(10, dtype=np.float32), np.full(10, np.nan, np.float32)], 1)
    for fast in (False, True):
        stats = compute_stats([{"x": x}], quantiles=[0.5], skip_nonfinite=True, fast=fast).stats[
            "x"
        ]
        assert stats.count.tolist() == [10, 0] and 4 <= stats.quantiles[0.5][0] <= 5
        assert fast or stats.quantiles[0.5][0] == np.float32(4.5)
        assert all(
            np.isnan(v[1])
            for v in (stats.mean, stats.std, stats.min, stats.max, stats.quantiles[0.5])
        )
    assert "hold no finite values" in caplog.text


@pytest.mark.parametrize("levels", [[], [0.5, float("nan")], [-0.1]])
def test_bad_quantile_levels_are_rejected(levels):
    with pytest.raises(DataError, match="quantile levels"):
        compute_stats([{"x": np.ones((4, 1), np.float32)}], quantiles=levels)


def test_zero_width_rows_are_rejected():
    with pytest.raises(DataError, match="width 0"):
        compute_stats([{"x": np.ones((4, 0), np.float32)}])


def test_torch_tensors_needing_grad_and_bfloat16_are_read():
    torch = pytest.importorskip("torch")
    x = torch.randn(1000, 3, requires_grad=True)
    b = x.detach().to(torch.bfloat16)
    got = compute_stats([{"x": x, "b": b}], quantiles=[0.1, 0.9]).stats
    assert_matches_numpy(got["x"], x.detach().numpy(), [0.1, 0.9])
    assert_matches_numpy(got["b"], b.float().numpy(), [0.1, 0.9])


@pytest.mark.parametrize(
    "make",
    [
        lambda rng, n: 16_777_217 + rng.integers(0, 10, n),  # just above float32's exact range
        lambda rng, n: rng.integers(-(2**62), 2**62, n),  # 62 bits of range: 4 passes
        lambda rng, n: rng.integers(-5, 5, n) * 1_000_000_007,  # ties far apart, negatives
        lambda rng, n: rng.integers(0, 2**32, n).astype(np.uint32),
        lambda rng, n: np.full(n, -(2**63)),  # int64's minimum, constant
    ],
    ids=["above-2^24", "62-bit", "ties", "uint32", "int64-min"],
)
def test_integer_columns_are_exact(rng, make):
    n = 10_007
    x = np.stack([make(rng, n), make(rng, n)[::-1]], 1)
    levels = np.asarray(LEVELS, np.float64)
    result = compute_stats([{"x": x[:5000]}, {"x": x[5000:]}], quantiles=LEVELS).stats["x"]
    assert result.min.dtype == np.int64 and result.max.dtype == np.int64
    np.testing.assert_array_equal(result.min, x.min(0))
    np.testing.assert_array_equal(result.max, x.max(0))
    expected = np.quantile(x.astype(np.int64), levels, axis=0)
    for i, q in enumerate(LEVELS):
        np.testing.assert_array_equal(result.quantiles[q], expected[i])
    ref = x.astype(np.int64).astype(np.float64)
    scale = np.abs(ref).max()
    np.testing.assert_allclose(result.mean, ref.mean(0), rtol=1e-15, atol=1e-15 * scale)
    np.testing.assert_allclose(result.std, ref.std(0), rtol=1e-12, atol=1e-12 * scale)
    fast = compute_stats([{"x": x}], quantiles=LEVELS, fast=True).stats["x"]
    np.testing.assert_array_equal(fast.min, x.min(0))  # fast mode's min/max are exact too
    np.testing.assert_array_equal(fast.max, x.max(0))


def test_integer_and_float_keys_in_one_run_on_any_device_count(rng, eight_devices, tmp_path):
    from accelkit.stats.formats.stats_files import write_stats

    n = 9_000
    big = (2**40 + rng.integers(-1000, 1000, (n, 2))).astype(np.int64)
    state = rng.standard_normal((n, 3)).astype(np.float32)
    batches = [{"i": big[a : a + 1000], "s": state[a : a + 1000]} for a in range(0, n, 1000)]
    outputs = set()
    for count in (1, 3, 8):
        result = compute_stats(batches, quantiles=LEVELS, devices=eight_devices[:count])
        path = write_stats(tmp_path / f"{count}.json", result.stats, "lerobot", {})
        outputs.add(path.read_bytes())
    assert len(outputs) == 1
    written = __import__("json").loads(outputs.pop())
    assert written["i"]["min"] == big.min(0).tolist()  # JSON ints, every digit
    assert written["i"]["max"] == big.max(0).tolist()


def test_spill_whose_last_arrays_are_small_replays(rng, one_device):
    """Arrays smaller than the file object's buffer must be readable when replayed."""
    x = rng.standard_normal((15, 2)).astype(np.float32)
    batches = [{"x": x[i : i + 5]} for i in range(0, 15, 5)]  # 40-byte arrays
    got = compute_stats(batches, quantiles=[0.5], devices=one_device, cache_bytes=0).stats["x"]
    assert_matches_numpy(got, x, [0.5])
