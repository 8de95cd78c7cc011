"""Camera features: LeRobot's sample rule and numbers (its own `compute_episode_stats`, run in its
venv on LeRobot-written datasets: `fixtures/make_camera_fixtures.py`), every frame exactly against
numpy float64, the files `--per-episode`/`--write-into` write, and bad videos (exit 2, one line
naming the file and the episode, nothing written)."""

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

pytest.importorskip("av")

from accelkit.stats.core import camera_stats as cameras
from accelkit.stats.formats import video as camera_files
from accelkit.stats.formats.sources import open_source

FIXTURES = Path(__file__).parents[1] / "fixtures"
EXPECTED = json.loads((FIXTURES / "cameras_expected.json").read_text())  # lerobot 0.4.4, v3.0
EXPECTED_V21 = json.loads((FIXTURES / "cameras_expected_v21.json").read_text())  # lerobot 0.3.3
DATASETS = {**EXPECTED["datasets"], **EXPECTED_V21["datasets"]}
LEVELS = EXPECTED["levels"]
NAMES = ["q01", "q10", "q50", "q90", "q99"]
FRONT, WRIST = "observation.images.front", "observation.images.wrist"
STATS = ("min", "max", "mean", "std")


def assert_equal_to(got: cameras.CameraStats, lerobot: dict | None, numpy_ref: dict) -> None:
    """mean/min/max/count bit for bit as LeRobot computes them; std and quantiles as numpy over
    the same pixels. LeRobot 0.3.3's std (np.std) agrees; 0.4.4's is 0 from a uint8 overflow and
    its quantiles are histogram estimates: checked to be so, and ours close to them."""
    if lerobot is not None:
        assert got.mean.tolist() == lerobot["mean"]
        assert got.min.tolist() == lerobot["min"]
        assert got.max.tolist() == lerobot["max"]
        assert [got.count] == lerobot["count"]
        if "q01" in lerobot:  # lerobot 0.4.4
            assert lerobot["std"] == [0.0, 0.0, 0.0]  # (uint8 ** 2) wraps
            for q, name in zip(LEVELS, NAMES, strict=True):
                # an estimate: within 5 grey levels here (768 pixels in the 1-frame episode)
                np.testing.assert_allclose(got.quantiles[q], lerobot[name], atol=5 / 255)
        else:  # lerobot 0.3.3: np.std of the sampled uint8 pixels
            np.testing.assert_allclose(got.std, lerobot["std"], rtol=1e-13, atol=0)
    assert got.mean.tolist() == numpy_ref["mean"]
    assert got.min.tolist() == numpy_ref["min"]
    assert got.max.tolist() == numpy_ref["max"]
    assert got.count == numpy_ref["count"]
    np.testing.assert_allclose(got.std, numpy_ref["std"], rtol=1e-13, atol=0)
    for q in LEVELS:
        assert got.quantiles[q].tolist() == numpy_ref["quantiles"][str(q)]


# --- LeRobot's rule ----------------------------------------------------------------------------


def test_sample_count_follows_lerobots_table():
    # estimate_num_samples' docstring: up to ~500 -> 100, 1000 -> 177, 2000 -> 299, 5000 -> 594,
    # 10000 -> 1000, 20000 -> 1681; fewer than 100 frames -> all of them
    table = {1: 1, 7: 7, 99: 99, 100: 100, 500: 105, 1000: 177, 2000: 299, 5000: 594}
    table.update({10_000: 1000, 20_000: 1681, 10**7: 10_000})
    assert {n: cameras.sample_count(n) for n in table} == table
    assert cameras.sample_frames(1).tolist() == [0]
    idx = cameras.sample_frames(700)
    assert idx[0] == 0 and idx[-1] == 699 and len(idx) == 136 and np.all(np.diff(idx) > 0)


def test_downsample_strides_like_lerobot():
    frame = np.arange(300 * 310 * 3, dtype=np.int64).reshape(300, 310, 3)
    assert cameras.downsample(frame[:299, :299]).shape == (299, 299, 3)  # both below 300
    assert cameras.downsample(frame).shape == (150, 155, 3)  # width 310 > height: stride 2
    tall = np.zeros((640, 450, 3))
    assert cameras.downsample(tall).shape == (160, 113, 3)  # height larger: stride 4
    np.testing.assert_array_equal(cameras.downsample(frame), frame[::2, ::2])


@pytest.mark.parametrize("version", ["0.4.4", "0.3.3"])
@pytest.mark.parametrize("case", sorted(EXPECTED["synthetic"]))
def test_sample_mode_equals_lerobots_compute_episode_stats(case, version):
    """Frames LeRobot sampled and downsampled (700 of 5x6 px; 300x310 and 640x450 px)."""
    spec = (EXPECTED if version == "0.4.4" else EXPECTED_V21)["synthetic"][case]
    rng = np.random.default_rng(spec["seed"])
    for (n, h, w), ref in zip(spec["shapes"], spec["episodes"], strict=True):
        frames = rng.integers(0, 256, (n, h, w, 3), dtype=np.uint8)
        picked = np.stack([cameras.downsample(f) for f in frames[cameras.sample_frames(n)]])
        assert [len(picked), 3, *picked.shape[1:3]] == ref["sampled_shape"]
        got = cameras.finalize(cameras.update(cameras.init(), picked), LEVELS)
        assert_equal_to(got, ref["lerobot"], ref["sample_numpy"])


# --- LeRobot-written datasets ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sample", "all"])
@pytest.mark.parametrize("name", sorted(DATASETS))
def test_episodes_of_lerobot_written_datasets(name, mode):
    """v3.0 (lerobot 0.4.4): AV1 (LeRobot's default libsvtav1, several episodes per mp4,
    rolled-over files), H.264, PNG image columns; v2.1 (lerobot 0.3.3): one AV1 file per episode,
    PNG image columns. Every episode of every camera."""
    source = open_source(FIXTURES / name).lerobot
    result = camera_files.compute_camera_stats(source, mode, LEVELS)
    expected = DATASETS[name]
    assert sorted(result.stats) == sorted(expected)
    for key, ref in expected.items():
        for episode, entry in ref["episodes"].items():
            got = result.episodes[int(episode)][key]
            if mode == "sample":
                assert_equal_to(got, entry["lerobot"], entry["sample_numpy"])
            else:
                assert_equal_to(got, None, entry["all_numpy"])


def pooled(entries: list[dict]) -> dict:
    """Statistics of the union of episodes with equal pixels per frame, from their float64
    means/stds and frame counts (the parallel formula), for the global check."""
    n = np.array([e["count"] for e in entries], np.float64)[:, None]
    mean = np.array([e["mean"] for e in entries])
    var = np.array([e["std"] for e in entries]) ** 2
    total = (mean * n).sum(0) / n.sum()
    return {
        "mean": total,
        "std": np.sqrt(((var + (mean - total) ** 2) * n).sum(0) / n.sum()),
        "min": np.min([e["min"] for e in entries], 0),
        "max": np.max([e["max"] for e in entries], 0),
        "count": int(n.sum()),
    }


@pytest.mark.parametrize("mode", ["sample", "all"])
def test_global_statistics_pool_the_episodes(mode):
    source = open_source(FIXTURES / "lerobot_v30_cameras").lerobot
    result = camera_files.compute_camera_stats(source, mode, LEVELS)
    for key, ref in EXPECTED["datasets"]["lerobot_v30_cameras"].items():
        field = "sample_numpy" if mode == "sample" else "all_numpy"
        want = pooled([e[field] for e in ref["episodes"].values()])
        got = result.stats[key]
        np.testing.assert_allclose(got.mean, want["mean"], rtol=1e-13)
        np.testing.assert_allclose(got.std, want["std"], rtol=1e-12)
        assert got.min.tolist() == want["min"].tolist()
        assert got.max.tolist() == want["max"].tolist()
        assert got.count == want["count"]
        if mode == "sample":  # LeRobot's aggregate_stats of its own episodes: same mean
            np.testing.assert_allclose(got.mean, ref["lerobot_aggregate"]["mean"], rtol=1e-13)
            assert got.count == ref["lerobot_aggregate"]["count"][0]


def test_merge_is_exact_and_order_free():
    rng = np.random.default_rng(3)
    parts = [rng.integers(0, 256, (k, 7, 5, 3), dtype=np.uint8) for k in (1, 4, 9)]
    states = [cameras.update(cameras.init(), p) for p in parts]
    whole = cameras.update(cameras.init(), np.concatenate(parts))
    for a, b, c in ((0, 1, 2), (2, 0, 1), (1, 2, 0)):
        merged = cameras.merge(cameras.merge(states[a], states[b]), states[c])
        assert merged.frames == whole.frames
        np.testing.assert_array_equal(merged.histogram, whole.histogram)


# --- the CLI: outputs --------------------------------------------------------------------------


def run(main, capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main(["stats", *map(str, args), "--no-progress"])
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def entry_of(stats: cameras.CameraStats, names=True) -> dict:
    return cameras.lerobot_entry(stats, dict(zip(LEVELS, NAMES, strict=True)) if names else None)


def test_write_into_replaces_stale_camera_entries(tmp_path, capsys):
    """LeRobot 0.4.4 wrote std 0 for its cameras; --write-into replaces stats.json's and every
    meta/episodes row's camera entries (LeRobot's column types), keeping the other columns."""
    from accelkit.cli import main

    root = shutil.copytree(FIXTURES / "lerobot_v30_cameras", tmp_path / "ds")
    before = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet")
    code, _, err = run(
        main, capsys, root, "--format", "lerobot", "--per-episode", "--write-into", root
    )
    assert code == 0, err
    want = camera_files.compute_camera_stats(open_source(root).lerobot, "sample", LEVELS)
    stats = json.loads((root / "meta/stats.json").read_text())
    for key in (FRONT, WRIST):
        assert stats[key] == entry_of(want.stats[key])
        assert stats[key]["std"] != [[[0.0]], [[0.0]], [[0.0]]]
    after = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet")
    assert after.schema == before.schema  # same columns, same (LeRobot's) types
    rows = after.to_pylist()
    for row in rows:
        for key in (FRONT, WRIST):
            want_entry = entry_of(want.episodes[row["episode_index"]][key])
            for stat, value in want_entry.items():
                assert row[f"stats/{key}/{stat}"] == value
    # every numeric feature's and camera's statistics are replaced; nothing else
    untouched = [c for c in before.column_names if not c.startswith("stats/")]
    assert after.select(untouched) == before.select(untouched)
    run_facts = json.loads((root / "meta/stats.run.json").read_text())
    assert run_facts["images"]["mode"] == "sample" and run_facts["images"]["frames"] == 82


def test_images_all_and_none_and_openpi(tmp_path, capsys):
    from accelkit.cli import main

    root = FIXTURES / "lerobot_v30_h264"
    out = tmp_path / "all.json"
    code, _, err = run(main, capsys, root, "--format", "lerobot", "--images", "all", "-o", out)
    assert code == 0, err
    want = camera_files.compute_camera_stats(open_source(root).lerobot, "all", LEVELS)
    assert json.loads(out.read_text())[FRONT] == entry_of(want.stats[FRONT])
    out = tmp_path / "none.json"
    code, _, err = run(main, capsys, root, "--format", "lerobot", "--images", "none", "-o", out)
    assert code == 0, err
    assert FRONT not in json.loads(out.read_text())
    out = tmp_path / "norm_stats.json"  # openpi: no cameras by default, refused when asked
    code, _, err = run(main, capsys, root, "-o", out)
    assert code == 0, err
    assert FRONT not in json.loads(out.read_text())["norm_stats"]
    code, _, err = run(main, capsys, root, "--images", "sample", "-o", tmp_path / "x.json")
    assert code == 2 and "--format lerobot" in err and not (tmp_path / "x.json").exists()


def test_v21_episodes_stats_jsonl_carry_cameras(tmp_path, capsys):
    """lerobot 0.3.3's v2.1 layout: --write-into replaces each line's camera entries (its keys:
    min, max, mean, std, count), keeping the numeric features' entries."""
    from accelkit.cli import main

    root = shutil.copytree(FIXTURES / "lerobot_v21_cameras", tmp_path / "ds")
    code, _, err = run(
        main, capsys, root, "--format", "lerobot", "--per-episode", "--write-into", root
    )
    assert code == 0, err
    want = camera_files.compute_camera_stats(open_source(root).lerobot, "sample", LEVELS)
    lines = [json.loads(x) for x in (root / "meta/episodes_stats.jsonl").read_text().splitlines()]
    assert [x["episode_index"] for x in lines] == [0, 1, 2, 3]
    for line in lines:
        for key in (FRONT, WRIST):
            entry = line["stats"][key]
            assert entry == entry_of(want.episodes[line["episode_index"]][key], names=False)
            ref = EXPECTED_V21["datasets"]["lerobot_v21_cameras"][key]["episodes"]
            lerobot = ref[str(line["episode_index"])]["lerobot"]  # 0.3.3 on the decoded frames
            assert [v[0][0] for v in entry["mean"]] == lerobot["mean"]
            np.testing.assert_allclose([v[0][0] for v in entry["std"]], lerobot["std"], rtol=1e-13)
    stats = json.loads((root / "meta/stats.json").read_text())
    assert stats[FRONT] == entry_of(want.stats[FRONT])


# --- bad input: one line naming the file and the episode, exit 2, nothing written ---------------


def digest(root: Path) -> dict:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def write_video(path: Path, frames: int) -> None:
    """A video of `frames` 32x24 frames at the dataset's 10 fps (H.264: PyAV's wheel encodes it)."""
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 32, 24, "yuv420p"
        for i in range(frames):
            image = np.full((24, 32, 3), 10 * i, np.uint8)
            out.mux(stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
        out.mux(stream.encode(None))


SECOND = f"videos/{FRONT}/chunk-000/file-001.mp4"  # episodes 1, 2 and 3


def break_missing(root):
    (root / SECOND).unlink()


def break_garbage(root):
    (root / SECOND).write_bytes(b"not a video" * 50)


def break_codec(root):
    data = (root / SECOND).read_bytes()
    assert b"av01" in data
    (root / SECOND).write_bytes(data.replace(b"av01", b"zz01"))


def break_frames(root):
    write_video(root / SECOND, 10)  # 10 of 21 frames: episode 1 (7) whole, episode 2 cut short


@pytest.mark.parametrize(
    "breaker, words, episode",
    [
        (break_missing, "missing", "episodes 1, 2, 3"),
        (break_garbage, "not a readable video", "episodes 1, 2, 3"),
        (break_codec, "cannot decode", "episodes 1, 2, 3"),
        (break_frames, "holds 3 of the episode's frames but the metadata says 13", "episode 2"),
    ],
)
def test_bad_videos_stop_the_run_before_anything_is_written(
    tmp_path, capsys, breaker, words, episode
):
    from accelkit.cli import main

    root = shutil.copytree(FIXTURES / "lerobot_v30_cameras", tmp_path / "ds")
    breaker(root)
    before = digest(root)
    code, _, err = run(
        main, capsys, root, "--format", "lerobot", "--per-episode", "--write-into", root
    )
    assert code == 2
    line = err.strip().splitlines()[-1]
    assert len(err.strip().splitlines()) == 1, err
    assert line.startswith("error: ") and str(root / SECOND) in line
    assert words in line and episode in line, line
    assert digest(root) == before  # nothing written, no backup made


@pytest.mark.parametrize(
    "shape", [(1, 5, 6, 3), (16, 120, 160, 3), (3, 99, 331, 3), (2, 64, 64, 4)]
)
def test_histogram_counts_every_channel(shape):
    """The paired-word histogram (even pixel counts of 3 channels) and the plain one (the rest)."""
    frames = np.random.default_rng(5).integers(0, 256, shape, dtype=np.uint8)
    flat = frames.reshape(-1, shape[-1])
    want = np.stack([np.bincount(flat[:, c], minlength=256) for c in range(shape[-1])])
    np.testing.assert_array_equal(cameras.histogram(frames), want)
    np.testing.assert_array_equal(
        cameras.histogram(frames[:, ::2, ::3]), cameras.histogram(frames[:, ::2, ::3].copy())
    )


def test_sample_mode_skips_only_unsampled_av1_pictures(tmp_path):
    """Two long episodes in one AV1 file with key frames every 2 frames (LeRobot's g=2): sample
    mode leaves whole groups of pictures and trailing frames undecoded; its frames must still be
    the sampled ones, bit for bit, as a plain decode of every frame gives them."""
    import av

    path = tmp_path / "long.mp4"
    rng = np.random.default_rng(9)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libsvtav1", rate=10, options={"g": "2", "crf": "30"})
        stream.width, stream.height, stream.pix_fmt = 32, 24, "yuv420p"
        for i in range(250):
            image = np.clip(rng.integers(0, 40, (24, 32, 3)) + 3 * i % 200, 0, 255)
            frame = av.VideoFrame.from_ndarray(image.astype(np.uint8), format="rgb24")
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    with av.open(str(path)) as container:
        every = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
        assert len(every) == 250
    clips = [camera_files.Clip(0, 130, path, 0.0), camera_files.Clip(1, 120, path, 13.0)]
    got: dict[int, np.ndarray] = {}
    for item in camera_files.read_video(path, clips, "cam", 10.0, "sample"):
        got[item.episode] = got.get(item.episode, 0) + cameras.histogram(item.frames)
    for clip, offset in zip(clips, (0, 130), strict=True):
        picked = np.stack([every[offset + i] for i in cameras.sample_frames(clip.length)])
        assert cameras.sample_count(clip.length) == 100 < clip.length
        np.testing.assert_array_equal(got[clip.episode], cameras.histogram(picked))
