"""`run_eval`: quantize one model with each method × bit setting and measure every row.

Each row: fidelity against FP32 (`fidelity.py`), the quantized layers' size, which CPU kernel its
layers run on (`kernels.py`), and eager / compiled latency against FP32 at the timing batch and at
one text (`speed.py`). Rows that differ only in activation bits share one quantization
(`with_abits`); every quantization shares the calibration inputs and the fitted transforms
(`SharedCalibration`: recorded once, fitted once per method). FP32's own row is read off its
reference pass, not run again. The seconds of each phase go to a `Phases`.

Timing is spent only where it can change the recommendation: with `candidate` given, a row that
misses it (a fidelity target) is not timed, and a row whose bits and kernels match a timed
candidate of a method that does strictly less work per call (`LESS_WORK`: rtn < smoothquant <
duquant — the same GEMMs, plus a division, plus rotations) cannot be faster than it and is not
timed either, nor a row whose every quantized layer runs on the float path (`FLOAT_PATH`: the
weight-only rows, and every row where no integer GEMM is exact or faster — FP32's GEMMs on
dequantized weights, plus the dequantization: it cannot be faster than FP32, and the
recommendation is never slower than FP32); `not_timed` says why.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import cast

from torch import nn

from accelkit.errors import InputError
from accelkit.quant.config import VALID_BITS, Method, QuantConfig
from accelkit.quant.evaluation.fidelity import (
    Subject,
    linear_bytes,
    load_subject,
    reference_fidelity,
    subject_fidelity,
    subject_reference,
)
from accelkit.quant.evaluation.speed import Phases, SpeedBench
from accelkit.quant.method.calibrate import SharedCalibration
from accelkit.quant.method.convert import quantize
from accelkit.quant.method.layers import QuantLinear, linear_layers
from accelkit.runtime.progress import Steps


@dataclass
class EvalRow:
    method: str
    bits: str
    quant_layers_mb: float
    fp32_layers_mb: float
    mean_cosine: float | None = None  # encoders: embeddings; causal LMs: last hidden states
    min_cosine: float | None = None
    top1_agreement: float | None = None  # encoders: retrieval; causal LMs: next token
    top1_partner_accuracy: float | None = None  # the shipped paraphrase pairs only
    perplexity: float | None = None  # causal LMs
    perplexity_fp32: float | None = None
    perplexity_ratio: float | None = None
    eager_ms: float | None = None  # the timing batch
    compiled_ms: float | None = None
    quantize_s: float | None = None
    compiled_one_ms: float | None = None  # one text
    # FP32's median time in the same interleaved rounds, and ms over it (`speed.TIMING`)
    eager_fp32_ms: float | None = None
    compiled_fp32_ms: float | None = None
    compiled_one_fp32_ms: float | None = None
    eager_ratio: float | None = None
    compiled_ratio: float | None = None
    compiled_one_ratio: float | None = None
    compile_s: float | None = None
    kernels: dict[str, int] | None = None  # CPU kernel -> number of layers on it
    label: str = ""  # method/bits, or a name given to a variant (target-cosine)
    not_timed: str | None = None  # why a row was not timed (it cannot change the recommendation)


def kernel_counts(model: nn.Module) -> dict[str, int]:
    """How many quantized layers run on each CPU kernel (`kernels.py`)."""
    counts: dict[str, int] = {}
    for m in model.modules():
        if isinstance(m, QuantLinear):
            counts[m.kernel] = counts.get(m.kernel, 0) + 1
    return counts


def fp32_bytes(model: nn.Module) -> int:
    """FP32 bytes of every Linear (and Conv1D) layer's weight and bias."""
    return sum(
        4 * m.weight.numel() + (4 * m.bias.numel() if m.bias is not None else 0)
        for m in linear_layers(model).values()
    )


def parse_bits(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"w(\d+)a(\d+)", text.strip().lower())
    if not m:
        raise InputError(f"--bits entry {text!r} is not like w4a8; e.g. --bits w4a8,w4a4")

    wbits, abits = int(m.group(1)), int(m.group(2))
    for bits, side in ((wbits, "weight"), (abits, "activation")):
        if bits not in VALID_BITS:
            raise InputError(
                f"--bits entry {text.strip()!r} asks for {bits}-bit {side}s; each of wXaY is 2..8"
                " or 16 (16: that side not quantized), e.g. --bits w4a8,w8a16"
            )
    if wbits == abits == 16:
        raise InputError(f"--bits entry {text!r} quantizes nothing: that is the fp32 row")
    return wbits, abits


# the work a method adds per call on top of the same GEMMs: none, a division, rotations
LESS_WORK = {"rtn": 0, "smoothquant": 1, "duquant": 2}
# why a row whose quantized layers all run on the float path is not timed (`recommend` reads it)
FLOAT_PATH = "cannot outrun fp32 (every quantized layer on the float path: FP32's GEMMs and more)"


def float_path_only(row: EvalRow) -> bool:
    """Whether every quantized layer of the row runs on the float path (`kernels.py`'s "float":
    dequantized weights, FP32's GEMM): it does FP32's work and more, so cannot be faster."""
    return bool(row.kernels) and set(row.kernels) == {"float"}


def outrun_by(row: EvalRow, timed: list[EvalRow]) -> EvalRow | None:
    """A timed row that `row` cannot be faster than: the same bits and layers on the same
    kernels, by a method doing strictly less work per call (`LESS_WORK`); None when none."""
    for other in timed:
        if (
            other.bits == row.bits
            and other.kernels == row.kernels
            and LESS_WORK.get(other.method, 99) < LESS_WORK.get(row.method, -1)
        ):
            return other
    return None


def with_abits(model: nn.Module, abits: int) -> nn.Module:
    """A copy of a quantized model with its activations at `abits`. With per-token dynamic
    activation scales nothing calibration fits depends on the activation bits (transform, weight
    codes and clip ratios come from the weights and the float calibration inputs:
    `QuantLinear.load_from_float`), so W4A4 is W4A8's layers with another spec — the same model
    `quantize` builds for W4A4 (tested), without calibrating again."""
    out = copy.deepcopy(model)
    for m in out.modules():
        if isinstance(m, QuantLinear):
            if m.spec.act_granularity != "per-token-dynamic":
                raise ValueError("with_abits needs per-token dynamic activations")
            m.spec = dataclasses.replace(m.spec, abits=abits)
            m.choose_kernel()  # which GEMM is exact depends on the activation bits
    return out


def run_eval(
    methods: list[str],
    bits: list[str],
    *,
    n_pairs: int = 300,
    latency: bool = True,
    compiled: bool | set[str] = True,
    config_overrides: dict | None = None,
    progress=None,
    subject: Subject | None = None,
    layers=None,
    phases: Phases | None = None,
    models: dict | None = None,
    reference: list | None = None,
    bench: SpeedBench | None = None,
    candidate: Callable[[dict], bool] | None = None,
) -> list[EvalRow]:
    """Quantize the model (default: MiniLM on the shipped sentences) with each method × bits and
    measure fidelity, size and latency against FP32. `layers` (a `report.LayerErrors`) watches
    every Linear during the FP32 reference pass and each quantized row's evaluation pass;
    `models`, when given, receives each quantized model by its label (method/bits) and
    `reference` the FP32 reference outputs (so a later pass can reuse them); `bench` times the
    rows (default: against this FP32 model on the first evaluation batch).
    `candidate(fidelity)`: time only the rows whose fidelity figures it accepts (the ones the
    recommendation can pick; compiles and timing rounds dominate the run's time), and of those
    not the ones a timed candidate outruns by construction (`outrun_by`); None: time every row."""
    phases = phases if phases is not None else Phases()
    subject = subject or load_subject("minilm", n_pairs=n_pairs)
    fp32, data, calib = subject.model, subject.data, subject.calibration
    with phases("fidelity"), layers.reference(fp32) if layers else nullcontext():
        ref = subject_reference(subject)
    if reference is not None:
        reference.append(ref)
    timing_batch = data.first()
    bench = bench or SpeedBench(fp32, timing_batch, phases)
    rows: list[EvalRow] = []

    plan = [
        (meth, b)
        for method in methods
        for meth, b in ([("fp32", "w32a32")] if method == "fp32" else [(method, b) for b in bits])
    ]
    n_linear = sum(isinstance(m, nn.Linear) for m in fp32.modules())
    # rows that differ only in activation bits share one quantization (`with_abits`)
    shared = (config_overrides or {}).get("act_granularity", "per-token-dynamic") == (
        "per-token-dynamic"
    )
    firsts = {(meth, parse_bits(b)[0]) for meth, b in plan if meth != "fp32"}
    quantizations = len(firsts) if shared else sum(meth != "fp32" for meth, _ in plan)
    # steps: every layer quantized, each evaluation, each latency measurement
    timed_rows = sum(meth != "fp32" for meth, _ in plan) if latency else 0
    steps = Steps(n_linear * quantizations + len(plan) + timed_rows, "quant eval")
    done_models: dict[tuple[str, int], nn.Module] = {}
    shared_calibration = SharedCalibration()
    timed_candidates: list[EvalRow] = []

    def say(what: str, by: int = 0) -> None:
        steps.done += by
        if progress:
            progress(steps.text(what))

    for meth, b in plan:
        say(f"{meth} {b}")
        label = "fp32" if meth == "fp32" else f"{meth}/{b}"
        if meth == "fp32":
            model, took = fp32, None
            q_bytes = fp_bytes = fp32_bytes(fp32)
        else:
            wbits, abits = parse_bits(b)
            cfg = QuantConfig(
                method=cast(Method, meth),  # a name QuantConfig checks
                wbits=wbits,
                abits=abits,
                **(config_overrides or {}),
            )
            t0 = time.perf_counter()
            before = steps.done

            def layer_done(name, meth=meth, b=b):
                say(f"{meth} {b}: quantized {name}", by=1)

            with phases("calibration"):
                if shared and (meth, wbits) in done_models:
                    model = with_abits(done_models[(meth, wbits)], abits)
                else:
                    model = quantize(
                        copy.deepcopy(fp32), cfg, calib, layer_done, shared_calibration
                    )
                    steps.done = before + n_linear  # layers left in float count as done too
                    if shared:
                        done_models[(meth, wbits)] = model
            took = time.perf_counter() - t0
            # every Linear layer as stored (float ones, lm_head too, in FP32), as in every row
            q_bytes, fp_bytes = linear_bytes(model), fp32_bytes(fp32)
            if models is not None:
                models[label] = model
        say(f"{meth} {b}: evaluating on {subject.texts} texts")
        watch = layers.compare(label, model) if layers and meth != "fp32" else nullcontext()
        with phases("fidelity"), watch:
            if meth == "fp32":  # its figures against itself, from the reference pass
                fid = reference_fidelity(subject, ref)
            else:
                fid = subject_fidelity(subject, model, ref)
        row = EvalRow(
            meth,
            b,
            **fid,
            quant_layers_mb=q_bytes / 2**20,
            fp32_layers_mb=fp_bytes / 2**20,
            quantize_s=took,
            kernels=None if meth == "fp32" else kernel_counts(model),
            label=label,
            not_timed=None,
        )
        if latency and meth != "fp32":  # FP32's times are each row's *_fp32_ms
            say(f"{meth} {b}: timing", by=1)
            faster = outrun_by(row, timed_candidates) if candidate is not None else None
            if candidate is not None and not candidate(fid):
                row.not_timed = "misses the fidelity targets"
            elif candidate is not None and float_path_only(row):
                row.not_timed = FLOAT_PATH
            elif faster is not None:
                row.not_timed = f"cannot outrun {faster.label} (same bits and kernels, more work)"
            else:
                want = compiled if isinstance(compiled, bool) else label in compiled
                row.__dict__.update(vars(bench.measure(model, want)))
                timed_candidates.append(row)
        steps.done += 1
        rows.append(row)
    for row in rows:  # FP32's compile, made with the first compiled setting
        if row.method == "fp32":
            row.compile_s = bench.fp32_compile_s
    return rows
