"""`accelkit quant eval` and `accelkit quant apply` (only typer and the stdlib at import time)."""

from __future__ import annotations

from typing import Annotated

import typer

from accelkit.runtime.cli_options import command_group
from accelkit.runtime.files import write_json_atomic
from accelkit.runtime.json_output import print_json
from accelkit.runtime.tables import Col, print_table, stdout_console

quant_app = command_group(
    "quant",
    "DuQuant / SmoothQuant / RTN quantization of PyTorch Linear layers that stays pure under torch.compile.",
)


def register(app: typer.Typer) -> None:
    app.add_typer(quant_app, name="quant")


ModelOption = Annotated[
    str,
    typer.Option(
        help="minilm (shipped, offline) or a local transformers model folder (config.json,"
        " safetensors, tokenizer): encoders are judged by embeddings, causal LMs by next tokens."
    ),
]
CalibrationOption = Annotated[
    str | None,
    typer.Option(
        "--calibration", help="Text file, one calibration text per line (default: shipped set)."
    ),
]
WeightFormatOption = Annotated[
    str | None,
    typer.Option(
        "--weight-format",
        help="progressive: 4-bit weights as int4 groups with integer scales over per-channel"
        " int8 (QServe), run as one int8 GEMM; groups of --group-size, else 64. plain: per output"
        " channel (or plain groups of --group-size). Default: the config's, progressive.",
    ),
]
MaxLengthOption = Annotated[
    int | None,
    typer.Option(
        "--max-length",
        help="Tokens per text: longer texts are cut (and a line says how many). Default: the"
        " longest text, at most the model's maximum.",
    ),
]
DtypeOption = Annotated[
    str,
    typer.Option(
        "--dtype",
        help="auto (the folder's own: bf16 stays bf16), float32, bfloat16 or float16.",
    ),
]
TokenizerOption = Annotated[
    str | None,
    typer.Option(
        "--tokenizer",
        help="A folder with the tokenizer files, when the model folder has none.",
    ),
]
EvalDataOption = Annotated[
    str | None,
    typer.Option(
        "--eval-data", help="Text file, one evaluation text per line (default: shipped pairs)."
    ),
]
TargetOption = Annotated[
    float | None,
    typer.Option(
        "--target-cosine",
        help="Reach this mean cosine to FP32 (e.g. 0.99): the most sensitive layers (worst"
        " first by their output error) move out of 4-bit to W8A8, then float, until it holds;"
        " the size and time it cost are reported.",
    ),
]
PerplexityTargetOption = Annotated[
    float | None,
    typer.Option(
        "--target-perplexity-ratio",
        help="Causal LMs: reach at most this perplexity ratio to FP32 (e.g. 1.05), moving the"
        " most sensitive layers out of 4-bit as --target-cosine does.",
    ),
]
Top1TargetOption = Annotated[
    float | None,
    typer.Option(
        "--target-top1",
        help="Reach at least this top-1 agreement with FP32 (causal LMs: the next token;"
        " encoders: the nearest neighbour), e.g. 0.9, as --target-cosine does.",
    ),
]
LmHeadOption = Annotated[
    bool | None,
    typer.Option(
        "--lm-head/--no-lm-head",
        help="Also quantize a language model's output projection (lm_head). Default: kept in"
        " float, so the hidden-state cosine sees every quantized layer.",
    ),
]
PairsOption = Annotated[int, typer.Option(help="Paraphrase pairs of the shipped set (max 300).")]


@quant_app.command("eval")
def eval_command(
    model: ModelOption = "minilm",
    calibration: CalibrationOption = None,
    eval_data: EvalDataOption = None,
    methods: Annotated[
        str, typer.Option(help="Comma-separated: fp32,rtn,smoothquant,duquant.")
    ] = "fp32,rtn,smoothquant,duquant",
    bits: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated wXaY settings (a16 = weight-only). Default:"
            " w4a8,w4a4,w8a8,w4a16,w8a16, plus w4a7 on a CPU without VNNI, where 8-bit codes"
            " cannot run exactly on an int8 GEMM."
        ),
    ] = None,
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Also write the results as JSON here.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the results as JSON on stdout instead of a table.")
    ] = False,
    pairs: PairsOption = 300,
    group_size: Annotated[
        int | None,
        typer.Option(
            help="Weight group size for every method (0 = the format's default: 64 for"
            " progressive, per output channel for plain)."
        ),
    ] = None,
    weight_format: WeightFormatOption = None,
    max_length: MaxLengthOption = None,
    dtype: DtypeOption = "auto",
    tokenizer: TokenizerOption = None,
    config: Annotated[
        str | None, typer.Option(help="YAML file with QuantConfig fields (the base of every row).")
    ] = None,
    latency: Annotated[bool, typer.Option(help="Measure eager and compiled latency.")] = True,
    compiled: Annotated[
        bool | None,
        typer.Option(
            "--compile/--no-compile",
            help="Also time torch.compile (slow first compile) for FP32 and the settings that meet"
            " the fidelity targets (the only rows timed). Default: on, unless"
            " OPENPI_DISABLE_TORCH_COMPILE / ACCELKIT_QUANT_DISABLE_COMPILE says otherwise.",
        ),
    ] = None,
    compile_all: Annotated[
        bool, typer.Option("--compile-all", help="Time every row, compiled, faithful or not.")
    ] = False,
    report: Annotated[
        str | None,
        typer.Option(
            "--report",
            help="Also write report.md, report.png and report.json (per-layer relative error,"
            " fidelity per setting, the chosen one highlighted) into this new or empty folder"
            " (a previous report there is replaced).",
        ),
    ] = None,
    target_cosine: TargetOption = None,
    target_perplexity_ratio: PerplexityTargetOption = None,
    target_top1: Top1TargetOption = None,
    lm_head: LmHeadOption = None,
) -> None:
    """Quantize the model with each method and bit setting; print fidelity to FP32, size and latency."""
    from accelkit.quant.api import evaluate
    from accelkit.runtime.progress import activity, pause

    try:  # the activity line appears once the arguments are checked
        result = evaluate(
            model,
            methods=methods,
            bits=bits,
            pairs=pairs,
            calibration=calibration,
            eval_data=eval_data,
            group_size=group_size,
            weight_format=weight_format,
            max_length=max_length,
            dtype=dtype,
            tokenizer=tokenizer,
            config=config,
            latency=latency,
            compiled=compiled,
            report=report,
            target_cosine=target_cosine,
            compile_all=compile_all,
            progress=lambda s: activity(f"{s}…"),
            target_perplexity_ratio=target_perplexity_ratio,
            target_top1=target_top1,
            lm_head=lm_head,
        )
    finally:
        pause()
    document = result.document()
    if as_json:
        print_json(document)
    else:
        _print_eval_table(result)
    if output:
        write_json_atomic(output, document)


def _print_eval_table(result) -> None:
    from accelkit.quant.evaluation.report import (
        fidelity_columns,
        timing_cells,
        timing_header,
        timing_kinds,
    )

    title = (
        f"accelkit quant eval — {result.model} ({result.kind}, {result.dtype}), {result.texts}"
        f" texts of ≤ {result.max_length} tokens, fidelity vs the unquantized model"
    )
    columns = [
        ("setting", "label", None),
        *fidelity_columns(result.kind),
        ("layers MB", "quant_layers_mb", ".2f"),
        ("kernel", "kernels", "kernels"),
    ]
    rows = [vars(r) for r in result.rows]
    kinds = timing_kinds(rows)  # per timing: ms, FP32 ms of the same rounds, their quotient

    def fmt(v, spec):
        if spec == "kernels":
            return (
                # a kernel and its layer count stay together when the cell wraps
                "-" if not v else ", ".join(f"{k}×{n}" if len(v) > 1 else k for k, n in v.items())
            )
        return "-" if v is None else str(v) if spec is None else format(v, spec)

    print_table(
        title,
        [
            Col(name, numeric=spec not in (None, "kernels"), key=key == "label")
            for name, key, spec in columns
        ]
        + [Col(name, numeric=True) for name in timing_header(kinds)],
        [[fmt(r[key], spec) for _, key, spec in columns] + timing_cells(r, kinds) for r in rows],
        console=stdout_console(),
    )
    if result.timing_batch and kinds:
        shape = "×".join(map(str, result.timing_batch))
        typer.echo(
            f"timed on a batch of {shape} tokens and on its first text alone; each row's ms,"
            " FP32 ms and × FP32 come from the same rounds, interleaved with FP32, the ratio"
            " being the quotient of the two times beside it"
        )
    if result.kernels and result.kernels.get("seconds"):
        key = result.kernels["machine"]
        typer.echo(
            f"CPU kernels: the fastest exact one per layer shape, measured on {key['cpu']}"
            f" ({', '.join(key['isa'])}), torch {key['torch']}, {key['threads']} threads;"
            f" cached in {result.kernels['cache']}"
        )
    typer.echo(_share_line(result.quantized_share, result.lm_head))
    if result.compile_error:
        typer.echo(f"torch.compile failed ({result.compile_error}): timed eager from there on")
    if result.target:
        typer.echo(_target_line(result.target))
    if result.recommendation:
        typer.echo(f"recommended for this model: {result.recommendation['text']}")
    typer.echo("phases: " + ", ".join(f"{name} {sec:.1f} s" for name, sec in result.phases.items()))
    if result.report:
        typer.echo(f"report: {result.report}/report.md, report.png, report.json")


@quant_app.command("apply")
def apply_command(
    output: Annotated[str, typer.Option(help="Where to write the quantized model (.safetensors).")],
    model: ModelOption = "minilm",
    calibration: CalibrationOption = None,
    method: Annotated[str | None, typer.Option(help="duquant | smoothquant | rtn.")] = None,
    wbits: Annotated[int | None, typer.Option(help="Weight bits (2..8, 16 = off).")] = None,
    abits: Annotated[int | None, typer.Option(help="Activation bits (2..8, 16 = off).")] = None,
    group_size: Annotated[
        int | None,
        typer.Option(
            help="Weight group size (0 or default: 64 for progressive, per channel for plain)."
        ),
    ] = None,
    weight_format: WeightFormatOption = None,
    max_length: MaxLengthOption = None,
    dtype: DtypeOption = "auto",
    tokenizer: TokenizerOption = None,
    config: Annotated[str | None, typer.Option(help="YAML file with QuantConfig fields.")] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print the report (layers, sizes, path) as JSON on stdout."),
    ] = False,
    target_cosine: TargetOption = None,
    eval_data: EvalDataOption = None,
    pairs: PairsOption = 300,
    target_perplexity_ratio: PerplexityTargetOption = None,
    target_top1: Top1TargetOption = None,
    lm_head: LmHeadOption = None,
) -> None:
    """Quantize the model (calibrated on the shipped sentences or --calibration) and save it (int4 packed safetensors)."""
    from accelkit.quant.api import apply
    from accelkit.runtime.progress import activity, pause

    try:
        result = apply(
            model,
            output,
            calibration=calibration,
            method=method,
            wbits=wbits,
            abits=abits,
            group_size=group_size,
            weight_format=weight_format,
            max_length=max_length,
            dtype=dtype,
            tokenizer=tokenizer,
            config=config,
            target_cosine=target_cosine,
            eval_data=eval_data,
            pairs=pairs,
            progress=activity,
            target_perplexity_ratio=target_perplexity_ratio,
            target_top1=target_top1,
            lm_head=lm_head,
        )
    finally:
        pause()
    if as_json:
        print_json(result.document())
    elif result.dry_run:
        for name, bits in result.planned.items():
            abits = result.layer_abits.get(name, result.abits)
            typer.echo(f"would quantize {name} (W{bits}A{abits})")
        for name, why in result.skipped.items():
            typer.echo(f"would leave {name} in float ({why})")
        typer.echo(
            f"dry run: {len(result.planned)} layers to quantize, {len(result.skipped)} left"
            f" in float; nothing written to {output}"
        )
    else:
        q_bytes, fp_bytes = result.quantized_layers_bytes, result.fp32_layers_bytes
        assert q_bytes is not None and fp_bytes is not None  # counted where a model is written
        typer.echo(
            f"{result.summary}; quantized layers {q_bytes / 2**20:.2f} MB vs"
            f" {fp_bytes / 2**20:.2f} MB FP32 ({q_bytes / fp_bytes:.3f}x); CPU kernels:"
            f" {', '.join(f'{k} {n}' for k, n in result.kernels.items())}; wrote {result.output}"
        )
        typer.echo(_share_line(result.quantized_share, result.lm_head))
        if result.target:
            typer.echo(_target_line(result.target))


def _share_line(share: float | None, lm_head: str | None) -> str:
    """What share of the model's linear weights is quantized, and what became of its lm_head."""
    text = f"quantized share: {100 * (share or 0.0):.1f} % of the model's linear weights"
    if lm_head == "float":
        text += " besides lm_head, which is kept in float (the default; --lm-head quantizes it)"
    elif lm_head == "quantized":
        text += (
            "; lm_head quantized (--lm-head): its error shows in the perplexity ratio and top-1,"
            " not in the hidden-state cosine"
        )
    return text


def _target_line(t: dict) -> str:
    """--target-cosine in one line: what moved out of 4-bit (worst first) and what it cost."""
    levels = list(t["layers"].values())
    shown = ", ".join(list(t["layers"])[:3]) + (", …" if len(levels) > 3 else "")
    moved = (
        f"{len(levels) - levels.count('float')} layers to 8-bit weights and"
        f" {levels.count('float')} to float"
        f" (worst first: {shown}; all in --json)"
        if levels
        else "nothing moved"
    )
    before, after = t["linear_bytes_before"] / 2**20, t["linear_bytes_after"] / 2**20
    cost = f"Linear layers {before:.2f} → {after:.2f} MB"
    if t.get("eager_ratio_after") is not None:
        cost += f", eager {t['eager_ratio_before']:.2f}× → {t['eager_ratio_after']:.2f}× FP32"
    metric = t.get("metric", "mean_cosine")
    name = {"mean_cosine": "cosine", "perplexity_ratio": "perplexity ratio"}.get(metric, "top-1")
    before, after = (
        (t["base_cosine"], t["cosine"])
        if metric == "mean_cosine"
        else (t["base_value"], t["value"])
    )
    return (
        f"target {name} {t['target']}: {t['base']} {before:.4f} → {after:.4f}"
        f" ({'reached' if t['reached'] else 'NOT reached'}), {moved}; {cost}"
    )
