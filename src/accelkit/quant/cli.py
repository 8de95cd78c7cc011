"""`accelkit quant eval` and `accelkit quant apply` (only typer and the stdlib at import time)."""

from __future__ import annotations

from typing import Annotated

import typer

from accelkit.runtime.output import command_group

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


@quant_app.command("eval")
def eval_command(
    model: ModelOption = "minilm",
    calibration: CalibrationOption = None,
    eval_data: EvalDataOption = None,
    methods: Annotated[
        str, typer.Option(help="Comma-separated: fp32,rtn,smoothquant,duquant.")
    ] = "fp32,rtn,smoothquant,duquant",
    bits: Annotated[
        str, typer.Option(help="Comma-separated wXaY settings, e.g. w4a8,w4a4.")
    ] = "w4a8,w4a4",
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Also write the results as JSON here.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the results as JSON on stdout instead of a table.")
    ] = False,
    pairs: Annotated[
        int, typer.Option(help="Paraphrase pairs of the shipped set to use (max 300).")
    ] = 300,
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
            help="Also time torch.compile (slow first compile). Default: on, unless"
            " OPENPI_DISABLE_TORCH_COMPILE / ACCELKIT_QUANT_DISABLE_COMPILE says otherwise.",
        ),
    ] = None,
    report: Annotated[
        str | None,
        typer.Option(
            "--report",
            help="Also write report.md, report.png and report.json (per-layer relative error,"
            " fidelity per setting, the chosen one highlighted) into this new or empty folder"
            " (a previous report there is replaced).",
        ),
    ] = None,
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
            progress=lambda s: activity(f"{s}…"),
        )
    finally:
        pause()
    document = result.to_dict()
    if as_json:
        from accelkit.runtime.output import print_json

        print_json(document)
    else:
        _print_eval_table(result)
    if output:
        from accelkit.runtime.files import write_json_atomic

        write_json_atomic(output, document)


def _print_eval_table(result) -> None:
    from accelkit.quant.report import fidelity_columns
    from accelkit.runtime.output import Col, print_table, stdout_console

    title = (
        f"accelkit quant eval — {result.model} ({result.kind}, {result.dtype}), {result.texts}"
        f" texts of ≤ {result.max_length} tokens, fidelity vs the unquantized model"
    )
    columns = [
        ("method", "method", None),
        ("bits", "bits", None),
        *fidelity_columns(result.kind),
        ("layers MB", "quant_layers_mb", ".2f"),
        ("eager ms", "eager_ms", ".2f"),
        ("compiled ms", "compiled_ms", ".2f"),
    ]

    def fmt(v, spec):
        return "-" if v is None else str(v) if spec is None else format(v, spec)

    print_table(
        title,
        [Col(name, numeric=spec is not None, key=key == "method") for name, key, spec in columns],
        [[fmt(getattr(r, key), spec) for _, key, spec in columns] for r in result.rows],
        console=stdout_console(),
    )
    if result.recommendation:
        typer.echo(f"recommended for this model: {result.recommendation['text']}")
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
) -> None:
    """Quantize the model (calibrated on the shipped sentences or --calibration) and save it (int4 packed safetensors)."""
    from accelkit.quant.api import apply
    from accelkit.runtime.output import print_json
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
            progress=activity,
        )
    finally:
        pause()
    if as_json:
        print_json(result.to_dict())
    elif result.dry_run:
        for name, bits in result.planned.items():
            typer.echo(f"would quantize {name} (W{bits}A{result.abits})")
        for name, why in result.skipped.items():
            typer.echo(f"would leave {name} in float ({why})")
        typer.echo(
            f"dry run: {len(result.planned)} layers to quantize, {len(result.skipped)} left"
            f" in float; nothing written to {output}"
        )
    else:
        q_bytes, fp_bytes = result.quantized_layers_bytes, result.fp32_layers_bytes
        typer.echo(
            f"{result.summary}; quantized layers {q_bytes / 2**20:.2f} MB vs"
            f" {fp_bytes / 2**20:.2f} MB FP32 ({q_bytes / fp_bytes:.3f}x); wrote {result.output}"
        )
