"""Crash consistency of every command that writes, all of it: the crash harness
(tests/support/crash/, whose module docstring says what a kill point is and what is checked) over
every case, `--kills` kills each; the suite runs a few kills per command (tests/test_faults.py).

    python -m benchmarks.reliability.faults                   # every command, 20 kills each
    python -m benchmarks.reliability.faults --kills 5 --only stats-v30,images-insert-new

Writes JSON to benchmarks/results/faults.json (or --output) and prints a markdown table of kills
x outcomes per command.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.support.crash.cases import cases
from tests.support.crash.harness import SEED, measure

from benchmarks.common import (
    REPO,
    ArgumentParser,
    checked,
    fail,
    listed,
    machine,
    out_file,
    positive,
    write_progress,
    write_results,
)

SCHEMA = "accelkit.faults/1"


def table(results: dict) -> str:
    rows = ["| command | kills | outcomes | reruns | failures |", "|---|---|---|---|---|"]
    for result in results.values():
        trials = result["trials"]
        outcomes = "; ".join(f"{n}× {o}" for o, n in sorted(result["outcomes"].items()))
        reruns = sum(t["rerun"] == "ran" for t in trials)
        rows.append(
            f"| `{result['command']}` | {len(trials)} | {outcomes} | {reruns} ran, "
            f"{len(trials) - reruns} known | {result['failures']} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=positive(), default=20)
    parser.add_argument("--only", default=None, help="comma-separated case names")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--server", action="store_true", help="also the Milvus server cases")
    parser.add_argument(
        "--output", type=out_file, default=str(REPO / "benchmarks" / "results" / "faults.json")
    )
    parser.add_argument(
        "--merge", action="store_true", help="keep the other commands' results already in --output"
    )
    args = parser.parse_args(argv)
    known = [c.name for c in cases(server=args.server)]
    # checked after parsing: the valid names depend on --server; an empty --only is refused
    only = known if args.only is None else checked("--only", listed(known), args.only).split(",")
    only = [name.strip() for name in only]
    chosen = [c for c in cases(server=args.server) if c.name in only]
    out = Path(args.output)
    results: dict[str, Any] = {}
    if args.merge:
        try:
            results = json.loads(out.read_text())["results"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            fail(f"argument --merge: {out} holds no readable results ({exc!r}); drop --merge")
    started = machine(())  # the common machine record

    def write(final: bool = False) -> None:  # a long run killed midway keeps what it measured
        document = {
            "schema": SCHEMA,
            "seed": args.seed,
            "kills_per_command": args.kills,
            "environment": {**started, "load_average_end": [round(x, 2) for x in os.getloadavg()]},
            "results": results,
            "table": table(results),
        }
        (write_results if final else write_progress)(out, document)

    with tempfile.TemporaryDirectory(prefix="accelkit-faults-") as tmp:
        for case in chosen:
            results[case.name] = measure(case, args.kills, Path(tmp) / case.name, args.seed)
            write()
    write(final=True)
    print(table(results))
    print(f"wrote {out}")
    return 1 if any(r["failures"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
