"""The library API of `accelkit quant`: `evaluate` and `apply`, the operations the command line runs.

Both take what the flags of `accelkit quant eval|apply` take (the same names, Python values), do
the whole operation — load the model and texts, calibrate, quantize, measure or save — and return
a result object; `accelkit.quant.cli` only parses the flags, calls one of them and renders the
result (a table, or `document()` in the `--json` envelope). A notebook calls the same functions:

    from accelkit.quant import apply, evaluate

    result = evaluate("minilm", methods=["fp32", "duquant"], bits=["w4a8"], pairs=32)
    result.rows[1].mean_cosine, result.recommendation["text"]
    saved = apply("minilm", "minilm_w4a8.safetensors")  # saved.quantized, saved.output
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

from accelkit.errors import ConfigError
from accelkit.quant.config import QuantConfig, config_for_run
from accelkit.quant.evaluation.report import (
    LM_KINDS,
    LayerErrors,
    build,
    check_folder,
    write_report,
)
from accelkit.runtime.files import temporary_folder
from accelkit.runtime.progress import Steps

# the modules that import torch at their top (method/, models, evaluation's fidelity, speed,
# sweep, target, recommend, tokenize) are imported inside the functions that need them

METHODS = ("fp32", "rtn", "smoothquant", "duquant")
Progress = Callable[[str], None] | None


@dataclass
class EvalResult:
    """What `evaluate` measured: one `EvalRow` per method × bits, and the setting it recommends."""

    model: str
    kind: str  # "encoder" | "causal-lm" | "vision" | "vision-language"
    dtype: str
    texts: int
    max_length: int
    pairs: int | None
    rows: list  # [EvalRow]
    recommendation: dict | None
    report: Path | None = None  # the report folder, when one was asked for
    timing_batch: list[int] | None = None  # texts × tokens of the timed batch
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase of the run
    kernels: dict | None = None  # the CPU kernel measurements the layers were placed by
    target: dict | None = None  # --target-*: what was moved out of 4-bit, and the cost
    quantized_share: float | None = None  # of the model's linear weights, in every row
    lm_head: str | None = None  # "float" | "quantized"; None: the model has none
    compile_error: str | None = None  # why torch.compile failed (then timed eager only)

    def document(self) -> dict:
        """The document `--json` prints and `--output` writes."""
        from accelkit.quant.evaluation.speed import TIMING

        return {
            "model": self.model,
            "kind": self.kind,
            "dtype": self.dtype,
            "texts": self.texts,
            "max_length": self.max_length,
            "pairs": self.pairs,
            "rows": [asdict(r) for r in self.rows],
            "recommendation": self.recommendation,
            "timing_batch": self.timing_batch,
            "timing": TIMING,
            "phases": self.phases,
            "kernels": self.kernels,
            "target": self.target,
            "quantized_share": self.quantized_share,
            "lm_head": self.lm_head,
            "compile_error": self.compile_error,
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
    layer_abits: dict[str, int] = field(default_factory=dict)  # layers at other activation bits
    summary: str = ""
    kernels: dict[str, int] = field(default_factory=dict)  # CPU kernel -> layers on it
    target: dict | None = None  # --target-*: what was moved out of 4-bit, and the cost
    quantized_share: float = 0.0  # of the model's linear weights
    lm_head: str | None = None  # "float" | "quantized"; None: the model has none
    speed: dict | None = None  # the default setting: eager time against FP32 (`_default_speed`)

    def document(self) -> dict:
        if self.dry_run:
            return {
                "dry_run": True,
                "planned": self.planned,
                "quantized": [],
                "skipped": self.skipped,
                "abits": self.abits,
                "layer_abits": self.layer_abits,
                "quantized_share": self.quantized_share,
                "lm_head": self.lm_head,
            }
        return {
            "output": str(self.output),
            "quantized": self.quantized,
            "skipped": self.skipped,
            "abits": self.abits,
            "layer_abits": self.layer_abits,
            "calibration": self.calibration,
            "quantized_layers_bytes": self.quantized_layers_bytes,
            "fp32_layers_bytes": self.fp32_layers_bytes,
            "kernels": self.kernels,
            "target": self.target,
            "quantized_share": self.quantized_share,
            "lm_head": self.lm_head,
            "speed": self.speed,
        }


def _items(value: str | Sequence[str], what: str, allowed: tuple[str, ...] | None = None):
    """A comma-separated string or a sequence, lower-cased, each entry once (a repeat would run
    the same setting twice); none at all, or an unknown entry, is an error."""
    parts = value.split(",") if isinstance(value, str) else list(value)
    items = list(dict.fromkeys(p.strip().lower() for p in parts if p.strip()))
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


def _goal(cosine: float | None, perplexity_ratio: float | None, top1: float | None):
    """The one fidelity target asked for (`target.Goal`), or None; each checked in one line."""
    from accelkit.quant.evaluation.target import Goal

    if cosine is not None and not 0.0 < cosine < 1.0:
        raise ConfigError(f"--target-cosine {cosine} must lie between 0 and 1, e.g. 0.99")
    if perplexity_ratio is not None and not perplexity_ratio >= 1.0:
        raise ConfigError(
            f"--target-perplexity-ratio {perplexity_ratio} must be at least 1 (quantized / FP32"
            " perplexity), e.g. 1.05"
        )
    if top1 is not None and not 0.0 < top1 <= 1.0:
        raise ConfigError(f"--target-top1 {top1} must lie in (0, 1], e.g. 0.9")
    given = [
        Goal(metric, value)
        for metric, value in (
            ("mean_cosine", cosine),
            ("perplexity_ratio", perplexity_ratio),
            ("top1_agreement", top1),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise ConfigError(
            "pass one of --target-cosine, --target-perplexity-ratio, --target-top1, not several"
        )
    return given[0] if given else None


def _check_goal_kind(goal, kind: str) -> None:
    from accelkit.quant.evaluation.target import TARGET_FLAGS

    if goal is not None and goal.metric == "perplexity_ratio" and kind not in LM_KINDS:
        raise ConfigError(
            f"{TARGET_FLAGS[goal.metric]} needs a causal LM (this model is an {kind}); use"
            " --target-cosine"
        )


def _plan_share(model, config: QuantConfig) -> tuple[float, str | None]:
    """(the share of the model's linear weights a run quantizes, what becomes of its lm_head:
    "float", "quantized" or None without one) — refused at ~0 before anything slow
    (`convert.check_share`)."""
    from accelkit.quant.method.convert import is_lm_head, plan
    from accelkit.quant.method.layers import linear_layers

    usable, report = plan(model, config, warn=False)  # the run itself warns once
    head = None
    if any(is_lm_head(name) for name in linear_layers(model)):
        head = "quantized" if any(is_lm_head(name) for name in usable) else "float"
    return report.quantized_share, head


def _subject(model, pairs, calibration, eval_data, max_length, dtype, tokenizer):
    """The model with its calibration and evaluation texts (`fidelity.load_subject`)."""
    from accelkit.quant.evaluation.fidelity import load_subject

    return load_subject(
        model,
        n_pairs=pairs,
        calibration_file=calibration,
        eval_file=eval_data,
        max_length=max_length,
        dtype=dtype,
        tokenizer_path=tokenizer,
    )


def default_bits() -> list[str]:
    """The bit settings `evaluate` runs by default: w4a8 and w4a4; on a CPU whose int8 GEMMs
    cannot sum full-range 8-bit codes exactly (no VNNI: u8·s8 pairs saturate), also w4a7, whose
    7-bit codes they do sum exactly (`method/kernels.py`) — the setting that can be fast there;
    then w8a8 and the weight-only w4a16 and w8a16, which can win where 4-bit activations lose on
    speed or fidelity (a small decoder). Rows of one weight width share one calibration
    (`sweep.with_abits`), and every row the inputs and transforms (`SharedCalibration`)."""
    from accelkit.quant.method import kernels

    four = ["w4a8", "w4a4"] if kernels.full_range_exact() else ["w4a8", "w4a7", "w4a4"]
    return [*four, "w8a8", "w4a16", "w8a16"]


def _target_row(subject, reference, rows, models, overrides, goal, progress) -> dict | None:
    """--target-* on an evaluation: None when a measured setting reaches the target as is;
    else the most faithful setting (by the target's metric) with its most sensitive layers moved
    out of 4-bit, as one more row ("row", "model") and what was moved (the rest of the dict)."""
    from accelkit.quant.evaluation import target as tgt
    from accelkit.quant.evaluation.sweep import EvalRow, fp32_bytes, kernel_counts, parse_bits

    quantized = [r for r in rows if r.method != "fp32" and getattr(r, goal.metric) is not None]
    if not quantized or any(goal.met(asdict(r)) for r in quantized):
        return None
    best = max(quantized, key=lambda r: goal.score(asdict(r)))
    wbits, abits = parse_bits(best.bits)
    config = QuantConfig(method=best.method, wbits=wbits, abits=abits, **overrides)
    model, found = tgt.reach(
        subject, reference, models[best.label], best.label, config, goal, progress
    )
    short = {"mean_cosine": "target", "perplexity_ratio": "ppl", "top1_agreement": "top1"}
    row = EvalRow(
        best.method,
        best.bits,
        **found.fidelity,
        quant_layers_mb=found.linear_bytes_after / 2**20,  # float layers included, in FP32
        fp32_layers_mb=fp32_bytes(subject.model) / 2**20,
        kernels=kernel_counts(model),
        label=f"{best.label}+{short[goal.metric]}{goal.value:g}",
    )
    return {**found.document(), "row": row, "model": model}


def _eval_inputs(model, methods, bits, pairs, max_length, dtype, report) -> tuple:
    """`evaluate`'s inputs checked before anything slow, each refused in one line: (methods, bit
    settings, torch dtype)."""
    from accelkit.quant.evaluation.sweep import parse_bits
    from accelkit.quant.models import check_model, parse_dtype

    method_list = _items(methods, "methods", METHODS)
    bit_list = _items(default_bits() if bits is None else bits, "bits")
    if not 1 <= pairs <= 300:
        raise ConfigError(f"--pairs {pairs} must lie in 1..300")
    _check_max_length(max_length)
    check_model(model)
    if report:
        check_folder(report)
    torch_dtype = parse_dtype(dtype)
    # each setting once, as it is written canonically (w04a8 is w4a8: one row, not two)
    bit_list = list(dict.fromkeys(f"w{w}a{a}" for w, a in map(parse_bits, bit_list)))
    return method_list, bit_list, torch_dtype


def _measured_target_row(target: dict, bench, base: QuantConfig):
    """The --target-cosine variant's row, taken out of `target` with its model, timed against
    FP32 like every other row (`bench` None: --no-latency)."""
    row, variant = target.pop("row"), target.pop("model")
    if bench is not None:
        row.__dict__.update(vars(bench.measure(variant, not base.disable_compile)))
    return row


def evaluate(
    model: str = "minilm",
    *,
    methods: str | Sequence[str] = METHODS,
    bits: str | Sequence[str] | None = None,
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
    target_cosine: float | None = None,
    compile_all: bool = False,
    progress: Progress = None,
    target_perplexity_ratio: float | None = None,
    target_top1: float | None = None,
    lm_head: bool | None = None,
) -> EvalResult:
    """Quantize `model` with each method × bit setting; fidelity to FP32, size and latency per row.

    `model`: "minilm" or a local transformers folder; `calibration` / `eval_data`: text files, one
    text per line (default: the shipped sentences, `pairs` paraphrase pairs to evaluate on).
    `config`: a `QuantConfig` or a YAML file, the base of every row (`group_size`,
    `weight_format` on top; `group_size=0` = per output channel). `compiled`: also time
    torch.compile (None: unless the config's `disable_compile`). `report`: a new or empty folder
    for report.md/.png/.json. `bits` (default `default_bits()`): w4a8 and w4a4 (and w4a7 on a
    CPU whose int8 GEMMs cannot sum full-range 8-bit codes exactly), w8a8, w4a16 and w8a16.
    `target_cosine`: the fidelity bar of the recommendation (default 0.98); when no setting
    reaches it, the most faithful one's most sensitive layers are moved out of 4-bit until it does
    (`evaluation/target.py`), and that variant is measured as one more row. The recommendation is
    the fastest setting meeting the target given, never slower than FP32 (`recommend.py`).
    Latency is measured for the settings that meet the targets (the candidates) but not for one a
    timed candidate outruns by construction (`sweep.outrun_by`); every row with `compile_all`.
    `progress(text)`
    hears what is being done. Causal LMs: `target_perplexity_ratio` (at most, e.g. 1.05) or
    `target_top1` (next-token agreement, at least) instead of `target_cosine`; `lm_head` True
    quantizes the output projection too (default: kept in float, and the result says so). A
    torch.compile failure keeps every figure measured and times the rest eager (`compile_error`).
    """
    from accelkit.quant.evaluation import sweep
    from accelkit.quant.evaluation.recommend import Targets, recommend
    from accelkit.quant.evaluation.speed import Phases, SpeedBench
    from accelkit.quant.method import kernels

    method_list, bit_list, torch_dtype = _eval_inputs(
        model, methods, bits, pairs, max_length, dtype, report
    )
    goal = _goal(target_cosine, target_perplexity_ratio, target_top1)
    base = config_for_run(
        config,
        group_size,
        disable_compile=None if compiled is None else not compiled,
        weight_format=weight_format,
        lm_head=lm_head,
    )
    overrides = base.model_dump(exclude={"method", "wbits", "abits", "disable_compile"})
    if progress:
        progress(f"loading {model} and its evaluation data")
    started = time.perf_counter()
    targets = Targets.given(target_cosine, target_perplexity_ratio, target_top1)
    with ExitStack() as stack:
        layers = None
        if report:  # hooks on the evaluation passes; FP32 layer outputs spilled here meanwhile
            layers = LayerErrors(stack.enter_context(temporary_folder("accelkit-quant-report-")))
        subject = _subject(model, pairs, calibration, eval_data, max_length, torch_dtype, tokenizer)
        _check_goal_kind(goal, subject.kind)
        share, head = _plan_share(subject.model, QuantConfig(**overrides))
        phases = Phases({"load": time.perf_counter() - started})
        bench = SpeedBench(subject.model, subject.data.first(), phases)
        kernels.table().phases = phases  # a shape measured on this machine: "kernel choice"
        stack.callback(setattr, kernels.table(), "phases", None)
        models: dict = {}
        reference: list = []
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
            phases=phases,
            models=models if goal is not None else None,  # only --target-* needs them
            reference=reference,
            bench=bench,
            # timed: the rows meeting the targets (the ones the recommendation can pick)
            candidate=None if compile_all else targets.met,
        )
    target = None
    if goal is not None:
        name = "cosine" if goal.metric == "mean_cosine" else goal.metric.replace("_", " ")
        with phases(f"target {name}"):
            target = _target_row(subject, reference[0], rows, models, overrides, goal, progress)
        if target is not None:
            rows.append(_measured_target_row(target, bench if latency else None, base))
    result = EvalResult(
        model=model,
        kind=subject.kind,
        dtype=subject.dtype,
        texts=subject.texts,
        max_length=subject.data.length,
        pairs=subject.n_pairs,
        rows=rows,
        recommendation=recommend(rows, targets=targets),
        timing_batch=list(next(iter(subject.data.first().values())).shape),
        phases=phases.rounded(),
        kernels=kernels.table().report(),
        target=target,
        quantized_share=share,
        lm_head=head,
        compile_error=bench.compile_failed,
    )
    if report:
        result.report = write_report(report, build(result.document(), layers))
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
    target_cosine: float | None = None,
    eval_data: str | os.PathLike | None = None,
    pairs: int = 300,
    progress: Progress = None,
    target_perplexity_ratio: float | None = None,
    target_top1: float | None = None,
    lm_head: bool | None = None,
) -> ApplyResult:
    """Quantize `model` (calibrated on the shipped sentences or the `calibration` text file) and
    save it to `output` (int4 packed safetensors; `load_quantized` reads it back bit-exactly).

    `config`: a `QuantConfig` or a YAML file; `method`, `wbits`, `abits`, `group_size`,
    `weight_format` on top. With the config's `dry_run` nothing is quantized or written: the
    result lists the layers that would be (`planned`). `target_cosine`: measure the mean cosine
    to FP32 on `eval_data` (default: `pairs` of the shipped paraphrase pairs) and move the most
    sensitive layers out of 4-bit until it is reached (`evaluation/target.py`); `target` says what
    moved and what it cost (size, and eager time against FP32 before and after);
    `target_perplexity_ratio` / `target_top1` likewise for causal LMs. `lm_head` True quantizes a
    language model's output projection too (default: float; `lm_head` in the result says which)."""
    import torch.nn as nn

    from accelkit.quant.evaluation.fidelity import calibration_data, quant_layer_bytes
    from accelkit.quant.evaluation.sweep import kernel_counts
    from accelkit.quant.method.convert import quantize_with_report
    from accelkit.quant.method.storage import save_quantized
    from accelkit.quant.models import check_model, load_model, parse_dtype

    if output is None:
        raise ConfigError("apply needs output=PATH (where to write the quantized model)")
    goal = _goal(target_cosine, target_perplexity_ratio, target_top1)
    check_model(model)
    torch_dtype = parse_dtype(dtype)
    _check_max_length(max_length)
    cfg = config_for_run(
        config,
        group_size,
        method=method,
        wbits=wbits,
        abits=abits,
        weight_format=weight_format,
        lm_head=lm_head,
    )
    if cfg.quantizes_nothing():  # the library's quantize() takes it (the transforms alone)
        raise ConfigError(
            "wbits=16 with abits=16 quantizes nothing: that is the FP32 model; give 2..8 for"
            " wbits (weights) or abits (activations)"
        )
    if progress:
        progress(f"loading {model}…")
    subject = None
    if goal is not None and not cfg.dry_run:  # the evaluation texts too
        subject = _subject(model, pairs, calibration, eval_data, max_length, torch_dtype, tokenizer)
        _check_goal_kind(goal, subject.kind)
        float_model, data = copy.deepcopy(subject.model), subject.calibration
    else:
        float_model, tok, _ = load_model(model, torch_dtype, tokenizer)
        data = calibration_data(float_model, tok, calibration, max_length)
    share, head = _plan_share(float_model, cfg)
    _default_abits(cfg, float_model)
    # the default setting (no method, bits or config asked for) is checked for speed on this CPU
    on_defaults = method is None and wbits is None and abits is None and config is None
    fp32 = copy.deepcopy(float_model) if on_defaults and not cfg.dry_run else None
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
            layer_abits=dict(cfg.layer_abits),
            summary=report.summary(),
            quantized_share=share,
            lm_head=head,
        )
    target = None
    if subject is not None:
        qmodel, target = _apply_target(subject, qmodel, cfg, goal, progress)
    _warn_float_fallback(qmodel, cfg)
    speed = None if fp32 is None else _default_speed(fp32, qmodel, data.first(), cfg)
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
        layer_abits=dict(cfg.layer_abits),
        summary=report.summary(),
        kernels=kernel_counts(qmodel),
        target=target,
        quantized_share=share,
        lm_head=head,
        speed=speed,
    )


def _default_speed(fp32, qmodel, batch: dict, cfg) -> dict:
    """`apply` on defaults: the quantized model's eager time against FP32's in the same
    interleaved rounds, on the first calibration batch; one warning line when it is not faster
    (a small decoder, where int8 loses: `quant eval` then recommends FP32 itself)."""
    from accelkit.quant.evaluation.speed import Phases, SpeedBench

    timed = SpeedBench(fp32, batch, Phases()).measure(qmodel, compiled=False)
    speed = {"eager_ms": timed.eager_ms, "eager_fp32_ms": timed.eager_fp32_ms}
    assert timed.eager_ms is not None and timed.eager_fp32_ms is not None  # measured eager
    speed["eager_ratio"] = timed.eager_ms / timed.eager_fp32_ms
    if speed["eager_ratio"] >= 1.0:
        logging.getLogger(__name__).warning(
            "quant: the default setting (%s W%dA%d) runs %.2f× FP32's eager time on this CPU"
            " (%.2f ms against %.2f ms, the same rounds); `accelkit quant eval --model …` finds"
            " the fastest faithful setting here, FP32 itself when none is faster",
            cfg.method, cfg.wbits, cfg.abits, speed["eager_ratio"], timed.eager_ms,
            timed.eager_fp32_ms,
        )  # fmt: skip
    return speed


def _apply_target(subject, qmodel, cfg, goal, progress) -> tuple:
    """`apply --target-*`: the model that reaches the target, and what it took."""
    from accelkit.quant.evaluation import target as tgt
    from accelkit.quant.evaluation.fidelity import subject_reference
    from accelkit.quant.evaluation.speed import Phases, SpeedBench

    if progress:
        progress(f"measuring {goal.metric} on {subject.texts} texts")
    reference = subject_reference(subject)
    label = f"{cfg.method}/w{cfg.wbits}a{cfg.abits}"
    final, found = tgt.reach(subject, reference, qmodel, label, cfg, goal, progress)
    done = found.document()
    if final is not qmodel:  # what it costs in time: eager, against FP32, in the same rounds
        bench = SpeedBench(subject.model, subject.data.first(), Phases())
        done["eager_ratio_before"] = bench.measure(qmodel, compiled=False).eager_ratio
        done["eager_ratio_after"] = bench.measure(final, compiled=False).eager_ratio
    return final, done


def _default_abits(cfg, model) -> None:
    """Activation bits by default where none were set (flag, file, environment), per layer: 8
    where an integer kernel sums full-range 8-bit codes exactly for that layer's width and weight
    bound (always with VNNI/AMX; without, e.g. plain 4-bit weights, |b| ≤ 15), else 7 where
    7-bit codes run exactly (`layer_abits`). On a CPU without VNNI (u8·s8 pairs saturate) W4A8's
    progressive layers (|b| up to 127) run on the float path, slower than FP32 (held to AVX2:
    1.22× compiled), and at 7 bits on fbgemm (0.86×; mean cos 0.9816 against 0.9820 on MiniLM)
    — docs/quant.md, "Speed"."""
    from accelkit.quant.method import kernels
    from accelkit.quant.method.convert import layer_spec, select_layers

    if "abits" in cfg.model_fields_set or cfg.abits != 8:
        return
    rotate = cfg.method == "duquant"
    for name, lin in select_layers(model, cfg).items():
        if name in cfg.layer_abits:
            continue
        spec = layer_spec(lin, cfg, rotate=rotate, name=name)
        if spec.integer_matmul:
            bits = kernels.default_abits(spec.in_features, spec.weight_bound)
            if bits != cfg.abits:
                cfg.layer_abits[name] = bits
    if cfg.layer_abits:
        logging.getLogger(__name__).info(
            "quant: %d layers at 7-bit activations by default on this CPU (no exact int8 kernel"
            " for 8-bit codes times their weights)",
            len(cfg.layer_abits),
        )


def _warn_float_fallback(model, cfg) -> None:
    """One line when layers that could run on an int8 GEMM take the float path because no
    kernel sums their values exactly on this CPU (and what does)."""
    from accelkit.quant.method.layers import QuantLinear

    slow = [
        m
        for m in model.modules()
        if isinstance(m, QuantLinear) and m.integer_gemm and m.kernel == "float"
    ]
    if slow and any(m.spec.abits == 8 for m in slow):
        logging.getLogger(__name__).warning(
            "quant: %d layers run on the float path on this CPU: its int8 GEMMs cannot sum"
            " full-range 8-bit activations times these weights exactly (no VNNI: u8·s8 pairs"
            " saturate); --abits 7 runs them on an exact int8 kernel",
            len(slow),
        )
