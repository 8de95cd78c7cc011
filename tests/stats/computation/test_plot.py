"""`accelkit stats --plot`: the figure shows the run's own numbers, and broken dimensions are
flagged in it and in the warnings."""

from __future__ import annotations

import json

import numpy as np
import pytest

from accelkit.stats.computation.plot import read_plot_data
from accelkit.stats.core import histograms
from accelkit.stats.engine.driver import compute_stats
from accelkit.stats.formats.synthetic import write_sample_dataset
from tests.support.cli import envelope_of, run_cli

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_sample_dataset(
        tmp_path_factory.mktemp("plot") / "ds",
        episodes=5,
        frames_per_episode=120,
        dim=4,
        layout="v2.1",
    )


def adversarial(rows: int = 4000, seed: int = 0) -> np.ndarray:
    """dim 0 healthy; 1 constant; 2 zero 95% of the time; 3 NaN in 1% of rows; 4 |mean| >> std."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 5)).astype(np.float32)
    x[:, 1] = 0.25
    x[:, 2] = np.where(rng.random(rows) < 0.95, 0.0, rng.uniform(0.5, 1.0, rows))
    x[::100, 3] = np.nan
    x[:, 4] = 1000 + 1e-3 * rng.normal(size=rows)
    return x.astype(np.float32)


def test_figure_holds_the_numbers_of_norm_stats_json(dataset, tmp_path, capsys):
    out, figure = tmp_path / "norm_stats.json", tmp_path / "figure.png"
    code, _, err = run_cli(
        ["stats", str(dataset), "-o", str(out), "--plot", str(figure), "--no-progress"], capsys
    )
    assert code == 0, err
    written = json.loads(out.read_text())["norm_stats"]
    drawn = read_plot_data(figure)
    assert set(drawn["features"]) == set(written) == {"state", "actions"}
    for key, entry in written.items():
        feature = drawn["features"][key]
        for name in ("mean", "std", "q01", "q99"):
            got = feature[name] if name in feature else feature["quantiles"][name]
            assert got == entry[name], (key, name)
        for name in ("min", "max"):
            assert feature[name] == entry[name]
        # the bars hold every counted value, between min and max
        for d, bars in enumerate(feature["bars"]):
            assert sum(bars["counts"]) == pytest.approx(feature["count"][d], rel=1e-12)
            assert bars["edges"][0] == entry["min"][d] and bars["edges"][-1] == entry["max"][d]
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically: no temporary file left


def test_html_page_is_self_contained_with_episode_heat_map(dataset, tmp_path, capsys):
    out, page = tmp_path / "stats.json", tmp_path / "page.html"
    code, printed, err = run_cli(
        [
            "stats", str(dataset), "--format", "lerobot", "--per-episode", "-o", str(out),
            "--plot", str(page), "--no-progress", "--json",
        ],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    document = envelope_of(printed)
    assert document["result"]["plot"] == str(page)
    text = page.read_text()
    assert "data:image/png;base64," in text
    assert "http://" not in text and "https://" not in text and "<link" not in text
    drawn = read_plot_data(page)
    written = json.loads(out.read_text())
    for feature in drawn["features"].values():
        column = written[feature["column"]]
        assert feature["mean"] == column["mean"] and feature["std"] == column["std"]
        assert feature["quantiles"]["q50"] == column["q50"]
        for d in range(feature["dims"]):  # the page's table shows every number
            assert f"{feature['mean'][d]:.6g}" in text
    # the heat map's rows are the per-episode means LeRobot's episodes_stats.jsonl holds
    lines = [
        json.loads(line)
        for line in (tmp_path / "episodes_stats.jsonl").read_text().split("\n")
        if line
    ]
    for key, heat in drawn["episodes"].items():
        column = drawn["features"][key]["column"]
        assert heat["index"] == [line["episode_index"] for line in lines]
        assert heat["mean"] == [line["stats"][column]["mean"] for line in lines]


def test_broken_dimensions_are_flagged_in_the_figure_and_the_warnings(tmp_path, capsys):
    x = adversarial()
    np.savez(tmp_path / "d.npz", state=x)
    out, figure = tmp_path / "o.json", tmp_path / "f.png"
    code, printed, err = run_cli(
        [
            "stats", str(tmp_path / "d.npz"), "--keys", "state=state", "-o", str(out),
            "--skip-nonfinite", "--plot", str(figure), "--json", "--no-progress",
        ],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    drawn = read_plot_data(figure)["features"]["state"]
    flags = drawn["flags"]
    # 1000 + noise: one key bucket spans the range; the panel says its bars are coarse
    assert drawn["bars"][4]["coarse"] == 1.0 and drawn["bars"][0]["coarse"] == 0.0
    assert set(flags) == {"1", "2", "3", "4"}  # dim 0 is healthy
    assert flags["1"] == ["constant (0.25)"]
    assert flags["2"] == [f"{np.mean(x[:, 2] == 0):.0%} of values at the min (0)"]
    assert flags["3"] == ["40 NaN/Inf skipped"]
    assert flags["4"][0].startswith("|mean| = ")
    warnings = envelope_of(printed)["warnings"]
    assert len(warnings) == 1 and "dim 1: constant" in warnings[0] and "dim 0:" not in warnings[0]
    assert envelope_of(printed)["result"]["flagged"] == 4


def test_flags_against_numpy_facts():
    """Each flag agrees with what numpy says of the raw values; both modes, and q01 == q99."""
    x = adversarial()
    x[:, 0] = np.where(np.arange(len(x)) % 200 == 0, 2.0, 1.0)  # q01 == q99 == 1, not constant
    for fast in (False, True):
        stats = compute_stats([{"s": x}], skip_nonfinite=True, fast=fast, platform="cpu").stats["s"]
        flags = histograms.flag_dimensions(stats)
        assert "q01 == q99 (1)" in flags[0]
        assert int(np.sum(np.isnan(x[:, 3]))) == 40 and flags[3] == ["40 NaN/Inf skipped"]
        share = np.mean(x[:, 2] == 0)
        assert share >= histograms.POINT_MASS_SHARE and f"{share:.0%}" in flags[2][-1]
        assert abs(x[:, 4].astype(np.float64).mean()) > 1e3 * x[:, 4].astype(np.float64).std()


@pytest.mark.parametrize("fast", [False, True])
def test_bars_equal_numpy_histogram_where_buckets_are_finer_than_bars(fast):
    """Integers 0..40 (in exact mode each in its own key bucket, starting on a bar edge): the 40
    bars the run keeps from its own histogram equal numpy's histogram of the raw values exactly;
    fast mode's buckets are offsets from the median, off by at most one value's count."""
    rng = np.random.default_rng(1)
    x = rng.integers(0, 41, size=(3000, 3)).astype(np.float32)
    x[:, 2] = np.where(rng.random(3000) < 0.5, 0, 40)  # two point masses at the ends
    stats = compute_stats([{"s": x}], fast=fast, platform="cpu").stats["s"]
    for d in range(3):
        edges, counts = histograms.dimension_bars(stats.histogram, d)
        np.testing.assert_array_equal(edges, np.linspace(0, 40, histograms.BARS + 1))
        reference, _ = np.histogram(x[:, d], edges)
        if not fast:
            np.testing.assert_allclose(counts, reference, rtol=0, atol=1e-9)
        else:  # buckets of x - median: a value below the median ends its bucket, which is spread
            assert counts.sum() == reference.sum()
            drift = np.abs(np.cumsum(counts) - np.cumsum(reference)).max()
            assert drift <= np.bincount(x[:, d].astype(int)).max()  # at most one value's count
    assert stats.histogram.at_min[2] == np.mean(x[:, 2] == 0)  # exactly the point mass


def test_bars_spread_a_wide_bucket_and_keep_the_total():
    """A bucket straddling bar edges is shared in proportion to its overlap (a reference written
    as overlaps); zero-width buckets go to the bar holding them."""
    lower = np.array([0.0, 0.25, 1.0, 2.5, 4.0])
    upper = np.array([0.0, 0.75, 2.0, 3.5, 4.0])
    count = np.array([3, 4, 10, 6, 2])
    _, counts = histograms.bars(lower, upper, count, 0.0, 4.0, n=4)
    expected = np.zeros(4)
    for lo, hi, c in zip(lower, upper, count, strict=True):
        if hi == lo:
            expected[min(int(lo), 3)] += c
            continue
        for j in range(4):
            expected[j] += c * max(0.0, min(hi, j + 1) - max(lo, j)) / (hi - lo)
    np.testing.assert_allclose(counts, expected)
    assert counts.sum() == count.sum()


def test_bad_plot_path_is_exit_2(dataset, tmp_path, capsys):
    code, _, err = run_cli(["stats", str(dataset), "--plot", str(tmp_path / "f.svg")], capsys)
    assert code == 2 and "--plot" in err and ".png or .html" in err
