"""`--target-cosine T`: keep the most sensitive layers out of 4-bit until the model reaches T.

Layers are ranked worst first by the report's metric — each layer's relative output error
‖y_q − y‖ / ‖y‖ inside the quantized model against the FP32 model — measured here on the first
evaluation batch. The changes are taken in one order: the worst layer to W8A8 (symmetric int8
weights per output channel on the same int8 GEMM, calibrated like the rest), then the next …
until every ranked layer is at W8A8, then the worst back to float, then the next. Mean cosine to
FP32 (on the whole evaluation set) grows along that order, so the fewest changes that reach T are
found by doubling then halving over it — a handful of evaluation passes, not one per layer. The
result names every layer moved, the cosine at each step tried, and what it cost: the size of the
Linear layers and, where timed, the speed.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from accelkit.quant.config import QuantConfig
from accelkit.quant.evaluation.fidelity import Subject, subject_fidelity
from accelkit.quant.evaluation.tokenize import Batches
from accelkit.quant.method.convert import quantize
from accelkit.quant.method.layers import QuantLinear
from accelkit.quant.method.storage import compact_tensors


@dataclass
class TargetResult:
    target: float
    base: str  # the setting the layers were moved from
    base_cosine: float
    reached: bool
    cosine: float
    layers: dict[str, str] = field(default_factory=dict)  # layer -> "w8a8" (w8a<bits>) | "float"
    tried: list[dict] = field(default_factory=list)  # {"changes": k, "mean_cosine": c}
    order: list[dict] = field(default_factory=list)  # {"layer", "relative_error"}, worst first
    linear_bytes_before: int = 0
    linear_bytes_after: int = 0
    fidelity: dict = field(default_factory=dict)

    def document(self) -> dict:
        return asdict(self)


def linear_bytes(model: nn.Module) -> int:
    """Bytes of every Linear layer: quantized ones as stored, float ones in FP32."""
    total = 0
    for m in model.modules():
        if isinstance(m, QuantLinear):
            total += sum(t.numel() * t.element_size() for t in compact_tensors(m).values())
        elif isinstance(m, nn.Linear):
            total += 4 * (m.weight.numel() + (m.bias.numel() if m.bias is not None else 0))
    return total


@torch.no_grad()
def layer_errors(fp32: nn.Module, quantized: nn.Module, batch: dict) -> dict[str, float]:
    """‖y_q − y‖ / ‖y‖ of every quantized layer's output on the batch's real tokens (float64)."""
    names = [n for n, m in quantized.named_modules() if isinstance(m, QuantLinear)]
    mask = batch["attention_mask"].bool()
    outputs: dict[str, dict[str, torch.Tensor]] = {"fp32": {}, "q": {}}

    def run(model, key):
        def hook_for(name):
            def hook(_module, _args, out):
                rows = out[mask] if out.dim() == 3 and out.shape[:2] == mask.shape else out
                outputs[key][name] = rows.detach().to(torch.float64)

            return hook

        handles = [model.get_submodule(n).register_forward_hook(hook_for(n)) for n in names]
        try:
            model(**batch)
        finally:
            for h in handles:
                h.remove()

    run(fp32, "fp32")
    run(quantized, "q")
    errors = {}
    for name in names:
        y, yq = outputs["fp32"][name], outputs["q"][name]
        norm = float(y.norm())
        errors[name] = float((yq - y).norm()) / norm if norm > 0 else 0.0
    return errors


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


class Ladder:
    """The models along the order: step k moves the k first changes (see the module doc)."""

    def __init__(
        self, base: nn.Module, w8: nn.Module, fp32: nn.Module, order: list[str], w8_name: str
    ):
        self.base, self.w8, self.fp32, self.order = base, w8, fp32, order
        self.w8_name = w8_name  # "w8a8" (or w8a4 … : the activations keep the setting's bits)

    @property
    def steps(self) -> int:
        return 2 * len(self.order)

    def levels(self, k: int) -> dict[str, str]:
        n = len(self.order)
        moved = {name: self.w8_name for name in self.order[: min(k, n)]}
        moved.update({name: "float" for name in self.order[: max(0, k - n)]})
        return moved

    def model(self, k: int) -> nn.Module:
        variant = copy.deepcopy(self.base)
        for name, level in self.levels(k).items():
            source = self.fp32 if level == "float" else self.w8
            _set_module(variant, name, copy.deepcopy(source.get_submodule(name)))
        return variant


def reach(
    subject: Subject,
    reference,
    base: nn.Module,
    base_label: str,
    base_config: QuantConfig,
    target: float,
    progress=None,
) -> tuple[nn.Module, TargetResult]:
    """The model with the fewest layers moved out of 4-bit (worst first) whose mean cosine to
    FP32 reaches `target`, and what was done (`TargetResult`)."""

    def cosine(model) -> dict:
        return subject_fidelity(subject, model, reference)

    base_fid = cosine(base)
    result = TargetResult(
        target=target,
        base=base_label,
        base_cosine=base_fid["mean_cosine"],
        reached=base_fid["mean_cosine"] >= target,
        cosine=base_fid["mean_cosine"],
        linear_bytes_before=linear_bytes(base),
        fidelity=base_fid,
    )
    result.tried.append({"changes": 0, "mean_cosine": base_fid["mean_cosine"]})
    if result.reached:
        result.linear_bytes_after = result.linear_bytes_before
        return base, result
    data = subject.data
    first = data.first() if isinstance(data, Batches) else data[0]
    errors = layer_errors(subject.model, base, first)
    ranked = [
        name
        for name in sorted(errors, key=errors.get, reverse=True)
        if base.get_submodule(name).spec.wbits < 8  # already 8-bit: nothing to gain at W8A8
    ]
    result.order = [{"layer": n, "relative_error": errors[n]} for n in ranked]
    if progress:
        progress(f"target cosine {target}: calibrating W8A8 layers")
    w8_config = base_config.model_copy(
        update={"wbits": 8, "weight_format": "progressive", "layer_wbits": {}}
    )
    w8 = quantize(copy.deepcopy(subject.model), w8_config, subject.calibration)
    ladder = Ladder(base, w8, subject.model, ranked, f"w8a{base_config.abits}")
    seen: dict[int, tuple[nn.Module, dict]] = {}

    def at(k: int) -> tuple[nn.Module, dict]:
        if k not in seen:
            if progress:
                progress(f"target cosine {target}: {k} layers moved out of 4-bit")
            model = ladder.model(k)
            fid = cosine(model)
            seen[k] = (model, fid)
            result.tried.append({"changes": k, "mean_cosine": fid["mean_cosine"]})
        return seen[k]

    low, high, step = 0, None, 1  # low: known short of the target
    while high is None:
        k = min(step, ladder.steps)
        if at(k)[1]["mean_cosine"] >= target:
            high = k
        elif k == ladder.steps:
            break  # even every ranked layer in float falls short
        else:
            low, step = k, step * 2
    if high is None:
        model, fid = at(ladder.steps)
        final_k = ladder.steps
    else:
        while high - low > 1:
            mid = (low + high) // 2
            if at(mid)[1]["mean_cosine"] >= target:
                high = mid
            else:
                low = mid
        final_k = high
        model, fid = at(final_k)
    result.reached = fid["mean_cosine"] >= target
    result.cosine = fid["mean_cosine"]
    result.fidelity = fid
    result.layers = ladder.levels(final_k)
    result.tried.sort(key=lambda t: t["changes"])
    result.linear_bytes_after = linear_bytes(model)
    return model, result
