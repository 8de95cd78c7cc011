"""`accelkit stats check`: stored statistics against exact ones, with causes, and --fix.

References are independent of accelkit: numpy float64 over the data files read with pyarrow, and
the float32 / averaged-quantile arithmetic LeRobot does, written out here in numpy."""

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from accelkit.stats.checking import compare as check
from tests.support.cli import run_cli
from tests.support.stats import FIXTURES, column_of, exact_of

LEVELS = {0.01: "q01", 0.1: "q10", 0.5: "q50", 0.9: "q90", 0.99: "q99"}


# --- the core, on numbers made here ------------------------------------------------------------


def test_float32_moments_of_an_offset_column_are_found_and_named():
    rng = np.random.default_rng(0)
    x = (1e4 + rng.normal(0, 0.01, size=(5000, 1))).astype(np.float32)
    truth = exact_of(x)
    # what a float32 pipeline stores: E[x²] - E[x]² in float32
    mean32 = x.mean(axis=0, dtype=np.float32)
    var32 = (x * x).mean(axis=0, dtype=np.float32) - mean32 * mean32
    stored = {"mean": mean32.astype(np.float64), "std": np.sqrt(np.maximum(var32, 0)).astype(float)}
    report = check.Report("d", check.TOLERANCE)
    check.check_global(report, "stats.json", {"x": stored}, {"x": truth}, frames=len(x))
    std = next(f for f in report.findings if f.stat == "std")
    assert std.fails and std.cause == "float32"
    assert std.confirmed is False  # no rows at hand: only consistent with float32 moments
    assert std.error == pytest.approx(abs(stored["std"][0] - truth["std"][0]) / truth["std"][0])
    # the same column stored exactly passes, within float64 JSON's rounding
    report = check.Report("d", check.TOLERANCE)
    exact = {k: v.copy() for k, v in truth.items()}
    check.check_global(report, "stats.json", {"x": exact}, {"x": truth}, frames=len(x))
    assert report.ok and report.numbers == len(truth)


def test_averaged_episode_quantiles_are_named_with_their_error():
    rng = np.random.default_rng(1)
    episodes = [rng.normal(m, s, size=(n, 2)) for m, s, n in ((0, 1, 50), (5, 0.1, 7), (-3, 2, 90))]
    data = np.concatenate(episodes)
    truth = exact_of(data)
    per = {i: {"x": exact_of(e)} for i, e in enumerate(episodes)}
    counts = np.asarray([len(e) for e in episodes], np.float64)
    stored = dict(truth)
    for name in LEVELS.values():  # LeRobot's aggregate_stats: count-weighted mean
        stored[name] = sum(per[i]["x"][name] * counts[i] for i in per) / counts.sum()
    report = check.Report("d", check.TOLERANCE)
    check.check_global(
        report,
        "stats.json",
        {"x": stored},
        {"x": truth},
        frames=len(data),
        episodes_stored={i: per[i] for i in per},
        episodes_exact=per,
    )
    failing = {f.stat: f for f in report.failures}
    assert set(failing) >= {"q01", "q99"} and {f.cause for f in failing.values()} == {"averaged"}
    q99 = failing["q99"]
    span = truth["max"] - truth["min"]
    np.testing.assert_allclose(q99.errors, np.abs(stored["q99"] - truth["q99"]) / span)


def test_episode_structure_stale_counts_gone_and_missing():
    """Stale only where the stored entry is recomputed from other frames: episode 1's numbers are
    those of its first 5 frames (written before its last frame was added); episode 2's count was
    changed by hand, which no recomputation gives back."""
    x = np.arange(16.0).reshape(-1, 1)
    rows = {0: x[:4], 1: x[4:10], 2: x[10:]}
    truth = {e: {"x": exact_of(r)} for e, r in rows.items()}
    hand_edited = dict(truth[2]["x"], count=np.asarray([7.0]))
    stored = {1: {"x": exact_of(rows[1][:5])}, 2: {"x": hand_edited}, 5: {"x": truth[0]["x"]}}
    report = check.Report("d", check.TOLERANCE)

    def rows_of(wanted):
        return [(e, f, rows[e]) for e, features in wanted.items() for f in features]

    check.check_episodes(
        report, "episodes", stored, truth, {0: 4, 1: 6, 2: 6}, rows_of=rows_of, levels=list(LEVELS)
    )
    causes = {(f.episode, f.cause) for f in report.failures}
    assert causes == {(5, "gone"), (0, "missing"), (1, "stale"), (2, "unknown")}
    count = next(f for f in report.failures if f.stat == "count" and f.episode == 1)
    assert (count.stored, count.exact, count.error) == (5.0, 6.0, 1.0)
    assert "first 5 of 6 frames" in count.detail


def test_constant_and_wrong_width_entries():
    truth = exact_of(np.full((5, 2), 3.25))
    report = check.Report("d", check.TOLERANCE)
    stored = dict(truth, std=np.asarray([0.0, 0.0]), mean=np.asarray([3.25, 3.26]))
    stored["q50"] = np.asarray([3.25])  # one value for two dimensions
    check.check_global(report, "f", {"x": stored}, {"x": truth}, frames=5)
    by = {f.stat: f for f in report.findings}
    assert by["q50"].cause == "shape" and by["q50"].fails
    assert by["mean"].fails and by["mean"].error == pytest.approx(0.01)  # absolute: std is 0
    assert by["mean"].cause != "float32"  # a constant column has no spread to lose
    assert not by["std"].fails


# --- the command, on datasets LeRobot wrote ----------------------------------------------------


@pytest.fixture
def dataset(tmp_path):
    def make(name: str) -> Path:
        return Path(shutil.copytree(FIXTURES / name, tmp_path / name))

    return make


def check_json(args, capsys) -> tuple[int, dict]:
    code, out, _ = run_cli(["stats", "check", *args, "--json", "--no-progress"], capsys)
    return code, json.loads(out)


def test_lerobot_written_v30_stats_are_off_with_their_causes(dataset, capsys):
    root = dataset("lerobot_v30")
    code, doc = check_json([str(root)], capsys)
    assert code == 3 and doc["ok"] is False and doc["command"] == "stats check"
    result = doc["result"]
    causes = {(r["file"], r["cause"]) for r in result["summary"]}
    assert ("meta/stats.json", "float32 moments") in causes
    assert ("meta/stats.json", "mean of per-episode quantiles") in causes
    assert ("meta/episodes", "binned quantiles") in causes
    assert not [r for r in result["summary"] if r["cause"] == "no known cause"]
    # every error equals numpy float64 over the frames, against the stored file read here
    stored = json.loads((root / "meta" / "stats.json").read_text())
    for finding in result["findings"]:
        if finding["file"] != "meta/stats.json" or finding["statistic"] == "count":
            continue
        feature, stat, d = finding["feature"], finding["statistic"], finding["dimension"]
        truth = exact_of(column_of(root, feature))
        unit = truth["std"] if stat in ("mean", "std") else truth["max"] - truth["min"]
        value = np.asarray(stored[feature][stat], np.float64).reshape(-1)[d]
        # quantiles of float32 data interpolate in float32 (as numpy.quantile does on it)
        rel = 1e-6 if stat.startswith("q") else 1e-12
        assert finding["exact"] == pytest.approx(truth[stat][d], rel=rel, abs=1e-12)
        error = abs(value - truth[stat][d]) / unit[d]
        assert finding["error"] == pytest.approx(error, rel=1e-3, abs=rel * abs(value) / unit[d])
    action_std = next(
        f
        for f in result["findings"]
        if (f["file"], f["feature"], f["statistic"]) == ("meta/stats.json", "action", "std")
    )
    assert action_std["dimension"] == 2 and action_std["error"] > 1  # 1e4 + N(0, 0.01)


def test_fix_writes_exact_statistics_and_keeps_the_old_files(dataset, capsys, tmp_path):
    root = dataset("lerobot_v30")
    before = (root / "meta" / "stats.json").read_bytes()
    episodes_before = {
        p.relative_to(root): p.read_bytes() for p in (root / "meta" / "episodes").rglob("*.parquet")
    }
    code, doc = check_json([str(root), "--fix"], capsys)
    assert code == 0 and doc["ok"] is True and doc["result"]["failing"] > 0
    backups = [Path(p) for p in doc["result"]["fixed"]["backups"]]
    assert (backups[0] / "meta" / "stats.json").read_bytes() == before
    for relative, content in episodes_before.items():
        assert (backups[0] / relative).read_bytes() == content
    code, doc = check_json([str(root)], capsys)
    assert code == 0 and doc["result"]["failing"] == 0 and doc["result"]["compared"] > 1000
    stats = json.loads((root / "meta" / "stats.json").read_text())
    truth = exact_of(column_of(root, "action"))
    np.testing.assert_allclose(stats["action"]["std"], truth["std"], rtol=1e-12)
    np.testing.assert_allclose(stats["action"]["q99"], truth["q99"], rtol=1e-6)
    # the per-episode columns now hold each episode's exact numbers
    table = pq.read_table(sorted((root / "meta" / "episodes").rglob("*.parquet"))[0])
    first = table.to_pylist()[0]
    frames = column_of(root, "action")[: first["length"]]
    np.testing.assert_allclose(first["stats/action/q10"], exact_of(frames)["q10"], rtol=1e-6)
    np.testing.assert_allclose(first["stats/action/std"], exact_of(frames)["std"], rtol=1e-9)
    assert not list(root.rglob("*.tmp*"))


def test_v21_compares_episodes_stats_jsonl_and_says_what_it_did_not_check(dataset, capsys):
    root = dataset("lerobot_v21")
    code, doc = check_json([str(root)], capsys)
    result = doc["result"]
    assert code == 3
    assert {r["file"] for r in result["summary"]} == {"meta/episodes_stats.jsonl"}
    assert any("meta/stats.json: absent" in n for n in result["not_checked"])
    # a line for an episode the data does not hold, and a count that is not the episode's
    path = root / "meta" / "episodes_stats.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    first = column_of(root, "action")[5:64]  # episode 1's first 59 of 60 frames, as numpy has them
    lines[1]["stats"]["action"] = {
        "min": first.min(0).tolist(),
        "max": first.max(0).tolist(),
        "mean": first.astype(np.float64).mean(0).tolist(),
        "std": first.astype(np.float64).std(0).tolist(),
        "count": [59],
    }
    lines.append({"episode_index": 9, "stats": lines[0]["stats"]})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, doc = check_json([str(root)], capsys)
    causes = {(f["episode"], f["cause"]) for f in doc["result"]["findings"]}
    assert (9, "episode is gone") in causes and (1, "stale after an edit") in causes
    code, doc = check_json([str(root), "--fix"], capsys)
    assert code == 0
    code, doc = check_json([str(root)], capsys)
    assert code == 0, doc["result"]["summary"]
    assert len(path.read_text().splitlines()) == 7


def test_norm_stats_json_is_compared_and_fixed(dataset, capsys, tmp_path):
    root = dataset("lerobot_v30")
    norm = tmp_path / "norm_stats.json"
    code, _, err = run_cli(["stats", str(root), "-o", str(norm), "--no-progress"], capsys)
    assert code == 0, err
    code, doc = check_json([str(root), "--stats", str(norm), "--fix"], capsys)
    assert code == 0  # LeRobot's own files fixed; our norm_stats.json was exact already
    assert not [f for f in doc["result"]["findings"] if f["file"] == str(norm)]
    data = json.loads(norm.read_text())
    data["norm_stats"]["actions"]["std"][1] *= 1.01
    norm.write_text(json.dumps(data))
    code, doc = check_json([str(root), "--stats", str(norm)], capsys)
    assert code == 3
    (finding,) = doc["result"]["findings"]
    truth = exact_of(column_of(root, "action"))
    assert finding["feature"] == "actions" and finding["dimension"] == 1
    assert finding["error"] == pytest.approx(0.01, rel=1e-6)
    assert finding["exact"] == pytest.approx(truth["std"][1], rel=1e-12)
    code, doc = check_json([str(root), "--stats", str(norm), "--fix"], capsys)
    assert code == 0 and any(p.endswith(".bak") for p in doc["result"]["fixed"]["backups"])
    code, _ = check_json([str(root), "--stats", str(norm)], capsys)
    assert code == 0


def test_table_fits_80_columns_and_plot_is_written(dataset, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "80")
    root = dataset("lerobot_v30")
    figure = tmp_path / "errors.png"
    code, out, err = run_cli(
        ["stats", "check", str(root), "--plot", str(figure), "--no-progress"], capsys
    )
    assert code == 3 and "--fix" in err
    long = [line for line in out.splitlines() if len(line) > 80 and str(tmp_path) not in line]
    assert not long  # the table and the causes' legend; a path is printed whole
    assert "float32 moments" in out and "mean of per-episode quantiles" in out
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "args, message",
    [
        (["{tmp}"], "not a LeRobot dataset"),
        (["{root}", "--tolerance", "0"], "--tolerance"),
        (["{root}", "--stats", "{tmp}/absent.json"], "does not exist"),
        (["{root}", "--plot", "{tmp}/errors.svg"], "--plot"),
        (["{root}", "--images", "most"], "--images"),
    ],
)
def test_bad_input_is_exit_2_naming_it(dataset, capsys, tmp_path, args, message):
    root = dataset("lerobot_v30")
    filled = [a.format(tmp=tmp_path, root=root) for a in args]
    code, _, err = run_cli(["stats", "check", *filled, "--no-progress"], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert (root / "meta" / "stats.json").read_bytes() == (
        FIXTURES / "lerobot_v30" / "meta" / "stats.json"
    ).read_bytes()


def test_stats_still_computes_and_a_folder_named_check_is_reachable(dataset, capsys, tmp_path):
    root = dataset("lerobot_v30")
    code, _, err = run_cli(["stats", str(root), "-o", str(tmp_path / "n.json")], capsys)
    assert code == 0, err
    code, out, _ = run_cli(["stats", "--help"], capsys)
    assert code == 0 and "--action-horizon" in out and "stats check" in out
    code, out, _ = run_cli(["stats", "check", "--help"], capsys)
    assert code == 0 and "--tolerance" in out and "--fix" in out


def test_a_dataset_with_no_statistics_says_so(tmp_path, capsys):
    """Nothing stored is not "701 of 0 off": the verdict counts what has no statistics, and --fix
    writes them."""
    from accelkit.stats.formats.synthetic import write_sample_dataset

    root = write_sample_dataset(tmp_path / "bare", episodes=3, frames_per_episode=50, layout="v3.0")
    code, out, err = run_cli(["stats", "check", str(root), "--no-progress"], capsys)
    assert code == 3, err
    features = len(json.loads((root / "meta" / "info.json").read_text())["features"])
    missing = features * 3 + 1  # every feature of every episode, and meta/stats.json
    assert f"{missing} features or episodes with no statistics stored" in out
    assert " of 0 " not in out + err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli(["stats", "check", str(root), "--fix", "--no-progress"], capsys)
    assert code == 0, err
    code, out, _ = run_cli(["stats", "check", str(root), "--no-progress"], capsys)
    assert code == 0 and "stored numbers within 0.001 of the exact ones" in out


def test_a_count_of_the_wrong_size_or_value_is_reported_like_any_statistic(
    dataset, capsys, tmp_path
):
    """A count is compared in full: LeRobot's [n] with an extra value is of
    the wrong size; in openpi's one count per dimension, each number is compared."""
    root = dataset("lerobot_v30")
    frames = len(column_of(root, "action"))
    path = root / "meta" / "stats.json"
    data = json.loads(path.read_text())
    data["action"]["count"] = [frames, 400]
    path.write_text(json.dumps(data))
    code, doc = check_json([str(root)], capsys)
    counts = [f for f in doc["result"]["findings"] if f["statistic"] == "count" and f["fails"]]
    assert code == 3 and [(f["feature"], f["cause"]) for f in counts] == [
        ("action", "wrong number of values")
    ]
    norm = tmp_path / "norm_stats.json"
    code, _, err = run_cli(["stats", str(root), "-o", str(norm), "--no-progress"], capsys)
    assert code == 0, err
    data = json.loads(norm.read_text())
    assert data["norm_stats"]["actions"]["count"][1] == frames  # one count per dimension
    data["norm_stats"]["actions"]["count"][1] = 400
    norm.write_text(json.dumps(data))
    code, doc = check_json([str(root), "--stats", str(norm)], capsys)
    (finding,) = [f for f in doc["result"]["findings"] if f["file"] == str(norm) and f["fails"]]
    assert code == 3 and finding["statistic"] == "count" and finding["dimension"] == 1
    assert (finding["stored"], finding["exact"]) == (400, frames)
    data["norm_stats"]["actions"]["count"] = [frames] * 3  # 3 counts for a wider feature
    norm.write_text(json.dumps(data))
    code, doc = check_json([str(root), "--stats", str(norm)], capsys)
    (finding,) = [f for f in doc["result"]["findings"] if f["file"] == str(norm) and f["fails"]]
    assert code == 3 and finding["cause"] == "wrong number of values"


def test_a_nan_stored_is_named_and_text_is_refused_as_damage(dataset, capsys):
    """A NaN stored is "not a number stored", the file's worst number; a
    string where a number belongs is damage like null (named with its key, statistic, index)."""
    root = dataset("lerobot_v30")
    path = root / "meta" / "stats.json"
    data = json.loads(path.read_text())
    data["action"]["mean"][1] = float("nan")
    path.write_text(json.dumps(data))
    code, doc = check_json([str(root)], capsys)
    (nan,) = [
        f
        for f in doc["result"]["findings"]
        if (f["file"], f["feature"], f["statistic"], f["dimension"])
        == ("meta/stats.json", "action", "mean", 1)
    ]
    assert code == 3 and nan["cause"] == "not a number stored"
    worst = doc["result"]["worst"]["meta/stats.json"]
    assert (worst["statistic"], worst["cause"]) == ("mean[1]", "not a number stored")
    data["action"]["mean"][1] = 0.0
    data["action"]["max"][1] = "5"
    path.write_text(json.dumps(data))
    code, _, err = run_cli(["stats", "check", str(root), "--no-progress"], capsys)
    assert code == 2 and "'action'.max holds text among its numbers (at index 1)" in err
