"""What a mixture costs: `accelkit stats A B` (the union, and `--weights 0.7,0.3`) against
`accelkit stats C`, where C holds A's and B's files (the same bytes: one run on the concatenation).

Whole processes (`benchmarks.common.run_process`: wall, CPU, peak RSS from wait4), one warm-up each,
then interleaved rounds whose first command rotates; medians and per-round ratios. The three
inputs are plain parquet folders of the same files (symlinks to two LeRobot v3.0 datasets' data
files, made once under --data-dir), so every run reads through the same path and only the mixture
differs. Cases: openpi's q01/q99 (one pass with windows), LeRobot's five levels (two passes).
The union's quantiles are checked to equal the concatenation's (the mixture is exact, so they
must), and the result goes to benchmarks/results/mixture_bench.json.

    python -m benchmarks.stats.mixture_bench                  # 2 x 1.1M frames, 3 rounds (~3 minutes)
    python -m benchmarks.stats.mixture_bench --quick          # 2 x 100k frames, 1 round
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import (
    REPO,
    ArgumentParser,
    accelkit_command,
    log,
    out_file,
    positive,
    rounds,
    run_process,
    work_dir,
    write_results,
)


def ensure_member(data_dir: Path, name: str, frames: int, seed: int) -> Path:
    """A LeRobot v3.0 dataset of about `frames` frames (14-wide state and action), made once."""
    from accelkit.stats.formats.synthetic import write_sample_dataset

    root = data_dir / f"mixture_{name}_f{frames}_s{seed}"
    if not (root / "bench_done").is_file():
        import shutil

        shutil.rmtree(root, ignore_errors=True)
        write_sample_dataset(
            root,
            episodes=math.ceil(frames / 1000),
            frames_per_episode=1000,
            dim=14,
            layout="v3.0",
            seed=seed,
        )
        (root / "bench_done").write_text("")
    return root


def folder_of(target: Path, members: dict[str, Path]) -> Path:
    """A plain folder of symlinks to the members' data files, named so they sort in order."""
    target.mkdir(parents=True, exist_ok=True)
    for prefix, root in members.items():
        for i, path in enumerate(sorted((root / "data").rglob("*.parquet"))):
            link = target / f"{prefix}_{i:04d}.parquet"
            if not link.exists():
                link.symlink_to(path.resolve())
    return target


def quantiles_of(path: Path, fmt: str) -> dict:
    data = json.loads(path.read_text())
    stats = data["norm_stats"] if fmt == "openpi" else data
    return {k: {q: v for q, v in s.items() if q.startswith("q")} for k, s in stats.items()}


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=positive(), default=1_100_000, help="frames per member")
    parser.add_argument("--rounds", type=positive(), default=3)
    parser.add_argument("--quick", action="store_true", help="2 x 100k frames, 1 round")
    parser.add_argument(
        "--data-dir", type=work_dir, default=Path(tempfile.gettempdir()) / "accelkit-bench"
    )
    parser.add_argument(
        "--out",
        type=out_file,
        default=None,
        help="default: benchmarks/results/mixture_bench.json (mixture_bench_quick.json with --quick)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.frames, args.rounds = 100_000, 1
    if args.out is None:  # the suffix names the default file, never a path that was given
        name = "mixture_bench_quick.json" if args.quick else "mixture_bench.json"
        args.out = REPO / "benchmarks" / "results" / name
    from accelkit.runtime.environment import record

    a = ensure_member(args.data_dir, "a", args.frames, seed=1)
    b = ensure_member(args.data_dir, "b", args.frames, seed=2)
    base = args.data_dir / f"mixture_folders_f{args.frames}"
    folders = {
        "A": folder_of(base / "a", {"a": a}),
        "B": folder_of(base / "b", {"b": b}),
        "C": folder_of(base / "c", {"a": a, "b": b}),
    }
    keys = ["--keys", "state=observation.state,actions=action"]
    report = {"environment": record(("numpy", "pyarrow", "numba")), "cases": {}}
    report["environment"]["machine_shared"] = True  # 2 cores shared with other engineers
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch)
        for case, fmt, extra in (
            ("openpi_q01_q99", "openpi", []),
            ("lerobot_five_levels", "lerobot", ["--format", "lerobot"]),
        ):
            log(f"{case}")

            def stats(name, inputs, more=(), fmt=fmt, extra=extra, case=case):
                path = out / f"{case}_{name}.json"
                command = [*accelkit_command(), "stats", *map(str, inputs), *keys, *extra]
                command += [*more, "-o", str(path), "--no-progress", "--images", "none"]
                return lambda: {**run_process(command), "output": str(path)}

            commands = {
                "concatenation": stats("concatenation", [folders["C"]]),
                "union": stats("union", [folders["A"], folders["B"]]),
                "weighted": stats(
                    "weighted", [folders["A"], folders["B"]], ["--weights", "0.7,0.3"]
                ),
            }
            calls = rounds(commands, args.rounds)
            walls = {n: [c["wall_s"] for c in runs] for n, runs in calls.items()}
            result = {
                "calls": calls,
                "median_wall_s": {n: statistics.median(w) for n, w in walls.items()},
                "median_cpu_s": {
                    n: statistics.median(c["cpu_s"] for c in runs) for n, runs in calls.items()
                },
                "max_peak_rss_mib": {
                    n: max(c["peak_rss_mib"] for c in runs) for n, runs in calls.items()
                },
            }
            for name in ("union", "weighted"):
                per_round = [
                    m / c for m, c in zip(walls[name], walls["concatenation"], strict=True)
                ]
                result[f"{name}_over_concatenation_per_round"] = per_round
                result[f"{name}_over_concatenation_median"] = statistics.median(per_round)
            same = quantiles_of(out / f"{case}_union.json", fmt) == quantiles_of(
                out / f"{case}_concatenation.json", fmt
            )
            result["union_quantiles_equal_concatenation"] = same
            if not same:
                raise SystemExit(f"{case}: the union's quantiles differ from the concatenation's")
            report["cases"][case] = result
            log(
                f"{case}: union/concatenation {result['union_over_concatenation_median']:.2f}x,"
                f" weighted/concatenation {result['weighted_over_concatenation_median']:.2f}x"
                f" (medians of {args.rounds} interleaved rounds)"
            )
    report["frames_per_member"] = json.loads((a / "meta" / "info.json").read_text())["total_frames"]
    report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    write_results(args.out, report)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
