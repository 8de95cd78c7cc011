"""How long `accelkit stats` takes to start: `accelkit stats --help` as a whole process
against the bare-import floor `python -c "import numpy, pyarrow.parquet"` (what any statistics
command over parquet pays before it reads a byte), and `accelkit stats` on the small sample
dataset (start-up, one read, the write) against the same floor.

Whole processes (`benchmarks.common.run_process`: wall, CPU, peak RSS from wait4), one warm-up
each, then interleaved rounds whose first command rotates; medians and the ratio of medians. The
modules each command imported (`-X importtime`, one run) are listed beside the times, so a
regression names its cause. Target: `stats --help` at most 1.3x the floor. Writes
benchmarks/results/startup_bench.json (`_quick` with --quick).

    python -m benchmarks.stats.startup_bench              # 15 rounds (~1 minute)
    python -m benchmarks.stats.startup_bench --quick      # 3 rounds
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import (
    RESULTS,
    ArgumentParser,
    accelkit_command,
    log,
    machine,
    positive,
    rounds,
    run_process,
    src_tree,
    write_results,
)

FLOOR = "import numpy, pyarrow.parquet"
TARGET = 1.3  # `accelkit stats --help` at most this many times the floor


def imported(command: list[str], env: dict | None = None) -> dict:
    """The top-level packages a process imported and the milliseconds their own modules took to
    import (each module's self time, summed per package)."""
    err = subprocess.run(
        [command[0], "-X", "importtime", *command[1:]], capture_output=True, text=True, env=env
    ).stderr
    top: dict[str, float] = {}
    for line in err.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        own, _, name = line.split("|")
        package = name.strip().split(".")[0]
        top[package] = top.get(package, 0.0) + int(own.split(":")[1]) / 1e3
    return {
        name: round(ms, 1) for name, ms in sorted(top.items(), key=lambda kv: -kv[1]) if ms >= 1
    }


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=positive(), default=15)
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--note", default=None, help="what else ran on the machine")
    parser.add_argument(
        "--baseline-src",
        type=src_tree,
        default=None,
        help="also time `stats --help` of the accelkit in this src folder (e.g. `git archive main"
        " src`) in the same rounds",
    )
    args = parser.parse_args(argv)
    count = 3 if args.quick else args.rounds

    from accelkit.stats.formats.synthetic import write_sample_dataset

    work = Path(tempfile.mkdtemp(prefix="startup_bench_"))
    sample = write_sample_dataset(work / "sample")
    commands = {
        "stats_help": [*accelkit_command(), "stats", "--help"],
        "stats_sample": [
            *accelkit_command(), "stats", str(sample), "--no-progress", "-o", str(work / "n.json"),
        ],
        "floor": [sys.executable, "-c", FLOOR],
    }  # fmt: skip
    envs = {name: None for name in commands}
    if args.baseline_src is not None:
        commands["stats_help_baseline"] = commands["stats_help"]
        envs["stats_help_baseline"] = {**os.environ, "PYTHONPATH": str(args.baseline_src.resolve())}
    calls = rounds(
        {
            name: (lambda command=command, env=envs[name]: run_process(command, env=env))
            for name, command in commands.items()
        },
        count,
    )
    medians = {
        name: {key: statistics.median(c[key] for c in runs) for key in ("wall_s", "cpu_s")}
        for name, runs in calls.items()
    }
    floor = medians["floor"]["wall_s"]
    ratios = {name: medians[name]["wall_s"] / floor for name in commands if name != "floor"}
    report = {
        "machine": machine(("numpy", "pyarrow", "typer", "pydantic", "rich")),
        "note": args.note,
        "rounds": count,
        "floor": FLOOR,
        "commands": {name: " ".join(c[1:]) for name, c in commands.items()},
        "baseline_src": None if args.baseline_src is None else str(args.baseline_src),
        "calls": calls,
        "median": medians,
        "ratio_to_floor": ratios,
        "target": {"stats_help": TARGET},
        "met": ratios["stats_help"] <= TARGET,
        "imported_ms": {name: imported(c, envs[name]) for name, c in commands.items()},
    }
    out = RESULTS / ("startup_bench_quick.json" if args.quick else "startup_bench.json")
    write_results(out, report, indent=1)
    for name, ratio in ratios.items():
        log(f"{name}: {medians[name]['wall_s']:.3f} s, floor {floor:.3f} s: {ratio:.2f}x")
    log(f"stats --help: target {TARGET}x, {'met' if report['met'] else 'not met'}")
    log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
