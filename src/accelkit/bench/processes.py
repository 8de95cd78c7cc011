"""`--processes`: one process per backend and round, rounds interleaved, repeats pooled.

A noisy machine drifts slowly; with the order rotating each round, the drift spreads over every
backend instead of landing on one. Each child runs one experiment for one backend
(`python -m accelkit.bench.processes ARGS.json OUT.json`) and writes its result as JSON.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

from accelkit.bench.harness import Protocol, Result, fix_threads, merge_results, run_child_process
from accelkit.runtime.files import temporary_folder, write_json_atomic


def run_in_processes(
    experiment: str,
    modes: list[str],
    settings: dict,
    protocol: Protocol,
    threads: int | None,
    rounds: int,
) -> Result:
    """`accelkit.bench.experiments.<experiment>.run(mode, **settings)` in a fresh process per
    mode and round; the rounds' results merged into one (`merge_results`)."""
    parts = []
    with temporary_folder("accelkit-bench-") as tmp:
        for r in range(rounds):
            order = modes[r % len(modes) :] + modes[: r % len(modes)]
            for mode in order:
                args = Path(tmp) / f"{mode}-{r}-args.json"
                args.write_text(
                    json.dumps(
                        {
                            "experiment": experiment,
                            "mode": mode,
                            "settings": settings,
                            "repeats": protocol.repeats,
                            "warmup": protocol.warmup,
                            "threads": threads,
                        }
                    )
                )
                argv = [
                    sys.executable,
                    "-m",
                    __name__,
                    str(args),
                    str(Path(tmp) / f"{mode}-{r}.json"),
                ]
                what = f"bench {experiment} {mode} (round {r + 1})"
                done = run_child_process(argv, dict(os.environ), what, timeout=None)
                parts.append(Result.from_json(done))
    merged = merge_results(parts)
    merged.params["modes"] = modes
    merged.params["processes"] = f"one per backend, {rounds} interleaved round(s)"
    return merged


def main(argv: list[str]) -> int:
    """The child: one experiment, one backend, its threads fixed as the parent's were."""

    args_path, out = argv
    args = json.loads(Path(args_path).read_text())
    threads = fix_threads(args["threads"])
    module = importlib.import_module(f"accelkit.bench.experiments.{args['experiment']}")
    protocol = Protocol(repeats=args["repeats"], warmup=args["warmup"])
    result = module.run([args["mode"]], protocol=protocol, **args["settings"])
    result.params["threads"] = threads
    write_json_atomic(out, result.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
