"""The tables of docs/quant.md, rendered from the quant benchmarks' JSON
(benchmarks/results/quant_*.json; never typed). `TABLES` names them for the docs engine
(`python -m benchmarks.docs`, blocks.py)."""

from __future__ import annotations

from benchmarks.common import REPO
from benchmarks.docs.blocks import Table

BENCH = REPO / "benchmarks" / "results" / "quant_bench.json"
MATRIX = REPO / "benchmarks" / "results" / "quant_matrix.json"
MATRIX_EAGER = REPO / "benchmarks" / "results" / "quant_matrix_2026-11-25.json"  # eager only
KERNELS = REPO / "benchmarks" / "results" / "quant_kernels.json"
EVAL = REPO / "benchmarks" / "results" / "quant_eval_default.json"
EVAL_AVX2 = REPO / "benchmarks" / "results" / "quant_eval_avx2.json"
TARGET = REPO / "benchmarks" / "results" / "quant_target.json"
EVAL_TIME = REPO / "benchmarks" / "results" / "quant_eval_time.json"
PROFILE = REPO / "benchmarks" / "results" / "quant_profile.json"
FAMILIES = REPO / "benchmarks" / "results" / "quant_families.json"


def _method_table(rows: list[dict]) -> str:
    """| method | W4A8 mean cos | W4A8 top-1 | W4A4 mean cos | W4A4 top-1 | size |"""
    names = {"rtn": "RTN", "smoothquant": "SmoothQuant", "duquant": "DuQuant"}
    by = {(r["method"], r["bits"]): r for r in rows}
    lines = [
        "| method | W4A8 mean cos | W4A8 top-1 | W4A4 mean cos | W4A4 top-1 | size |",
        "|---|---|---|---|---|---|",
    ]
    for method, name in names.items():
        a8, a4 = by.get((method, "w4a8")), by.get((method, "w4a4"))
        if a8 is None or a4 is None:
            continue
        size = a8["quant_layers_mb"] / a8["fp32_layers_mb"]
        lines.append(
            f"| {name} | {a8['mean_cosine']:.4f} | {a8['top1_agreement']:.3f} | "
            f"{a4['mean_cosine']:.4f} | {a4['top1_agreement']:.3f} | {size:.3f}× |"
        )
    return "\n".join(lines)


def bench_groups(bench: dict) -> str:
    return _method_table(bench["rows"])


def bench_per_channel(bench: dict) -> str:
    return _method_table(bench["rows_per_channel"])


def bench_torchao(bench: dict) -> str:
    c = bench["torchao_crosscheck"]
    return (
        f"Cross-check: our RTN W4A8 and torchao's `Int8DynamicActivationIntxWeightConfig(int4,"
        f" PerAxis(0), asymmetric)` agree to {c['layer_rel_diff_ours_vs_torchao']:.1e} relative"
        f" on a MiniLM layer and {c['ours_vs_torchao_embedding_cosine']:.5f} mean cosine on the"
        f" embeddings; in eager mode ours (int8 GEMM) took {c['eager_ms_ours']:.0f} ms and"
        f" torchao's {c['eager_ms_torchao']:.0f} ms for the same batch (same run)."
    )


def bench_progressive(bench: dict) -> str:
    """Progressive weights against per channel and plain groups: fidelity, size and compiled
    latency (interleaved against compiled FP32) of quant_bench.json's run."""
    comp, prog = bench["compiled_latency_interleaved"], bench["rows_progressive"]

    def pick(rows, method, bits):
        return next(r for r in rows if r["method"] == method and r["bits"] == bits)

    table = [  # (name, rows, method, compiled key)
        ("RTN, progressive 128", prog["128"], "rtn", "progressive_128"),
        ("RTN, progressive 64", prog["64"], "rtn", "progressive_64"),
        ("DuQuant, per channel (plain)", bench["rows_per_channel"], "duquant", "per_channel"),
        ("DuQuant, progressive 128", prog["128"], "duquant", "progressive_128"),
        ("DuQuant, progressive 64", prog["64"], "duquant", "progressive_64"),
        ("DuQuant, progressive 64, `permutation: false`", prog["64_no_permutation"], "duquant",
         "progressive_64_no_permutation"),
        ("DuQuant, plain groups of 64 (float path)", bench["rows"], "duquant", "group_64"),
    ]  # fmt: skip
    lines = [
        "| setting | W4A8 mean cos | W4A4 mean cos | size | compiled, 64×32 tokens |"
        " compiled, 32×128 tokens | one sentence, 1×32 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, rows, method, key in table:
        a8, a4 = pick(rows, method, "w4a8"), pick(rows, method, "w4a4")
        label = f"{method}/w4a8"
        wide = comp.get(f"{key}_32x128", {}).get("ratio_vs_fp32", {}).get(label)
        single = comp[key].get("single", {}).get("ratio_vs_fp32", {}).get(label)
        lines.append(
            f"| {name} | {a8['mean_cosine']:.4f} | {a4['mean_cosine']:.4f} |"
            f" {a8['quant_layers_mb'] / a8['fp32_layers_mb']:.3f}× |"
            f" {comp[key]['ratio_vs_fp32'][label]:.2f}× | {'' if wide is None else f'{wide:.2f}×'} |"
            f" {'' if single is None else f'{single:.2f}×'} |"
        )
    return "\n".join(lines)


def bench_compiled(bench: dict) -> str:
    """Compiled latency per weight layout, FP32 / RTN / DuQuant W4A8 (quant_bench.json)."""
    comp = bench["compiled_latency_interleaved"]
    names = {
        "per_channel": "per output channel (int8 GEMM)",
        "group_64": "plain groups of 64 (dequantized float matmul)",
        "progressive_64": "progressive groups of 64 (int8 GEMM)",
        "progressive_64_no_permutation": "progressive 64, `permutation: false`",
    }
    lines = ["| | FP32 | RTN W4A8 | DuQuant W4A8 |", "|---|---|---|---|"]
    for key, name in names.items():
        ms, ratio = comp[key]["median_ms"], comp[key]["ratio_vs_fp32"]
        lines.append(
            f"| {name} | {ms['fp32']:.0f} ms | {ms['rtn/w4a8']:.0f} ms ({ratio['rtn/w4a8']:.2f}×)"
            f" | {ms['duquant/w4a8']:.0f} ms ({ratio['duquant/w4a8']:.2f}×) |"
        )
    return "\n".join(lines)


def _setting(row: dict) -> str:
    name = {"rtn": "RTN", "smoothquant": "SmoothQuant", "duquant": "DuQuant"}[row["method"]]
    if row["permutation"] is not None:
        name += ", perm on" if row["permutation"] else ", perm off"
    if row.get("block"):
        name += f", block {row['block']}"
    return f"{name}, {row['weights']}"


def _x(value) -> str:
    return "-" if value is None else f"{value:.2f}×"


def matrix_table(matrix: dict) -> str:
    """One row per setting, per model: W4A8 and W4A4 fidelity (top-1 beside cosine, or
    perplexity ratio and hidden-state cosine) and time against the unquantized model — eager at
    the timing batch, compiled at the timing batch and at one text — and the CPU kernel."""
    lines = []
    for model in matrix["models"]:
        if not model["rows"]:
            continue
        lm = model["kind"] == "causal-lm"
        second = "ppl ratio" if lm else "mean cos"
        lines += [
            f"**{model['model']}** ({model['parameters'] / 1e6:.1f}M parameters, {model['texts']}"
            f" texts of ≤ {model['max_length']} tokens; timing batch"
            f" {'×'.join(map(str, model['timing_batch']))})",
            "",
            f"| setting | W4A8 top-1 | W4A8 {second} |"
            + (" W4A8 cos |" if lm else "")
            + " W4A8 eager | W4A8 compiled | W4A8 1 text | W4A4 top-1 |"
            f" W4A4 {second} | W4A4 compiled | W4A4 1 text | size | kernel |",
            "|---|" + "---|" * (11 + int(lm)),
        ]
        settings = {}
        for r in model["rows"]:
            settings.setdefault(_setting(r), {})[r["bits"]] = r
        for name, by in settings.items():
            cells = []
            for bits in ("w4a8", "w4a4"):
                r = by.get(bits)
                n = (6 + int(lm)) if bits == "w4a8" else 4
                if r is None:
                    cells += [""] * n
                    continue
                value = r["perplexity_ratio"] if lm else r["mean_cosine"]
                cells += [f"{r['top1_agreement']:.3f}", f"{value:.4f}"]
                if bits == "w4a8":
                    if lm:
                        cells.append(f"{r['mean_cosine']:.4f}" if r.get("mean_cosine") else "-")
                    cells.append(_x(r.get("eager_ratio")))
                cells += [_x(r.get("compiled_ratio")), _x(r.get("compiled_one_ratio"))]
            first = next(iter(by.values()))
            kernel = ", ".join(sorted(first.get("kernels") or {})) or "-"
            lines.append(
                f"| {name} | {' | '.join(cells)} | {first['size_vs_fp32']:.3f}× | {kernel} |"
            )
        lines.append("")
    envs = matrix["environment"]
    envs = envs if isinstance(envs, list) else [envs]
    loads = ", ".join(str(e.get("load_average", ["?"])[0]) for e in envs)
    threads = ", ".join(str(e.get("threads", "?")) for e in envs)
    lines.append(
        f"({matrix.get('settings_done', '?')} of {matrix.get('settings_planned', '?')} model ×"
        f" setting runs done; {envs[0].get('time_utc', '')}, {envs[0].get('cpu_count', '?')} CPUs,"
        f" {threads} torch thread(s), load average {loads} at the start of each model's process;"
        f" {matrix['latency']}.)"
    )
    return "\n".join(lines).rstrip()


def kernel_table(doc: dict) -> str:
    """Per layer shape and row count: each kernel's time over float32's, on the CPU's own ISA and
    held to AVX2; and which kernels sum exactly in each regime."""
    isas = [k for k in ("native", "avx2") if k in doc]
    lines = [
        "| model | shape (in×out) | rows | "
        + " | ".join(
            f"{isa} {k}" for isa in isas for k in ("onednn", "fbgemm", "fbgemm dyn.", "unpack int4")
        )
        + " |",
        "|---|---|---|" + "---|" * (4 * len(isas)),
    ]
    keyed = {isa: {(r["model"], r["in"], r["out"], r["rows"]): r for r in doc[isa]["results"]}
             for isa in isas}  # fmt: skip
    for key in keyed[isas[0]]:
        cells = []
        for isa in isas:
            r = keyed[isa].get(key)
            for k in ("onednn", "fbgemm", "fbgemm_dynamic", "unpack_int4"):
                cells.append(_x(r["ratio_to_fp32"].get(k)) if r else "")
        model, n, m, rows = key
        lines.append(f"| {model} | {n}×{m} | {rows} | " + " | ".join(cells) + " |")
    lines.append("")
    for isa in isas:
        part = doc[isa]
        exact = "; ".join(
            f"{k}: "
            + ", ".join(f"{regime} {'exact' if ok else 'SATURATES'}" for regime, ok in v.items())
            for k, v in part["exact"].items()
        )
        env = part["environment"]
        lines.append(
            f"- **{isa}** ({part['cpu_capability']}, VNNI {'yes' if part['vnni'] else 'no'}"
            f"{', ' + ' '.join(f'{k}={v}' for k, v in part['isa_env'].items()) if part['isa_env'] else ''};"
            f" {env.get('threads', '?')} threads, load {env.get('load_average', ['?'])[0]}):"
            f" {exact}."
        )
    lines.append(
        f"\n(times over `nn.functional.linear` in float32 of the same shape, medians of"
        f" {doc[isas[0]]['rounds']} interleaved rounds; {doc[isas[0]]['environment'].get('time_utc', '')}.)"
    )
    return "\n".join(lines)


def eval_default(doc: dict) -> str:
    """`quant eval` with every default: the rows, the recommendation, the seconds per phase."""
    result = doc.get("result", doc)
    lines = [
        "| setting | mean cos | top-1 | layers MB | kernel | compiled × FP32 | 1 text × FP32 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        kernel = ", ".join(sorted(r.get("kernels") or {})) or "-"
        lines.append(
            f"| {r.get('label') or r['method']} | {r['mean_cosine']:.4f} |"
            f" {r['top1_agreement']:.3f} | {r['quant_layers_mb']:.2f} | {kernel} |"
            f" {_x(r.get('compiled_ratio'))} | {_x(r.get('compiled_one_ratio'))} |"
        )
    phases = ", ".join(f"{name} {sec:.0f} s" for name, sec in result["phases"].items())
    total = doc.get("run", {}).get("seconds")
    env = doc.get("environment") or {}
    when = doc.get("run", {}).get("started_utc") or env.get("time_utc", "")
    threads = (result.get("kernels") or {}).get("machine", {}).get("threads", "?")
    lines += [
        "",
        f"Recommended: {(result['recommendation'].get('setting') or result['recommendation'])['text']}",
        "",
        f"Seconds per phase: {phases}"
        + (f"; {total:.0f} s in all (the command's own clock)" if total else "")
        + f" ({when}, {threads} torch thread(s)"
        + (f", load {env['load_average'][0]}" if env.get("load_average") else "")
        + ").",
    ]
    return "\n".join(lines)


def target_table(doc: dict) -> str:
    """--target-cosine on each model: from which setting, how many layers moved, at what cost."""
    lines = [
        "| model | target | from | cosine before → after | layers moved | Linear MB before → after"
        " | compiled × FP32 before → after | 1 text × FP32 before → after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in doc["runs"]:
        t, row = run["target"], run["row"]
        if t is None:
            lines.append(f"| {run['model']} | {run['target_cosine']} | (reached as measured) |||||")
            continue
        base = next((r for r in run["rows"] if r.get("label") == t["base"]), {})
        levels = list(t["layers"].values())
        moved = f"{len(levels) - levels.count('float')} to 8-bit, {levels.count('float')} float"
        lines.append(
            f"| {run['model']} | {t['target']} | {t['base']} | {t['base_cosine']:.4f} →"
            f" {t['cosine']:.4f} | {moved} | {t['linear_bytes_before'] / 2**20:.2f} →"
            f" {t['linear_bytes_after'] / 2**20:.2f} |"
            f" {_x(base.get('compiled_ratio'))} → {_x(row.get('compiled_ratio'))} |"
            f" {_x(base.get('compiled_one_ratio'))} → {_x(row.get('compiled_one_ratio'))} |"
        )
    env = doc["environment"]
    lines.append(
        f"\n({env.get('time_utc', '')}, {env.get('threads', '?')} torch thread(s), load"
        f" {env.get('load_average', ['?'])[0]}; times interleaved with the FP32 model, medians.)"
    )
    return "\n".join(lines)


def eval_time_table(doc: dict) -> str:
    """`quant eval` on defaults as a whole process, cold caches then warm: wall and CPU seconds,
    the seconds per phase, inductor's cache hits, and the answer each run gave."""
    runs = doc["runs"]
    phases = sorted({p for run in runs.values() for p in run["phases"]})
    lines = [
        "| run | wall s | CPU s | load avg | "
        + " | ".join(f"{p} s" for p in phases)
        + " | FX cache hit / miss | recommended (compiled × FP32: batch, 1 text) |",
        "|---|---|---|---|" + "---|" * len(phases) + "---|---|",
    ]
    for name, run in runs.items():
        fx = (run.get("counters") or {}).get("inductor", {})
        rec = run["recommendation"].get("setting") or run["recommendation"]
        cells = " | ".join(f"{run['phases'].get(p, 0):.0f}" for p in phases)
        lines.append(
            f"| {name} | {run['wall_s']:.0f} | {run['cpu_s']:.0f} |"
            f" {run['load_average_start'][0]:.1f}–{run['load_average_end'][0]:.1f} | {cells} |"
            f" {fx.get('fxgraph_cache_hit', 0)} / {fx.get('fxgraph_cache_miss', 0)} |"
            f" {rec.get('label', '?')} ({_x(rec.get('time_ratio'))}, {_x(rec.get('time_ratio_one'))}) |"
        )
    env = doc["environment"]
    baseline = env.get("baseline")
    lines.append(
        f"\n({env.get('time_utc', '')}, {env.get('cpus', '?')} CPUs; `{doc['command']}` in a"
        " fresh HOME / XDG_CACHE_HOME / TORCHINDUCTOR_CACHE_DIR, then again on what it left"
        + (
            f"; baseline: the accelkit of commit `{baseline['commit']}`, cold, in caches of its"
            " own, in the same session"
            if baseline
            else ""
        )
        + ".)"
    )
    return "\n".join(lines)


def profile_table(doc: dict) -> str:
    """Where the recommended W4A8 model's time goes at the timing batch, against FP32's."""
    prof = doc["profile"]
    fp, q = prof["models"]["fp32"], prof["models"]["duquant/w4a8"]
    names = list(dict.fromkeys([*q["categories_ms"], *fp["categories_ms"]]))
    lines = ["| cost | DuQuant W4A8 ms | FP32 ms | W4A8 share of FP32 |", "|---|---|---|---|"]
    for name in names:
        a, b = q["categories_ms"].get(name, 0.0), fp["categories_ms"].get(name, 0.0)
        lines.append(f"| {name} | {a:.2f} | {b:.2f} | {a / fp['profiled_ms']:.2f}× |")
    lines.append(
        f"| all profiled | {q['profiled_ms']:.2f} | {fp['profiled_ms']:.2f} |"
        f" {q['profiled_ms'] / fp['profiled_ms']:.2f}× |"
    )
    if "rotation_ms" in prof:  # W4A8's bmm less FP32's (the attention's, the same in both)
        rot = prof["rotation_ms"]
        lines.append(f"| of which the rotation | {rot:.2f} | - | {rot / fp['profiled_ms']:.2f}× |")
    env = doc["environment"]
    lines.append(
        f"\n(batch {prof['batch']}, self CPU ms per forward over {prof['rounds']} forwards;"
        f" timed apart from the profiler, interleaved: {prof['median_ms']['duquant/w4a8']:.1f} ms"
        f" against {prof['median_ms']['fp32']:.1f} ms, {prof['ratio']:.2f}× compiled FP32;"
        f" {env.get('time_utc', '')}, {env.get('threads', '?')} torch thread(s), load"
        f" {env.get('load_average', ['?'])[0]}.)"
    )
    return "\n".join(lines)


def families_table(doc: dict) -> str:
    """The family matrix (benchmarks/quant/quant_families.py): each family's trained test model, RTN
    and DuQuant at W4A8 against FP32, the quantized share, the outlier measure, eager speed."""

    def f(value, spec=".4f") -> str:
        return "-" if value is None else format(value, spec)

    lines = [
        "| family | judged by | quantized share | channel max/median (init → trained)"
        " | RTN mean cos | DuQuant mean cos | RTN / DuQuant ppl ratio | RTN / DuQuant top-1"
        " | DuQuant eager × FP32 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, run in doc["families"].items():
        if "refused" in run:
            why = run["refused"].split(": ", 1)[-1].split(";")[0]  # without the temporary path
            lines.append(f"| {name} | refused in one line: {why} ||||||||")
            continue
        rtn, dq = run["rows"]["rtn/w4a8"], run["rows"]["duquant/w4a8"]
        ratio = run["channel_ratio"]
        causal = rtn["perplexity_ratio"] is not None  # causal LMs and PaliGemma
        lines.append(
            f"| {name} | {run['kind']} | {100 * run['quantized_share']:.0f} %"
            f" | {ratio['init']:.1f} → {ratio['trained']:.1f}"
            f" | {f(rtn['mean_cosine'])} | {f(dq['mean_cosine'])}"
            f" | {f(rtn['perplexity_ratio']) + ' / ' + f(dq['perplexity_ratio']) if causal else '-'}"
            f" | {f(rtn['top1_agreement'], '.3f')} / {f(dq['top1_agreement'], '.3f')}"
            f" | {_x(dq['eager_ratio'])} |"
        )
    env = doc["environment"]
    lines.append(
        f"\n({env.get('time_utc', '')}, {doc['steps']} training steps per model,"
        f" {2 * doc['pairs']} evaluation texts or images, W4A8, lm_head in float; eager times"
        f" interleaved with the FP32 model, medians; load {env.get('load_average', ['?'])[0]}.)"
    )
    return "\n".join(lines)


TABLES = {
    "bench-groups": Table(BENCH, bench_groups),
    "bench-per-channel": Table(BENCH, bench_per_channel),
    "bench-torchao": Table(BENCH, bench_torchao),
    "bench-progressive": Table(BENCH, bench_progressive),
    "bench-compiled": Table(BENCH, bench_compiled),
    "matrix": Table(MATRIX, matrix_table),
    "matrix-2026-11-25": Table(MATRIX_EAGER, matrix_table),
    "kernels": Table(KERNELS, kernel_table),
    "eval-default": Table(EVAL, eval_default),
    "eval-avx2": Table(EVAL_AVX2, eval_default),
    "target": Table(TARGET, target_table),
    "eval-time": Table(EVAL_TIME, eval_time_table),
    "profile": Table(PROFILE, profile_table),
    "families": Table(FAMILIES, families_table),
}
