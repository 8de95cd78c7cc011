"""`stats check` names a cause only where recomputing it gives the stored number back, and our own
writer passes our own check.

Every dataset here was written or edited by LeRobot 0.4.4 itself (tests/stats/fixtures/README.md,
make_lerobot_edit_fixtures.py): unedited ones must get no "stale after an edit", edited ones
(LeRobot's delete_episodes and merge_datasets) must get it for exactly the entries the edit left
behind — found here independently, by comparing each stored per-episode entry of `index` and
`episode_index` with the data's own values read with pyarrow."""

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from accelkit.stats.checking import compare as check
from accelkit.stats.formats.synthetic import write_sample_dataset
from accelkit.stats.upstream import lerobot as lerobot_rules
from tests.support.cli import run_cli

FIXTURES = Path(__file__).parents[1] / "fixtures"
LEVELS = [0.01, 0.1, 0.5, 0.9, 0.99]


def check_json(root, capsys) -> tuple[int, dict]:
    code, out, err = run_cli(["stats", "check", str(root), "--json", "--no-progress"], capsys)
    assert code in (0, 3), err
    return code, json.loads(out)["result"]


def test_lerobot_rules_equal_lerobots_own_function_bit_for_bit():
    """LeRobot 0.4.4's get_feature_stats (what compute_episode_stats runs per feature), recorded
    in its own environment on float32, int64, bool, float64 and 0/1 columns of 1 to 101 rows."""
    cases = json.loads((FIXTURES / "lerobot_rules_expected.json").read_text())
    assert len(cases) == 49
    for case in cases:
        x = np.asarray(case["values"], dtype=case["dtype"])
        ours = lerobot_rules.lerobot_04(x, LEVELS)
        for stat, values in case["stats"].items():
            np.testing.assert_array_equal(ours[stat], np.asarray(values), err_msg=stat)


def renumbered_entries(root: Path) -> set[tuple[int, str]]:
    """(episode, feature) whose stored `index` / `episode_index` statistics are not those of the
    data's values: what an edit that renumbers frames leaves behind."""
    data = [pq.read_table(p) for p in sorted((root / "data").rglob("*.parquet"))]
    values = {
        name: np.concatenate([t.column(name).to_numpy() for t in data])
        for name in ("index", "episode_index")
    }
    out = set()
    for path in sorted((root / "meta" / "episodes").rglob("*.parquet")):
        for row in pq.read_table(path).to_pylist():
            episode = row["episode_index"]
            mine = values["episode_index"] == episode
            for name in ("index", "episode_index"):
                if row[f"stats/{name}/min"] != [int(values[name][mine].min())]:
                    out.add((episode, name))
    return out


@pytest.mark.parametrize("name", ["lerobot_v30", "lerobot_v21", "lerobot_v30_gripper"])
def test_unedited_lerobot_datasets_get_no_stale_and_no_unknown(name, capsys):
    code, result = check_json(FIXTURES / name, capsys)
    assert code == 3
    causes = {f["cause"] for f in result["findings"]}
    assert "stale after an edit" not in causes and "no known cause" not in causes, causes
    if name == "lerobot_v30_gripper":  # a 0/1 column's median: half the range off, binned
        median = [
            f
            for f in result["findings"]
            if (f["feature"], f["statistic"], f["dimension"]) == ("observation.state", "q50", 1)
            and f["episode"] is not None
        ]
        # the even-length episodes (31 frames: the median is a frame's own value)
        assert sorted(f["episode"] for f in median) == [0, 1, 3]
        assert {f["cause"] for f in median} == {"binned quantiles"}
        assert min(f["error"] for f in median) > 0.4


@pytest.mark.parametrize("name", ["lerobot_v30_deleted", "lerobot_v30_merged"])
def test_lerobot_edits_are_named_stale_exactly_where_they_left_stale_entries(name, capsys):
    root = FIXTURES / name
    edited = renumbered_entries(root)
    assert len(edited) >= 8  # the fixtures' edits renumber 4 (delete) and 6 (merge) episodes
    code, result = check_json(root, capsys)
    assert code == 3
    per_episode = [f for f in result["findings"] if f["episode"] is not None]
    stale = {
        (f["episode"], f["feature"]) for f in per_episode if f["cause"] == "stale after an edit"
    }
    assert stale == edited
    for f in per_episode:
        if (f["episode"], f["feature"]) in edited:
            assert "numbered as before an edit" in f["detail"]
    assert not [f for f in result["findings"] if f["cause"] == "no known cause"]
    # the dataset-wide numbers LeRobot re-aggregated from those entries are stale too
    stats_json = {
        (f["feature"], f["statistic"]): f["cause"]
        for f in result["findings"]
        if f["file"] == "meta/stats.json"
    }
    assert stats_json[("index", "mean")] == stats_json[("episode_index", "mean")]
    assert stats_json[("index", "mean")] == "stale after an edit"


def test_a_number_nothing_reproduces_is_no_known_cause(tmp_path, capsys):
    root = Path(shutil.copytree(FIXTURES / "lerobot_v30", tmp_path / "ds"))
    path = sorted((root / "meta" / "episodes").rglob("*.parquet"))[0]
    table = pq.read_table(path)
    rows = table.to_pylist()
    rows[1]["stats/action/q50"] = [v + 0.5 for v in rows[1]["stats/action/q50"]]
    pq.write_table(type(table).from_pylist(rows, schema=table.schema), path)
    _, result = check_json(root, capsys)
    found = [
        f
        for f in result["findings"]
        if (f["episode"], f["feature"], f["statistic"]) == (1, "action", "q50")
    ]  # every edited dimension a finding of its own
    assert sorted(f["dimension"] for f in found) == list(range(len(rows[1]["stats/action/q50"])))
    assert {f["cause"] for f in found} == {"no known cause"}


@pytest.mark.parametrize(
    "name, per_episode",
    [
        ("sample-v2.1", True),
        ("sample-v2.1", False),
        ("sample-v3.0", True),
        ("sample-v3.0", False),
        ("lerobot_v30", True),
        ("lerobot_v21", True),
        ("lerobot_v30_cameras", True),
        ("lerobot_v30_merged", True),
    ],
)
def test_our_writer_passes_our_check(name, per_episode, tmp_path, capsys):
    """`--format lerobot --write-into` writes every numeric feature LeRobot keeps statistics of
    (bookkeeping columns included), so `stats check` on the same dataset exits 0."""
    if name.startswith("sample-"):
        root = write_sample_dataset(
            tmp_path / "ds", episodes=4, frames_per_episode=30, layout=name.split("-")[1]
        )
    else:
        root = Path(shutil.copytree(FIXTURES / name, tmp_path / "ds"))
    args = ["stats", str(root), "--format", "lerobot", "--write-into", str(root), "--no-progress"]
    code, _, err = run_cli([*args, *(["--per-episode"] if per_episode else [])], capsys)
    assert code == 0, err
    code, result = check_json(root, capsys)
    if name == "sample-v3.0" and not per_episode:
        # this sample keeps no per-episode statistics, and --write-into alone writes none
        assert code == 3
        assert {(r["file"], r["cause"]) for r in result["summary"]} == {
            ("meta/episodes", "no statistics stored")
        }
    else:
        assert code == 0, result["summary"]
    written = json.loads((root / "meta" / "stats.json").read_text())
    assert {"index", "frame_index", "episode_index", "task_index", "timestamp"} <= set(written)


# --- moments: a cause named only where LeRobot's arithmetic gives the stored number back --------


def lerobot_moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LeRobot 0.4's per-episode mean and std (compute_stats.py, RunningQuantileStats.update with
    the episode's rows): np.mean of x and of x² in x's dtype, std = sqrt(max(0, E[x²] − E[x]²))."""
    mean = np.mean(x, axis=0)
    squares = np.mean(x**2, axis=0)
    return mean, np.sqrt(np.maximum(0, squares - mean**2))


def numpy_entry(x: np.ndarray) -> dict[str, np.ndarray]:
    wide = x.astype(np.float64)
    out = {
        "mean": wide.mean(0),
        "std": wide.std(0),
        "min": wide.min(0),
        "max": wide.max(0),
        "count": np.asarray([len(x)], np.float64),
    }
    for q in LEVELS:
        out[f"q{int(q * 100):02d}"] = np.quantile(wide, q, axis=0)
    return out


def explained(x: np.ndarray, stored: dict, *, rows: bool) -> dict:
    """The failing findings of one episode's entry (rows re-read when `rows`), by statistic."""
    report = check.Report("d", check.TOLERANCE)
    truth = {0: {"x": numpy_entry(x)}}
    check.check_episodes(
        report,
        "meta/episodes",
        {0: {"x": stored}},
        truth,
        {0: len(x)},
        rows_of=(lambda wanted: [(0, "x", x)]) if rows else None,
        levels=LEVELS,
    )
    return {f.stat: f for f in report.failures}


def offset_column(offset: float, spread: float, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (offset + rng.normal(0, spread, size=(n, 1))).astype(np.float32)


def test_a_std_edited_to_1_5x_on_an_offset_column_is_not_float32_moments():
    """1000 + N(0, 1) in float32: the float32 rounding bound of E[x²] − E[x]² admits any std
    from 0 to ~1.6, so a bound is no confirmation; with the rows at hand, LeRobot's own float32
    arithmetic gives its std back (named, confirmed) and not 1.5× the true one."""
    x = offset_column(1000.0, 1.0, 1000)
    truth = numpy_entry(x)
    edited = dict(truth, std=truth["std"] * 1.5)
    found = explained(x, edited, rows=True)
    assert set(found) == {"std"} and found["std"].cause == "unknown"
    _, std32 = lerobot_moments(x)
    assert abs(float(std32[0]) - truth["std"][0]) > 0.01 * truth["std"][0]  # it does fail
    found = explained(x, dict(truth, std=std32.astype(np.float64)), rows=True)
    assert found["std"].cause == "float32" and found["std"].confirmed is True
    # without the rows, neither is confirmed: both are only consistent with float32 moments
    for std in (truth["std"] * 1.5, std32.astype(np.float64)):
        found = explained(x, dict(truth, std=std), rows=False)
        assert found["std"].cause == "float32" and found["std"].confirmed is False
        assert found["std"].document()["cause"] == "consistent with float32 moments"
        assert found["std"].document()["confirmed"] is False


def test_a_mean_off_by_a_float32_step_is_float32_moments_only_where_reproduced():
    """1e4 + N(0, 0.01) in float32: LeRobot's float32 mean is a float32 step from the exact one
    (> 1e-3 std); one float32 step further is within the rounding bound too, but no arithmetic
    gives it back."""
    x = offset_column(1e4, 0.01, 5000)
    truth = numpy_entry(x)
    mean32, _ = lerobot_moments(x)
    assert abs(float(mean32[0]) - truth["mean"][0]) > 1e-3 * truth["std"][0]
    reproduced = dict(truth, mean=mean32.astype(np.float64))
    found = explained(x, reproduced, rows=True)
    assert found["mean"].cause == "float32" and found["mean"].confirmed is True
    step = np.nextafter(mean32, np.float32(np.inf)).astype(np.float64)
    found = explained(x, dict(truth, mean=step), rows=True)
    assert found["mean"].cause == "unknown"
    for stored in (reproduced, dict(truth, mean=step)):
        found = explained(x, stored, rows=False)
        assert found["mean"].cause == "float32" and found["mean"].confirmed is False


def test_a_dataset_wide_moment_without_episodes_is_only_consistent(capsys):
    """stats.json / norm_stats.json numbers with no per-episode entries to aggregate: the weaker
    label, in the table and in --json."""
    x = offset_column(1000.0, 1.0, 1000)
    truth = numpy_entry(x)
    report = check.Report("d", check.TOLERANCE)
    stored = dict(truth, std=truth["std"] * 1.5)
    check.check_global(report, "meta/stats.json", {"x": stored}, {"x": truth}, frames=len(x))
    (finding,) = report.failures
    assert (finding.cause, finding.confirmed) == ("float32", False)
    (row,) = check.summary_rows(report)
    assert row["cause"] == "consistent with float32 moments" and row["confirmed"] is False


def edit_episode_stat(root: Path, episode: int, column: str, change) -> None:
    for path in sorted((root / "meta" / "episodes").rglob("*.parquet")):
        table = pq.read_table(path)
        rows = table.to_pylist()
        for row in rows:
            if row["episode_index"] == episode:
                row[column] = change(row[column])
        pq.write_table(type(table).from_pylist(rows, schema=table.schema), path)


def test_an_edited_std_in_lerobots_own_file_is_no_known_cause(tmp_path, capsys):
    """lerobot_v30's action dimension 2 (1e4 + N(0, 0.01)): LeRobot stored float32 moments,
    ~300 std off, confirmed by recomputing them; the same std × 1.5 is not float32 moments."""
    root = Path(shutil.copytree(FIXTURES / "lerobot_v30", tmp_path / "ds"))
    _, result = check_json(root, capsys)

    def std_finding(result, episode):
        return next(
            f
            for f in result["findings"]
            if (f["episode"], f["feature"], f["statistic"]) == (episode, "action", "std")
        )

    before = std_finding(result, 1)
    assert before["dimension"] == 2
    assert (before["cause"], before["confirmed"]) == ("float32 moments", True)
    edit_episode_stat(root, 1, "stats/action/std", lambda v: [*v[:2], v[2] * 1.5, *v[3:]])
    _, result = check_json(root, capsys)
    after = std_finding(result, 1)
    assert after["dimension"] == 2 and after["cause"] == "no known cause"
    assert std_finding(result, 0)["cause"] == "float32 moments"  # the others untouched


def test_check_and_diff_name_the_same_cause_at_the_reproduction_boundary(tmp_path, capsys):
    """One rule decides, in check and in diff, whether a recomputation gives a number back:
    frame_index's dataset-wide q01 set 3e-7 of the range from the count-weighted mean of the
    episodes' exact q01 (numpy here), its q99 3e-6 from theirs: both commands call the first
    "mean of per-episode quantiles" and the second "no known cause"."""
    import accelkit.stats as stats

    root = Path(shutil.copytree(FIXTURES / "lerobot_v30", tmp_path / "ds"))
    tables = [pq.read_table(p) for p in sorted((root / "data").rglob("*.parquet"))]
    values = np.concatenate([t.column("frame_index").to_numpy() for t in tables]).astype(float)
    episodes = np.concatenate([t.column("episode_index").to_numpy() for t in tables])
    span = values.max() - values.min()
    path = root / "meta" / "stats.json"
    written = json.loads(path.read_text())
    for name, q, offset in (("q01", 0.01, 3e-7), ("q99", 0.99, 3e-6)):
        counts = np.asarray([np.sum(episodes == e) for e in np.unique(episodes)], float)
        per = np.asarray([np.quantile(values[episodes == e], q) for e in np.unique(episodes)])
        averaged = float((per * counts).sum() / counts.sum())
        assert abs(averaged - np.quantile(values, q)) > 1e-3 * span  # it fails the tolerance
        written["frame_index"][name] = [averaged + offset * span]
    path.write_text(json.dumps(written))
    checked = stats.check(root)
    in_check = {
        f.stat: f.document()["cause"]
        for f in checked.failures
        if (f.file, f.feature) == ("meta/stats.json", "frame_index") and f.stat in ("q01", "q99")
    }
    exact = stats.compute(
        root, output=tmp_path / "exact.json", format="lerobot", keys={"frame_index": "frame_index"}
    ).output
    diffed = stats.diff(path, exact, dataset=root)
    in_diff = {
        d.stat: d.causes[0].removesuffix(" (A)")
        for d in diffed.comparison.differences
        if d.key == "frame_index" and d.stat in ("q01", "q99")
    }
    assert (
        in_check
        == in_diff
        == {
            "q01": "mean of per-episode quantiles",
            "q99": "no known cause",
        }
    )


def test_a_dataset_wide_std_aggregated_from_an_edited_entry_is_no_known_cause():
    """Two episodes of 1000 + N(0, 1); episode 0's std edited to 1.5×, and stats.json holding
    LeRobot's aggregate of the stored entries (weighted mean of std² + (mean − total mean)²,
    written out here): the aggregate gives it back, but what it aggregates has no known cause,
    so neither has it — not "float32 moments", whose rounding bound it lies within."""
    x = [offset_column(1000.0, 1.0, 1000, seed) for seed in (1, 2)]
    truth = {e: {"x": numpy_entry(rows)} for e, rows in enumerate(x)}
    stored = {0: {"x": dict(truth[0]["x"], std=truth[0]["x"]["std"] * 1.5)}, 1: truth[1]}
    report = check.Report("d", check.TOLERANCE)
    check.check_episodes(
        report,
        "meta/episodes",
        stored,
        truth,
        {0: 1000, 1: 1000},
        rows_of=lambda wanted: [(e, "x", x[e]) for e in wanted],
        levels=LEVELS,
    )
    means = np.asarray([stored[e]["x"]["mean"][0] for e in (0, 1)])
    stds = np.asarray([stored[e]["x"]["std"][0] for e in (0, 1)])
    total = means.mean()
    aggregated = dict(
        numpy_entry(np.concatenate(x)), std=np.sqrt([np.mean(stds**2 + (means - total) ** 2)])
    )
    whole = numpy_entry(np.concatenate(x))
    check.check_global(
        report,
        "meta/stats.json",
        {"x": aggregated},
        {"x": whole},
        frames=2000,
        episodes_stored=stored,
        episodes_exact=truth,
        episode_file="meta/episodes",
    )
    causes = {(f.file, f.stat): (f.cause, f.confirmed) for f in report.failures}
    assert causes == {
        ("meta/episodes", "std"): ("unknown", True),
        ("meta/stats.json", "std"): ("unknown", True),
    }


def test_stale_needs_every_number_given_back_within_1e_6_of_its_unit():
    """Episodes 0 and 1 hold the numbers of their first 5 of 6 frames (an earlier frame count),
    their max moved by 3e-7 and by 3e-6 of the range: the first is still given back (stale),
    the second is not (no known cause) — the window `stats diff` uses, not 0.1 × the tolerance."""
    x = np.arange(12.0).reshape(-1, 1)
    rows = {0: x[:6], 1: x[6:]}
    truth = {e: {"x": numpy_entry(r)} for e, r in rows.items()}
    stored = {}
    for e, offset in ((0, 3e-7), (1, 3e-6)):
        earlier = numpy_entry(rows[e][:5])
        span = float(truth[e]["x"]["max"][0] - truth[e]["x"]["min"][0])
        stored[e] = {"x": dict(earlier, max=earlier["max"] + offset * span)}
    report = check.Report("d", check.TOLERANCE)
    check.check_episodes(
        report,
        "meta/episodes",
        stored,
        truth,
        {0: 6, 1: 6},
        rows_of=lambda wanted: [(e, f, rows[e]) for e, fs in wanted.items() for f in fs],
        levels=LEVELS,
    )
    causes = {(f.episode, f.cause) for f in report.failures}
    assert causes == {(0, "stale"), (1, "unknown")}
