"""`stats check` reports every failing number (not one per statistic), counts numbers in its
verdict, and recomputes a dataset-wide number from the rows before it names a cause: on
LeRobot 0.4.4's own output (tests/stats/fixtures/lerobot_v30), edited here. The figures
docs/stats.md gives for that fixture are the ones check reports."""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

import accelkit.stats as stats
from tests.support.stats import FIXTURES, column_of, exact_of

DOCS = Path(__file__).parents[3] / "docs" / "stats.md"
STATS = ("mean", "std", "min", "max", "q01", "q10", "q50", "q90", "q99")


@pytest.fixture
def copy(tmp_path):
    return Path(shutil.copytree(FIXTURES / "lerobot_v30", tmp_path / "ds"))


def edit(root: Path, feature: str, stat: str, dim: int, value) -> dict:
    path = root / "meta" / "stats.json"
    stored = json.loads(path.read_text())
    values = stored[feature][stat]
    values[dim] = value(values[dim]) if callable(value) else value
    path.write_text(json.dumps(stored))
    return stored


def finding(report, feature: str, stat: str, dim: int):
    found = [
        f
        for f in report.failures
        if (f.file, f.feature, f.stat, f.dim) == ("meta/stats.json", feature, stat, dim)
    ]
    assert len(found) == 1, found
    return found[0]


def test_an_edit_of_a_dimension_that_is_not_the_worst_is_reported(copy):
    before = stats.check(copy)
    assert not [
        f for f in before.failures if f.feature == "action" and f.stat == "std" and f.dim == 0
    ]
    edited = edit(copy, "action", "std", 0, lambda v: v * 0.25)
    report = stats.check(copy)
    std0 = finding(report, "action", "std", 0)
    assert std0.stored == edited["action"]["std"][0] and std0.cause == "unknown"
    assert finding(report, "action", "std", 2).cause == "float32"  # the worst one, as it was
    assert report.numbers_off == before.numbers_off + 1
    doc = report.document()
    assert any(
        (f["feature"], f["statistic"], f["dimension"], f["cause"])
        == ("action", "std", 0, "no known cause")
        for f in doc["findings"]
    )
    row = next(
        r
        for r in doc["summary"]
        if (r["file"], r["feature"], r["statistic"], r["cause"])
        == ("meta/stats.json", "action", "std", "no known cause")
    )
    assert row["numbers"] == 1 and row["dimensions"] == [0]


def test_the_verdict_counts_numbers_and_docs_give_these_figures():
    report = stats.check(FIXTURES / "lerobot_v30")
    doc = report.document()
    # every failing number is a finding; the table's rows add up to them
    assert doc["failing"] == len(doc["findings"]) == sum(r["numbers"] for r in doc["summary"])
    # independently: stats.json's numbers off by more than 1e-3 of their unit, numpy float64
    stored = json.loads((FIXTURES / "lerobot_v30" / "meta" / "stats.json").read_text())
    off = 0
    for feature in {f.feature for f in report.findings if f.file == "meta/stats.json"}:
        truth = exact_of(column_of(FIXTURES / "lerobot_v30", feature))
        for stat in STATS:
            unit = truth["std"] if stat in ("mean", "std") else truth["max"] - truth["min"]
            unit = np.where(unit > 0, unit, 1.0)
            value = np.asarray(stored[feature][stat], np.float64).reshape(-1)
            off += int((np.abs(value - truth[stat]) / unit > 1e-3).sum())
    assert off == sum(f.file == "meta/stats.json" for f in report.failures)
    text = " ".join(DOCS.read_text(encoding="utf-8").split())
    said = re.search(
        r"216 frames\): ([\d,]+) of ([\d,]+) stored numbers off by more than 1e-3", text
    )
    assert said, "docs/stats.md: the lerobot_v30 figures"
    n, m = (int(g.replace(",", "")) for g in said.groups())
    assert (n, m) == (report.numbers_off, report.numbers) == (435, 1368)
    assert report.verdict() == "435 of 1,368 stored numbers off by more than 0.001"
    rows = {(r["file"], r["statistic"], r["cause"]) for r in doc["summary"]}
    paragraph = text[said.start() : said.start() + 1200]
    for (file, stat, cause), words in {
        ("meta/stats.json", "std", "float32 moments"): "float32 moments",
        ("meta/stats.json", "q01", "mean of per-episode quantiles"): "mean of per-episode",
        ("meta/episodes", "q10", "binned quantiles"): "(binned)",
    }.items():
        assert (file, stat, cause) in rows and words in paragraph
    assert "no known cause" not in {r["cause"] for r in doc["summary"]}


def test_a_dataset_wide_std_is_recomputed_from_the_rows(copy):
    """action dimension 2 is 1e4 + N(0, 0.01): float32's rounding bound on E[x²] − E[x]² admits
    any std up to ~10, so a bound confirms nothing. A std edited to 1.5× the exact one is "no known
    cause"; the std LeRobot 0.4's float32 arithmetic gives over all frames at once (written out
    here in numpy) is "float32 moments", confirmed."""
    x = column_of(copy, "action").astype(np.float32)
    truth = exact_of(x)
    edit(copy, "action", "std", 2, float(truth["std"][2]) * 1.5)
    std = finding(stats.check(copy), "action", "std", 2)
    assert (std.cause, std.confirmed) == ("unknown", True), std.detail
    mean = np.mean(x, axis=0)
    lerobot = np.sqrt(np.maximum(0, np.mean(x**2, axis=0) - mean**2))
    edit(copy, "action", "std", 2, float(lerobot[2]))
    std = finding(stats.check(copy), "action", "std", 2)
    assert (std.cause, std.confirmed) == ("float32", True) and "over all" in std.detail
