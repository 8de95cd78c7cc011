"""The numbers docs/quant.md shows from the benchmark JSON, generated from it (never typed).

    python benchmarks/quant_docs.py          # rewrite the generated blocks of docs/quant.md
    python benchmarks/quant_docs.py --check  # exit 1 when the docs differ from the JSON

Each block sits between `<!-- generated: NAME -->` and `<!-- end generated: NAME -->` and is
made by `BLOCKS[NAME](json)` from the file it cites; tests/quant/test_docs_numbers.py checks that
the docs hold exactly what this renders.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "quant.md"
BENCH = ROOT / "benchmarks" / "results" / "quant_bench.json"
MATRIX = ROOT / "benchmarks" / "results" / "quant_matrix.json"


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


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


def _setting(row: dict) -> str:
    name = {"rtn": "RTN", "smoothquant": "SmoothQuant", "duquant": "DuQuant"}[row["method"]]
    if row["permutation"] is not None:
        name += ", perm on" if row["permutation"] else ", perm off"
    return f"{name}, {row['weights']}"


def matrix_table(matrix: dict) -> str:
    """One row per setting, per model: W4A8 and W4A4 fidelity (top-1 beside cosine or
    perplexity ratio) and eager time against the unquantized model."""
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
            f"| setting | W4A8 top-1 | W4A8 {second} | W4A8 eager | W4A4 top-1 | W4A4 {second}"
            " | W4A4 eager | size |",
            "|---|---|---|---|---|---|---|---|",
        ]
        settings = {}
        for r in model["rows"]:
            settings.setdefault(_setting(r), {})[r["bits"]] = r
        for name, by in settings.items():
            cells = []
            for bits in ("w4a8", "w4a4"):
                r = by.get(bits)
                if r is None:
                    cells += ["", "", ""]
                    continue
                value = r["perplexity_ratio"] if lm else r["mean_cosine"]
                cells += [f"{r['top1_agreement']:.3f}", f"{value:.4f}", f"{r['eager_ratio']:.2f}×"]
            size = next(iter(by.values()))["size_vs_fp32"]
            lines.append(f"| {name} | {' | '.join(cells)} | {size:.3f}× |")
        lines.append("")
    envs = matrix["environment"]
    envs = envs if isinstance(envs, list) else [envs]
    loads = ", ".join(str(e.get("load_average", ["?"])[0]) for e in envs)
    lines.append(
        f"({matrix.get('settings_done', '?')} of {matrix.get('settings_planned', '?')} model ×"
        f" setting runs done; {envs[0].get('time_utc', '')}, {envs[0].get('cpu_count', '?')} CPUs,"
        f" load average {loads} at the start of each model's process; {matrix['latency']}.)"
    )
    return "\n".join(lines).rstrip()


BLOCKS = {  # name -> (source, renderer)
    "bench-groups": (BENCH, bench_groups),
    "bench-per-channel": (BENCH, bench_per_channel),
    "bench-torchao": (BENCH, bench_torchao),
    "matrix": (MATRIX, matrix_table),
}
_BLOCK = re.compile(
    r"(<!-- generated: (?P<name>[a-z-]+) -->\n)(?P<body>.*?)(\n<!-- end generated: (?P=name) -->)",
    re.S,
)


def render(text: str) -> str:
    """`text` with every generated block rendered again from its JSON."""
    cache: dict[Path, dict | None] = {}

    def fill(m: re.Match) -> str:
        source, make = BLOCKS[m.group("name")]
        if source not in cache:
            cache[source] = _load(source)
        if cache[source] is None:
            return m.group(0)  # no JSON yet: leave the block as it is
        return m.group(1) + make(cache[source]) + m.group(4)

    return _BLOCK.sub(fill, text)


def blocks(text: str) -> dict[str, str]:
    return {m.group("name"): m.group("body") for m in _BLOCK.finditer(text)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 on a difference")
    args = parser.parse_args()
    text = DOC.read_text(encoding="utf-8")
    new = render(text)
    if args.check:
        if new != text:
            print("docs/quant.md differs from the JSON; run python benchmarks/quant_docs.py")
            return 1
        return 0
    DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
