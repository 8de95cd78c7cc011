"""Whole processes against their floors: how close each command, run as a user runs it, comes to
the part of its work that no implementation can skip.

Each workload times complete processes (start-up, imports, model load and writing included) in
interleaved rounds, the starting process rotating, after one warm-up call each (page cache, the
compiled-program and ONNX caches). Per call: wall seconds, CPU seconds (user + system, all threads,
from `wait4`) and peak RSS of the process; the 1-minute load average before the call. Ratios are
`floor wall / accelkit wall` per round (1.0 = as fast as the floor); the table gives the median and
the best of each (best accelkit against best floor, as a quiet machine would show).

    stats_v30   `accelkit stats DATASET -o norm_stats.json` on a LeRobot v3.0 dataset written with
                LeRobot's packing rule (episodes appended as row groups to ~100 MB files), against
                `floors.py read` (pyarrow reads observation.state and action into numpy, threads on);
                `floors.py read-lean` (the same without pyarrow's pre-buffering, as accelkit reads)
                runs in the same rounds and is reported beside it
    stats_v21   the same on the v2.1 layout (one file per episode)
    stats_v30_1rg  stats_v30's dataset with each file written as one row group (as pandas or a
                plain `pq.write_table` writes it)
    The stats datasets have robot-like columns (`--columns robot`, the default:
    `formats/synthetic.py`'s ROBOT_COLUMNS: grippers, a constant joint, 1e6 + noise, four values,
    Student-t tails, drift over episodes); `--columns smooth` gives the earlier random walks.
    images      `accelkit images embed FOLDER -o x.npy` on JPEG photos (400-900 px), against
                `floors.py model` (the same ONNX model on ready 224x224 tensors, same batch size);
                the same with the int8 model (`model.name: efficientnet-lite0-int8`) against the
                same floor, and beside them `floors.py model-spin` (the floor with ORT's
                spinning threads) and the int8 model alone
    ray         `accelkit images embed FOLDER --ray ADDR --ray-actors 2` on a 2-CPU Ray cluster on
                127.0.0.1 (2 nodes of 1 CPU, started once, as a user's cluster is), against the
                local `accelkit images embed` of the same photos

    python -m benchmarks.machine.limits_bench                 # everything, ~15 min here (datasets once)
    python -m benchmarks.machine.limits_bench --stats                 # the stats rows only
    python -m benchmarks.machine.limits_bench --only stats_v30,stats_v21 --rounds 3
    python -m benchmarks.machine.limits_bench --quick         # small sizes, one round: a smoke run
    python -m benchmarks.machine.limits_bench --docs-only     # rewrite docs/performance.md from the JSON

Writes benchmarks/results/limits_bench.json (limits_bench_quick.json with --quick) and the section
in the `limits` block of docs/performance.md (not with --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import (
    REPO,
    ArgumentParser,
    accelkit_command,
    checked,
    ensure_photos,
    ensure_tensors,
    ensure_v21,
    ensure_v30,
    existing_file,
    listed,
    log,
    out_file,
    positive,
    rounds,
    run_process,
    src_tree,
    work_dir,
    write_progress,
    write_results,
)
from benchmarks.docs.blocks import Table, rewrite

TARGETS = {  # each workload's whole process against its floor, at least this
    "stats_v30": 0.9,
    "stats_v30_1rg": 0.9,
    "stats_v21": 0.9,
    "images": 0.85,
    "ray": 0.9,
}
STATS_WORKLOADS = ("stats_v30", "stats_v30_1rg", "stats_v21")
# the int8 model: images embed with it against the FP32 model alone, and its
# neighbours against the FP32 model's
INT8_TARGETS = {"ratio": 1.0, "recall_at_10": 0.99}
# stats: peak RSS at most this many times the read-only process's, or this many MiB
MEMORY_TARGET = 1.5
MEMORY_FLOOR_MIB = 512
WORKLOADS = tuple(TARGETS)
DOCS = REPO / "docs" / "performance.md"
RESULT = REPO / "benchmarks" / "results" / "limits_bench.json"
FLOORS = Path(__file__).with_name("floors.py")  # run by path: a floor imports only what it needs


def summarize(calls: dict[str, list[dict]], ours: str, floor: str) -> dict:
    walls = {name: [c["wall_s"] for c in runs] for name, runs in calls.items()}
    per_round = [f / o for o, f in zip(walls[ours], walls[floor], strict=True)]
    summary = {
        "calls": calls,
        "median_wall_s": {name: statistics.median(w) for name, w in walls.items()},
        "best_wall_s": {name: min(w) for name, w in walls.items()},
        "median_cpu_s": {
            name: statistics.median(c["cpu_s"] for c in runs) for name, runs in calls.items()
        },
        "max_peak_rss_mib": {
            name: max(c["peak_rss_mib"] for c in runs) for name, runs in calls.items()
        },
        "ratio_per_round": per_round,
        "ratio_median": statistics.median(per_round),
        "ratio_best": min(walls[floor]) / min(walls[ours]),
        "ours": ours,
        "floor": floor,
    }
    return summary


# --- data ---------------------------------------------------------------------------------------


# --- workloads ----------------------------------------------------------------------------------


def bench_stats(name: str, args, scratch: Path) -> dict:
    if name == "stats_v21":
        layout = "v2.1"
        root, info = ensure_v21(
            args.data_dir, args.frames_v21 or args.frames, args.frames_per_episode, args.columns
        )
    else:
        layout = "v3.0"
        row_groups = "file" if name == "stats_v30_1rg" else "episode"
        root, info = ensure_v30(
            args.data_dir, args.frames, args.frames_per_episode, args.columns, row_groups
        )
    log(f"{layout}: {info['frames']:,} frames in {info['files']} files at {root}")
    out = scratch / f"norm_stats_{layout}.json"
    commands = {
        "accelkit": lambda: run_process(
            [*accelkit_command(), "stats", str(root), "-o", str(out), "--no-progress"]
        ),
        "floor_read": lambda: run_process([sys.executable, str(FLOORS), "read", str(root)]),
        "floor_read_lean": lambda: run_process(
            [sys.executable, str(FLOORS), "read-lean", str(root)]
        ),
    }
    if args.baseline_src:  # another checkout's accelkit (e.g. main's), in the same rounds
        env = {**os.environ, "PYTHONPATH": str(args.baseline_src)}
        commands["accelkit_baseline"] = lambda: run_process(
            [*accelkit_command(), "stats", str(root), "-o", str(out) + ".baseline.json",
             "--no-progress"],
            env=env,
        )  # fmt: skip
    calls = rounds(commands, args.rounds)
    result = summarize(calls, "accelkit", "floor_read")
    lean = summarize(calls, "accelkit", "floor_read_lean")
    result["lean"] = {k: lean[k] for k in ("ratio_per_round", "ratio_median", "ratio_best")}
    if args.baseline_src:
        base = summarize(calls, "accelkit_baseline", "floor_read")
        result["baseline"] = {
            "src": str(args.baseline_src),
            "commit": args.baseline_commit,
            **{k: base[k] for k in ("ratio_per_round", "ratio_median", "ratio_best")},
        }
    result["dataset"] = {**info, "path": str(root)}
    rss = result["max_peak_rss_mib"]
    result["memory_ratio"] = rss["accelkit"] / rss["floor_read"]
    result["memory_limit_mib"] = max(MEMORY_TARGET * rss["floor_read"], MEMORY_FLOOR_MIB)
    return result


def bench_images(args, scratch: Path) -> dict:
    """`images embed` with the FP32 model and with the int8 one (`model.name:
    efficientnet-lite0-int8`), both against the FP32 model alone, in the same rounds;
    and the int8 vectors' neighbours against the FP32 vectors' of the same photos."""
    from accelkit.images.embedding.int8 import INT8_MODEL_NAME, cpu_int8_features

    photos = ensure_photos(args.data_dir, args.photos)
    tensors = ensure_tensors(args.data_dir, photos)
    int8_env = {**os.environ, "ACCELKIT_MODEL_NAME": INT8_MODEL_NAME}
    commands = {
        "accelkit": lambda: run_process(
            [*accelkit_command(), "images", "embed", str(photos / "jpg"),
             "-o", str(scratch / "embeddings.npy"), "--no-progress"]
        ),
        "accelkit_int8": lambda: run_process(
            [*accelkit_command(), "images", "embed", str(photos / "jpg"),
             "-o", str(scratch / "embeddings_int8.npy"), "--no-progress"], env=int8_env,
        ),
        "floor_model": lambda: run_process(
            [sys.executable, str(FLOORS), "model", str(tensors),
             str(args.photos), "32"]
        ),
        # the FP32 floor with ORT's spinning threads (accelkit's sessions do not spin), and the
        # int8 model alone: what the int8 process has besides its model
        "floor_model_spin": lambda: run_process(
            [sys.executable, str(FLOORS), "model-spin", str(tensors),
             str(args.photos), "32"]
        ),
        "int8_model_alone": lambda: run_process(
            [sys.executable, str(FLOORS), "model", str(tensors),
             str(args.photos), "32", INT8_MODEL_NAME]
        ),
    }  # fmt: skip
    calls = rounds(commands, args.rounds)
    result = summarize(calls, "accelkit", "floor_model")
    result["photos"] = {"count": args.photos, "path": str(photos)}
    keys = ("ratio_per_round", "ratio_median", "ratio_best")
    int8, spin, alone = (
        summarize(calls, ours, floor)
        for ours, floor in (
            ("accelkit_int8", "floor_model"),
            ("accelkit_int8", "floor_model_spin"),
            ("accelkit_int8", "int8_model_alone"),
        )
    )
    result["int8"] = {
        "model": INT8_MODEL_NAME,
        "cpu_int8_features": cpu_int8_features(),
        **{k: int8[k] for k in keys},
        "against_spinning_floor": {k: spin[k] for k in keys},
        "against_int8_model_alone": {k: alone[k] for k in keys},
        **neighbours(scratch / "embeddings.npy", scratch / "embeddings_int8.npy"),
    }
    return result


def neighbours(reference: Path, candidate: Path, k: int = 10) -> dict:
    """recall@k of `candidate`'s vectors against `reference`'s (the same inputs, in the same
    order): the share of each item's k nearest others (brute-force cosine) both agree on; and
    the cosine of each item's two vectors."""
    import numpy as np

    lists = [p.with_name(p.stem + ".inputs.txt").read_text() for p in (reference, candidate)]
    if lists[0] != lists[1]:
        raise SystemExit(f"{reference} and {candidate} hold other inputs")
    a, b = (np.load(p).astype(np.float64) for p in (reference, candidate))
    a, b = (v / np.linalg.norm(v, axis=1, keepdims=True) for v in (a, b))

    def nearest(v):
        similarity = v @ v.T
        np.fill_diagonal(similarity, -np.inf)
        return np.argsort(-similarity, axis=1, kind="stable")[:, :k]

    shared = [len(set(x) & set(y)) / k for x, y in zip(nearest(a), nearest(b), strict=True)]
    cosine = np.sum(a * b, axis=1)
    return {
        f"recall_at_{k}": float(np.mean(shared)),
        "cosine_min": float(cosine.min()),
        "cosine_median": float(np.median(cosine)),
        "items": len(a),
    }


def bench_ray(args, scratch: Path) -> dict:
    from tests.support.ray_cluster import RayCluster

    photos = ensure_photos(args.data_dir, args.photos)
    log("ray: starting a 2-node cluster (1 CPU each) on 127.0.0.1")
    started = time.perf_counter()
    # the nodes' workers import this checkout's accelkit, as the test suite's cluster does
    source = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)
    cluster = RayCluster({"PYTHONPATH": source}).start()
    cluster_start = time.perf_counter() - started
    env = {**os.environ, **cluster.client_env}
    calls = [0]

    def on_ray():
        calls[0] += 1
        target = scratch / f"ray_out_{calls[0]}"
        run = run_process(
            [*accelkit_command(), "images", "embed", str(photos / "jpg"), "--ray",
             cluster.address, "--ray-actors", "2", "-o", str(target), "--no-progress"],
            env=env,
        )  # fmt: skip
        shutil.rmtree(target, ignore_errors=True)
        return run

    commands = {
        "accelkit_ray": on_ray,
        "accelkit_local": lambda: run_process(
            [*accelkit_command(), "images", "embed", str(photos / "jpg"),
             "-o", str(scratch / "local.npy"), "--no-progress"]
        ),
    }  # fmt: skip
    try:
        result = summarize(rounds(commands, args.rounds), "accelkit_ray", "accelkit_local")
    finally:
        cluster.stop()
    result["cluster"] = {"nodes": 2, "cpus": 2, "start_s": cluster_start}
    result["photos"] = {"count": args.photos, "path": str(photos)}
    return result


# --- report -------------------------------------------------------------------------------------

LABELS = {
    "stats_v30": "stats, LeRobot v3.0 (~100 MB files)",
    "stats_v30_1rg": "stats, LeRobot v3.0, one row group per file",
    "stats_v21": "stats, LeRobot v2.1 (a file per episode)",
    "images": "images embed",
    "ray": "images embed --ray, 2 actors",
}


def render(report: dict) -> str:
    env = report["environment"]
    source = env.get("accelkit_source", {})
    lines = [
        "## Whole processes against their floors (`benchmarks/machine/limits_bench.py`)",
        "",
        f"Generated from `benchmarks/results/limits_bench.json`, written {env['time_utc']} "
        f"(commit `{(source.get('commit') or '?')[:7]}`{', uncommitted changes' if source.get('dirty') else ''}), "
        f"{report['rounds']} interleaved rounds after a warm-up each, on {env['cpu_count']} "
        f"CPUs ({env['cpu_model']}). Ratio = floor's wall time / ours, per round (1.0 = as fast "
        "as the floor); best = best ours against best floor. Load = the 1-minute load average "
        "before each call." + (f" **{report['note']}**" if report.get("note") else ""),
        "",
        "| workload | ours (median s) | floor | floor (median s) | ratio median (rounds) | ratio best | target | CPU s ours / floor | peak RSS ours / floor | load |",
        "|---|---:|---|---:|---|---:|---:|---|---|---|",
    ]
    for name, result in report["workloads"].items():
        ours, floor = result["ours"], result["floor"]
        med, cpu, rss = result["median_wall_s"], result["median_cpu_s"], result["max_peak_rss_mib"]
        loads = [c["load_before"] for runs in result["calls"].values() for c in runs]
        met = "met" if result["ratio_median"] >= TARGETS[name] else "missed"
        lines.append(
            f"| {LABELS[name]} | {med[ours]:.2f} | {floor} | {med[floor]:.2f} | "
            f"**{result['ratio_median']:.2f}×** ({', '.join(f'{r:.2f}' for r in result['ratio_per_round'])}) | "
            f"{result['ratio_best']:.2f}× | ≥ {TARGETS[name]}× ({met}) | "
            f"{cpu[ours]:.1f} / {cpu[floor]:.1f} | {rss[ours]:.0f} / {rss[floor]:.0f} MiB | "
            f"{min(loads):.1f}–{max(loads):.1f} |"
        )
        if "int8" in result:
            lines.append(int8_row(result))
    lines.append("")
    for name, result in report["workloads"].items():
        if "measured_utc" in result:  # carried over from an earlier run of this script
            lines.append(
                f"- {LABELS[name]}: from an earlier run, {result['measured_utc']} (commit "
                f"`{result.get('measured_commit', '?')}`)."
            )
    for name in STATS_WORKLOADS:
        if name in report["workloads"]:
            r = report["workloads"][name]
            d = r["dataset"]
            limit = r.get("memory_limit_mib")
            memory = (
                f"peak memory {r['max_peak_rss_mib']['accelkit']:.0f} MiB, {r['memory_ratio']:.2f}× "
                f"the read-only process's (target ≤ max({MEMORY_TARGET}×, {MEMORY_FLOOR_MIB} MiB) = "
                f"{limit:.0f} MiB: {'met' if r['max_peak_rss_mib']['accelkit'] <= limit else 'missed'})"
                if limit
                else f"peak memory {r['memory_ratio']:.2f}× the read-only process's"
            )
            lean = r.get("lean")
            against = (
                f"; against pyarrow without pre-buffering (`floors.py read-lean`, same rounds): "
                f"**{lean['ratio_median']:.2f}×** "
                f"({', '.join(f'{x:.2f}' for x in lean['ratio_per_round'])}), best "
                f"{lean['ratio_best']:.2f}×"
                if lean
                else ""
            )
            base = r.get("baseline")
            if base:
                against += (
                    f"; the baseline (`{base.get('commit') or base['src']}`) in the same rounds: "
                    f"**{base['ratio_median']:.2f}×** "
                    f"({', '.join(f'{x:.2f}' for x in base['ratio_per_round'])})"
                )
            lines.append(
                f"- {LABELS[name]}: {d['frames']:,} frames in {d['files']} files "
                f"({d['bytes_on_disk'] / 1e6:.0f} MB), {d.get('columns', 'smooth')} columns; "
                f"{memory}{against}."
            )
    for name in ("images", "ray"):
        if name in report["workloads"]:
            r = report["workloads"][name]
            extra = (
                f"; the cluster started in {r['cluster']['start_s']:.1f} s, once, before the rounds"
                if name == "ray"
                else ""
            )
            lines.append(f"- {LABELS[name]}: {r['photos']['count']:,} JPEG photos{extra}.")
    if "int8" in report["workloads"].get("images", {}):
        images = report["workloads"]["images"]
        q, cpu = images["int8"], images["median_cpu_s"]
        recall, features = q["recall_at_10"], ", ".join(q["cpu_int8_features"]) or "none"
        lines.append(
            f"- images embed, int8: `model.name: {q['model']}` against the FP32 model alone"
            f" (`floors.py model`), same rounds, target ≥ {INT8_TARGETS['ratio']}×; by CPU"
            f" seconds (median) {cpu['floor_model'] / cpu['accelkit_int8']:.2f}×; its vectors"
            f" of the {q['items']:,} photos against the FP32 model's: **recall@10 {recall:.3f}**"
            f" (target ≥ {INT8_TARGETS['recall_at_10']}:"
            f" {'met' if recall >= INT8_TARGETS['recall_at_10'] else 'missed'}), cosine min"
            f" {q['cosine_min']:.3f}, median {q['cosine_median']:.4f}; int8 instructions of this"
            f" CPU: {features}."
        )
        if "against_spinning_floor" in q:
            spin, alone = q["against_spinning_floor"], q["against_int8_model_alone"]
            lines.append(
                f"- images embed, int8, the other processes of the same rounds: against the FP32"
                f" model alone with ORT's spinning threads (`floors.py model-spin`; accelkit's"
                f" sessions do not spin) **{spin['ratio_median']:.2f}×**"
                f" ({', '.join(f'{x:.2f}' for x in spin['ratio_per_round'])}), by CPU seconds"
                f" {cpu['floor_model_spin'] / cpu['accelkit_int8']:.2f}×; against the int8 model"
                f" alone {alone['ratio_median']:.2f}×"
                f" ({', '.join(f'{x:.2f}' for x in alone['ratio_per_round'])}), CPU seconds"
                f" {cpu['accelkit_int8']:.1f} against its {cpu['int8_model_alone']:.1f}."
            )
    lines += [""]
    return "\n".join(lines)


def int8_row(result: dict) -> str:
    """The images workload's int8 row: `images embed` with the int8 model against the floor."""
    q, med, cpu, rss = (
        result["int8"],
        result["median_wall_s"],
        result["median_cpu_s"],
        result["max_peak_rss_mib"],
    )
    loads = [c["load_before"] for c in result["calls"]["accelkit_int8"]]
    floor, ours = result["floor"], "accelkit_int8"
    met = "met" if q["ratio_median"] >= INT8_TARGETS["ratio"] else "missed"
    return (
        f"| images embed, int8 model | {med[ours]:.2f} | {floor} | {med[floor]:.2f} | "
        f"**{q['ratio_median']:.2f}×** ({', '.join(f'{r:.2f}' for r in q['ratio_per_round'])}) | "
        f"{q['ratio_best']:.2f}× | ≥ {INT8_TARGETS['ratio']}× ({met}) | "
        f"{cpu[ours]:.1f} / {cpu[floor]:.1f} | {rss[ours]:.0f} / {rss[floor]:.0f} MiB | "
        f"{min(loads):.1f}–{max(loads):.1f} |"
    )


TABLES = {"limits": Table(RESULT, render)}  # for the docs engine


def write_docs(report: dict) -> None:
    rewrite(DOCS, "limits", render(report))


def save(report: dict, previous: dict, out: Path, final: bool = False) -> dict:
    """Write `report` atomically to the progress file beside `out` (`out` itself once every
    workload has run: `final`) and return what was written: workloads not run this time keep
    their last results, marked with their own time."""
    report = {**report, "workloads": dict(report["workloads"])}
    for name, result in previous.get("workloads", {}).items():
        if name not in report["workloads"]:
            result.setdefault("measured_utc", previous["environment"]["time_utc"])
            source = previous["environment"].get("accelkit_source", {})
            result.setdefault("measured_commit", (source.get("commit") or "?")[:7])
            report["workloads"][name] = result
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    (write_results if final else write_progress)(out, report, newline=False)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", type=listed(WORKLOADS), default=",".join(WORKLOADS), help="comma-separated"
    )
    parser.add_argument("--rounds", type=positive(), default=3)
    parser.add_argument("--frames", type=positive(), default=2_100_000)
    parser.add_argument("--frames-per-episode", type=positive(), default=1000)
    parser.add_argument(
        "--frames-v21",
        type=positive(),
        default=None,
        help="v2.1 frames (default: --frames; target: 4M)",
    )
    parser.add_argument(
        "--columns",
        choices=("robot", "smooth"),
        default="robot",
        help="the stats datasets' columns",
    )
    parser.add_argument(
        "--baseline-src",
        type=src_tree,
        default=None,
        help="stats: also time the accelkit of this src folder (e.g. `git archive main src`) in "
        "the same rounds",
    )
    parser.add_argument("--baseline-commit", default=None, help="what --baseline-src holds")
    parser.add_argument("--photos", type=positive(), default=2000)
    parser.add_argument("--data-dir", type=work_dir, default=Path("/tmp/accelkit_bench_data"))
    parser.add_argument("--quick", action="store_true", help="200k frames, 200 photos, 1 round")
    parser.add_argument("--stats", action="store_true", help="the stats workloads only")
    parser.add_argument("--docs-only", action="store_true", help="rewrite the docs from the JSON")
    parser.add_argument("--out", type=out_file, default=None)
    parser.add_argument(
        "--note", default=None, help="what else ran on the machine (kept in the JSON and the docs)"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.frames, args.photos, args.rounds = 200_000, 200, 1
    out = args.out or REPO / "benchmarks" / "results" / (
        "limits_bench_quick.json" if args.quick else "limits_bench.json"
    )
    if args.docs_only:
        report = json.loads(checked("--out", existing_file, out).read_text())
        if args.note:
            report["note"] = args.note
            write_results(out, report, newline=False)
        write_docs(report)
        return 0
    if args.stats:
        args.only = ",".join(STATS_WORKLOADS)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workload {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    args.data_dir.mkdir(parents=True, exist_ok=True)
    from accelkit.runtime.environment import record

    report = {
        "environment": record(("numpy", "pyarrow", "jax", "onnxruntime", "ray")),
        "rounds": args.rounds,
        "note": args.note,
        "targets": TARGETS,
        "workloads": {},
    }
    previous = json.loads(out.read_text()) if out.is_file() else {}
    with tempfile.TemporaryDirectory(prefix="limits_bench") as scratch:
        for name in names:
            log(f"{name}:")
            if name.startswith("stats_"):
                result = bench_stats(name, args, Path(scratch))
            elif name == "images":
                result = bench_images(args, Path(scratch))
            else:
                result = bench_ray(args, Path(scratch))
            report["workloads"][name] = result
            log(
                f"{name}: ratio {result['ratio_median']:.2f} (rounds "
                f"{', '.join(f'{r:.2f}' for r in result['ratio_per_round'])}), best "
                f"{result['ratio_best']:.2f}, target {TARGETS[name]}"
            )
            save(report, previous, out)  # a later failure loses nothing measured (partial(out))
    written = save(report, previous, out, final=True)
    log(f"wrote {out}")
    if not args.quick:
        write_docs(written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
