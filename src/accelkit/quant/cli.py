"""`accelkit quant eval` and `accelkit quant apply` (only typer and the stdlib at import time)."""

from __future__ import annotations

from typing import Annotated

import typer

from accelkit.runtime.output import command_group

quant_app = command_group(
    "quant",
    "DuQuant / SmoothQuant / RTN quantization of PyTorch Linear layers that stays pure under torch.compile.",
)

METHODS = ("fp32", "rtn", "smoothquant", "duquant")


def register(app: typer.Typer) -> None:
    app.add_typer(quant_app, name="quant")


def _split(text: str, what: str, allowed: tuple[str, ...] | None = None) -> list[str]:
    from accelkit.errors import ConfigError

    items = [p.strip().lower() for p in text.split(",") if p.strip()]
    if not items:
        raise ConfigError(f"--{what} is empty; e.g. --{what} {','.join(allowed or ('w4a8',))}")
    if allowed:
        bad = [p for p in items if p not in allowed]
        if bad:
            raise ConfigError(f"--{what} {bad[0]!r} is not known; choose from {', '.join(allowed)}")
    return items


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


def load_quant_config(path: str | None, group_size: int | None, **flags):
    """The config from defaults < environment < file < flags; `--group-size 0` asks for per
    output channel even when the file or the environment set groups."""
    from accelkit.quant.config import load_config

    config = load_config(path, weight_group_size=group_size or None, **flags)
    if group_size == 0:
        config.weight_group_size = None
    return config


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
    from accelkit.errors import ConfigError

    method_list = _split(methods, "methods", METHODS)
    bit_list = _split(bits, "bits")
    if not 1 <= pairs <= 300:
        raise ConfigError(f"--pairs {pairs} must lie in 1..300")
    if max_length is not None and max_length < 2:
        raise ConfigError(f"--max-length {max_length} must be at least 2 tokens")
    from accelkit.quant.evaluate import (
        check_model,
        load_subject,
        parse_bits,
        parse_dtype,
        recommend,
        run_eval,
    )

    check_model(model)
    if report:
        from accelkit.quant.report import check_folder

        check_folder(report)
    torch_dtype = parse_dtype(dtype)
    for b in bit_list:
        parse_bits(b)
    base = load_quant_config(
        config,
        group_size,
        disable_compile=None if compiled is None else not compiled,
        weight_format=weight_format,
    )
    overrides = base.model_dump(exclude={"method", "wbits", "abits", "disable_compile"})
    compiled = not base.disable_compile
    from contextlib import ExitStack

    from accelkit.runtime.output import stdout_console
    from accelkit.runtime.progress import status as status_line

    with ExitStack() as stack:
        update = stack.enter_context(status_line(f"loading {model} and its evaluation data…"))
        layers = None
        if report:  # hooks on the evaluation passes; FP32 layer outputs spilled here meanwhile
            from accelkit.quant.report import LayerErrors
            from accelkit.runtime.files import temporary_folder

            layers = LayerErrors(stack.enter_context(temporary_folder("accelkit-quant-report-")))
        subject = load_subject(
            model,
            n_pairs=pairs,
            calibration_file=calibration,
            eval_file=eval_data,
            max_length=max_length,
            dtype=torch_dtype,
            tokenizer_path=tokenizer,
        )
        rows = run_eval(
            method_list,
            bit_list,
            n_pairs=pairs,
            latency=latency,
            compiled=compiled,
            config_overrides=overrides,
            progress=lambda s: update(f"{s}…"),
            subject=subject,
            layers=layers,
        )
    texts = subject.texts
    lm = subject.kind == "causal-lm"
    title = (
        f"accelkit quant eval — {model} ({subject.kind}, {subject.dtype}), {texts} texts of"
        f" ≤ {subject.data.length} tokens, fidelity vs the unquantized model"
    )
    fidelity_columns = (
        [("next-token agree", "top1_agreement", ".3f"), ("ppl ratio", "perplexity_ratio", ".4f")]
        if lm
        else [
            ("mean cos", "mean_cosine", ".4f"),
            ("min cos", "min_cosine", ".4f"),
            ("top-1 agree", "top1_agreement", ".3f"),
        ]
    )
    columns = [
        ("method", "method", None),
        ("bits", "bits", None),
        *fidelity_columns,
        ("layers MB", "quant_layers_mb", ".2f"),
        ("eager ms", "eager_ms", ".2f"),
        ("compiled ms", "compiled_ms", ".2f"),
    ]

    def fmt(v, spec):
        return "-" if v is None else str(v) if spec is None else format(v, spec)

    table_rows = [[fmt(getattr(r, key), spec) for _, key, spec in columns] for r in rows]
    from dataclasses import asdict

    advice = recommend(rows)
    document = {
        "model": model,
        "kind": subject.kind,
        "dtype": subject.dtype,
        "texts": texts,
        "max_length": subject.data.length,
        "pairs": subject.n_pairs,
        "rows": [asdict(r) for r in rows],
        "recommendation": advice,
    }
    if report:
        from accelkit.quant.report import build, write_report

        write_report(report, build(document, layers))
    if as_json:
        from accelkit.runtime.output import print_json

        print_json(document)
    else:
        from accelkit.runtime.output import Col, print_table

        print_table(
            title,
            [
                Col(name, numeric=spec is not None, key=key == "method")
                for name, key, spec in columns
            ],
            table_rows,
            console=stdout_console(),
        )
        if advice:
            typer.echo(f"recommended for this model: {advice['text']}")
        if report:
            typer.echo(f"report: {report}/report.md, report.png, report.json")
    if output:
        from accelkit.runtime.files import write_json_atomic

        write_json_atomic(output, document)


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
    from accelkit.errors import ConfigError
    from accelkit.quant.apply import quantize_with_report
    from accelkit.quant.evaluate import (
        Texts,
        check_model,
        load_model,
        model_max_length,
        parse_dtype,
        prepare,
        quant_layer_bytes,
    )
    from accelkit.quant.sentences import calibration_sentences
    from accelkit.quant.storage import save_quantized

    check_model(model)
    torch_dtype = parse_dtype(dtype)
    if max_length is not None and max_length < 2:
        raise ConfigError(f"--max-length {max_length} must be at least 2 tokens")
    cfg = load_quant_config(
        config, group_size, method=method, wbits=wbits, abits=abits, weight_format=weight_format
    )
    texts = (
        Texts("--calibration", calibration)
        if calibration
        else Texts("the shipped calibration sentences", items=calibration_sentences())
    )
    from accelkit.runtime.progress import Steps, status

    with status(f"loading {model}…") as update:
        float_model, tok, _ = load_model(model, torch_dtype, tokenizer)
        data = prepare(
            tok,
            texts,
            max_length=max_length,
            model_max=model_max_length(float_model, tok),
            batch_size=32,
        )
        import torch.nn as nn

        steps = Steps(sum(isinstance(m, nn.Linear) for m in float_model.modules()), "quant apply")
        update(steps.text(f"calibrating ({cfg.method}) on {data.count} texts"))

        def layer_done(name: str) -> None:
            steps.done += 1
            update(steps.text(f"quantized {name}"))

        qmodel, report = quantize_with_report(float_model, cfg, data, layer_done)
    if cfg.dry_run:  # dry run (OPENPI_DUQUANT_DRYRUN / ACCELKIT_QUANT_DRY_RUN): nothing written
        plan = {
            "dry_run": True,
            "planned": report.planned,
            "quantized": [],
            "skipped": report.skipped,
        }
        if as_json:
            from accelkit.runtime.output import print_json

            print_json(plan)
        else:
            for name, bits in report.planned.items():
                typer.echo(f"would quantize {name} (W{bits}A{cfg.abits})")
            for name, why in report.skipped.items():
                typer.echo(f"would leave {name} in float ({why})")
            typer.echo(
                f"dry run: {len(report.planned)} layers to quantize, {len(report.skipped)} left"
                f" in float; nothing written to {output}"
            )
        return
    path = save_quantized(qmodel, output)
    q_bytes, fp_bytes = quant_layer_bytes(qmodel)
    if as_json:
        from accelkit.runtime.output import print_json

        print_json(
            {
                "output": str(path),
                "quantized": report.quantized,
                "skipped": report.skipped,
                "calibration": {"texts": data.count, "tokens": data.tokens, "length": data.length},
                "quantized_layers_bytes": q_bytes,
                "fp32_layers_bytes": fp_bytes,
            }
        )
        return
    typer.echo(
        f"{report.summary()}; quantized layers {q_bytes / 2**20:.2f} MB vs {fp_bytes / 2**20:.2f} MB FP32 "
        f"({q_bytes / fp_bytes:.3f}x); wrote {path}"
    )
