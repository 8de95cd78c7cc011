"""`quantize(model, config, calibration_batches)`: calibrate eagerly, then swap Linear -> QuantLinear.

Order of work: select layers by name, run the calibration batches once through the float model
(hooks record each layer's inputs), fit each layer's transform in float64, fold it into the
weight, quantize, and replace the module. The returned model has no hooks, flags or lazy state.
"""

from __future__ import annotations

import fnmatch
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

from accelkit.errors import ConfigError, DataError, InputError
from accelkit.quant.config import QuantConfig
from accelkit.quant.method.calibrate import SharedCalibration, collect_inputs
from accelkit.quant.method.layers import (
    LayerSpec,
    QuantLinear,
    as_linear,
    is_conv1d,
    linear_layers,
)
from accelkit.quant.method.transforms import fit_transform, quiet_channels

# smoothing scales come from per-channel activation maxima: fewer tokens than this give noise
MIN_CALIBRATION_TOKENS = 32
# the share of a model's linear weights quantized below which a run says so (and at ~0 refuses)
LOW_SHARE = 0.5
SUPPORTED = (
    "accelkit quant quantizes nn.Linear and transformers' Conv1D layers (BERT/MiniLM-style"
    " encoders, GPT-2, Llama/Qwen2/Mistral/Gemma-style decoders, T5 encoders, ViT/SigLIP vision"
    " towers)"
)

log = logging.getLogger(__name__)


@dataclass
class QuantReport:
    quantized: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    planned: dict[str, int] = field(default_factory=dict)  # dry_run: layer -> weight bits
    linear_weights: int = 0  # weights of every Linear (and Conv1D) layer of the model
    quantized_weights: int = 0  # … of the layers quantized (planned, in a dry run)
    lm_head_left: bool = False  # the model has an lm_head, kept in float: counted on no side

    @property
    def quantized_share(self) -> float:
        """The share of the model's linear weights that are quantized (planned)."""
        return self.quantized_weights / self.linear_weights if self.linear_weights else 0.0

    def summary(self) -> str:
        text = (
            f"quantized {len(self.quantized)} Linear layers"
            f" ({100 * self.quantized_share:.1f} % of the model's linear weights"
            f"{' besides lm_head, kept in float' if self.lm_head_left else ''})"
        )
        if self.skipped:
            text += "; left in float: " + ", ".join(
                f"{n} ({why})" for n, why in self.skipped.items()
            )
        return text


def is_lm_head(name: str) -> bool:
    """The output projection of a language model (transformers names it `lm_head`)."""
    return name.rpartition(".")[2] == "lm_head"


def select_layers(model: nn.Module, config: QuantConfig) -> dict[str, nn.Linear]:
    """Linear layers (and Conv1D ones, as the Linear they are: `layers.as_linear`) whose
    qualified name starts with `scope`, matches an include glob (and the include regex, by
    re.search) and no exclude glob (nor the exclude regex); a language model's `lm_head` only
    with `config.lm_head`."""
    if any(isinstance(m, QuantLinear) for m in model.modules()):
        raise InputError(
            "the model is already quantized (it holds QuantLinear layers); quantize the float model instead"
        )
    linears = linear_layers(model)
    chosen = {
        name: mod
        for name, mod in linears.items()
        if name.startswith(config.scope)
        and (config.lm_head or not is_lm_head(name))
        and any(fnmatch.fnmatchcase(name, pat) for pat in config.include)
        and not any(fnmatch.fnmatchcase(name, pat) for pat in config.exclude)
        and (config.include_regex is None or re.search(config.include_regex, name))
        and not (config.exclude_regex and re.search(config.exclude_regex, name))
    }
    regexes = "".join(
        f" {what}={value!r}"
        for what, value in (
            ("include_regex", config.include_regex),
            ("exclude_regex", config.exclude_regex),
        )
        if value
    )
    if not chosen:
        names = list(linears)
        shown = ", ".join(names[:12]) + (f", … ({len(names)} in all)" if len(names) > 12 else "")
        raise InputError(
            f"no nn.Linear matches scope={config.scope!r} include={config.include} exclude={config.exclude}"
            f"{regexes}; candidates: {shown or 'none'}. {SUPPORTED}"
        )
    unknown = sorted((set(config.layer_wbits) | set(config.layer_abits)) - set(chosen))
    if unknown:
        raise InputError(
            f"per-layer bits name {', '.join(map(repr, unknown))}, which is not among the selected "
            f"layers ({len(chosen)}: {', '.join(list(chosen)[:6])}{', …' if len(chosen) > 6 else ''})"
        )
    return chosen


def layer_spec(
    linear: nn.Linear, config: QuantConfig, rotate: bool, name: str | None = None
) -> LayerSpec:
    wbits, group_size, weight_format = config.layer_weights(name, linear.in_features)
    return LayerSpec(
        in_features=linear.in_features,
        out_features=linear.out_features,
        bias=linear.bias is not None,
        wbits=wbits,
        abits=config.layer_abits.get(name, config.abits) if name is not None else config.abits,
        group_size=group_size,
        weight_format=weight_format,
        act_granularity=config.act_granularity,
        act_clip=config.act_clip,
        smooth=config.method in ("smoothquant", "duquant"),
        block=config.layer_block(linear.in_features, linear.out_features) if rotate else None,
        permutation=rotate and config.permutation,
        rotation_steps=config.rotation_steps if rotate else 0,
        seed=config.seed,
    )


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def plan_layers(
    layers: dict[str, nn.Linear], config: QuantConfig, report: QuantReport, warn: bool = True
) -> dict[str, nn.Linear]:
    """The selected layers that can be quantized; the others go to `report.skipped` with the
    reason, under one warning for all of them (a dry run and a real run decide alike)."""
    usable: dict[str, nn.Linear] = {}
    for name, lin in layers.items():
        n = lin.in_features
        why = None
        block = config.layer_block(n, lin.out_features)
        if config.method == "duquant" and n % block:
            why = f"input width {n} is not divisible by block_size {block}"
        elif (
            (group := config.layer_weights(name, n)[1])
            and config.layer_weights(name, n)[0] < 16
            and (n % group)
        ):
            why = f"input width {n} is not divisible by weight_group_size {group}"
        if why:
            if config.indivisible == "error":
                raise ConfigError(
                    f"layer {name!r}: {why}; pick a divisor, exclude the layer, or set indivisible='skip'"
                )
            report.skipped[name] = why
        else:
            usable[name] = lin
    if report.skipped and warn:
        reasons: dict[str, list[str]] = {}
        for name, why in report.skipped.items():
            reasons.setdefault(why, []).append(name)
        shown = "; ".join(
            f"{why}: {len(names)} ({', '.join(names[:3])}{', …' if len(names) > 3 else ''})"
            for why, names in reasons.items()
        )
        log.warning(
            "quant: leaving %d of %d selected layers in float (%s); pick a size that divides the"
            " widths or exclude them",
            len(report.skipped),
            len(layers),
            shown,
        )
    return usable


def _default_selection(config: QuantConfig) -> bool:
    return (
        not config.scope
        and config.include == ["*"]
        and not config.exclude
        and not config.include_regex
        and not config.exclude_regex
    )


def matmul_weights(model: nn.Module) -> dict[str, int]:
    """How many weights each matmul layer of `model` holds: Linear and Conv1D layers, and any
    other module's 2-D `weight` (a fused or custom linear quant does not know, e.g. Conv1D before
    it was known); embedding tables are not matmuls."""
    found = {}
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if not name or isinstance(module, nn.Embedding | QuantLinear):
            continue
        linear = as_linear(module)
        if linear is not None:
            found[name] = linear.weight.numel()
        elif isinstance(weight, nn.Parameter) and weight.dim() == 2:
            found[name] = weight.numel()
    return found


def check_share(model: nn.Module, usable: dict[str, nn.Linear], config, report) -> None:
    """Count the share of the model's linear (matmul) weights `usable` covers into `report` — an
    lm_head kept in float by default counts on neither side; refuse a default selection that
    would quantize (almost) none of them — the model's compute is in layers quant does not know,
    and the result would be the float model under another name — and warn below `LOW_SHARE`."""
    weights = {
        name: n
        for name, n in matmul_weights(model).items()
        if config.lm_head or not is_lm_head(name)
    }
    report.linear_weights = sum(weights.values())
    report.lm_head_left = not config.lm_head and any(map(is_lm_head, matmul_weights(model)))
    report.quantized_weights = sum(m.weight.numel() for m in usable.values())
    share = report.quantized_share
    if share < 0.005 and _default_selection(config):
        raise InputError(
            f"only {100 * share:.1f} % of the model's linear weights ({report.quantized_weights}"
            f" of {report.linear_weights}: {', '.join(list(usable)[:3]) or 'none'}) can be"
            f" quantized; its compute is in layers quant does not handle. {SUPPORTED}"
        )
    if share < LOW_SHARE:
        left = [n for n in weights if n not in usable]
        text = (
            f"quant: only {100 * share:.1f} % of the model's linear weights are quantized"
            f" ({report.quantized_weights} of {report.linear_weights}); left in float:"
            f" {', '.join(left[:4])}{', …' if len(left) > 4 else ''}"
        )
        if text not in _WARNED:  # once per process: an evaluation quantizes the model per row
            _WARNED.add(text)
            log.warning("%s", text)


_WARNED: set[str] = set()


def plan(
    model: nn.Module, config: QuantConfig, warn: bool = True
) -> tuple[dict[str, nn.Linear], QuantReport]:
    """The layers `quantize` would quantize (by name, as Linear) and its report so far: what is
    left in float and why, and the quantized share (refused near 0, `check_share`). Changes
    nothing. `warn=False`: a look ahead whose run warns itself (no second warning line)."""
    report = QuantReport()
    usable = plan_layers(select_layers(model, config), config, report, warn)
    check_share(model, usable, config, report)
    return usable, report


def quantize_with_report(
    model: nn.Module,
    config: QuantConfig,
    calibration_batches: Iterable,
    progress=None,
    shared: SharedCalibration | None = None,
) -> tuple[nn.Module, QuantReport]:
    """Quantize in place; returns the model and which layers were quantized or skipped (and why).
    Conv1D layers are swapped for the Linear they are (the same weights, the same results) before
    calibration, so the hooks see them as any Linear. `shared`: calibration inputs and transforms
    already fitted for copies of the same FP32 model are reused (the same results, once)."""
    usable, report = plan(model, config)
    if config.dry_run:  # the openpi fork's DRYRUN: say what would be quantized, change nothing
        report.planned = {name: config.layer_weights(name)[0] for name in usable}  # bits
        return model, report
    if not usable:
        raise InputError(f"no selected layer can be quantized: {report.summary()}")
    for name, linear in usable.items():
        if is_conv1d(model.get_submodule(name)):
            _set_module(model, name, linear)
    needs_data = (
        config.method != "rtn"
        or config.weight_clip == "search"
        or (config.abits < 16 and config.act_granularity == "per-tensor-static")
    )
    collect = collect_inputs if shared is None else shared.collect
    inputs = (
        collect(
            model, usable, calibration_batches, max_rows=config.calibration_rows, seed=config.seed
        )
        if needs_data
        else {}
    )
    quiet: dict[str, list[int]] = {}
    if config.method in ("smoothquant", "duquant"):
        for name, entry in inputs.items():
            if entry.tokens < MIN_CALIBRATION_TOKENS:
                raise DataError(
                    f"layer {name!r} saw only {entry.tokens} calibration tokens; {config.method} "
                    f"fits its smoothing on activation statistics and needs at least "
                    f"{MIN_CALIBRATION_TOKENS} (pass more or longer calibration batches, or use rtn)"
                )
            assert entry.absmax is not None  # collect_inputs refuses a layer that never ran
            channels = quiet_channels(entry.absmax)
            if len(channels):
                quiet[name] = channels.tolist()
    if quiet:
        shown = "; ".join(
            f"{name} ({len(ch)}: {', '.join(map(str, ch[:8]))}{', …' if len(ch) > 8 else ''})"
            for name, ch in list(quiet.items())[:6]
        )
        more = f"; and {len(quiet) - 6} more layers" if len(quiet) > 6 else ""
        log.warning(
            "quant: input channels quiet or dead during calibration get a typical smoothing scale "
            "instead of their own (which would amplify them at inference): %s%s; calibrate on "
            "data like the inference inputs",
            shown,
            more,
        )
    for name, lin in usable.items():
        entry = inputs.get(name)
        sample = entry.sample() if entry is not None else None
        block = config.layer_block(lin.in_features, lin.out_features)
        # the inputs of one `shared.collect` and every setting the transform is fitted with
        key = (name, id(entry), config.method, config.smooth_alpha, block, config.rotation_steps)
        key += (config.permutation, config.seed)
        transform = shared.transforms.get(key) if shared is not None else None
        if transform is None:
            transform = fit_transform(
                sample if sample is not None else torch.zeros(1, lin.in_features),
                lin.weight.detach(),
                act_absmax=None if entry is None else entry.absmax,
                method=config.method,
                alpha=config.smooth_alpha,
                block=block,
                steps=config.rotation_steps,
                permutation=config.permutation,
                seed=config.seed,
            )
            if shared is not None:
                shared.transforms[key] = transform
        spec = layer_spec(lin, config, rotate=config.method == "duquant", name=name)
        qlin = QuantLinear(spec)
        act_range = None
        if sample is not None and spec.abits < 16 and spec.act_granularity == "per-tensor-static":
            xt = transform.activations(sample.to(torch.float64))
            act_range = (xt.amin(), xt.amax())
        qlin.load_from_float(
            lin.weight.detach(),
            None if lin.bias is None else lin.bias.detach(),
            transform,
            sample,
            config.weight_clip,
            act_range,
        )
        qlin.to(lin.weight.device)
        _set_module(model, name, qlin)
        report.quantized.append(name)
        if progress is not None:
            progress(name)
    return model, report


def quantize(
    model: nn.Module,
    config: QuantConfig | None = None,
    calibration_batches: Iterable = (),
    progress=None,
    shared: SharedCalibration | None = None,
) -> nn.Module:
    """Replace the selected nn.Linear layers of `model` by QuantLinear (in place) and return it.
    `progress(layer_name)` is called after each layer; `shared`: see `quantize_with_report`."""
    config = config or QuantConfig()
    return quantize_with_report(model, config, calibration_batches, progress, shared)[0]
