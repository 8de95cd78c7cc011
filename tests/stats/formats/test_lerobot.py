"""Datasets written by LeRobot's own code (tests/stats/fixtures): exact statistics, and the dataset's
metadata as the contract for what is read (stray files, missing files, wrong counts, wrong features)."""

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from accelkit.errors import DataError
from accelkit.stats.engine.driver import compute_stats
from accelkit.stats.formats.sources import open_source
from tests.stats.helpers import assert_matches_numpy
from tests.support.stats import FIXTURES, column_of, listed_files

VERSIONS = ["lerobot_v21", "lerobot_v30"]
LEVELS = [0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0]
FRAMES = 216  # 7 episodes: 5, 60, 1, 33, 47, 12, 58


@pytest.fixture
def copy_of(tmp_path):
    def make(version: str) -> Path:
        return Path(shutil.copytree(FIXTURES / version, tmp_path / version))

    return make


@pytest.mark.parametrize("version", VERSIONS)
def test_lerobot_written_datasets_match_numpy(version):
    root = FIXTURES / version
    keys = {"state": "observation.state", "actions": "action"}
    result = compute_stats(open_source(root, keys=keys), quantiles=LEVELS)
    assert result.summary.rows == FRAMES
    for key, column in keys.items():
        x = column_of(root, column).astype(np.float32)
        assert x.shape[0] == FRAMES
        assert_matches_numpy(result.stats[key], x, LEVELS)


def test_both_versions_hold_the_same_frames():
    keys = {"state": "observation.state"}
    a = compute_stats(open_source(FIXTURES / VERSIONS[0], keys=keys), quantiles=LEVELS)
    b = compute_stats(open_source(FIXTURES / VERSIONS[1], keys=keys), quantiles=LEVELS)
    for q in LEVELS:
        np.testing.assert_array_equal(a.stats["state"].quantiles[q], b.stats["state"].quantiles[q])
    np.testing.assert_array_equal(a.stats["state"].mean, b.stats["state"].mean)


@pytest.mark.parametrize("version", VERSIONS)
def test_stray_parquet_file_is_named_and_not_read(version, copy_of, caplog):
    root = copy_of(version)
    first = listed_files(root)[1]
    shutil.copy(first, root / "data" / "backup_copy.parquet")
    shutil.copy(first, first.parent / "old-download.parquet")
    with caplog.at_level(logging.WARNING):
        result = compute_stats(open_source(root, keys={"actions": "action"}), quantiles=LEVELS)
    assert result.summary.rows == FRAMES
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "2 parquet files under data/ not part of the dataset" in warning
    assert "backup_copy.parquet" in warning and "old-download.parquet" in warning
    clean = compute_stats(
        open_source(FIXTURES / version, keys={"actions": "action"}), quantiles=LEVELS
    )
    np.testing.assert_array_equal(result.stats["actions"].mean, clean.stats["actions"].mean)
    # --trust-files reads what is there, and says that it disagrees with total_frames
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        trusted = open_source(root, keys={"actions": "action"}, trust_files=True)
    assert trusted.total_rows > FRAMES
    assert f"total_frames is {FRAMES}" in " ".join(r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("version", VERSIONS)
def test_missing_data_file_is_an_error(version, copy_of):
    root = copy_of(version)
    gone = listed_files(root)[-1]
    gone.unlink()
    with pytest.raises(
        DataError, match=f"{gone.name} is listed by the episode metadata but missing"
    ):
        open_source(root)
    assert open_source(root, trust_files=True).total_rows < FRAMES


@pytest.mark.parametrize("version", VERSIONS)
def test_file_with_other_row_count_is_an_error_naming_both(version, copy_of):
    root = copy_of(version)
    target = listed_files(root)[1]
    table = pq.read_table(target)
    pq.write_table(table.slice(0, table.num_rows - 3), target)
    stream = open_source(root)  # the listing comes from the metadata: no file is opened for it
    with pytest.raises(DataError) as caught:  # the file's reader checks its footer first
        compute_stats(stream)
    message = str(caught.value)
    assert (
        f"holds {table.num_rows - 3:,} rows but the episode metadata says {table.num_rows:,}"
        in message
    )
    assert target.name in message and "--trust-files" in message
    assert open_source(root, trust_files=True).total_rows == FRAMES - 3


@pytest.mark.parametrize("version", VERSIONS)
def test_total_frames_disagreeing_with_episodes_is_an_error(version, copy_of):
    root = copy_of(version)
    info_file = root / "meta" / "info.json"
    info = json.loads(info_file.read_text())
    info["total_frames"] = 101_584
    info_file.write_text(json.dumps(info))
    with pytest.raises(
        DataError, match=f"add up to {FRAMES} frames but .* total_frames is 101,584"
    ):
        open_source(root)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"shape": [20]}, "has 4 values per row but meta/info.json declares shape \\[20\\]"),
        ({"dtype": "int64"}, "holds float32 values but meta/info.json declares int64"),
    ],
)
def test_feature_disagreeing_with_info_json_is_an_error(version, copy_of, change, message):
    root = copy_of(version)
    info_file = root / "meta" / "info.json"
    info = json.loads(info_file.read_text())
    info["features"]["action"].update(change)
    info_file.write_text(json.dumps(info))
    with pytest.raises(DataError, match=f"column 'action' {message}"):
        compute_stats(open_source(root, keys={"actions": "action"}))


def test_data_path_outside_the_dataset_is_refused(copy_of):
    root = copy_of("lerobot_v21")
    info_file = root / "meta" / "info.json"
    info = json.loads(info_file.read_text())
    info["data_path"] = "../../elsewhere/episode_{episode_index:06d}.parquet"
    info_file.write_text(json.dumps(info))
    with pytest.raises(DataError, match="points outside the dataset"):
        open_source(root)


def test_cli_exits_2_on_a_metadata_disagreement(copy_of, tmp_path, capsys):
    from accelkit.cli import main

    def run(*args):
        with pytest.raises(SystemExit) as exit_info:
            main(["stats", str(root), "-o", str(out), "--no-progress", *args])
        return exit_info.value.code, capsys.readouterr().err

    root = copy_of("lerobot_v30")
    target = listed_files(root)[0]
    pq.write_table(pq.read_table(target).slice(0, 2), target)
    out = tmp_path / "stats.json"
    code, err = run()
    assert code == 2 and "holds 2 rows but the episode metadata says 5" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    code, err = run("--trust-files")
    assert code == 0, err
    assert out.exists()


@pytest.mark.parametrize("version", VERSIONS)
def test_int64_feature_above_2_24_is_exact(version):
    root = FIXTURES / version
    x = column_of(root, "observation.int_big")
    assert x.dtype == np.int64 and x.max() == 123_456_789
    result = compute_stats(open_source(root, keys={"i": "observation.int_big"}), quantiles=LEVELS)
    got = result.stats["i"]
    np.testing.assert_array_equal(got.min, x.min(0))
    np.testing.assert_array_equal(got.max, x.max(0))
    expected = np.quantile(x, np.asarray(LEVELS), axis=0)
    for i, q in enumerate(LEVELS):
        np.testing.assert_array_equal(got.quantiles[q], expected[i])
    np.testing.assert_allclose(got.mean, x.astype(np.float64).mean(0), rtol=1e-15)
    np.testing.assert_allclose(got.std, x.astype(np.float64).std(0), rtol=1e-12)


@pytest.mark.parametrize("version", VERSIONS)
def test_symlinked_data_folder_is_read(version, tmp_path):
    """data/ on another disk (or a hub-cache snapshot of symlinks) is still the dataset's data."""
    root = tmp_path / "ds"
    (root / "meta").mkdir(parents=True)
    for path in (FIXTURES / version / "meta").rglob("*"):
        if path.is_file():
            target = root / "meta" / path.relative_to(FIXTURES / version / "meta")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(path)
    (root / "data").symlink_to(FIXTURES / version / "data")
    result = compute_stats(open_source(root, keys={"actions": "action"}), quantiles=LEVELS)
    assert result.summary.rows == FRAMES


def test_null_in_v30_episode_metadata_is_a_data_error(copy_of):
    root = copy_of("lerobot_v30")
    path = sorted((root / "meta" / "episodes").rglob("*.parquet"))[0]
    table = pq.read_table(path)
    lengths = table.column("length").to_pylist()
    lengths[0] = None
    table = table.set_column(
        table.schema.get_field_index("length"), "length", pa.array(lengths, pa.int64())
    )
    pq.write_table(table, path)
    with pytest.raises(DataError, match="length is None, not a count"):
        open_source(root)


# --- the same datasets on object storage (moto's S3 server on 127.0.0.1) ---------------------


@pytest.fixture(scope="module")
def s3_fixtures(s3_server):
    """Both fixtures uploaded once: {version: s3 URI}."""
    return {v: s3_server.upload(FIXTURES / v, "accelkit-lerobot", v) for v in VERSIONS}


@pytest.mark.parametrize("version", VERSIONS)
def test_dataset_on_s3_equals_the_local_run_bit_for_bit(version, s3_fixtures, s3_env, tmp_path):
    from accelkit.cli import main

    outputs = {}
    for where, dataset in (("local", FIXTURES / version), ("s3", s3_fixtures[version])):
        output = f"s3://accelkit-lerobot/out-{version}/stats.json"
        if where == "local":
            output = str(tmp_path / "stats.json")
        with pytest.raises(SystemExit) as done:
            main(["stats", str(dataset), "--format", "lerobot", "-o", output, "--no-progress"])
        assert done.value.code == 0
    outputs["local"] = (tmp_path / "stats.json").read_bytes()
    client = s3_env.client()
    body = client.get_object(Bucket="accelkit-lerobot", Key=f"out-{version}/stats.json")["Body"]
    outputs["s3"] = body.read()
    assert outputs["s3"] == outputs["local"]  # the written statistics, byte for byte
    sidecar = client.get_object(Bucket="accelkit-lerobot", Key=f"out-{version}/stats.run.json")
    facts = json.loads(sidecar["Body"].read())
    assert facts["source"].endswith(f"dataset {s3_fixtures[version]}") and facts["rows"] == FRAMES
    stats = json.loads(outputs["s3"])  # and against numpy, independently of the local run
    x = column_of(FIXTURES / version, "observation.state").astype(np.float32)
    expected = np.quantile(x, [0.5], axis=0)[0]
    assert np.array_equal(np.asarray(stats["observation.state"]["q50"]), expected)


@pytest.mark.parametrize("version", VERSIONS)
def test_missing_object_is_named_by_its_uri(version, s3_server, s3_env):
    first = listed_files(FIXTURES / version)[0].relative_to(FIXTURES / version)
    uri = s3_server.upload(FIXTURES / version, "accelkit-broken", version)
    s3_server.client().delete_object(Bucket="accelkit-broken", Key=f"{version}/{first}")
    with pytest.raises(
        DataError,
        match=rf"s3://accelkit-broken/{version}/{first} is listed by the episode metadata but missing",
    ):
        open_source(uri)


def test_endpoint_flag_beats_the_environment(s3_fixtures, s3_server, monkeypatch):
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    stream = open_source(s3_fixtures["lerobot_v21"], endpoint_url=s3_server.endpoint)
    assert stream.total_rows == FRAMES


# --- cases that once passed without a word -------------------------------------------------------


def run_stats(capsys, *args) -> tuple[int, str]:
    from accelkit.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["stats", *args, "--no-progress"])
    return exit_info.value.code, capsys.readouterr().err


def test_zero_length_v21_episode_is_named_and_gets_no_line(copy_of, tmp_path, capsys):
    root = copy_of("lerobot_v21")
    first = listed_files(root)[0]
    empty = first.parent / "episode_000007.parquet"
    pq.write_table(pq.read_table(first).slice(0, 0), empty)
    with (root / "meta" / "episodes.jsonl").open("a") as handle:
        handle.write(json.dumps({"episode_index": 7, "tasks": ["x"], "length": 0}) + "\n")
    info_file = root / "meta" / "info.json"
    info = json.loads(info_file.read_text())
    info["total_episodes"] = 8
    info_file.write_text(json.dumps(info))
    out = tmp_path / "out" / "stats.json"
    code, err = run_stats(capsys, str(root), "--format", "lerobot", "--per-episode", "-o", str(out))
    assert code == 0, err
    assert "episode 7 has no frames (length 0 in meta/episodes.jsonl)" in err
    lines = (out.parent / "episodes_stats.jsonl").read_text().splitlines()
    assert [json.loads(line)["episode_index"] for line in lines] == list(range(7))


def test_one_frame_warns_that_std_is_zero(tmp_path, capsys):
    table = pa.table(
        {
            "observation.state": pa.array([[1.0, 2.0]], pa.list_(pa.float32(), 2)),
            "action": pa.array([[0.5]], pa.list_(pa.float32(), 1)),
        }
    )
    data = tmp_path / "one.parquet"
    pq.write_table(table, data)
    out = tmp_path / "norm_stats.json"
    code, err = run_stats(capsys, str(data), "-o", str(out))
    assert code == 0, err
    assert "'observation.state', 'action' computed from 1 frame: std is 0" in err
    stats = json.loads(out.read_text())["norm_stats"]
    assert stats["state"]["std"] == [0.0, 0.0] and stats["state"]["q01"] == [1.0, 2.0]


@pytest.mark.parametrize("version", VERSIONS)
def test_declared_feature_absent_from_the_data_is_named(version, copy_of, tmp_path, capsys):
    root = copy_of(version)
    info_file = root / "meta" / "info.json"
    info = json.loads(info_file.read_text())
    info["features"]["observation.effort"] = {"dtype": "float32", "shape": [3], "names": None}
    info_file.write_text(json.dumps(info))
    out = tmp_path / "norm_stats.json"
    code, err = run_stats(capsys, str(root), "-o", str(out))
    assert code == 0, err
    assert "meta/info.json declares 'observation.effort', which" in err
    assert "does not hold: no statistics for it" in err
    code, err = run_stats(
        capsys, str(root), "-o", str(tmp_path / "b.json"), "--keys", "state=observation.effort"
    )
    assert code == 2 and "declares feature 'observation.effort' but" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "b.json").exists()


@pytest.mark.parametrize("version", VERSIONS)
def test_float64_data_declared_float32_gets_one_consistent_error(version, copy_of, caplog):
    root = copy_of(version)
    for path in listed_files(root):
        table = pq.read_table(path)
        index = table.schema.get_field_index("action")
        values = np.asarray(table.column("action").to_pylist(), np.float64) + 1e-9
        width = values.shape[1]
        column = pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), width)
        pq.write_table(table.set_column(index, "action", column), path)
    with caplog.at_level(logging.WARNING), pytest.raises(DataError) as error:
        compute_stats(open_source(root, keys={"actions": "action"}))
    assert "holds float64 values but meta/info.json declares float32" in str(error.value)
    assert not any("float32 rounding" in r.getMessage() for r in caplog.records)
