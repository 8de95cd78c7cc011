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

from accelkit.stats import lerobot_rules
from accelkit.stats.sample import write_sample_dataset
from tests.support.cli import run_cli

FIXTURES = Path(__file__).parent / "fixtures"
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
    (finding,) = [
        f
        for f in result["findings"]
        if (f["episode"], f["feature"], f["statistic"]) == (1, "action", "q50")
    ]
    assert finding["cause"] == "no known cause"


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
