"""CUDA-graph safety of a quantized model: torch.compile(mode="reduce-overhead") for 100 calls while
holding every earlier output, each compared with eager. This is the failure the openpi fork hit
("accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run").

    python -m benchmarks.quant.quant_cuda_graphs [--calls 100] [--out benchmarks/results/quant_cuda_graphs.json]

Needs a CUDA GPU; on a CPU-only machine it exits with status 3 and says so. The model is
all-MiniLM-L6-v2 quantized with DuQuant W4A8 (calibrated eagerly on the CPU, then moved to the GPU).
Outputs are cloned outside the compiled function (PyTorch's documented rule for outputs kept across
replays); the check is that (a) no call raises, (b) every held output still equals the eager output
of its own input, (c) the model's buffers are unchanged, (d) no recompilation after warm-up.
"""

from __future__ import annotations

import copy
import sys
import time

import torch

from benchmarks.common import (
    ArgumentParser,
    out_file,
    positive,
)


def main() -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=positive(), default=100)
    parser.add_argument("--out", type=out_file, default="benchmarks/results/quant_cuda_graphs.json")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(
            "quant_cuda_graphs: no CUDA GPU here; this check needs one (CUDA graphs exist only on GPU). Nothing was run."
        )
        return 3
    from accelkit.quant.config import QuantConfig
    from accelkit.quant.evaluation.corpus import calibration_sentences, eval_pairs
    from accelkit.quant.evaluation.tokenize import batches
    from accelkit.quant.method.convert import quantize
    from accelkit.quant.models import load_minilm
    from accelkit.runtime.files import write_json_atomic

    fp32, tok = load_minilm()
    model = quantize(
        copy.deepcopy(fp32),
        QuantConfig(method="duquant", wbits=4, abits=8),
        batches(tok, calibration_sentences(), 32),
    )
    dev = torch.device("cuda")
    model = model.to(dev).eval()
    snapshot = {k: v.clone() for k, v in model.named_buffers()}
    pairs = eval_pairs(300)
    sentences = [a for a, _ in pairs] + [b for _, b in pairs]
    data = [{k: v.to(dev) for k, v in b.items()} for b in batches(tok, sentences, batch_size=16)]
    data = [b for b in data if b["input_ids"].shape[0] == 16]
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, mode="reduce-overhead", dynamic=False)
    held, errors = [], []
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(args.calls):
            batch = data[i % len(data)]
            try:
                out = compiled(**batch).clone()  # clone outside the compiled region: safe to keep
            except Exception as exc:  # record the failure mode instead of dying on the first call
                errors.append(f"call {i}: {type(exc).__name__}: {exc}".splitlines()[0])
                break
            held.append((i, out))
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        worst = 0.0
        for i, out in held:
            ref = model(**data[i % len(data)])
            worst = max(worst, float((out - ref).abs().max()))
        # also check the uncloned output of the latest call is usable right after the call
        fresh = compiled(**data[0])
        fresh_ok = bool(torch.allclose(fresh, model(**data[0]), atol=1e-3))
    unchanged = all(torch.equal(snapshot[k], v) for k, v in model.named_buffers())
    int8 = int8_path(fp32.to(dev).eval(), model, data)
    result = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "calls": args.calls,
        "completed_calls": len(held),
        "errors": errors,
        "max_abs_diff_vs_eager": worst,
        "fresh_output_ok": fresh_ok,
        "buffers_unchanged": unchanged,
        "wall_s": wall,
        "int8_path": int8,
        "ok": not errors
        and len(held) == args.calls
        and worst < 1e-2
        and unchanged
        and fresh_ok
        and int8["int8_vs_float_path_max_rel"] < 1e-3,
    }
    write_json_atomic(args.out, result)
    print(result)
    return 0 if result["ok"] else 1


def int8_path(fp32, model, data) -> dict:
    """The quantized model on CUDA with its int8 GEMMs (`torch._int_mm`, batches of more than 16
    token rows) against the same model with the float (dequantized) path and against FP32:
    agreement, mean cosine to FP32, and compiled latency of each (median of 20 calls)."""
    import statistics

    from accelkit.quant.method.layers import QuantLinear

    float_path = copy.deepcopy(model)
    layers = [m for m in model.modules() if isinstance(m, QuantLinear)]
    for m in float_path.modules():
        if isinstance(m, QuantLinear):
            m.cuda_integer = False
    batch = data[0]
    with torch.no_grad():
        outs = {
            name: m(**batch) for name, m in (("fp32", fp32), ("int8", model), ("float", float_path))
        }

        def cosine(a, b):
            return float(torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1).mean())

        times = {}
        for name, m in (("fp32", fp32), ("int8", model), ("float", float_path)):
            torch._dynamo.reset()
            fn = torch.compile(m, fullgraph=True)
            for _ in range(3):
                fn(**batch)
            torch.cuda.synchronize()
            runs = []
            for _ in range(20):
                t = time.perf_counter()
                fn(**batch)
                torch.cuda.synchronize()
                runs.append(time.perf_counter() - t)
            times[name] = statistics.median(runs) * 1e3
    diff = (outs["int8"] - outs["float"]).norm() / outs["float"].norm()
    return {
        "layers_on_int8": sum(1 for m in layers if m.cuda_integer),
        "layers": len(layers),
        "rows_per_batch": int(batch["input_ids"].numel()),
        "int8_vs_float_path_max_rel": float(diff),
        "mean_cosine_to_fp32": {
            "int8": cosine(outs["int8"], outs["fp32"]),
            "float": cosine(outs["float"], outs["fp32"]),
        },
        "compiled_ms": times,
        "compiled_vs_fp32": {k: v / times["fp32"] for k, v in times.items()},
    }


if __name__ == "__main__":
    sys.exit(main())
