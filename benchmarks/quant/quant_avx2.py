"""`quant eval` on this CPU held to AVX2: what an AVX2-only machine's default would look like.

    python -m benchmarks.quant.quant_avx2 [--out benchmarks/results/quant_eval_avx2.json]

Re-runs itself with ONEDNN_MAX_CPU_ISA=AVX2 and FBGEMM_ENABLE_INSTRUCTIONS=AVX2 (oneDNN's and
fbgemm's own switches) and inductor's `cpp.simdlen = 256` (AVX2-wide generated code), then runs
`accelkit.quant.evaluate` — FP32 and DuQuant at w4a8 and w4a7 (the default bits there), compiled
at both shapes. Not ATEN_CPU_CAPABILITY=avx2: with it torch 2.13's inductor produced wrong results
on this AVX-512 host (docs/quant.md, "Speed"). An approximation of an AVX2 machine: ATen's own
checks still see VNNI (on a real AVX2-only CPU `torch._int_mm` skips oneDNN and runs a naive loop).
"""

from __future__ import annotations

import os
import subprocess
import sys

from benchmarks.common import (
    ArgumentParser,
    module_command,
    out_file,
    positive,
    repo_env,
)

ENV = {"ONEDNN_MAX_CPU_ISA": "AVX2", "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2"}


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=out_file, default="benchmarks/results/quant_eval_avx2.json")
    parser.add_argument("--pairs", type=positive(), default=300)
    parser.add_argument("--threads", type=positive())
    args = parser.parse_args()
    if any(os.environ.get(k) != v for k, v in ENV.items()):  # the variables are read at start-up
        sys.exit(
            subprocess.call(
                module_command("benchmarks.quant.quant_avx2", *sys.argv[1:]),
                env=repo_env({**os.environ, **ENV}),
            )
        )
    import torch

    from accelkit.quant import evaluate
    from accelkit.runtime.environment import record
    from accelkit.runtime.files import write_json_atomic

    torch._inductor.config.cpp.simdlen = 256
    if args.threads:
        torch.set_num_threads(args.threads)
    result = evaluate(
        "minilm", methods=["fp32", "duquant"], bits=["w4a8", "w4a7"], pairs=args.pairs
    )
    print(result.recommendation["setting"]["text"])
    write_json_atomic(
        args.out,
        {
            "environment": {**record(("torch",)), "threads": torch.get_num_threads()},
            "isa_env": ENV,
            "inductor_simdlen": 256,
            **result.document(),
        },
    )


if __name__ == "__main__":
    main()
