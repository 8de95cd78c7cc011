"""Every `accelkit quant` speed and fidelity benchmark in one command, then docs/quant.md's
generated tables from their JSON (benchmarks/results/quant_*.json).

    python -m benchmarks.quant.quant_all [--threads N] [--quick]

In order, each in its own process (the machine may be shared: each script interleaves its
candidates with their baseline and reports medians and ratios):
1. `quant_kernels.py` — int8 GEMM kernels per layer shape, native ISA and held to AVX2;
2. `accelkit quant eval --json` with every default — rows, recommendation, seconds per phase
   (`quant_eval_default.json`, the command's own --json document);
3. `quant_avx2.py` — `quant eval` (FP32, DuQuant W4A8 / W4A7) with the libraries held to AVX2;
4. `quant_target.py` — `--target-cosine` on MiniLM and on the causal LM;
5. `quant_matrix.py` — the settings matrix with compiled timings at both shapes (`--quick`:
   MiniLM and the causal LM, the first four settings);
6. `quant_eval_time.py` — `quant eval` on defaults as a whole process, cold caches then warm;
7. `quant_bench.py --profile` — where the recommended W4A8 model's time goes (torch.profiler);
8. `quant_docs.py` — the generated blocks of docs/quant.md.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import (
    REPO,
    RESULTS,
    ArgumentParser,
    positive,
)


def run(cmd: list[str], stdout_to: Path | None = None) -> None:
    print("$", " ".join(cmd), flush=True)
    start = time.perf_counter()
    if stdout_to is None:
        subprocess.run(cmd, cwd=REPO, check=True)
    else:
        done = subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.PIPE)
        stdout_to.write_bytes(done.stdout)
    print(f"  ({time.perf_counter() - start:.0f} s)", flush=True)


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=positive(), help="torch threads (default: torch's own)")
    parser.add_argument("--quick", action="store_true", help="a smaller matrix")
    args = parser.parse_args()
    py = sys.executable
    threads = ["--threads", str(args.threads)] if args.threads else []
    run([py, "-m", "benchmarks.quant.quant_kernels", *threads])
    env_threads = [] if not args.threads else ["env", f"OMP_NUM_THREADS={args.threads}"]
    run([*env_threads, py, "-m", "accelkit", "quant", "eval", "--json"],
        stdout_to=RESULTS / "quant_eval_default.json")  # fmt: skip
    run([py, "-m", "benchmarks.quant.quant_avx2", *threads])
    run([py, "-m", "benchmarks.quant.quant_target", *threads])
    quick = ["--models", "minilm,llama-random", "--limit", "4"] if args.quick else []
    run([py, "-m", "benchmarks.research.quant_matrix", *threads, *quick])
    run([*env_threads, py, "-m", "benchmarks.quant.quant_eval_time"])
    run([*env_threads, py, "-m", "benchmarks.quant.quant_bench", "--profile"])
    run([py, "-m", "benchmarks.docs", "--page", "docs/quant.md"])


if __name__ == "__main__":
    main()
