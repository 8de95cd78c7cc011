"""How long `accelkit quant eval` with every default takes as a user runs it: a whole process with
cold caches (a new user: fresh HOME, XDG_CACHE_HOME and TORCHINDUCTOR_CACHE_DIR, so the kernel
table is measured anew and inductor builds every graph), then the same command again on the caches
the first run left (warm: inductor's FX / AOT caches and the kernel table hit).

    python -m benchmarks.quant.quant_eval_time [--out benchmarks/results/quant_eval_time.json] [--runs cold,warm]
    python -m benchmarks.quant.quant_eval_time --baseline-src /tmp/main/src --baseline-commit 38f19a7
    python -m benchmarks.quant.quant_eval_time --decoder --runs cold \
        --out benchmarks/results/quant_eval_time_decoder.json

`--decoder`: the model is `quant_eval_phases`'s 12.9M-parameter Qwen2-style decoder (built from its
config into the run's folder), evaluated on 96 shipped pairs (192 texts): `quant eval --model
FOLDER --pairs 96 --json`, every other option on its default.

With --baseline-src, the accelkit of that src folder (e.g. `git archive <commit> src`) runs the same
command cold first, in caches of its own, so the baseline comes from the same session.

Per run: the whole process's wall and CPU seconds (its own and its children's, the compile
workers'), the command's seconds per phase (`--json`'s `phases`), inductor's cache hits and misses
(`TORCH_LOGS` is not needed: `torch._dynamo.utils.counters`, written by the child at exit), the
rows' fidelity and compiled ratios and the recommendation — so a faster run can be checked to give
the same answer. The load average at the start and end of each run is recorded beside it (the
machine may be shared: compare CPU seconds when the load differs).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import (
    REPO,
    ArgumentParser,
    listed,
    out_file,
    src_tree,
    write_progress,
    write_results,
)

COMMAND = "python -m accelkit quant eval --json"

# the child: `python -m accelkit quant eval --json`, with inductor's counters written at exit
CHILD = """
import atexit, json, os, runpy, sys
def counters():
    from torch._dynamo.utils import counters as c
    keep = ("inductor", "aot_autograd", "stats")
    with open(os.environ["QUANT_EVAL_TIME_COUNTERS"], "w") as f:
        json.dump({k: dict(v) for k, v in c.items() if k in keep}, f)
atexit.register(counters)
sys.argv = ["accelkit", "quant", "eval", "--json", *json.loads(os.environ["QUANT_EVAL_TIME_ARGS"])]
runpy.run_module("accelkit", run_name="__main__")
"""


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(env: dict[str, str], folder: Path, args: list[str]) -> dict:
    counters = folder / "counters.json"
    load_start = os.getloadavg()
    cpu0, start = _children_cpu(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=REPO,
        env={
            **env,
            "QUANT_EVAL_TIME_COUNTERS": str(counters),
            "QUANT_EVAL_TIME_ARGS": json.dumps(args),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        check=True,
    )
    wall, cpu = time.perf_counter() - start, _children_cpu() - cpu0
    doc = json.loads(done.stdout)
    result = doc["result"]
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "command_s": doc.get("run", {}).get("seconds"),
        "phases": result["phases"],
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
        "counters": json.loads(counters.read_text()) if counters.is_file() else None,
        "recommendation": result["recommendation"],
        "rows": [
            {
                key: row.get(key)
                for key in (
                    "label",
                    "mean_cosine",
                    "min_cosine",
                    "top1_agreement",
                    "perplexity_ratio",
                    "compiled_ratio",
                    "compiled_one_ratio",
                    "compile_s",
                    "quantize_s",
                )
            }
            for row in result["rows"]
        ],
    }


def fresh_env(env: dict[str, str], src: Path, folder: Path) -> dict[str, str]:
    """`env` running the accelkit of `src`, with HOME and the caches in `folder` (made on first
    use, kept for the next run with the same folder: the warm run)."""
    for name in ("home", "cache", "inductor"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    return {
        **env,
        "PYTHONPATH": os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])]),
        "HOME": str(folder / "home"),
        "XDG_CACHE_HOME": str(folder / "cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor"),
    }


def run_names(text: str) -> str:
    """An argument type: `cold`, or `cold,warm` — a warm run is measured on the caches the cold
    run before it left, so `warm` alone or first (or a run named twice: a second `cold` would
    meet warm caches) would record a cold run as warm."""
    names = [name.strip() for name in listed(("cold", "warm"))(text).split(",")]
    if names not in (["cold"], ["cold", "warm"]):
        raise argparse.ArgumentTypeError(
            f"{text!r}: warm runs on the caches a cold run leaves, so it needs cold before it"
            " (and each run once); give cold or cold,warm"
        )
    return ",".join(names)


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=out_file, default="benchmarks/results/quant_eval_time.json")
    parser.add_argument(
        "--runs",
        type=run_names,
        default="cold,warm",
        help="cold, or cold,warm (warm runs on the caches cold leaves, so it needs cold first)",
    )
    parser.add_argument(
        "--baseline-src",
        type=src_tree,
        default=None,
        help="also run this src folder's accelkit cold",
    )
    parser.add_argument("--baseline-commit", default=None, help="what --baseline-src holds")
    parser.add_argument(
        "--decoder", action="store_true", help="the 12.9M decoder on 192 texts, not MiniLM"
    )
    args = parser.parse_args()
    from accelkit.runtime.environment import record

    runs = {}
    with tempfile.TemporaryDirectory(prefix="quant-eval-time-") as tmp:
        base = Path(tmp)
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("ACCELKIT_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
        }
        environment = {**record(("torch", "transformers")), "cpus": os.cpu_count()}
        command = []
        if args.decoder:
            from benchmarks.quant.quant_eval_phases import build_decoder

            model = base / "decoder"
            environment["parameters"] = build_decoder(model)
            command = ["--model", str(model), "--pairs", "96"]
        plan = [(name, REPO / "src", base / "candidate") for name in args.runs.split(",")]
        if args.baseline_src is not None:
            plan.insert(0, ("baseline cold", args.baseline_src.resolve(), base / "baseline"))
            environment["baseline"] = {
                "src": str(args.baseline_src),
                "commit": args.baseline_commit or "?",
            }
        for name, src, folder in plan:
            run_env = fresh_env(env, src, folder)
            runs[name] = run_once(run_env, folder, command)
            print(
                f"{name}: {runs[name]['wall_s']:.0f} s wall, {runs[name]['cpu_s']:.0f} s CPU,"
                f" phases {runs[name]['phases']}, load {runs[name]['load_average_start'][0]:.1f}",
                flush=True,
            )
            # written after each run: a cold figure survives a warm run cut short
            doc = {
                "environment": environment,
                "command": " ".join([COMMAND, *command]),
                "runs": runs,
            }
            write_progress(args.out, doc, newline=False)
    write_results(args.out, doc, newline=False)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
