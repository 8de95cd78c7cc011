"""`accelkit stats diff A B` without a dataset: every difference, in units of the std and of the
range, against numpy float64 computed here from the two files' own numbers; adversarial files
(missing keys on one side, other shapes, zero std and range, NaN, other quantile sets); the
table at 80 and 120 columns, the `--json` envelope, exit codes 0 / 3 / 2."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

import accelkit.stats as stats
from accelkit.stats.diffing.causes import DIFF_CAUSES
from tests.support.cli import envelope_of, run_cli

FIXTURES = Path(__file__).parents[1] / "fixtures"


def write(path: Path, payload: dict) -> Path:
    path.write_text(json.dumps(payload, indent=2))
    return path


def lerobot_entry(rng, dim: int, n: int = 100) -> dict:
    x = rng.normal(size=(n, dim)) * rng.uniform(0.1, 3, dim) + rng.normal(size=dim)
    entry = {
        "min": x.min(0).tolist(),
        "max": x.max(0).tolist(),
        "mean": x.mean(0).tolist(),
        "std": x.std(0).tolist(),
        "count": [n],
    }
    for q in (0.01, 0.1, 0.5, 0.9, 0.99):
        entry[f"q{int(q * 100):02d}"] = np.quantile(x, q, axis=0).tolist()
    return entry


def reference(a: dict, b: dict, stat: str, unit: str | None = None) -> np.ndarray:
    """numpy float64 of the difference, in the smaller positive std or range of the two files
    (`unit`; by default the statistic's own: std for moments, range for the rest)."""
    va, vb = np.asarray(a[stat], float), np.asarray(b[stat], float)
    unit = unit or ("std" if stat in ("mean", "std") else "range")
    if unit == "std":
        sa, sb = np.asarray(a["std"], float), np.asarray(b["std"], float)
    else:
        sa = np.asarray(a["max"], float) - np.asarray(a["min"], float)
        sb = np.asarray(b["max"], float) - np.asarray(b["min"], float)
    smaller = np.fmin(np.where(sa > 0, sa, np.nan), np.where(sb > 0, sb, np.nan))
    return np.abs(va - vb) / np.where(np.isnan(smaller), 1.0, smaller)


@pytest.fixture
def pair(tmp_path):
    rng = np.random.default_rng(7)
    a = {"observation.state": lerobot_entry(rng, 5), "action": lerobot_entry(rng, 3)}
    b = json.loads(json.dumps(a))
    b["observation.state"]["mean"][1] += 0.5 * a["observation.state"]["std"][1]  # 0.5 σ
    b["observation.state"]["q99"][4] -= 0.01 * (
        a["observation.state"]["max"][4] - a["observation.state"]["min"][4]
    )
    b["action"]["std"][0] *= 4  # B's larger std does not excuse it: the smaller is the unit
    return tmp_path, a, b


def test_every_difference_equals_numpy_in_std_and_range(pair, capsys):
    folder, a, b = pair
    report = stats.diff(write(folder / "a.json", a), write(folder / "b.json", b))
    assert isinstance(report, stats.DiffReport) and not report.ok
    found = {(d.key, d.stat): d for d in report.comparison.differences}
    for key, entry in a.items():
        for stat in entry:
            d = found[(key, stat)]
            if stat == "count":
                assert d.unit == "frames" and d.errors.tolist() == [0.0]
                continue
            truth = reference(entry, b[key], stat)
            np.testing.assert_allclose(d.errors, truth, rtol=1e-12, atol=1e-15)
            for unit, got in (("std", d.in_std), ("range", d.in_range)):
                np.testing.assert_allclose(got, reference(entry, b[key], stat, unit), rtol=1e-12)
    failing = {
        (d.key, d.stat, tuple(d.failing)) for d in report.comparison.differences if d.failing
    }
    assert failing == {
        ("observation.state", "mean", (1,)),
        ("observation.state", "q99", (4,)),
        ("action", "std", (0,)),
    }
    assert found[("action", "std")].errors[0] == pytest.approx(3.0)  # 4σ − σ in units of σ
    assert report.verdict() == "3 of 74 compared numbers differ by more than 0.001"
    # the command prints what the object holds and exits 3
    code, out, err = run_cli(
        ["stats", "diff", str(folder / "a.json"), str(folder / "b.json"), "--json"], capsys
    )
    assert code == 3 and "differ by more than" in err
    doc = envelope_of(out)
    assert doc["ok"] is False and doc["command"] == "stats diff"
    assert doc["result"] == json.loads(json.dumps(report.document()))
    assert doc["result"]["notes"] and "--dataset" in doc["result"]["notes"][0]


def test_within_tolerance_is_exit_0_and_the_tolerance_decides(pair, capsys):
    folder, a, b = pair
    code, out, err = run_cli(
        ["stats", "diff", str(write(folder / "a.json", a)), str(folder / "a.json")], capsys
    )
    assert code == 0, err
    assert "all 74 compared numbers within 0.001" in out
    write(folder / "b.json", b)
    code, _, _ = run_cli(
        ["stats", "diff", str(folder / "a.json"), str(folder / "b.json"), "--tolerance", "3.5"],
        capsys,
    )
    assert code == 0
    code, _, _ = run_cli(
        ["stats", "diff", str(folder / "a.json"), str(folder / "b.json"), "--tolerance", "2.9"],
        capsys,
    )
    assert code == 3


def test_openpi_and_lerobot_keys_pair_by_column_and_quantile_sets_may_differ(tmp_path):
    rng = np.random.default_rng(1)
    lerobot = {
        "observation.state": lerobot_entry(rng, 4),
        "action": lerobot_entry(rng, 2),
        "timestamp": lerobot_entry(rng, 1),
    }
    openpi = {
        "norm_stats": {
            "state": {k: lerobot["observation.state"][k] for k in ("mean", "std", "q01", "q99")},
            "actions": {k: lerobot["action"][k] for k in ("mean", "std", "q01", "q99")},
            "extra": {"mean": [0.0], "std": [1.0]},
        }
    }
    report = stats.diff(
        write(tmp_path / "norm_stats.json", openpi), write(tmp_path / "stats.json", lerobot)
    )
    assert report.ok and report.comparison.compared == 4 * 4 + 4 * 2
    c = report.comparison
    assert c.only_in_a == ["extra"] and c.only_in_b == ["timestamp"]
    assert (
        "state (B: observation.state): min, max, count, q10, q50, q90 only in B" in c.not_compared
    )
    # other column names: --keys maps them
    renamed = {"norm_stats": {"s": openpi["norm_stats"]["state"]}}
    report = stats.diff(
        write(tmp_path / "r.json", renamed),
        tmp_path / "stats.json",
        keys={"s": "observation.state"},
    )
    assert (
        report.ok and next(d.column for d in report.comparison.differences) == "observation.state"
    )


def test_zero_std_and_range_nan_and_other_shapes(tmp_path, capsys):
    a = {
        "const": {
            "min": [2.0, 0.0],
            "max": [2.0, 1.0],
            "mean": [2.0, 0.5],
            "std": [0.0, 0.5],
            "q50": [2.0, 0.5],
            "count": [10],
        },
        "wide": {"mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0], "count": [10]},
        "nan": {"mean": [1.0, 2.0], "std": [1.0, 1.0], "count": [10]},
    }
    b = json.loads(json.dumps(a))
    b["const"]["mean"] = [2.0005, 0.5]  # std 0 on both sides: the difference is absolute
    b["const"]["q50"] = [2.002, 0.5]  # range 0 on both sides: absolute too
    b["const"]["count"] = [12]
    b["wide"] = {"mean": [0.0, 0.0], "std": [1.0, 1.0], "count": [10]}
    b["nan"]["mean"][0] = float("nan")  # json writes it as NaN, as numpy's tolist would
    write(tmp_path / "b.json", b)
    assert "NaN" in (tmp_path / "b.json").read_text()
    report = stats.diff(write(tmp_path / "a.json", a), tmp_path / "b.json")
    found = {(d.key, d.stat): d for d in report.comparison.differences}
    assert (
        found[("const", "mean")].errors[0] == pytest.approx(0.0005)
        and not found[("const", "mean")].fails[0]
    )
    assert (
        found[("const", "q50")].errors[0] == pytest.approx(0.002)
        and found[("const", "q50")].fails[0]
    )
    assert (
        found[("const", "count")].errors.tolist() == [2.0]
        and found[("const", "count")].unit == "frames"
    )
    shape = found[("wide", "mean")]
    assert shape.problem == "A holds 3 values, B 2" and shape.causes[0] == DIFF_CAUSES["shape"]
    nan = found[("nan", "mean")]
    assert math.isinf(nan.errors[0]) and nan.failing == [0]
    assert nan.causes[0] == "not a number stored (B)"
    code, out, _ = run_cli(
        ["stats", "diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--json"], capsys
    )
    assert code == 3
    doc = envelope_of(out)["result"]  # strict JSON: no NaN or Infinity in the document
    json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the --json document"))
    nan_doc = next(d for d in doc["differences"] if (d["key"], d["statistic"]) == ("nan", "mean"))
    assert nan_doc["b"][0] is None and nan_doc["errors"][0] is None


@pytest.mark.parametrize("columns", [80, 120])
def test_table_fits_the_terminal(columns, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", str(columns))
    norm = tmp_path / "norm_stats.json"
    code, _, err = run_cli(
        ["stats", str(FIXTURES / "lerobot_v30"), "-o", str(norm), "--no-progress"], capsys
    )
    assert code == 0, err
    code, out, _ = run_cli(
        ["stats", "diff", str(norm), str(FIXTURES / "lerobot_v30"), "--no-progress"], capsys
    )
    assert code == 3
    long = [
        line
        for line in out.splitlines()
        if len(line) > columns and str(tmp_path) not in line and str(FIXTURES) not in line
    ]
    assert not long, long
    assert "std[2]" in out and "293σ" in out  # LeRobot's float32 std of 1e4 + N(0, 0.01)


def test_a_dataset_folder_means_its_stored_statistics(tmp_path):
    """v3.0: meta/stats.json; v2.1 (no stats.json): episodes_stats.jsonl aggregated as LeRobot
    0.3.3 does when it loads the dataset — equal, number for number, to what it loaded."""
    report = stats.diff(FIXTURES / "lerobot_v21", FIXTURES / "lerobot_v21_loaded_stats.json")
    assert report.ok and report.comparison.compared > 0
    assert all(np.array_equal(d.a, d.b) for d in report.comparison.differences)
    assert report.a.read.startswith("the dataset's meta/episodes_stats.jsonl")
    report = stats.diff(FIXTURES / "lerobot_v30", FIXTURES / "lerobot_v30" / "meta" / "stats.json")
    assert report.ok and report.a.path == FIXTURES / "lerobot_v30" / "meta" / "stats.json"


@pytest.mark.parametrize(
    "args, message",
    [
        (["{tmp}/absent.json", "{v30}"], "A: {tmp}/absent.json does not exist"),
        (["{v30}", "{tmp}/list.json"], "neither an openpi norm_stats.json"),
        (["{v30}", "{tmp}/bad.json"], "not readable JSON"),
        (["{v30}", "{tmp}"], "not a LeRobot dataset"),
        (["{v30}", "{v30}", "--tolerance", "-1"], "--tolerance"),
        (["{v30}", "{v30}", "--dataset", "{tmp}"], "--dataset"),
        (["{v30}", "{v30}", "--chunk-end", "wrap"], "--chunk-end"),
        (["{v30}", "{v30}", "--delta-actions", "x,y"], "--delta-actions"),
        (["{v30}", "{v30}", "--openpi-batch-size", "0"], "--openpi-batch-size"),
        (["{empty}", "{v30}"], "stores no statistics"),
    ],
)
def test_bad_input_is_exit_2_naming_it(capsys, tmp_path, args, message):
    write(tmp_path / "list.json", {"a": [1, 2]})
    (tmp_path / "bad.json").write_text("{")
    empty = tmp_path / "empty"
    shutil.copytree(FIXTURES / "lerobot_v30", empty)
    (empty / "meta" / "stats.json").unlink()
    names = dict(tmp=tmp_path, v30=FIXTURES / "lerobot_v30", empty=empty)
    code, _, err = run_cli(
        ["stats", "diff", *[a.format(**names) for a in args], "--no-progress"], capsys
    )
    assert code == 2 and message.format(**names) in err, err
    assert len(err.strip().splitlines()) == 1


def test_counts_are_compared_in_full(tmp_path):
    """A count with an extra value, or one per dimension with one of them off,
    differs; LeRobot's [n] and openpi's [n, n] for the same frames agree."""
    entry = {"mean": [0.0, 1.0], "std": [1.0, 1.0], "count": [508]}
    a = write(tmp_path / "a.json", {"x": entry})
    per_dimension = write(tmp_path / "p.json", {"x": dict(entry, count=[508, 508])})
    assert stats.diff(a, per_dimension).ok
    extra = write(tmp_path / "e.json", {"x": dict(entry, count=[508, 400, 3])})
    (count,) = [d for d in stats.diff(a, extra).comparison.differences if d.stat == "count"]
    assert count.fails.all() and count.causes[0] == DIFF_CAUSES["shape"]
    one_off = write(tmp_path / "o.json", {"x": dict(entry, count=[508, 400])})
    (count,) = [
        d for d in stats.diff(per_dimension, one_off).comparison.differences if d.stat == "count"
    ]
    assert count.failing == [1] and count.errors.tolist() == [0.0, 108.0]
