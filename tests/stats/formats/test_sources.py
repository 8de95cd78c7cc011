"""Real parquet datasets in both LeRobot layouts, numpy files, action chunks, sampling, bad input."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from accelkit.errors import DataError, InputError
from accelkit.stats.engine.driver import compute_stats
from accelkit.stats.formats.sources import chunk_weights, open_source
from accelkit.stats.formats.synthetic import write_sample_dataset
from tests.stats.helpers import assert_matches_numpy

LEVELS = [0.01, 0.1, 0.5, 0.9, 0.99]


def read_all(root, column):
    """Independent reference reader: every parquet file under data/, whole column, via pyarrow."""
    files = sorted((root / "data").rglob("*.parquet"))
    tables = [pq.read_table(f, columns=[column, "episode_index"]) for f in files]
    values = np.concatenate([np.stack(t.column(column).to_pylist()) for t in tables]).astype(
        np.float32
    )
    episodes = np.concatenate([t.column("episode_index").to_numpy() for t in tables])
    return values, episodes


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    base = tmp_path_factory.mktemp("lerobot")
    return {
        layout: write_sample_dataset(
            base / layout.replace(".", ""),
            episodes=12,
            frames_per_episode=300,
            dim=6,
            layout=layout,
            seed=3,
            episodes_per_file=5,
        )
        for layout in ("v2.1", "v3.0")
    }


@pytest.mark.parametrize("layout", ["v2.1", "v3.0"])
def test_lerobot_layouts_match_numpy_over_all_rows(datasets, layout):
    root = datasets[layout]
    stream = open_source(root)
    assert stream.keys == {"state": "observation.state", "actions": "action"}
    result = compute_stats(stream, quantiles=LEVELS)
    for key, column in stream.keys.items():
        values, _ = read_all(root, column)
        assert_matches_numpy(result.stats[key], values, LEVELS)


def test_only_needed_columns_are_read_and_videos_never_opened(datasets, monkeypatch):
    root = datasets["v2.1"]
    videos = root / "videos" / "chunk-000" / "observation.images.top"
    videos.mkdir(parents=True, exist_ok=True)
    (videos / "episode_000000.mp4").write_bytes(b"not a video")
    import accelkit.stats.formats.sources as sources

    seen = []

    class SpyFile(pq.ParquetFile):
        def read(self, columns=None, **kwargs):
            seen.append((self._path, columns))
            return super().read(columns=columns, **kwargs)

        def iter_batches(self, batch_size=65536, row_groups=None, columns=None, **kwargs):
            seen.append((self._path, columns))
            return super().iter_batches(batch_size, row_groups, columns, **kwargs)

        def __init__(self, source, *args, **kwargs):
            self._path = str(source)
            super().__init__(source, *args, **kwargs)

    monkeypatch.setattr(pq, "ParquetFile", SpyFile)
    compute_stats(sources.open_source(root, keys={"state": "observation.state"}))
    assert seen and all(cols == ["observation.state", "episode_index"] for _, cols in seen)
    assert not any("videos" in path for path, _ in seen)


def materialized_chunks(actions, episodes, horizon, clamp):
    """Reference: build every frame's H-step chunk explicitly, the way openpi's loader does."""
    rows = []
    for e in np.unique(episodes):
        ep = actions[episodes == e]
        for t in range(len(ep)):
            idx = np.arange(t, t + horizon)
            if clamp:
                rows.append(ep[np.minimum(idx, len(ep) - 1)])
            else:
                rows.append(ep[idx[idx < len(ep)]])
    return np.concatenate(rows)


@pytest.mark.parametrize("layout", ["v2.1", "v3.0"])
@pytest.mark.parametrize("end", ["truncate", "clamp"])
def test_action_horizon_equals_materialized_chunks(datasets, layout, end):
    root = datasets[layout]
    stream = open_source(root, keys={"actions": "action"}, action_horizon=10, chunk_end=end)
    got = compute_stats(stream, quantiles=LEVELS).stats["actions"]
    actions, episodes = read_all(root, "action")
    assert_matches_numpy(got, materialized_chunks(actions, episodes, 10, end == "clamp"), LEVELS)


def test_chunk_weights_with_sampling_match_a_direct_count():
    episodes = np.array([0] * 7 + [1] * 3)
    sampled = np.array([1, 0, 1, 1, 0, 0, 1, 1, 1, 0], bool)
    for end in ("truncate", "clamp"):
        expected = np.zeros(10, int)
        for t in np.flatnonzero(sampled):
            _first, last = np.flatnonzero(episodes == episodes[t])[[0, -1]]
            for j in range(t, t + 4):
                if j <= last:
                    expected[j] += 1
                elif end == "clamp":
                    expected[last] += 1
        np.testing.assert_array_equal(chunk_weights(episodes, sampled, 4, end), expected)


def test_max_frames_is_a_seeded_uniform_sample(datasets):
    root = datasets["v2.1"]
    values, _ = read_all(root, "observation.state")
    stream = open_source(root, keys={"state": "observation.state"}, max_frames=500, seed=7)
    got = compute_stats(stream, quantiles=LEVELS).stats["state"]
    chosen = np.sort(np.random.default_rng(7).choice(len(values), 500, replace=False))
    assert_matches_numpy(got, values[chosen], LEVELS)
    first = compute_stats(
        open_source(root, keys={"state": "observation.state"}, max_frames=500, seed=8)
    ).stats["state"]
    assert not np.array_equal(first.mean, got.mean)  # another seed, another sample
    assert not np.allclose(got.mean, values[:500].mean(0))  # not the first N frames


def test_numpy_files_and_folders(tmp_path, rng):
    state = rng.standard_normal((3000, 4)).astype(np.float32)
    actions = rng.standard_normal((3000, 2)).astype(np.float32)
    np.savez(tmp_path / "data.npz", state=state, actions=actions)
    got = compute_stats(open_source(tmp_path / "data.npz"), quantiles=LEVELS).stats
    assert_matches_numpy(got["state"], state, LEVELS)
    assert_matches_numpy(got["actions"], actions, LEVELS)
    folder = tmp_path / "npy"
    folder.mkdir()
    np.save(folder / "state.npy", state)
    got = compute_stats(
        open_source(folder / "state.npy", keys={"state": "state"}), quantiles=LEVELS
    ).stats
    assert_matches_numpy(got["state"], state, LEVELS)
    parts = tmp_path / "parts"
    parts.mkdir()
    for i in range(3):
        pq.write_table(
            pa.table(
                {
                    "state": pa.FixedSizeListArray.from_arrays(
                        pa.array(state[i * 1000 : (i + 1) * 1000].ravel()), 4
                    )
                }
            ),
            parts / f"part-{i}.parquet",
        )
    with pytest.raises(
        DataError, match=r"has state but not actions \(available: state\).*--keys state=state"
    ):
        open_source(parts)
    got = compute_stats(open_source(parts, keys={"state": "state"}), quantiles=LEVELS).stats
    assert_matches_numpy(got["state"], state, LEVELS)
    np.savez(tmp_path / "other.npz", state=state, act=actions)
    with pytest.raises(DataError, match=r"has state but not actions \(available: state, act\)"):
        open_source(tmp_path / "other.npz")


def test_dict_batches_from_a_loader_with_action_chunks(rng):
    # an existing loader yields (B, H, D) action chunks: every leading axis is flattened
    chunks = rng.standard_normal((40, 8, 10, 3)).astype(np.float32)
    batches = [{"actions": c} for c in chunks]
    got = compute_stats(batches, quantiles=LEVELS).stats["actions"]
    assert_matches_numpy(got, chunks.reshape(-1, 3), LEVELS)
    with pytest.raises(DataError, match="one-shot iterator"):
        compute_stats(iter(batches))


# --- bad input: one clear error each --------------------------------------------------------


def write_parquet(path, **columns):
    pq.write_table(pa.table(columns), path)


def test_missing_path(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        open_source(tmp_path / "nope")


def test_folder_without_data_files(tmp_path):
    (tmp_path / "readme.txt").write_text("hi")
    with pytest.raises(DataError, match="holds no data files"):
        open_source(tmp_path)


def test_missing_column_lists_available(datasets):
    with pytest.raises(
        DataError, match=r"no column 'observation\.joints'.*available: observation\.state, action"
    ):
        open_source(datasets["v3.0"], keys={"state": "observation.joints"})


def test_ragged_column(tmp_path):
    write_parquet(
        tmp_path / "a.parquet",
        state=pa.array([[1.0, 2.0], [3.0], [4.0, 5.0]], pa.list_(pa.float32())),
    )
    with pytest.raises(DataError, match=r"ragged: row 1 has 1 values but row 0 has 2"):
        compute_stats(open_source(tmp_path / "a.parquet", keys={"state": "state"}))


def test_non_numeric_column(tmp_path):
    write_parquet(tmp_path / "a.parquet", state=pa.array(["a", "b"]))
    with pytest.raises(DataError, match="not numbers"):
        compute_stats(open_source(tmp_path / "a.parquet", keys={"state": "state"}))


def test_wrong_width_across_files(tmp_path):
    write_parquet(
        tmp_path / "a.parquet", state=pa.array([[1.0, 2.0]] * 3, pa.list_(pa.float32(), 2))
    )
    write_parquet(
        tmp_path / "b.parquet", state=pa.array([[1.0, 2.0, 3.0]] * 3, pa.list_(pa.float32(), 3))
    )
    with pytest.raises(DataError, match=r"b\.parquet.*3 values per row, but earlier rows had 2"):
        compute_stats(open_source(tmp_path, keys={"state": "state"}))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_names_column_dimension_and_row(tmp_path, bad):
    values = np.arange(20, dtype=np.float32).reshape(10, 2)
    values[7, 1] = bad
    write_parquet(
        tmp_path / "a.parquet", state=pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), 2)
    )
    with pytest.raises(
        DataError,
        match=r"column 'state' dimension 1 holds NaN or Inf at .*a\.parquet row 7.*--skip-nonfinite",
    ):
        compute_stats(open_source(tmp_path / "a.parquet", keys={"state": "state"}))
    got = compute_stats(
        open_source(tmp_path / "a.parquet", keys={"state": "state"}),
        skip_nonfinite=True,
        quantiles=[0.5],
    ).stats["state"]
    np.testing.assert_array_equal(got.nonfinite, [0, 1])
    np.testing.assert_array_equal(got.count, [10, 9])
    assert got.quantiles[0.5][1] == np.quantile(np.delete(values[:, 1], 7), 0.5)


def test_empty_dataset(tmp_path):
    write_parquet(tmp_path / "a.parquet", state=pa.array([], pa.list_(pa.float32(), 2)))
    with pytest.raises(DataError, match="no rows"):
        open_source(tmp_path / "a.parquet", keys={"state": "state"})


def test_all_values_nonfinite_when_skipped(tmp_path):
    write_parquet(tmp_path / "a.parquet", state=pa.array([[np.nan]] * 3, pa.list_(pa.float32(), 1)))
    with pytest.raises(DataError, match="no finite values"):
        compute_stats(
            open_source(tmp_path / "a.parquet", keys={"state": "state"}), skip_nonfinite=True
        )


def test_corrupt_parquet_is_named(tmp_path, datasets):
    (tmp_path / "good.parquet").write_bytes(
        (datasets["v2.1"] / "data" / "chunk-000" / "episode_000000.parquet").read_bytes()
    )
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(DataError, match=r"broken\.parquet is not a readable parquet file") as err:
        compute_stats(open_source(tmp_path))
    assert "remove" not in str(err.value)  # the user's file: never advice to delete it
    assert "re-export it, or restore it from a copy" in str(err.value)


def test_damaged_info_json(tmp_path):
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "info.json").write_text("{not json")
    with pytest.raises(DataError, match=r"info\.json is not valid JSON"):
        open_source(tmp_path)


def test_lerobot_without_data_files(tmp_path):
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "info.json").write_text(
        json.dumps(
            {
                "codebase_version": "v3.0",
                "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
                "features": {},
            }
        )
    )
    with pytest.raises(DataError, match="without episode metadata"):
        open_source(tmp_path)
    with pytest.raises(DataError, match="holds no parquet files"):
        open_source(tmp_path, trust_files=True)


def test_v30_files_are_packed_as_lerobot_records_them(tmp_path, monkeypatch):
    """One row group per episode, a new file once the next episode would pass the size limit; read
    in pieces smaller than an episode and larger, every row still counts once (numpy reference)."""
    from accelkit.stats.formats import sources

    root = write_sample_dataset(
        tmp_path / "packed", episodes=9, frames_per_episode=2000, dim=3, layout="v3.0",
        data_files_size_in_mb=0.15,
    )  # fmt: skip
    files = sorted((root / "data").rglob("*.parquet"))
    assert len(files) >= 3
    lengths = {e["episode_index"]: e["length"] for e in pq.read_table(
        next((root / "meta" / "episodes").rglob("*.parquet"))).to_pylist()}  # fmt: skip
    seen = 0
    for f in files:
        meta = pq.ParquetFile(f).metadata
        groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        assert groups == [lengths[e] for e in range(seen, seen + len(groups))]
        seen += len(groups)
        assert f.stat().st_size < 0.15e6 * 1.2 or len(groups) == 1  # an estimate, as LeRobot's
    assert seen == 9
    values, _ = read_all(root, "action")
    for rows in (700, 1 << 18):  # pieces end inside episodes, or hold whole files
        monkeypatch.setattr(sources, "SPLIT_ROWS", rows)
        result = compute_stats(open_source(root), quantiles=LEVELS, per_episode=True)
        assert_matches_numpy(result.stats["actions"], values, LEVELS)
        assert [e.index for e in result.episodes] == list(range(9))
        _, episodes = read_all(root, "action")
        for e in result.episodes:  # every episode whole, however the pieces cut it
            assert e.stats["actions"].count[0] == np.sum(episodes == e.index)


def test_small_files_are_read_in_runs_and_reach_the_reduction_in_order(tmp_path, monkeypatch):
    """A file per episode (v2.1): the reader threads read runs of small files of about GROUP_ROWS
    rows as one task each (the first file alone), and their chunks reach the reduction in order,
    with each row's id and episode."""
    from accelkit.stats.formats import sources

    monkeypatch.setattr(sources, "GROUP_ROWS", 700)
    root = write_sample_dataset(
        tmp_path / "v21", episodes=30, frames_per_episode=100, dim=3, layout="v2.1", seed=5
    )
    stream = open_source(root)
    tasks = stream._tasks(True)
    assert tasks[0] == [0] and 2 < len(tasks) < len(stream.fragments) == 30
    assert [i for task in tasks for i in task] == list(range(30))
    assert all(sum(stream.fragments[i].num_rows for i in t[:-1]) < 700 for t in tasks)
    chunks = list(stream.chunks())
    for key, name in stream.keys.items():
        values, episodes = read_all(root, name)
        np.testing.assert_array_equal(np.concatenate([c[key].values for c in chunks]), values)
        np.testing.assert_array_equal(np.concatenate([c[key].episode for c in chunks]), episodes)
        row_id = np.concatenate([c[key].row_id for c in chunks])
        np.testing.assert_array_equal(row_id, np.arange(len(values)))


def test_robot_columns_in_one_row_group_files(tmp_path, monkeypatch):
    """`columns="robot"` (grippers, a constant joint, 1e6 + noise, four values, Student-t tails,
    drift) written with a row group per episode and with one per file: the same statistics,
    numpy's, per-episode too; the one-row-group file is decoded with pyarrow's threads, read in
    pieces."""
    from accelkit.stats.formats import readers, sources
    from accelkit.stats.formats.synthetic import ROBOT_COLUMNS

    monkeypatch.setattr(sources, "SPLIT_ROWS", 256)  # pieces of a file's one row group
    threaded = []
    real = readers.huge_row_groups
    monkeypatch.setattr(
        readers,
        "huge_row_groups",
        lambda meta, rows: threaded.append(real(meta, rows)) or real(meta, rows),
    )
    roots = {
        groups: write_sample_dataset(
            tmp_path / groups, episodes=9, frames_per_episode=400, dim=len(ROBOT_COLUMNS),
            layout="v3.0", episodes_per_file=4, columns="robot", row_groups=groups,
        )
        for groups in ("episode", "file")
    }  # fmt: skip
    for path in (roots["file"] / "data").rglob("*.parquet"):
        assert pq.ParquetFile(path).metadata.num_row_groups == 1
    values, _ = read_all(roots["file"], "observation.state")
    assert len(np.unique(values[:, 2])) == 1 and set(np.unique(values[:, 1])) == {0.0, 1.0}
    assert len(np.unique(values[:, 4])) <= 4 and values[:, 3].min() > 999_000
    levels = [0.01, 0.99]
    results = {}
    for groups, root in roots.items():
        threaded.clear()
        results[groups] = compute_stats(open_source(root), quantiles=levels, per_episode=True)
        assert threaded and any(threaded) == (groups == "file")  # (not the last file's 400 rows)
        assert results[groups].summary.passes == 1
        for key, column in (("state", "observation.state"), ("actions", "action")):
            assert_matches_numpy(results[groups].stats[key], read_all(root, column)[0], levels)
    a, b = results["episode"].episodes, results["file"].episodes
    assert [e.index for e in a] == [e.index for e in b] == list(range(9))
    for one, other in zip(a, b, strict=True):
        for key in ("state", "actions"):
            for q in levels:
                assert (
                    one.stats[key].quantiles[q].tobytes() == other.stats[key].quantiles[q].tobytes()
                )


def test_unknown_sample_columns_or_row_groups(tmp_path):
    with pytest.raises(InputError, match="columns 'gaussian'"):
        write_sample_dataset(tmp_path / "a", columns="gaussian")
    with pytest.raises(InputError, match="row_groups 'page'"):
        write_sample_dataset(tmp_path / "b", layout="v3.0", row_groups="page")
