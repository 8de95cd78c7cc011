"""Past one machine, measured here: the local run against Ray with 1 and 2 worker processes, on the
same data in one run, and a scaling model for 8, 64 and 512 workers built from those measurements.

Workloads
  stats   `compute_stats` (exact mode, the default quantiles) on the >= --frames LeRobot v2.1
          dataset of stats_bench (one file per episode); Ray results checked bit-identical to local
  images  --images JPEGs (crops of the sample photos, generated once into --data-dir) embedded by
          the local pipeline and by `images.embedding.ray.run` (decode + model actors, Parquet shards);
          Ray vectors checked against local (max abs difference)

Each Ray configuration is a fresh local Ray instance on 127.0.0.1 with that many CPUs (so that
many worker processes run tasks at once), started before its timed calls (not timed; reported as
`startup_s`) and warmed by one small run. Timed calls include everything a user waits for per run:
listing, task scheduling, worker reads, shipping partial states, the driver's merge (stats); the
actors' model load and preprocessor compile (images: a pool is made per run). Rounds interleave
local, ray_1 and ray_2, the starting one rotating (runtime.timing.interleaved).

The model: work per worker-second (rows/s or images/s of one Ray worker, from ray_1), the driver's
merge seconds per task (measured), the listing seconds per file (stats: `open_source` on this
dataset), for a dataset of --model-frames frames in --model-files files with 2 tasks per worker.

    python -m benchmarks.machine.scale_bench            # full run (about 5 minutes on 2 cores)
    python -m benchmarks.machine.scale_bench --quick    # smoke run (about a minute)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import (
    REPO,
    ArgumentParser,
    log,
    out_file,
    positive,
    work_dir,
    write_results,
)

SCHEMA = "accelkit.scale_bench/1"
TARGETS = {"ray_2_vs_local_throughput": 0.8, "driver_share_at_512_workers": 0.01}
TASKS_PER_WORKER = 2  # stats.cluster.TASKS_PER_CPU
MANY_TASKS = 64  # groups of the run that measures what a task costs beyond its rows


def start_ray(cpus: int) -> float:
    """A fresh local Ray instance with `cpus` CPUs on loopback; returns its start seconds."""
    import ray

    from accelkit.runtime.logs import third_party_level

    if ray.is_initialized():
        ray.shutdown()
    started = time.perf_counter()
    ray.init(
        address="local",
        num_cpus=cpus,
        _node_ip_address="127.0.0.1",
        include_dashboard=False,
        object_store_memory=300_000_000,
        logging_level=third_party_level(),
        log_to_driver=False,
    )
    return time.perf_counter() - started


def ensure_images(data_dir: Path, count: int, seed: int = 0) -> list[tuple[str, str]]:
    """`count` JPEGs: random crops (at least 64 px a side) of the sample photos, made once."""
    from PIL import Image

    from accelkit.images.testing import photos

    folder = data_dir / f"scale_images_{count}_s{seed}"
    done = folder / "done"
    if not done.exists():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        rng = np.random.default_rng(seed)
        sources = list(photos().values())
        for i in range(count):
            image = sources[i % len(sources)]
            h, w = image.shape[:2]
            ch, cw = rng.integers(min(64, h), h + 1), rng.integers(min(64, w), w + 1)
            y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
            Image.fromarray(image[y : y + ch, x : x + cw]).save(folder / f"{i:06d}.jpg", quality=90)
        done.write_text("ok")
    return [(str(p), p.name) for p in sorted(folder.glob("*.jpg"))]


def bench_stats(args, result: dict) -> None:
    from accelkit.runtime.timing import interleaved
    from accelkit.stats.engine.driver import compute_stats
    from accelkit.stats.formats.sources import open_source
    from benchmarks.common import ensure_parquet_dataset

    root, info = ensure_parquet_dataset(args.data_dir, args.frames, args.frames_per_episode)
    files = info.get("files") or len(list((root / "data").rglob("*.parquet")))
    open_source(root)  # imports and first-use costs apart: the listing is timed warm
    started = time.perf_counter()
    stream = open_source(root)
    listing_s = time.perf_counter() - started
    frames = stream.total_rows
    log(f"stats: {frames} frames in {files} files (listing {listing_s:.2f} s)")
    startup: dict[str, float] = {}
    current = {"cpus": None}

    def before(name: str, _round: int) -> None:
        if name.startswith("ray_") and current["cpus"] != int(name[4:]):
            current["cpus"] = int(name[4:])
            startup[name] = start_ray(current["cpus"])
            compute_stats(open_source(root, max_frames=20_000), ray="local")  # warm the workers
        log(f"stats: {name}")

    runs = {
        "local": lambda: compute_stats(open_source(root)),
        "ray_1": lambda: compute_stats(open_source(root), ray="local"),
        "ray_2": lambda: compute_stats(open_source(root), ray="local"),
    }
    rounds = interleaved(runs, args.rounds, warmup={"local"}, sync=lambda x: x, before=before)
    local = rounds.outputs["local"]
    out = {"frames": frames, "files": files, "listing_s": listing_s, "startup_s": startup}
    for name in runs:
        wall = rounds.medians()[name]
        out[name] = {"wall_s": wall, "frames_per_s": frames / wall, "rounds_s": rounds.wall[name]}
        if name != "local":
            got = rounds.outputs[name]
            out[name]["bit_identical"] = all(
                getattr(local.stats[k], f).tobytes() == getattr(got.stats[k], f).tobytes()
                for k in local.stats
                for f in ("count", "mean", "std", "min", "max")
            ) and all(
                local.stats[k].quantiles[q].tobytes() == got.stats[k].quantiles[q].tobytes()
                for k in local.stats
                for q in local.stats[k].quantiles
            )
            out[name]["throughput_vs_local"] = rounds.ratio(name, "local")
            traffic = got.summary.cluster
            passes = max(1, len(traffic["returned_bytes"]))
            out[name]["traffic"] = {
                "tasks": traffic["tasks"],
                "merge_tasks": traffic["merge_tasks"],
                "passes": passes,
                "stream_bytes_once": traffic["stream_bytes"],
                "plan_bytes_per_pass_max": max(traffic["sent_bytes"]),
                "returned_to_driver_bytes_per_pass": max(traffic["returned_bytes"]),
                # the driver's own time: submitting tasks, then the last block and the root
                "submit_s_per_task": traffic["submit_seconds"]
                / max(1, traffic["tasks"] + traffic["merge_tasks"]),
                "driver_merge_s_per_pass": traffic["merge_seconds"] / passes,
                "fold_s_per_pass": traffic["fold_seconds"] / passes,
                # a merge task's time on a worker (median): the tree's cost per level
                "merge_task_s_median": float(np.median(traffic["task_merge_seconds"] or [0.0])),
            }
    # many small tasks on the 2-CPU cluster: what each task costs beyond its rows (the driver's
    # submission, the worker's set-up and result, the merge tree), measured as the difference
    before("ray_2", 0)
    started = time.perf_counter()
    many = compute_stats(open_source(root), ray="local", ray_tasks=MANY_TASKS)
    wall = time.perf_counter() - started
    traffic = many.summary.cluster
    small = out["ray_2"]
    out["ray_2_many_tasks"] = {
        "groups": MANY_TASKS,
        "wall_s": wall,
        "tasks": traffic["tasks"],
        "merge_tasks": traffic["merge_tasks"],
        "submit_s_per_task": traffic["submit_seconds"]
        / max(1, traffic["tasks"] + traffic["merge_tasks"]),
        "merge_task_s_median": float(np.median(traffic["task_merge_seconds"] or [0.0])),
        "driver_merge_s_per_pass": traffic["merge_seconds"]
        / max(1, len(traffic["returned_bytes"])),
        # worker-seconds per extra task: (wall difference) x 2 CPUs / (extra tasks)
        "task_overhead_s": max(0.0, wall - small["wall_s"])
        * 2
        / max(1, traffic["tasks"] - small["traffic"]["tasks"]),
    }
    log(f"stats: {MANY_TASKS} tasks on ray_2: {wall:.2f} s")
    result["stats"] = out


def bench_images(args, result: dict) -> None:
    from accelkit.images.embedding import ray as cluster
    from accelkit.images.embedding.pipeline import EmbeddingPipeline
    from accelkit.images.embedding.ray import read_shards
    from accelkit.images.settings.config import ServiceConfig
    from accelkit.runtime.timing import interleaved

    named = ensure_images(args.data_dir, args.images)
    settings = ServiceConfig()
    folder = Path(tempfile.mkdtemp(prefix="scale-bench-"))
    startup: dict[str, float] = {}
    current = {"cpus": None}

    def local():
        with EmbeddingPipeline(settings) as pipeline:
            return pipeline.embed([path for path, _ in named]).embeddings

    def on_ray(name: str):
        def run():
            target = str(folder / name)
            cluster.prepare_folder(target, None)
            outcome = cluster.run(named, settings, "local", cluster.ShardSink(target))
            assert not any(reason for _, reason in outcome.values())
            cluster.write_manifest(target, len(named), outcome, 1280, None)
            return read_shards(target)[0]

        return run

    def before(name: str, _round: int) -> None:
        if name.startswith("ray_") and current["cpus"] != int(name[4:]):
            current["cpus"] = int(name[4:])
            startup[name] = start_ray(current["cpus"])
            warm = str(folder / "warm")
            cluster.run(named[:16], settings, "local", cluster.ShardSink(warm))
        log(f"images: {name}")

    runs = {"local": local, "ray_1": on_ray("ray_1"), "ray_2": on_ray("ray_2")}
    rounds = interleaved(runs, args.rounds, warmup={"local"}, sync=lambda x: x, before=before)
    shutil.rmtree(folder, ignore_errors=True)
    out = {"images": len(named), "startup_s": startup}
    for name in runs:
        wall = rounds.medians()[name]
        out[name] = {
            "wall_s": wall,
            "images_per_s": len(named) / wall,
            "rounds_s": rounds.wall[name],
        }
        if name != "local":
            diff = np.abs(rounds.outputs[name] - rounds.outputs["local"]).max()
            out[name]["max_abs_diff_vs_local"] = float(diff)
            out[name]["throughput_vs_local"] = rounds.ratio(name, "local")
    result["images"] = out


def scaling_model(args, result: dict) -> dict:
    """Wall time on W workers = the workers' share of the work + the merge tree's levels + the
    driver's own time; work measured as one Ray worker's rows/s (ray_1), tasks = 2 per worker,
    merge tasks of MERGE_FANIN results each. The driver lists the files (metadata), submits every
    task and merge task, waits on their statuses and finishes each pass with one merged result (its
    last block and the tree's root): listing + (tasks + merges) x submit + passes x finish. The
    driver's share is its time over the wall time."""
    from accelkit.stats.engine.ray_runner import MERGE_FANIN

    stats = result["stats"]
    many = stats["ray_2_many_tasks"]
    per_worker = stats["frames"] / stats["ray_1"]["wall_s"]  # rows/s of one worker, overhead in
    traffic = [stats[n]["traffic"] for n in ("ray_1", "ray_2")]
    submit = many["submit_s_per_task"]  # the run's fixed start-up spread over many tasks
    finish = max(
        [t["driver_merge_s_per_pass"] for t in traffic] + [many["driver_merge_s_per_pass"]]
    )
    merge_task = many["merge_task_s_median"]
    overhead = many["task_overhead_s"]
    passes = max(t["passes"] for t in traffic)
    listing_per_file = stats["listing_s"] / stats["files"]
    rows, files = args.model_frames, args.model_files
    model = {
        "dataset": {"frames": rows, "files": files},
        "measured": {
            "rows_per_s_per_worker": per_worker,
            "task_overhead_s": overhead,
            "submit_s_per_task": submit,
            "driver_finish_s_per_pass": finish,
            "merge_task_s": merge_task,
            "listing_s_per_file": listing_per_file,
            "passes": passes,
            "merge_fanin": MERGE_FANIN,
        },
        "workers": {},
    }

    def driver_s(tasks: int, merges: int) -> float:
        return files * listing_per_file + passes * ((tasks + merges) * submit + finish)

    for workers in (8, 64, 512):
        tasks = TASKS_PER_WORKER * workers
        merges, levels, width = 0, 0, tasks
        while width > 1:
            width = -(-width // MERGE_FANIN)
            merges += width
            levels += 1
        work = rows / (per_worker * workers) + passes * TASKS_PER_WORKER * overhead
        tree = passes * levels * merge_task
        driver = driver_s(tasks, merges)
        wall = work + tree + driver
        model["workers"][str(workers)] = {
            "tasks": tasks,
            "merge_tasks": merges,
            "tree_levels": levels,
            "work_s": work,
            "tree_s": tree,
            "driver_s": driver,
            "wall_s": wall,
            "driver_share": driver / wall,
            "speedup_vs_1": (rows / per_worker) / wall,
            "limit": max(
                ("work", work), ("merge tree", tree), ("driver", driver), key=lambda t: t[1]
            )[0],
        }
    # the dataset (frames at this model's frames per file) from which the driver's share at
    # 512 workers is at most 1 %: driver(rows) <= 0.01 x wall(rows), all terms linear or fixed
    tasks = TASKS_PER_WORKER * 512
    fixed = model["workers"]["512"]["driver_s"] - files * listing_per_file
    per_row_driver = listing_per_file * files / rows
    per_row_work = 1 / (per_worker * 512)
    tree = model["workers"]["512"]["tree_s"] + passes * TASKS_PER_WORKER * overhead
    # d(R) = fixed + R a; w(R) = R b + tree + d(R); d <= 0.01 w  <=>  R (0.99 a - 0.01 b) <= ...
    a, b = per_row_driver, per_row_work
    if 0.99 * a < 0.01 * b:
        model["frames_for_1pct_driver_at_512"] = float(
            (0.99 * fixed - 0.01 * tree) / (0.01 * b - 0.99 * a)
        )
    else:  # the listing alone grows as fast as the work: never
        model["frames_for_1pct_driver_at_512"] = None
    model["tasks_at_512"] = tasks
    return model


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=positive(), default=2_000_000)
    parser.add_argument("--frames-per-episode", type=positive(), default=1000)
    parser.add_argument("--images", type=positive(), default=2000)
    parser.add_argument("--rounds", type=positive(), default=2)
    parser.add_argument("--model-frames", type=positive(), default=50_000_000)
    parser.add_argument("--model-files", type=positive(), default=50_000)
    parser.add_argument("--data-dir", type=work_dir, default=Path("/tmp/accelkit_bench_data"))
    parser.add_argument(
        "--out", type=out_file, default=REPO / "benchmarks" / "results" / "scale_bench.json"
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (about a minute)")
    parser.add_argument("--only", choices=("stats", "images"), default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.frames, args.images, args.rounds = 200_000, 200, 1
    from accelkit.runtime.environment import record
    from accelkit.runtime.logs import configure

    configure()
    result: dict = {
        "schema": SCHEMA,
        "environment": record(("numpy", "jax", "jaxlib", "pyarrow", "ray", "onnxruntime")),
        "args": {k: str(v) for k, v in vars(args).items()},
        "targets": TARGETS,
    }
    if args.only in (None, "stats"):
        bench_stats(args, result)
        result["model"] = scaling_model(args, result)
    if args.only in (None, "images"):
        bench_images(args, result)
    import ray

    if ray.is_initialized():
        ray.shutdown()
    checks = {}
    if "stats" in result:
        s = result["stats"]
        checks["stats_bit_identical"] = s["ray_1"]["bit_identical"] and s["ray_2"]["bit_identical"]
        checks["stats_ray_2_vs_local"] = s["ray_2"]["throughput_vs_local"]["median"]
        checks["driver_share_at_512"] = result["model"]["workers"]["512"]["driver_share"]
    if "images" in result:
        checks["images_ray_2_vs_local"] = result["images"]["ray_2"]["throughput_vs_local"]["median"]
        checks["images_max_abs_diff"] = max(
            result["images"][n]["max_abs_diff_vs_local"] for n in ("ray_1", "ray_2")
        )
    result["checks"] = checks
    write_results(args.out, result, newline=False)
    print(json.dumps(checks, indent=2))
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
