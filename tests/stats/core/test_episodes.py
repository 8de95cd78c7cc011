"""Per-episode statistics: equal to numpy over each episode, written where LeRobot keeps them, from
the same reads as the global statistics; --write-into with backups; the v2.1 sample carries them."""

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.errors import DataError
from accelkit.stats.core.episodes import EpisodeCollector
from accelkit.stats.engine.driver import compute_stats
from accelkit.stats.formats.sources import open_source
from accelkit.stats.types import Column

FIXTURES = Path(__file__).parents[1] / "fixtures"
LEVELS = [0.01, 0.1, 0.5, 0.9, 0.99]
NAMES = {"observation.state": "float32", "action": "float32"}


def episodes_of(root: Path, column: str) -> dict[int, np.ndarray]:
    """Each episode's rows of `column`, read with pyarrow from every data file (independent)."""
    out: dict[int, list] = {}
    for path in sorted((root / "data").rglob("*.parquet")):
        table = pq.read_table(path, columns=[column, "episode_index"])
        values = np.asarray(table.column(column).to_pylist())
        for e in np.unique(table.column("episode_index").to_numpy()):
            mask = table.column("episode_index").to_numpy() == e
            out.setdefault(int(e), []).append(values[mask].reshape(int(mask.sum()), -1))
    return {e: np.concatenate(parts) for e, parts in out.items()}


def assert_entry_is_numpy(entry: dict, rows: np.ndarray, with_quantiles: bool) -> None:
    x = rows.astype(np.float32)
    np.testing.assert_array_equal(entry["min"], x.min(0))
    np.testing.assert_array_equal(entry["max"], x.max(0))
    np.testing.assert_array_equal(entry["mean"], x.astype(np.float64).mean(0))
    np.testing.assert_array_equal(entry["std"], x.astype(np.float64).std(0))
    assert list(entry["count"]) == [len(x)]
    if with_quantiles:
        q = np.quantile(x.astype(np.float64), np.asarray(LEVELS), axis=0)  # float64, as documented
        for i, name in enumerate(["q01", "q10", "q50", "q90", "q99"]):
            np.testing.assert_array_equal(entry[name], q[i])


def run(main, capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main(["stats", *map(str, args), "--no-progress"])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_v21_episodes_stats_jsonl_equals_numpy_per_episode(tmp_path, capsys):
    from accelkit.cli import main

    root = FIXTURES / "lerobot_v21"
    code, _, err = run(
        main, capsys, root, "--format", "lerobot", "--per-episode", "-o", tmp_path / "stats.json"
    )
    assert code == 0, err
    lines = [json.loads(x) for x in (tmp_path / "episodes_stats.jsonl").read_text().splitlines()]
    original = [
        json.loads(x) for x in (root / "meta" / "episodes_stats.jsonl").read_text().splitlines()
    ]
    assert [x["episode_index"] for x in lines] == list(range(7))
    for column in NAMES:
        truth = episodes_of(root, column)
        for line in lines:
            entry = line["stats"][column]
            assert set(entry) == {"min", "max", "mean", "std", "count"}  # LeRobot 0.3's keys
            assert_entry_is_numpy(entry, truth[line["episode_index"]], with_quantiles=False)
    # every numeric feature LeRobot keeps statistics of is computed, bookkeeping columns too
    timestamps = episodes_of(root, "timestamp")
    for ours, theirs in zip(lines, original, strict=True):
        assert set(ours["stats"]) == set(theirs["stats"])
        rows = timestamps[ours["episode_index"]]
        assert_entry_is_numpy(ours["stats"]["timestamp"], rows, with_quantiles=False)
    # with --keys, the features not computed keep LeRobot's own entries
    code, _, err = run(
        main, capsys, root, "--format", "lerobot", "--per-episode", "--keys", "action=action",
        "-o", tmp_path / "stats.json",
    )  # fmt: skip
    assert code == 0, err
    lines = [json.loads(x) for x in (tmp_path / "episodes_stats.jsonl").read_text().splitlines()]
    for ours, theirs in zip(lines, original, strict=True):
        assert ours["stats"]["timestamp"] == theirs["stats"]["timestamp"]


def test_v30_episode_metadata_gets_exact_stats_columns(tmp_path, capsys):
    from accelkit.cli import main

    root = FIXTURES / "lerobot_v30"
    code, _, err = run(
        main, capsys, root, "--format", "lerobot", "--per-episode", "-o", tmp_path / "stats.json"
    )
    assert code == 0, err
    written = sorted((tmp_path / "episodes").rglob("*.parquet"))
    originals = sorted((root / "meta" / "episodes").rglob("*.parquet"))
    assert [p.relative_to(tmp_path / "episodes") for p in written] == [
        p.relative_to(root / "meta" / "episodes") for p in originals
    ]
    for ours_path, theirs_path in zip(written, originals, strict=True):
        ours, theirs = pq.read_table(ours_path), pq.read_table(theirs_path)
        assert ours.schema.names == theirs.schema.names  # replaced in place, nothing added
        assert ours.schema == theirs.schema  # LeRobot's types (list<double>, list<int64> count)
        for name in ("episode_index", "dataset_from_index"):
            assert ours.column(name).equals(theirs.column(name))
        for column in [*NAMES, "index"]:  # bookkeeping columns too, as LeRobot keeps them
            truth = episodes_of(root, column)
            for row, e in enumerate(ours.column("episode_index").to_pylist()):
                entry = {
                    stat: ours.column(f"stats/{column}/{stat}")[row].as_py()
                    for stat in (
                        "min",
                        "max",
                        "mean",
                        "std",
                        "count",
                        "q01",
                        "q10",
                        "q50",
                        "q90",
                        "q99",
                    )
                }
                assert_entry_is_numpy(entry, truth[e], with_quantiles=True)


def test_per_episode_comes_from_the_same_reads(monkeypatch):
    from accelkit.stats.formats import sources

    reads = []
    real = sources.FileReader.read_pieces

    def counting(self, path, columns, rows, *rest):
        reads.append(path)
        return real(self, path, columns, rows, *rest)

    monkeypatch.setattr(sources.FileReader, "read_pieces", counting)
    stream = open_source(FIXTURES / "lerobot_v30", keys={"actions": "action"})
    plain = len(stream.fragments)
    compute_stats(stream, quantiles=LEVELS)
    without = len(reads)
    reads.clear()
    result = compute_stats(stream, quantiles=LEVELS, per_episode=True)
    assert len(reads) == without  # no extra read for the episodes
    assert len(result.episodes) == 7 and plain == 4
    assert without == plain  # exact mode's two passes decode each file once


def test_write_into_replaces_meta_files_and_keeps_backups(tmp_path, capsys):
    from accelkit.cli import main

    root = Path(shutil.copytree(FIXTURES / "lerobot_v30", tmp_path / "ds"))
    before = {p: p.read_bytes() for p in (root / "meta").rglob("*") if p.is_file()}
    code, out, err = run(
        main, capsys, root, "--format", "lerobot", "--per-episode", "--write-into", root
    )
    assert code == 0, err
    backups = list((root / "meta" / ".accelkit-backup").iterdir())
    assert len(backups) == 1 and "previous files kept in" in out
    for path, content in before.items():
        if path.name in ("stats.json",) or "episodes" in path.parts:
            saved = backups[0] / path.relative_to(root)
            assert saved.read_bytes() == content
    written = json.loads((root / "meta" / "stats.json").read_text())
    assert written["action"]["count"] == [216]
    lerobots = json.loads((FIXTURES / "lerobot_v30" / "meta" / "stats.json").read_text())
    assert set(written) == set(lerobots)  # every numeric feature, as LeRobot's stats.json
    index = np.arange(216, dtype=np.float64)
    assert written["index"]["mean"] == [index.mean()] and written["index"]["q50"] == [107.5]
    assert (root / "meta" / "stats.run.json").is_file()
    # the dataset still reads the same after the update (episode metadata intact)
    again = compute_stats(open_source(root, keys={"actions": "action"}), quantiles=LEVELS)
    assert again.summary.rows == 216


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--per-episode"], "add --format lerobot"),
        (["--format", "lerobot", "--per-episode", "--max-frames", "10"], "drop --max-frames"),
        (
            ["--format", "lerobot", "--per-episode", "--action-horizon", "4"],
            "drop --action-horizon",
        ),
        (["--format", "lerobot", "--write-into", "ELSEWHERE"], "is not the dataset being read"),
        (["--format", "lerobot", "--write-into", "DS", "-o", "x.json"], "drop --output"),
    ],
)
def test_bad_episode_options_exit_2(tmp_path, capsys, args, message):
    from accelkit.cli import main

    root = Path(shutil.copytree(FIXTURES / "lerobot_v21", tmp_path / "ds"))
    args = [
        str(tmp_path / "other") if a == "ELSEWHERE" else str(root) if a == "DS" else a for a in args
    ]
    code, _, err = run(main, capsys, root, *args)
    assert code == 2 and message in err, err
    assert not (root / "meta" / ".accelkit-backup").exists()


def test_per_episode_needs_a_lerobot_dataset(tmp_path, capsys):
    from accelkit.cli import main

    np.savez(tmp_path / "d.npz", state=np.ones((5, 2), np.float32), actions=np.ones((5, 1)))
    code, _, err = run(main, capsys, tmp_path / "d.npz", "--format", "lerobot", "--per-episode")
    assert code == 2 and "need a LeRobot dataset" in err


def test_v21_sample_dataset_ships_episodes_stats(tmp_path):
    from accelkit.stats.formats.synthetic import write_sample_dataset

    root = write_sample_dataset(tmp_path / "s", episodes=3, frames_per_episode=20, dim=4)
    lines = [
        json.loads(x) for x in (root / "meta" / "episodes_stats.jsonl").read_text().splitlines()
    ]
    assert [x["episode_index"] for x in lines] == [0, 1, 2]
    truth = episodes_of(root, "action")
    for line in lines:
        assert set(line["stats"]) == {
            "observation.state", "action", "timestamp", "frame_index", "episode_index", "index",
            "task_index",
        }  # fmt: skip
        assert_entry_is_numpy(line["stats"]["action"], truth[line["episode_index"]], False)
        assert isinstance(line["stats"]["index"]["min"][0], int)


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    cuts=st.lists(st.integers(0, 240), max_size=5),
    seed=st.integers(0, 1000),
)
def test_collector_splits_anywhere_equal_numpy(lengths, cuts, seed):
    rng = np.random.default_rng(seed)
    episode = np.repeat(np.arange(len(lengths)) * 3 + 1, lengths)
    values = rng.standard_normal((len(episode), 3)).astype(np.float32)
    values[:, 2] = np.round(values[:, 2])  # ties
    bounds = sorted({0, len(episode), *[c for c in cuts if c < len(episode)]})
    collector = EpisodeCollector(LEVELS)
    for a, b in itertools.pairwise(bounds):
        n = b - a
        collector.add(
            {"x": Column(values[a:b], np.ones(n, np.int32), np.arange(a, b), episode[a:b])}
        )
    results = collector.finish()
    assert [r.index for r in results] == sorted(set(episode.tolist()))
    for r in results:
        rows = values[episode == r.index]
        s = r.stats["x"]
        np.testing.assert_array_equal(s.mean, rows.astype(np.float64).mean(0))
        np.testing.assert_array_equal(s.std, rows.astype(np.float64).std(0))
        q = np.quantile(rows.astype(np.float64), np.asarray(LEVELS), axis=0)
        for i, level in enumerate(LEVELS):
            np.testing.assert_array_equal(s.quantiles[level], q[i])


def test_per_episode_quantiles_of_float32_rows_are_numpys_over_float64():
    """docs/stats.md: float64, equal to numpy.quantile over the float64 values bit for bit — not
    numpy's quantile of the float32 values, which interpolates in float32 (these rows: ~1e-8 off).
    LeRobot stores no numpy quantile to match (its per-episode quantiles are binned)."""
    from accelkit.stats.core.episodes import episode_stats

    x = np.random.default_rng(1).normal(3, 1, size=(37, 3)).astype(np.float32)
    wide = np.quantile(x.astype(np.float64), np.asarray(LEVELS), axis=0)
    narrow = np.quantile(x, np.asarray(LEVELS), axis=0)
    assert not np.array_equal(np.asarray(narrow, np.float64), wide)  # the case that differs
    got = episode_stats(x, LEVELS).quantiles
    for i, level in enumerate(LEVELS):
        assert got[level].dtype == np.float64
        np.testing.assert_array_equal(got[level], wide[i])
    big = np.asarray([[2**62 + 1], [2**62 + 7], [5]], np.int64)  # integers: numpy over them
    for i, q in enumerate(np.quantile(big, np.asarray(LEVELS), axis=0)):
        np.testing.assert_array_equal(episode_stats(big, LEVELS).quantiles[LEVELS[i]], q)


def test_episode_appearing_twice_is_an_error():
    collector = EpisodeCollector(LEVELS)
    x = np.ones((2, 1), np.float32)
    with pytest.raises(DataError, match="episode 0 appears again"):
        for e in (0, 1, 0):
            collector.add({"x": Column(x, np.ones(2, np.int32), np.arange(2), np.array([e, e]))})


def test_per_episode_int64_feature_is_exact(tmp_path, capsys):
    from accelkit.cli import main

    root = FIXTURES / "lerobot_v21"
    code, _, err = run(
        main, capsys, root, "--format", "lerobot", "--per-episode", "--keys",
        "i=observation.int_big", "-o", tmp_path / "stats.json",
    )  # fmt: skip
    assert code == 0, err
    truth = episodes_of(root, "observation.int_big")
    for line in (tmp_path / "episodes_stats.jsonl").read_text().splitlines():
        entry = json.loads(line)
        rows = truth[entry["episode_index"]]
        stats = entry["stats"]["observation.int_big"]
        assert stats["min"] == rows.min(0).tolist() and stats["max"] == rows.max(0).tolist()
        assert all(isinstance(v, int) for v in stats["min"] + stats["max"])
        np.testing.assert_array_equal(stats["mean"], rows.astype(np.float64).mean(0))
    saved = json.loads((tmp_path / "stats.json").read_text())["observation.int_big"]
    every = np.concatenate(list(truth.values()))
    assert saved["max"] == every.max(0).tolist() and saved["max"][1] == 123_456_789
