"""The library API of `accelkit quant`: `evaluate` and `apply`, the operations the command line runs.

Both take what the flags of `accelkit quant eval|apply` take (the same names, Python values), do
the whole operation — load the model and texts, calibrate, quantize, measure or save — and return
a result object; `accelkit.quant.cli` only parses the flags, calls one of them and renders the
result (a table, or `to_dict()` in the `--json` envelope). A notebook calls the same functions:

    from accelkit.quant import apply, evaluate

    result = evaluate("minilm", methods=["fp32", "duquant"], bits=["w4a8"], pairs=32)
    result.rows[1].mean_cosine, result.recommendation["text"]
    saved = apply("minilm", "minilm_w4a8.safetensors")  # saved.quantized, saved.output
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

from accelkit.errors import ConfigError
from accelkit.quant.config import QuantConfig, config_for_run

METHODS = ("fp32", "rtn", "smoothquant", "duquant")
Progress = Callable[[str], None] | None


@dataclass
class EvalResult:
    """What `evaluate` measured: one `EvalRow` per method × bits, and the setting it recommends."""

    model: str
    kind: str  # "encoder" | "causal-lm"
    dtype: str
    texts: int
    max_length: int
    pairs: int | None
    rows: list  # [EvalRow]
    recommendation: dict | None
    report: Path | None = None  # the report folder, when one was asked for

    def to_dict(self) -> dict:
        """The document `--json` prints and `--output` writes."""
        return {
            "model": self.model,
            "kind": self.kind,
            "dtype": self.dtype,
            "texts": self.texts,
            "max_length": self.max_length,
            "pairs": self.pairs,
            "rows": [asdict(r) for r in self.rows],
            "recommendation": self.recommendation,
        }


@dataclass
class ApplyResult:
    """What `apply` did: the layers quantized or left in float (and why), the sizes and the file
    (`output` is None and `dry_run` True when only a plan was asked for)."""

    output: Path | None
    quantized: list[str]
    skipped: dict[str, str]
    calibration: dict  # texts, tokens, length
    quantized_layers_bytes: int | None = None
    fp32_layers_bytes: int | None = None
    dry_run: bool = False
    planned: dict[str, int] = field(default_factory=dict)  # dry run: layer -> weight bits
    abits: int = 8
    summary: str = ""

    def to_dict(self) -> dict:
        if self.dry_run:
            return {
                "dry_run": True,
                "planned": self.planned,
                "quantized": [],
                "skipped": self.skipped,
            }
        return {
            "output": str(self.output),
            "quantized": self.quantized,
            "skipped": self.skipped,
            "calibration": self.calibration,
            "quantized_layers_bytes": self.quantized_layers_bytes,
            "fp32_layers_bytes": self.fp32_layers_bytes,
        }


def _items(value: str | Sequence[str], what: str, allowed: tuple[str, ...] | None = None):
    """A comma-separated string or a sequence, lower-cased; empty or unknown entries are errors."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    items = [p.strip().lower() for p in parts if p.strip()]
    if not items:
        raise ConfigError(f"--{what} is empty; e.g. --{what} {','.join(allowed or ('w4a8',))}")
    if allowed:
        bad = [p for p in items if p not in allowed]
        if bad:
            raise ConfigError(f"--{what} {bad[0]!r} is not known; choose from {', '.join(allowed)}")
    return items


def _check_max_length(max_length: int | None) -> None:
    if max_length is not None and max_length < 2:
        raise ConfigError(f"--max-length {max_length} must be at least 2 tokens")


def evaluate(
    model: str = "minilm",
    *,
    methods: str | Sequence[str] = METHODS,
    bits: str | Sequence[str] = ("w4a8", "w4a4"),
    pairs: int = 300,
    calibration: str | os.PathLike | None = None,
    eval_data: str | os.PathLike | None = None,
    group_size: int | None = None,
    weight_format: str | None = None,
    max_length: int | None = None,
    dtype: str = "auto",
    tokenizer: str | os.PathLike | None = None,
    config: QuantConfig | str | os.PathLike | None = None,
    latency: bool = True,
    compiled: bool | None = None,
    report: str | os.PathLike | None = None,
    progress: Progress = None,
) -> EvalResult:
    """Quantize `model` with each method × bit setting; fidelity to FP32, size and latency per row.

    `model`: "minilm" or a local transformers folder; `calibration` / `eval_data`: text files, one
    text per line (default: the shipped sentences, `pairs` paraphrase pairs to evaluate on).
    `config`: a `QuantConfig` or a YAML file, the base of every row (`group_size`,
    `weight_format` on top; `group_size=0` = per output channel). `compiled`: also time
    torch.compile (None: unless the config's `disable_compile`). `report`: a new or empty folder
    for report.md/.png/.json. `progress(text)` hears what is being done.
    """
    from accelkit.quant import sweep
    from accelkit.quant.fidelity import load_subject
    from accelkit.quant.models import check_model, parse_dtype
    from accelkit.quant.recommend import recommend

    method_list = _items(methods, "methods", METHODS)
    bit_list = _items(bits, "bits")
    if not 1 <= pairs <= 300:
        raise ConfigError(f"--pairs {pairs} must lie in 1..300")
    _check_max_length(max_length)
    check_model(model)
    if report:
        from accelkit.quant.report import check_folder

        check_folder(report)
    torch_dtype = parse_dtype(dtype)
    for b in bit_list:
        sweep.parse_bits(b)
    base = config_for_run(
        config,
        group_size,
        disable_compile=None if compiled is None else not compiled,
        weight_format=weight_format,
    )
    overrides = base.model_dump(exclude={"method", "wbits", "abits", "disable_compile"})
    if progress:
        progress(f"loading {model} and its evaluation data")
    with ExitStack() as stack:
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
        rows = sweep.run_eval(
            method_list,
            bit_list,
            n_pairs=pairs,
            latency=latency,
            compiled=not base.disable_compile,
            config_overrides=overrides,
            progress=progress,
            subject=subject,
            layers=layers,
        )
    result = EvalResult(
        model=model,
        kind=subject.kind,
        dtype=subject.dtype,
        texts=subject.texts,
        max_length=subject.data.length,
        pairs=subject.n_pairs,
        rows=rows,
        recommendation=recommend(rows),
    )
    if report:
        from accelkit.quant.report import build, write_report

        result.report = write_report(report, build(result.to_dict(), layers))
    return result


def apply(
    model: str = "minilm",
    output: str | os.PathLike | None = None,
    *,
    calibration: str | os.PathLike | None = None,
    method: str | None = None,
    wbits: int | None = None,
    abits: int | None = None,
    group_size: int | None = None,
    weight_format: str | None = None,
    max_length: int | None = None,
    dtype: str = "auto",
    tokenizer: str | os.PathLike | None = None,
    config: QuantConfig | str | os.PathLike | None = None,
    progress: Progress = None,
) -> ApplyResult:
    """Quantize `model` (calibrated on the shipped sentences or the `calibration` text file) and
    save it to `output` (int4 packed safetensors; `load_quantized` reads it back bit-exactly).

    `config`: a `QuantConfig` or a YAML file; `method`, `wbits`, `abits`, `group_size`,
    `weight_format` on top. With the config's `dry_run` nothing is quantized or written: the
    result lists the layers that would be (`planned`)."""
    import torch.nn as nn

    from accelkit.quant.convert import quantize_with_report
    from accelkit.quant.fidelity import quant_layer_bytes
    from accelkit.quant.models import check_model, load_model, model_max_length, parse_dtype
    from accelkit.quant.sentences import calibration_sentences
    from accelkit.quant.storage import save_quantized
    from accelkit.quant.texts import Texts, prepare
    from accelkit.runtime.progress import Steps

    if output is None:
        raise ConfigError("apply needs output=PATH (where to write the quantized model)")
    check_model(model)
    torch_dtype = parse_dtype(dtype)
    _check_max_length(max_length)
    cfg = config_for_run(
        config, group_size, method=method, wbits=wbits, abits=abits, weight_format=weight_format
    )
    texts = (
        Texts("--calibration", calibration)
        if calibration
        else Texts("the shipped calibration sentences", items=calibration_sentences())
    )
    if progress:
        progress(f"loading {model}…")
    float_model, tok, _ = load_model(model, torch_dtype, tokenizer)
    data = prepare(
        tok,
        texts,
        max_length=max_length,
        model_max=model_max_length(float_model, tok),
        batch_size=32,
    )
    steps = Steps(sum(isinstance(m, nn.Linear) for m in float_model.modules()), "quant apply")
    if progress:
        progress(steps.text(f"calibrating ({cfg.method}) on {data.count} texts"))

    def layer_done(name: str) -> None:
        steps.done += 1
        if progress:
            progress(steps.text(f"quantized {name}"))

    qmodel, report = quantize_with_report(float_model, cfg, data, layer_done)
    calib = {"texts": data.count, "tokens": data.tokens, "length": data.length}
    if cfg.dry_run:  # dry run (OPENPI_DUQUANT_DRYRUN / ACCELKIT_QUANT_DRY_RUN): nothing written
        return ApplyResult(
            output=None,
            quantized=[],
            skipped=report.skipped,
            calibration=calib,
            dry_run=True,
            planned=report.planned,
            abits=cfg.abits,
            summary=report.summary(),
        )
    path = save_quantized(qmodel, output)
    q_bytes, fp_bytes = quant_layer_bytes(qmodel)
    return ApplyResult(
        output=path,
        quantized=report.quantized,
        skipped=report.skipped,
        calibration=calib,
        quantized_layers_bytes=q_bytes,
        fp32_layers_bytes=fp_bytes,
        abits=cfg.abits,
        summary=report.summary(),
    )
