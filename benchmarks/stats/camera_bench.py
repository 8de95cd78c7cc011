"""Camera statistics: `accelkit.stats.core.camera_stats` against LeRobot's `compute_episode_stats` and
against decoding alone, in one run, on the same LeRobot-written dataset.

Methods
  sample       accelkit `--images sample` (LeRobot's frame sample and downsampling), every camera
               and episode, decoding the videos included
  all          accelkit `--images all` (every pixel of every frame)
  decode       PyAV decoding alone: every frame of every video converted to RGB (`rgb24`), as
               `all` decodes them, nothing reduced — the ceiling of `all`
  lerobot      LeRobot 0.4.4's `compute_episode_stats` on the same episodes, given what it is given
               while recording: the frames as PNG files (written beforehand from the decoded video,
               not timed). Runs in LeRobot's own environment (--lerobot-python), as a subprocess.

Dataset: CAMERAS video cameras x EPISODES x FRAMES frames at HEIGHTxWIDTH, written by LeRobot's
writer (`LeRobotDataset.create` / `add_frame` / `save_episode`, its default AV1 codec) into
--data-dir on first use (the lerobot venv of tests/stats/fixtures/make_lerobot_fixtures.py).

Timing: one warm-up of each accelkit method (page cache), then --repeats interleaved rounds;
medians. The LeRobot baseline is timed once per episode and camera, summed. Results: JSON (--out).

    python -m benchmarks.stats.camera_bench --lerobot-python /tmp/lr04/bin/python
    python -m benchmarks.stats.camera_bench --lerobot-python /tmp/lr04/bin/python --episodes 100 \\
        --height 480 --width 640       # the issue's 2 x 100 x 300 at 640x480 (long to write)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import (
    REPO,
    ArgumentParser,
    checked,
    interpreter,
    out_file,
    positive,
    work_dir,
    write_results,
)
from benchmarks.common import log as common_log

SCHEMA = "accelkit.camera_bench/1"
MODULE = "benchmarks.stats.camera_bench"


def log(msg: str) -> None:
    common_log(msg, "camera_bench")


# --- in LeRobot's environment ------------------------------------------------------------------


def make_dataset(root: Path, cameras: int, episodes: int, frames: int, height: int, width: int):
    os.environ["HF_HUB_OFFLINE"] = "1"
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    keys = [f"observation.images.cam{i}" for i in range(cameras)]
    features = {"observation.state": {"dtype": "float32", "shape": (2,), "names": ["a", "b"]}}
    features["action"] = {"dtype": "float32", "shape": (2,), "names": ["a", "b"]}
    for key in keys:
        features[key] = {
            "dtype": "video",
            "shape": (height, width, 3),
            "names": ["height", "width", "channels"],
        }
    ds = LeRobotDataset.create(
        repo_id="accelkit/camera_bench", fps=30, features=features, root=root, use_videos=True
    )
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width]
    for e in range(episodes):
        for t in range(frames):
            frame = {"observation.state": rng.standard_normal(2).astype(np.float32)}
            frame["action"] = rng.standard_normal(2).astype(np.float32)
            frame["task"] = "look"
            for c, key in enumerate(keys):
                base = np.stack([x + 2 * t + 40 * c, y + e * 5, (x + y) // 2 + t], -1)
                noise = rng.integers(0, 16, (height, width, 3))
                frame[key] = ((base + noise) % 256).astype(np.uint8)
            ds.add_frame(frame)
        ds.save_episode()
        log(f"wrote episode {e + 1}/{episodes}")
    ds.finalize()


def lerobot_child(root: Path, out: Path) -> None:
    """Time compute_episode_stats per episode and camera, on PNGs of the decoded frames."""
    import tempfile

    import av
    import pandas as pd
    from lerobot.datasets.compute_stats import compute_episode_stats
    from PIL import Image

    info = json.loads((root / "meta" / "info.json").read_text())
    keys = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    episodes = pd.concat(
        pd.read_parquet(p) for p in sorted((root / "meta" / "episodes").rglob("*.parquet"))
    ).sort_values("episode_index")
    seconds, calls, counted = 0.0, 0, 0
    with tempfile.TemporaryDirectory() as tmp:
        for key in keys:
            files: dict[str, list] = {}
            for _, ep in episodes.iterrows():
                path = root / info["video_path"].format(
                    video_key=key,
                    chunk_index=ep[f"videos/{key}/chunk_index"],
                    file_index=ep[f"videos/{key}/file_index"],
                )
                files.setdefault(str(path), []).append(ep)
            for path, eps in files.items():
                with av.open(path) as container:
                    decoded = [
                        (f.time, f.to_ndarray(format="rgb24")) for f in container.decode(video=0)
                    ]
                times = np.array([t for t, _ in decoded])
                for ep in eps:
                    start = ep[f"videos/{key}/from_timestamp"]
                    paths = []
                    for i in range(int(ep["length"])):
                        j = int(np.argmin(np.abs(times - (start + i / info["fps"]))))
                        paths.append(f"{tmp}/{key}_{ep['episode_index']}_{i}.png")
                        Image.fromarray(decoded[j][1]).save(paths[-1])
                    feature = {key: info["features"][key]}
                    began = time.perf_counter()
                    stats = compute_episode_stats({key: paths}, feature)
                    seconds += time.perf_counter() - began
                    calls += 1
                    counted += int(stats[key]["count"][0])
                    for p in paths:
                        os.unlink(p)
    out.write_text(json.dumps({"seconds": seconds, "calls": calls, "frames_counted": counted}))


# --- in accelkit's environment -----------------------------------------------------------------


def decode_only(root: Path) -> int:
    """Every frame of every video file to RGB, nothing else (accelkit's reader settings)."""
    import av

    frames = 0
    for path in sorted((root / "videos").rglob("*.mp4")):
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            for frame in container.decode(stream):
                frame.to_ndarray(format="rgb24")
                frames += 1
    return frames


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lerobot-python", default="/tmp/lr04/bin/python")
    parser.add_argument("--data-dir", type=work_dir, default=Path("/tmp/accelkit-camera-bench"))
    parser.add_argument("--cameras", type=positive(), default=2)
    parser.add_argument("--episodes", type=positive(), default=10)
    parser.add_argument("--frames", type=positive(), default=300)
    parser.add_argument("--height", type=positive(), default=240)
    parser.add_argument("--width", type=positive(), default=320)
    parser.add_argument("--repeats", type=positive(), default=3)
    parser.add_argument(
        "--out", type=out_file, default=REPO / "benchmarks/results/camera_bench.json"
    )
    parser.add_argument("--make", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--lerobot-child", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.make:
        make_dataset(args.make, args.cameras, args.episodes, args.frames, args.height, args.width)
        return 0
    if args.lerobot_child:
        lerobot_child(*args.lerobot_child)
        return 0

    args.lerobot_python = checked("--lerobot-python", interpreter, args.lerobot_python)
    shape = f"{args.cameras}x{args.episodes}x{args.frames}@{args.height}x{args.width}"
    root = args.data_dir / shape
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}  # benchmarks only
    if not (root / "meta" / "info.json").is_file():
        log(f"writing {root} with LeRobot's writer")
        began = time.perf_counter()
        subprocess.run(
            [args.lerobot_python, "-m", MODULE, "--make", str(root), "--cameras", str(args.cameras),
             "--episodes", str(args.episodes), "--frames", str(args.frames),
             "--height", str(args.height), "--width", str(args.width)],
            check=True, env=env,
        )  # fmt: skip
        log(f"written in {time.perf_counter() - began:.0f} s")

    from accelkit.stats.formats import video as camera_files
    from accelkit.stats.formats.sources import open_source

    source = open_source(root).lerobot
    levels = (0.01, 0.1, 0.5, 0.9, 0.99)
    methods = {
        "sample": lambda: (
            camera_files.compute_camera_stats(source, "sample", levels).frames_counted
        ),
        "all": lambda: camera_files.compute_camera_stats(source, "all", levels).frames_counted,
        "decode": lambda: decode_only(root),
    }
    seconds: dict[str, list[float]] = {m: [] for m in methods}
    cpu: dict[str, list[float]] = {m: [] for m in methods}
    counted = {}
    for name, fn in methods.items():  # warm-up: page cache, imports
        counted[name] = fn()
    for r in range(args.repeats):
        for name, fn in methods.items():
            wall, proc = time.perf_counter(), time.process_time()
            fn()
            seconds[name].append(time.perf_counter() - wall)
            cpu[name].append(time.process_time() - proc)
            log(f"round {r + 1}: {name} {seconds[name][-1]:.2f} s")
    log("LeRobot's compute_episode_stats (its environment)")
    child_out = args.data_dir / "lerobot_timing.json"
    subprocess.run(
        [args.lerobot_python, "-m", MODULE, "--lerobot-child", str(root), str(child_out)],
        check=True, env=env,
    )  # fmt: skip
    lerobot = json.loads(child_out.read_text())
    med = {m: statistics.median(v) for m, v in seconds.items()}
    total_frames = args.cameras * args.episodes * args.frames
    from accelkit.runtime.environment import record

    result = {
        "schema": SCHEMA,
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "dataset": {"shape": shape, "frames": total_frames, "codec": "libsvtav1 (LeRobot default)"},
        "median_s": med,
        "cpu_s": {m: statistics.median(v) for m, v in cpu.items()},
        "rounds_s": seconds,
        "frames_counted": counted,
        "frames_per_s": {"all": total_frames / med["all"], "decode": total_frames / med["decode"]},
        "lerobot": lerobot,
        "ratios": {
            "sample_speedup_vs_lerobot": lerobot["seconds"] / med["sample"],
            "all_fps_vs_decode_fps": med["decode"] / med["all"],
        },
        "environment": record(),
    }
    write_results(args.out, result)
    print(
        json.dumps({k: result[k] for k in ("dataset", "median_s", "lerobot", "ratios")}, indent=2)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
