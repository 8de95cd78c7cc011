"""accelkit quant on all-MiniLM-L6-v2: fidelity, size and eager/compiled latency vs FP32 (same run),
plus a cross-check of our RTN W4A8 against torchao's int8-dynamic-activation / int4-weight.

    python -m benchmarks.quant.quant_bench [--pairs 300] [--out benchmarks/results/quant_bench.json]
    python -m benchmarks.quant.quant_bench --profile [--out benchmarks/results/quant_profile.json]

`--profile`: only where the time of `quant eval`'s recommended setting (DuQuant W4A8, the default
config) goes — torch.profiler over the compiled quantized model and the compiled FP32 model (as
`quant eval` compiles them: `speed.compile_model`) at the timing batch (the first evaluation
batch, 64 texts), each op's self CPU time per forward, summed into the costs a W4A8 layer adds
(activation quantization, rotation, dequantization epilogue, the int8 GEMM) and the rest.

Latency: median of 10 forwards of one batch of 64 sentences × 32 tokens after warm-up; compiled =
torch.compile(fullgraph=True) with inductor. Only ratios within this run are meaningful.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from dataclasses import asdict

import torch

from accelkit.quant.evaluation.corpus import eval_pairs
from accelkit.quant.evaluation.fidelity import embed, fidelity, latency_ms
from accelkit.quant.evaluation.sweep import run_eval
from accelkit.quant.evaluation.tokenize import batches
from accelkit.quant.models import load_minilm
from accelkit.runtime.environment import record
from accelkit.runtime.files import write_json_atomic
from accelkit.runtime.timing import interleaved
from benchmarks.common import (
    ArgumentParser,
    listed,
    out_file,
    positive,
)


def torchao_crosscheck(n_pairs: int) -> dict:
    """Same model, same eval set: torchao Int8DynamicActivationIntxWeightConfig(int4, per-channel,
    asymmetric) against our RTN W4A8 with the same grid (no clip search, act_clip 1.0)."""
    try:
        from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
        from torchao.quantization.granularity import PerAxis
        from torchao.quantization.quant_primitives import MappingType
    except Exception as exc:  # torchao missing or broken on this machine
        return {"status": f"torchao unavailable: {exc}"}
    from accelkit.quant.config import QuantConfig
    from accelkit.quant.evaluation.corpus import calibration_sentences
    from accelkit.quant.method.convert import quantize
    from accelkit.quant.method.layers import QuantLinear

    fp32, tok = load_minilm()
    pairs = eval_pairs(n_pairs)
    data = batches(tok, [a for a, _ in pairs] + [b for _, b in pairs])
    ref = embed(fp32, data)
    ours = quantize(
        copy.deepcopy(fp32),
        QuantConfig(method="rtn", wbits=4, abits=8, weight_clip=1.0, act_clip=1.0),
        batches(tok, calibration_sentences(), 32),
    )
    ao = copy.deepcopy(fp32)
    cfg = Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4,
        weight_granularity=PerAxis(0),
        weight_mapping_type=MappingType.ASYMMETRIC,
        act_mapping_type=MappingType.ASYMMETRIC,
    )
    quantize_(ao, cfg)
    e_ours, e_ao = embed(ours, data), embed(ao, data)
    # one layer, same input: how far apart are the two W4A8 implementations, relative to their error?
    name = "bert.encoder.layer.0.intermediate.dense"
    x = torch.randn(256, 384, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y_fp = fp32.get_submodule(name)(x)
        y_ours = ours.get_submodule(name)(x)
        y_ao = ao.get_submodule(name)(x)
    assert isinstance(ours.get_submodule(name), QuantLinear)
    rel = lambda a, b: float((a - b).norm() / b.norm())  # noqa: E731
    out = {
        "status": "ok",
        "ours_rtn_w4a8": fidelity(e_ours, ref, n_pairs),
        "torchao_w4a8": fidelity(e_ao, ref, n_pairs),
        "ours_vs_torchao_embedding_cosine": float((e_ours * e_ao).sum(-1).mean()),
        "layer": name,
        "layer_rel_err_ours_vs_fp32": rel(y_ours, y_fp),
        "layer_rel_err_torchao_vs_fp32": rel(y_ao, y_fp),
        "layer_rel_diff_ours_vs_torchao": rel(y_ours, y_ao),
        "eager_ms_torchao": latency_ms(ao, data[0]),
        "eager_ms_ours": latency_ms(ours, data[0]),
    }
    return out


PROGRESSIVE_SETTINGS = ((128, True), (64, True), (64, False))  # (group size, permutation)


def interleaved_latency(
    group_size: int | None,
    rounds: int = 15,
    weight_format: str = "plain",
    permutation: bool = True,
    long_batch: bool = False,
) -> dict:
    """Compiled (inductor, fullgraph) latency of FP32, RTN W4A8 and DuQuant W4A8, measured in
    interleaved rounds so that load from other processes hits every model alike; medians in ms."""
    from accelkit.quant.config import QuantConfig
    from accelkit.quant.evaluation.corpus import calibration_sentences
    from accelkit.quant.evaluation.speed import compile_model
    from accelkit.quant.method.convert import quantize

    fp32, tok = load_minilm()
    calib = batches(tok, calibration_sentences(), 32)
    pairs = eval_pairs(32)
    batch = batches(tok, [a for a, _ in pairs] + [b for _, b in pairs])[0]
    if long_batch:  # the 32 sequences x 128 tokens (pairs joined into long texts)
        texts = [" ".join([a, b] * 6) for a, b in pairs]
        enc = tok(texts, padding="max_length", truncation=True, max_length=128, return_tensors="pt")
        batch = {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
    single = batches(tok, [pairs[0][0]], batch_size=1)[0]  # one sentence: latency-bound inference
    models = {"fp32": fp32}
    for method in ("rtn", "duquant"):
        models[f"{method}/w4a8"] = quantize(
            copy.deepcopy(fp32),
            QuantConfig(
                method=method,
                wbits=4,
                abits=8,
                weight_group_size=group_size,
                weight_format=weight_format,
                permutation=permutation,
            ),
            calib,
        )
    torch._dynamo.reset()
    compiled = {name: compile_model(m) for name, m in models.items()}
    with torch.no_grad():
        for fn in compiled.values():  # compile + warm up, both shapes
            for b in (batch, batch, single, single):
                fn(**b)
        runs = {name: (lambda fn=fn: fn(**batch)) for name, fn in compiled.items()}
        for name, fn in compiled.items():  # single-sentence calls are short: five per round
            runs[f"{name}/single"] = lambda fn=fn: [fn(**single) for _ in range(5)]
        timed = interleaved(runs, rounds, warmup=False)
    ms = {name: [1e3 * t for t in v] for name, v in timed.wall.items() if "/single" not in name}
    ms1 = {
        name: [1e3 * t / 5 for t in timed.wall[f"{name}/single"]] for name in compiled
    }  # per call
    med = {name: statistics.median(v) for name, v in ms.items()}
    med1 = {name: statistics.median(v) for name, v in ms1.items()}
    return {
        "batch": list(batch["input_ids"].shape),
        "median_ms": med,
        "ratio_vs_fp32": {name: med[name] / med["fp32"] for name in med},
        "all_ms": ms,
        "single": {
            "batch": list(single["input_ids"].shape),
            "median_ms": med1,
            "ratio_vs_fp32": {name: med1[name] / med1["fp32"] for name in med1},
        },
    }


# what each profiled op is, by its name: inductor's kernels (`cpp_fused_…`, named after the ops
# they fuse: `cpp.enable_kernel_profile`) by what they fuse, extern calls by the op; first match wins.
# The dequantization epilogue (int32 sums × scales + bias) fuses into the kernel after the GEMM,
# the next layer's activation quantization or the layer norm / GELU: it has no kernel of its own.
PROFILE_RULES = (
    ("activation quantization + dequant epilogue (fused)", ("cpp_fused", "round")),
    (
        "layer norm / GELU / softmax / residual (fused)",
        ("cpp_fused", "layer_norm|gelu|softmax|rsqrt|silu|mean"),
    ),
    ("other fused kernels (copies, transposes)", ("cpp_fused", "")),
    ("int8 GEMM", ("", "_int_mm|fbgemm|quantized::")),
    ("attention (scaled dot product)", ("", "scaled_dot_product|flash_attention")),
    ("bmm (attention; W4A8 also the rotation)", ("", "bmm")),
    ("float GEMM", ("", "aten::mm|addmm|aten::linear|mkldnn")),
    ("copies", ("", "aten::copy_|aten::clone|contiguous")),
)


def profile_category(name: str) -> str:
    low = name.lower()
    for category, (kind, keys) in PROFILE_RULES:
        if kind in low and any(k in low for k in keys.split("|")):
            return category
    return "other (calls, guards, dynamo)"


def model_profile(rounds: int = 20, subject=None, batch=None, compiled=None) -> dict:
    """torch.profiler over the compiled quantized model (DuQuant W4A8, `quant eval`'s default
    config and its recommendation) and the compiled FP32 model at the timing batch: per op its
    self CPU ms per forward and category (`PROFILE_RULES`), the categories' sums, and the two
    models' median times interleaved (the ratio `quant eval` reports). `subject` (default
    MiniLM's), `batch` (default its timing batch) and `compiled` (the two compiled models, by
    those names: made here when not given) for another model or shape."""
    import torch._inductor.config as inductor_config
    from torch.profiler import ProfilerActivity, profile

    from accelkit.quant.config import QuantConfig
    from accelkit.quant.evaluation.fidelity import load_subject
    from accelkit.quant.evaluation.speed import compile_model
    from accelkit.quant.method.convert import quantize

    inductor_config.cpp.enable_kernel_profile = True  # inductor's kernels by name in the profile
    subject = subject or load_subject("minilm")
    batch = batch or subject.data.first()
    if compiled is None:
        fp32 = subject.model
        w4a8 = quantize(
            copy.deepcopy(fp32),
            QuantConfig(method="duquant", wbits=4, abits=8),
            subject.calibration,
        )
        compiled = {"fp32": compile_model(fp32), "duquant/w4a8": compile_model(w4a8)}
    out: dict = {"batch": list(batch["input_ids"].shape), "rounds": rounds, "models": {}}
    with torch.no_grad():
        for fn in compiled.values():
            fn(**batch), fn(**batch)  # compile, warm up
        timed = interleaved({n: (lambda fn=fn: fn(**batch)) for n, fn in compiled.items()}, rounds)
        med = {n: 1e3 * statistics.median(v) for n, v in timed.wall.items()}
        out["median_ms"], out["ratio"] = med, med["duquant/w4a8"] / med["fp32"]
        for name, fn in compiled.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(rounds):
                    fn(**batch)
            ops = [
                {
                    "name": e.key,
                    "ms": e.self_cpu_time_total / 1e3 / rounds,
                    "calls": e.count / rounds,
                    "category": profile_category(e.key),
                }
                for e in prof.key_averages()
                if e.self_cpu_time_total > 0
            ]
            ops.sort(key=lambda op: -op["ms"])
            total = sum(op["ms"] for op in ops)
            categories: dict[str, float] = {}
            for op in ops:
                categories[op["category"]] = categories.get(op["category"], 0.0) + op["ms"]
            out["models"][name] = {
                "profiled_ms": total,
                "categories_ms": dict(sorted(categories.items(), key=lambda kv: -kv[1])),
                "ops": ops[:40],
            }
    fp_ms = out["models"]["fp32"]["profiled_ms"]
    bmm = "bmm (attention; W4A8 also the rotation)"
    # the attention's bmm is the same in both models: the rest of W4A8's is the rotation
    out["rotation_ms"] = out["models"]["duquant/w4a8"]["categories_ms"].get(bmm, 0.0) - out[
        "models"
    ]["fp32"]["categories_ms"].get(bmm, 0.0)
    out["categories_vs_fp32"] = {
        category: ms / fp_ms
        for category, ms in out["models"]["duquant/w4a8"]["categories_ms"].items()
    }
    return out


def calibration_seconds(rounds: int = 2) -> dict:
    """Wall seconds of quantize() on MiniLM (calibration forward, transform fit, clip search,
    packing) per method, W4A8 per channel, interleaved rounds (the target: DuQuant <= 60 s)."""
    from accelkit.quant.config import QuantConfig
    from accelkit.quant.evaluation.corpus import calibration_sentences
    from accelkit.quant.method.convert import quantize

    fp32, tok = load_minilm()
    calib = batches(tok, calibration_sentences(), 32)
    runs = {
        method: (
            lambda method=method: quantize(
                copy.deepcopy(fp32), QuantConfig(method=method, wbits=4, abits=8), calib
            )
        )
        for method in ("rtn", "smoothquant", "duquant")
    }
    timed = interleaved(runs, rounds, warmup=False)
    return {"rounds": rounds, "median_s": timed.medians(), "all_s": timed.wall}


METHODS, BITS = ("fp32", "rtn", "smoothquant", "duquant"), ("w4a8", "w4a4")
ROWS = ("fp32", *(f"{m}/{b}" for m in METHODS[1:] for b in BITS))  # `sweep.run_eval`'s labels


def minilm_widths() -> tuple[int, ...]:
    """The input widths of MiniLM's linear layers (hidden and intermediate size), read from the
    packaged model's config.json: no weights loaded."""
    import json

    from accelkit.quant.models import minilm_path

    config = json.loads((minilm_path() / "config.json").read_text())
    return (config["hidden_size"], config["intermediate_size"])


def group_size(text: str) -> int:
    """An argument type: 0 (per output channel) or a group size of 2 or more that divides every
    linear layer's input width — quant leaves a layer whose width it does not divide in float
    (`convert.plan_layers`), so another size would compare a partly quantized model, or refuse
    it after the model has loaded when no layer is left."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0 or value == 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give 0 (per output channel) or a group size of 2 or more"
        )
    try:
        widths = minilm_widths() if value else ()
    except Exception:  # MiniLM not installed: the run says so itself
        widths = ()
    if any(width % value for width in widths):
        divisors = [g for g in (16, 32, 64, 128) if not any(w % g for w in widths)]
        raise argparse.ArgumentTypeError(
            f"{value} does not divide MiniLM's layer input widths {', '.join(map(str, widths))};"
            f" give 0 (per output channel) or a divisor of them (e.g. {', '.join(map(str, divisors))})"
        )
    return value


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=positive(), default=300)
    parser.add_argument(
        "--out",
        type=out_file,
        default=None,
        help="default: benchmarks/results/quant_bench.json (quant_profile.json with --profile)",
    )
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument(
        "--profile", action="store_true", help="only the W4A8 model's profile (quant_profile.json)"
    )
    parser.add_argument(
        "--compile-rows",
        type=listed(("all", *ROWS)),
        default=None,
        help="rows whose compiled latency is measured ('all' = every row; inductor compiles take minutes here)",
    )
    parser.add_argument(
        "--group-size",
        type=group_size,
        default=64,
        help="weight group size for every method (0 = per channel, else 2 or more)",
    )
    args = parser.parse_args()
    t0 = time.perf_counter()
    if args.out is None and not args.profile:
        args.out = "benchmarks/results/quant_bench.json"
    if args.profile:
        out = args.out or "benchmarks/results/quant_profile.json"
        env = {**record(("torch", "transformers")), "threads": torch.get_num_threads()}
        write_json_atomic(out, {"environment": env, "profile": model_profile()})
        print(f"wrote {out}")
        return
    rows = run_eval(
        list(METHODS),
        list(BITS),
        n_pairs=args.pairs,
        compiled=False
        if args.no_compile
        else True
        if "all" in (args.compile_rows or "").split(",")
        else set(filter(None, (args.compile_rows or "").split(","))),
        config_overrides={"weight_group_size": args.group_size or None},
        progress=lambda s: print(f"[{time.perf_counter() - t0:6.0f}s] {s}", flush=True),
    )
    fp = rows[0]
    table = [asdict(r) for r in rows]
    for r in table:
        if fp.compiled_ms and r["compiled_ms"]:
            r["compiled_vs_fp32_compiled"] = r["compiled_ms"] / fp.compiled_ms
        if fp.eager_ms and r["eager_ms"]:
            r["eager_vs_fp32_eager"] = r["eager_ms"] / fp.eager_ms
        r["size_vs_fp32"] = r["quant_layers_mb"] / r["fp32_layers_mb"]
    # per output channel (the QuantConfig default): the int8-GEMM path on CPU; fidelity and latency
    print(f"[{time.perf_counter() - t0:6.0f}s] per-channel fidelity", flush=True)
    per_channel = [
        asdict(r)
        for r in run_eval(
            ["fp32", "rtn", "duquant"],
            ["w4a8", "w4a4"],
            n_pairs=args.pairs,
            compiled=False,
            config_overrides={"weight_group_size": None},
        )
    ]
    # progressive groups (QServe W4A8): group-level fidelity on the int8-GEMM path
    print(f"[{time.perf_counter() - t0:6.0f}s] progressive fidelity", flush=True)
    progressive = {}
    for group, permutation in PROGRESSIVE_SETTINGS:
        progressive[f"{group}{'' if permutation else '_no_permutation'}"] = [
            asdict(r)
            for r in run_eval(
                ["fp32", "rtn", "duquant"],
                ["w4a8", "w4a4"],
                n_pairs=args.pairs,
                compiled=False,
                config_overrides={
                    "weight_group_size": group,
                    "weight_format": "progressive",
                    "permutation": permutation,
                },
            )
        ]
    print(f"[{time.perf_counter() - t0:6.0f}s] interleaved compiled latency", flush=True)
    inter = {"per_channel": interleaved_latency(None)}
    if args.group_size:
        inter[f"group_{args.group_size}"] = interleaved_latency(args.group_size)
    for group, permutation in PROGRESSIVE_SETTINGS:
        name = f"progressive_{group}{'' if permutation else '_no_permutation'}"
        inter[name] = interleaved_latency(
            group, weight_format="progressive", permutation=permutation
        )
        inter[f"{name}_32x128"] = interleaved_latency(
            group, rounds=8, weight_format="progressive", permutation=permutation, long_batch=True
        )
    print(f"[{time.perf_counter() - t0:6.0f}s] torchao cross-check", flush=True)
    cross = torchao_crosscheck(args.pairs)
    print(f"[{time.perf_counter() - t0:6.0f}s] calibration time per method", flush=True)
    calibration = calibration_seconds()
    payload = {
        "environment": {
            **record(("torch", "torchao", "transformers")),
            "threads": torch.get_num_threads(),
        },
        "pairs": args.pairs,
        "weight_group_size": args.group_size or None,
        "rows": table,
        "rows_per_channel": per_channel,
        "rows_progressive": progressive,
        "compiled_latency_interleaved": inter,
        "torchao_crosscheck": cross,
        "calibration_seconds": calibration,
        "wall_s": time.perf_counter() - t0,
    }
    write_json_atomic(args.out, payload)
    for r in table:
        print(
            f"{r['method']:12s} {r['bits']:7s} cos {r['mean_cosine']:.4f} top1 {r['top1_agreement']:.3f} "
            f"size {r['size_vs_fp32']:.3f}x eager {r['eager_ms'] or 0:.1f}ms compiled {r['compiled_ms'] or 0:.1f}ms"
        )
    for r in per_channel:
        print(
            f"per channel  {r['method']:12s} {r['bits']:7s} cos {r['mean_cosine']:.4f} top1 {r['top1_agreement']:.3f}"
        )
    for group, prog_rows in progressive.items():
        for r in prog_rows:
            print(
                f"progressive {group:>4s} {r['method']:12s} {r['bits']:7s} cos {r['mean_cosine']:.4f}"
                f" top1 {r['top1_agreement']:.3f} size {r['quant_layers_mb'] / r['fp32_layers_mb']:.3f}x"
            )
    for name, lat in inter.items():
        print(f"compiled latency (interleaved, {name}):", lat["median_ms"], lat["ratio_vs_fp32"])
        print(
            f"  one sentence {lat['single']['batch']}:",
            lat["single"]["median_ms"],
            lat["single"]["ratio_vs_fp32"],
        )
    print("torchao:", {k: v for k, v in cross.items() if not isinstance(v, dict)})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
