"""Why W4A8 loses its lead over FP32 on a busy machine, and what keeps it: `accelkit quant eval`'s
own compiled timing of DuQuant W4A8 against FP32 (MiniLM), as a user runs it, quiet and with every
core kept busy (stress-ng --cpu N, or Python spinners without it), in three thread settings of the
eval's process:

- `default`: torch's own (one OpenMP thread per core; OpenMP's threads spin while they wait),
- `passive`: OMP_WAIT_POLICY=PASSIVE (waiting threads sleep at once),
- `one thread`: OMP_NUM_THREADS=1.

    python -m benchmarks.quant.quant_contention [--pairs 64] [--out benchmarks/results/quant_contention.json]

Each cell is one whole `quant eval --model minilm --methods fp32,duquant --bits w4a8 --json`
process: its compiled ratios (timing batch, one text) come from rounds it interleaves itself, so
FP32 and W4A8 meet the same load. Wall and CPU seconds of the process are recorded beside them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

from benchmarks.common import (
    REPO,
    ArgumentParser,
    listed,
    log,
    machine,
    out_file,
    positive,
)

MODES = {
    "default": {},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "one thread": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
}
SPINNER = "while True: pass"


def busy(cores: int) -> list[subprocess.Popen]:
    """Every core kept busy until the processes are stopped."""
    if shutil.which("stress-ng"):
        return [subprocess.Popen(["stress-ng", "--cpu", str(cores), "--quiet"])]
    return [subprocess.Popen([sys.executable, "-c", SPINNER]) for _ in range(cores)]


def stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait()


def eval_once(pairs: int, extra_env: dict[str, str]) -> dict:
    command = [
        sys.executable, "-m", "accelkit", "quant", "eval", "--model", "minilm", "--methods",
        "fp32,duquant", "--bits", "w4a8", "--pairs", str(pairs), "--json",
    ]  # fmt: skip
    env = {**os.environ, **extra_env}
    load = os.getloadavg()[0]
    started, cpu = time.perf_counter(), os.times()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    after = os.times()
    if done.returncode != 0:
        raise SystemExit(f"quant eval exited {done.returncode}:\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout)["result"]  # the JSON envelope (runtime/json_output.py)
    row = next(r for r in result["rows"] if r["label"] == "duquant/w4a8")
    return {
        "compiled_ratio": row["compiled_ratio"],
        "compiled_one_ratio": row["compiled_one_ratio"],
        "mean_cosine": row["mean_cosine"],
        "wall_s": round(time.perf_counter() - started, 1),
        "cpu_s": round(
            (after.children_user + after.children_system)
            - (cpu.children_user + cpu.children_system),
            1,
        ),
        "load_before": round(load, 2),
    }


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=positive(), default=64)
    parser.add_argument(
        "--modes",
        type=listed(tuple(MODES)),
        default=",".join(MODES),
        help="comma-separated: " + ", ".join(MODES),
    )
    parser.add_argument(
        "--out", type=out_file, default=REPO / "benchmarks/results/quant_contention.json"
    )
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",")]
    cores = os.cpu_count() or 1
    cells: dict[str, dict[str, dict]] = {}
    for condition in ("quiet", "busy"):
        spinners = busy(cores) if condition == "busy" else []
        try:
            if spinners:
                time.sleep(3)
            for mode in modes:
                log(f"{condition}, {mode} …")
                cell = eval_once(args.pairs, MODES[mode])
                cells.setdefault(mode, {})[condition] = cell
                log(f"  {json.dumps(cell)}")
        finally:
            stop(spinners)
    for row in cells.values():
        if "quiet" in row and "busy" in row:
            row["busy_minus_quiet"] = {
                key: round(row["busy"][key] - row["quiet"][key], 3)
                for key in ("compiled_ratio", "compiled_one_ratio")
            }
    report = {
        "environment": machine(
            ("torch",), load_by="stress-ng" if shutil.which("stress-ng") else "python spinners"
        ),
        "command": f"accelkit quant eval --model minilm --methods fp32,duquant --bits w4a8 --pairs {args.pairs} --json",
        "cells": cells,
    }
    from accelkit.runtime.files import write_json_atomic

    write_json_atomic(args.out, report)
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
