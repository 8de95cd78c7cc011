"""The int8 GEMM kernels a QuantLinear can run on this CPU, per layer shape, against float32:
speed at one text and at the evaluation's timing batch, and whether each sums exactly — on the
CPU's own ISA and held to AVX2 (`--isa avx2`: ONEDNN_MAX_CPU_ISA=AVX2,
FBGEMM_ENABLE_INSTRUCTIONS=AVX2, ATEN_CPU_CAPABILITY=avx2; eager only, so inductor is not
involved).

    python -m benchmarks.quant.quant_kernels            # both ISAs, one process each -> JSON
    python -m benchmarks.quant.quant_kernels --isa native --out part.json

Per shape (in × out) of MiniLM and of the matrix's Llama, at each row count, median seconds of
interleaved rounds (each round calls every candidate `calls` times; the machine may be shared):
- `fp32`: `nn.functional.linear` in float32 (oneDNN / MKL sgemm) — the baseline;
- `onednn`: `torch._int_mm` on int8 activation codes (oneDNN s8·s8→s32), what QuantLinear runs;
- `fbgemm`: fbgemm's prepacked u8·s8 GEMM with float32 output (`kernels.fbgemm_mm`);
- `fbgemm_dynamic`: `quantized::linear_dynamic` — PyTorch's own dynamic quantization (it also
  quantizes the activations, per tensor, 7-bit: not our numerics; for reference);
- `unpack_int4`: rebuilding the int8 weight from packed int4 codes on every call (what keeping
  derived int8 buffers saves).
Exactness (`kernels.exact`) per kernel and regime: full-range 8-bit codes × |b| ≤ 127, × |b| ≤ 64,
and 7-bit codes × |b| ≤ 127.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from benchmarks.common import (
    ArgumentParser,
    module_command,
    out_file,
    positive,
    repo_env,
)

SHAPES = {"minilm": [(384, 384), (384, 1536), (1536, 384)], "llama-random": [(256, 256),
          (256, 128), (256, 768), (768, 256)]}  # fmt: skip
ROWS = (19, 1216, 4096)  # one text; the eval's timing batch (64 × 19); a large batch
AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "FBGEMM_ENABLE_INSTRUCTIONS": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2"}  # fmt: skip


def time_shape(model: str, n: int, m: int, rounds: int, calls_budget: int) -> list[dict]:
    """Every candidate on one layer shape at each row count in `ROWS`."""
    import warnings

    import torch

    from accelkit.quant.method import kernels
    from accelkit.quant.method import quantizers as qz
    from accelkit.runtime.timing import interleaved

    w = torch.randn(m, n) * 0.05
    w8 = torch.randint(-119, 120, (m, n), dtype=torch.int8)
    rowsum = w8.sum(1, dtype=torch.int32)
    s_w = torch.rand(m) * 0.01 + 1e-3
    packed4 = qz.pack_int4(torch.randint(0, 16, (m, n), dtype=torch.uint8))
    s2 = torch.randint(1, 9, (m, n // 64), dtype=torch.uint8)
    z2 = torch.randint(0, 16, (m, n // 64), dtype=torch.uint8)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            qw = torch._make_per_channel_quantized_tensor(
                w8, s_w.double(), torch.zeros(m, dtype=torch.long), 0
            )
            torch.backends.quantized.engine = "fbgemm"
            dynamic_packed = torch.ops.quantized.linear_prepack(qw, None)
    except (RuntimeError, AttributeError):
        dynamic_packed = None

    def candidates(x, codes, zero) -> dict:
        runs = {
            "fp32": lambda: torch.nn.functional.linear(x, w),
            "onednn": lambda: kernels.integer_sums("onednn", codes, w8, rowsum, zero, 8),
            "fbgemm": lambda: kernels.integer_sums("fbgemm", codes, w8, rowsum, zero, 8),
            "unpack_int4": lambda: qz.progressive_int8(qz.unpack_int4(packed4), s2, z2),
        }
        if dynamic_packed is not None:
            runs["fbgemm_dynamic"] = lambda: torch.ops.quantized.linear_dynamic(
                x, dynamic_packed, True
            )
        usable = {}
        for name, run in runs.items():
            try:
                run()
                usable[name] = run
            except (RuntimeError, NotImplementedError):
                pass
        return usable

    def repeat(run, calls):
        return lambda: [run() for _ in range(calls)]

    out = []
    for rows in ROWS:
        codes = torch.randint(0, 256, (rows, n)).float()
        with torch.no_grad():
            runs = candidates(torch.randn(rows, n), codes, torch.full((rows, 1), 128.0))
            calls = max(1, calls_budget // rows)
            timed = interleaved({k: repeat(f, calls) for k, f in runs.items()}, rounds)
        med = {k: statistics.median(v) / calls for k, v in timed.wall.items()}
        out.append(
            {
                "model": model,
                "in": n,
                "out": m,
                "rows": rows,
                "seconds": med,
                "ratio_to_fp32": {k: v / med["fp32"] for k, v in med.items()},
            }
        )
        print(
            f"{model:12s} {n}x{m} rows {rows:5d}: "
            + "  ".join(f"{k} {v / med['fp32']:.2f}x" for k, v in med.items()),
            flush=True,
        )
    kernels.forget(w8)
    return out


def measure(rounds: int, calls_budget: int) -> dict:
    import torch

    from accelkit.quant.method import kernels
    from accelkit.runtime.environment import record

    torch.manual_seed(0)
    results = [
        row
        for model, shapes in SHAPES.items()
        for n, m in shapes
        for row in time_shape(model, n, m, rounds, calls_budget)
    ]
    exact = {
        k: {
            "u8_x_127": kernels.exact(k, 255, 127),
            "u8_x_64": kernels.exact(k, 255, 64),
            "u7_x_127": kernels.exact(k, 127, 127),
        }
        for k in kernels.INTEGER_KERNELS
    }
    return {
        "environment": {**record(("torch",)), "threads": torch.get_num_threads()},
        "isa_env": {k: os.environ[k] for k in AVX2 if os.environ.get(k)},
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "vnni": bool(getattr(torch.cpu, "_is_vnni_supported", lambda: False)()),
        "machine": kernels.machine_key(),
        "rounds": rounds,
        "exact": exact,
        "results": results,
    }


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", choices=["native", "avx2", "both"], default="both")
    parser.add_argument("--rounds", type=positive(), default=9)
    parser.add_argument("--calls", type=positive(), default=4096, help="rows per timed sample")
    parser.add_argument("--out", type=out_file, default="benchmarks/results/quant_kernels.json")
    parser.add_argument("--threads", type=positive(), help="torch threads (default: torch's own)")
    args = parser.parse_args()
    if args.isa == "both":  # one child process per ISA: the variables are read at start-up
        start, parts = time.perf_counter(), {}
        for isa in ("native", "avx2"):
            part = Path(args.out).with_suffix(f".{isa}.json")
            env = {**os.environ, **(AVX2 if isa == "avx2" else {})}
            for key in AVX2 if isa == "native" else ():
                env.pop(key, None)
            cmd = [*module_command("benchmarks.quant.quant_kernels"), "--isa", isa, "--rounds", str(args.rounds),
                   "--calls", str(args.calls), "--out", str(part)]  # fmt: skip
            if args.threads:
                cmd += ["--threads", str(args.threads)]
            subprocess.run(cmd, env=repo_env(env), check=True)
            parts[isa] = json.loads(part.read_text(encoding="utf-8"))
            part.unlink()
        from accelkit.runtime.files import write_json_atomic

        write_json_atomic(args.out, {**parts, "wall_s": time.perf_counter() - start})
        print(f"wrote {args.out}")
        return
    import torch

    from accelkit.runtime.files import write_json_atomic

    if args.threads:
        torch.set_num_threads(args.threads)
    write_json_atomic(args.out, measure(args.rounds, args.calls))


if __name__ == "__main__":
    main()
