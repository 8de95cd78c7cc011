"""openpi norm_stats.json and LeRobot stats.json: structure, round trip, atomic writes."""

import json

import numpy as np
import pytest

from accelkit.runtime.files import atomic_open
from accelkit.stats.core.quantiles import quantile_name
from accelkit.stats.engine.driver import compute_stats
from accelkit.stats.formats.stats_files import read_norm_stats, write_stats


@pytest.fixture
def result(rng):
    state = rng.standard_normal((2000, 3)).astype(np.float32)
    actions = np.stack([rng.random(2000) > 0.5, rng.standard_normal(2000)], 1).astype(np.float32)
    return (
        compute_stats(
            [{"state": state, "actions": actions}], quantiles=[0.01, 0.1, 0.5, 0.9, 0.99]
        ),
        state,
        actions,
    )


def test_quantile_names():
    assert [quantile_name(q) for q in (0.01, 0.1, 0.5, 0.99, 0.995, 0.001, 1.0)] == [
        "q01",
        "q10",
        "q50",
        "q99",
        "q99.5",
        "q00.1",
        "q100",
    ]


def test_openpi_round_trip_and_layout(tmp_path, result):
    res, state, _ = result
    path = write_stats(tmp_path / "norm_stats.json", res.stats, "openpi", {})
    text = path.read_text()
    assert not text.endswith("\n") and text.startswith('{\n  "norm_stats": {\n    "state": {')
    loaded = read_norm_stats(path)
    assert set(loaded) == {"state", "actions"}
    np.testing.assert_array_equal(loaded["state"]["q01"], np.quantile(state, [0.01], axis=0)[0])
    np.testing.assert_allclose(loaded["state"]["std"], state.astype(np.float64).std(0), rtol=1e-9)
    raw = json.loads(text)
    assert "partial" not in raw
    assert raw["norm_stats"]["actions"]["count"] == [2000, 2000]


def test_openpi_without_q01_q99_is_refused_unless_allowed(tmp_path, rng):
    from accelkit.errors import InputError

    res = compute_stats(
        [{"state": rng.standard_normal((50, 2)).astype(np.float32)}], quantiles=[0.5]
    )
    with pytest.raises(InputError, match=r"lacks q01 and q99.*--allow-missing-quantiles"):
        write_stats(tmp_path / "n.json", res.stats, "openpi", {})
    assert not (tmp_path / "n.json").exists()
    raw = json.loads(
        write_stats(
            tmp_path / "n.json", res.stats, "openpi", {}, allow_missing_quantiles=True
        ).read_text()
    )
    assert (
        raw["norm_stats"]["state"]["q01"] is None and raw["norm_stats"]["state"]["q50"] is not None
    )
    assert set(raw) == {"norm_stats"}


@pytest.mark.parametrize("fmt", ["openpi", "lerobot"])
def test_dimension_without_finite_values_is_an_error_unless_filled(tmp_path, fmt):
    from accelkit.errors import DataError

    x = np.ones((40, 3), np.float32)
    x[:, 1] = np.nan
    res = compute_stats([{"state": x}], quantiles=[0.01, 0.99], skip_nonfinite=True)
    names = {"state": "observation.state"}
    with pytest.raises(DataError, match=r"dimensions \[1\] hold no finite values.*--fill-empty"):
        write_stats(tmp_path / "s.json", res.stats, fmt, names)
    path = write_stats(tmp_path / "s.json", res.stats, fmt, names, fill_empty=0.0, run={"rows": 40})
    text = path.read_text()
    assert "null" not in text and "NaN" not in text
    raw = json.loads(text)
    entry = raw["norm_stats"]["state"] if fmt == "openpi" else raw["observation.state"]
    assert entry["mean"] == [1.0, 0.0, 1.0] and entry["std"] == [0.0, 0.0, 0.0]
    assert entry["q99"] == [1.0, 0.0, 1.0]
    facts = json.loads((tmp_path / "s.run.json").read_text())
    key = "state" if fmt == "openpi" else "observation.state"
    assert facts["filled"] == {"value": 0.0, "dimensions": {key: [1]}} and facts["rows"] == 40


def test_run_facts_go_to_a_sidecar_never_into_the_output(tmp_path, result):
    res, _, _ = result
    path = write_stats(
        tmp_path / "stats.json",
        res.stats,
        "lerobot",
        {"state": "observation.state", "actions": "action"},
        run={"partial": True, "rows": 2000},
    )
    assert set(json.loads(path.read_text())) == {"observation.state", "action"}
    facts = json.loads((tmp_path / "stats.run.json").read_text())
    assert facts["partial"] is True and facts["output"] == "stats.json"


def test_lerobot_layout_uses_column_names(tmp_path, result):
    res, _, actions = result
    raw = json.loads(
        write_stats(
            tmp_path / "stats.json",
            res.stats,
            "lerobot",
            {"state": "observation.state", "actions": "action"},
        ).read_text()
    )
    assert set(raw) == {"observation.state", "action"}
    entry = raw["action"]
    assert set(entry) == {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}
    assert entry["count"] == [2000]
    np.testing.assert_array_equal(entry["q50"], np.quantile(actions, [0.5], axis=0)[0])


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_open(target) as handle:
        handle.write("half of the new")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_each_statistics_file_has_one_reader():
    """`stats check`, `fix`, `diff` and the library read statistics files through the functions of
    `formats/stats_files.py`; `checking/compare.py` once held a second `read_norm_stats` (another
    error, another return type) and `diff` reached into its private `_entry`."""
    import accelkit.stats as stats
    from accelkit.stats.checking import api as check_api
    from accelkit.stats.checking import compare
    from accelkit.stats.formats import stats_files

    assert stats.read_norm_stats is stats_files.read_norm_stats is check_api.read_norm_stats
    assert check_api.read_stats_json is stats_files.read_stats_json
    for name in ("read_norm_stats", "read_stats_json", "load_json", "_entry"):
        assert not hasattr(compare, name), name


def test_read_norm_stats_refuses_a_damaged_file(tmp_path):
    """The public reader is the one `stats check` uses: a null among the numbers is a damaged
    file (it once became NaN silently), a null statistic is left out."""
    from accelkit.errors import DataError

    path = tmp_path / "norm_stats.json"
    path.write_text(json.dumps({"norm_stats": {"state": {"mean": [0.0, None], "std": [1, 1]}}}))
    with pytest.raises(DataError, match=r"'state'\.mean holds null"):
        read_norm_stats(path)
    path.write_text(json.dumps({"norm_stats": {"state": {"mean": [0.5], "q01": None}}}))
    loaded = read_norm_stats(path)
    assert list(loaded["state"]) == ["mean"] and loaded["state"]["mean"].dtype == np.float64
    path.write_text(json.dumps({"state": {}}))
    with pytest.raises(DataError, match="has no 'norm_stats' mapping"):
        read_norm_stats(path)


def test_per_episode_files_have_one_reader(tmp_path, monkeypatch):
    """v2.1 `episodes_stats.jsonl` and v3.0 `meta/episodes/*.parquet` are read by one function
    each (`lerobot.episode_lines`, `lerobot.episode_tables`), for `stats check` and for the writer
    that keeps the dataset's other features: the writer once parsed the lines itself and crashed
    (KeyError, exit 1) on a line check names as damaged."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from accelkit.errors import DataError
    from accelkit.stats.formats import lerobot, stats_files

    root = tmp_path / "ds"
    (root / "meta" / "episodes").mkdir(parents=True)
    jsonl = root / lerobot.EPISODES_JSONL
    jsonl.write_text(
        json.dumps({"episode_index": 0, "stats": {"x": {"mean": [1.5], "count": [2]}}}) + "\n\n"
    )
    table = pa.table({"episode_index": [0, 1], "stats/x/mean": [[1.0], [2.0]]})
    pq.write_table(table, root / "meta" / "episodes" / "file-000.parquet")

    calls = []
    for name in ("episode_lines", "episode_tables"):
        real = getattr(lerobot, name)
        monkeypatch.setattr(
            lerobot, name, lambda arg, real=real, name=name: calls.append(name) or real(arg)
        )
    assert stats_files.read_episodes_jsonl(jsonl)[0]["x"]["mean"].tolist() == [1.5]
    files = lerobot.episode_meta_files(root)
    assert stats_files.read_episodes_parquet(files)[1]["x"]["mean"].tolist() == [2.0]
    lerobot.write_episodes_v21(root, tmp_path / "out.jsonl", [], {}, {}, {})
    assert calls == ["episode_lines", "episode_tables", "episode_lines"]

    jsonl.write_text('{"stats": {}}\n')  # no episode_index
    for read in (
        lambda: stats_files.read_episodes_jsonl(jsonl),
        lambda: lerobot.write_episodes_v21(root, tmp_path / "out.jsonl", [], {}, {}, {}),
    ):
        with pytest.raises(DataError, match=r"line 1 is not an episode's statistics"):
            read()
