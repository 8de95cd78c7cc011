"""`--target-cosine T` (and, for causal LMs, `--target-perplexity-ratio R` / `--target-top1 A`):
keep the most sensitive layers out of 4-bit until the model reaches the target.

Layers are ranked worst first by the report's metric — each layer's relative output error
‖y_q − y‖ / ‖y‖ inside the quantized model against the FP32 model — measured here on the first
evaluation batch. The changes are taken in one order: the worst layer to W8A8 (symmetric int8
weights per output channel on the same int8 GEMM, calibrated like the rest), then the next …
until every ranked layer is at W8A8, then the worst back to float, then the next (from an
8-bit setting, only the float steps). Mean cosine to
FP32 (or next-token agreement; the perplexity ratio falls) on the whole evaluation set improves
along that order, so the fewest changes that reach the target are
found by doubling then halving over it — a handful of evaluation passes, not one per layer. The
result names every layer moved, the cosine at each step tried, and what it cost: the size of the
Linear layers and, where timed, the speed.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from typing import cast

import torch
from torch import nn

from accelkit.quant.config import QuantConfig
from accelkit.quant.evaluation.fidelity import Subject, linear_bytes, subject_fidelity
from accelkit.quant.method.convert import quantize
from accelkit.quant.method.layers import QuantLinear

# the flag that sets each target metric
TARGET_FLAGS = {
    "mean_cosine": "--target-cosine",
    "perplexity_ratio": "--target-perplexity-ratio",
    "top1_agreement": "--target-top1",
}


@dataclass(frozen=True)
class Goal:
    """What a target asks of the quantized model: `metric` (a fidelity key) at least `value`,
    or at most for the perplexity ratio."""

    metric: str  # "mean_cosine" | "perplexity_ratio" | "top1_agreement"
    value: float

    @property
    def lower_is_better(self) -> bool:
        return self.metric == "perplexity_ratio"

    def met(self, fidelity: dict) -> bool:
        got = fidelity.get(self.metric)
        if got is None:
            return False
        return got <= self.value if self.lower_is_better else got >= self.value

    def score(self, fidelity: dict) -> float:
        """Higher is better, for picking the most faithful row."""
        got = fidelity.get(self.metric)
        if got is None:
            return float("-inf")
        return -got if self.lower_is_better else got


@dataclass
class TargetResult:
    target: float
    base: str  # the setting the layers were moved from
    base_cosine: float
    reached: bool
    cosine: float
    metric: str = "mean_cosine"  # what `target` is a value of (`Goal.metric`)
    base_value: float | None = None  # that metric before and after
    value: float | None = None
    layers: dict[str, str] = field(default_factory=dict)  # layer -> "w8a8" (w8a<bits>) | "float"
    tried: list[dict] = field(default_factory=list)  # {"changes": k, "mean_cosine": c}
    order: list[dict] = field(default_factory=list)  # {"layer", "relative_error"}, worst first
    linear_bytes_before: int = 0
    linear_bytes_after: int = 0
    fidelity: dict = field(default_factory=dict)

    def document(self) -> dict:
        return asdict(self)


@torch.no_grad()
def layer_errors(fp32: nn.Module, quantized: nn.Module, batch: dict) -> dict[str, float]:
    """‖y_q − y‖ / ‖y‖ of every quantized layer's output on the batch's real tokens (float64)."""
    names = [n for n, m in quantized.named_modules() if isinstance(m, QuantLinear)]
    mask = batch.get("attention_mask")  # images: every token is real
    mask = None if mask is None else mask.bool()
    outputs: dict[str, dict[str, torch.Tensor]] = {"fp32": {}, "q": {}}

    def run(model, key):
        def hook_for(name):
            def hook(_module, _args, out):
                real = mask is not None and out.dim() == 3 and out.shape[:2] == mask.shape
                rows = out[mask] if real else out
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
        self,
        base: nn.Module,
        w8: nn.Module,
        fp32: nn.Module,
        order: list[str],
        w8_name: str,
        to_w8: list[str] | None = None,
    ):
        self.base, self.w8, self.fp32, self.order = base, w8, fp32, order
        self.w8_name = w8_name  # "w8a8" (or w8a4 … : the activations keep the setting's bits)
        # the layers below 8-bit weights, in the same order: a layer already at 8 bits gains
        # nothing at W8A8, only in float
        self.to_w8 = list(order) if to_w8 is None else to_w8

    @property
    def steps(self) -> int:
        return len(self.to_w8) + len(self.order)

    def levels(self, k: int) -> dict[str, str]:
        n = len(self.to_w8)
        moved = {name: self.w8_name for name in self.to_w8[: min(k, n)]}
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
    target: float | Goal,
    progress=None,
) -> tuple[nn.Module, TargetResult]:
    """The model with the fewest layers moved out of 4-bit (worst first) that reaches `target`
    (a `Goal`; a number is a mean cosine) and what was done (`TargetResult`)."""
    goal = target if isinstance(target, Goal) else Goal("mean_cosine", target)

    def measure(model) -> dict:
        return subject_fidelity(subject, model, reference)

    def tried(k: int, fid: dict) -> dict:
        return {"changes": k, "mean_cosine": fid["mean_cosine"], goal.metric: fid[goal.metric]}

    base_fid = measure(base)
    result = TargetResult(
        target=goal.value,
        base=base_label,
        base_cosine=base_fid["mean_cosine"],
        reached=goal.met(base_fid),
        cosine=base_fid["mean_cosine"],
        metric=goal.metric,
        base_value=base_fid[goal.metric],
        value=base_fid[goal.metric],
        linear_bytes_before=linear_bytes(base),
        fidelity=base_fid,
    )
    result.tried.append(tried(0, base_fid))
    if result.reached:
        result.linear_bytes_after = result.linear_bytes_before
        return base, result
    errors = layer_errors(subject.model, base, subject.data.first())
    ranked = sorted(errors, key=lambda n: errors[n], reverse=True)
    # already 8-bit (a W8A8 setting, or layers kept at 8 bits): nothing to gain at W8A8, only
    # in float
    below8 = [n for n in ranked if cast(QuantLinear, base.get_submodule(n)).spec.wbits < 8]
    result.order = [{"layer": n, "relative_error": errors[n]} for n in ranked]
    if progress:
        progress(f"target {goal.metric} {goal.value}: calibrating W8A8 layers")
    w8_config = base_config.model_copy(
        update={"wbits": 8, "weight_format": "progressive", "layer_wbits": {}}
    )
    w8 = quantize(copy.deepcopy(subject.model), w8_config, subject.calibration) if below8 else base
    ladder = Ladder(base, w8, subject.model, ranked, f"w8a{base_config.abits}", below8)
    seen: dict[int, tuple[nn.Module, dict]] = {}

    def at(k: int) -> tuple[nn.Module, dict]:
        if k not in seen:
            if progress:
                progress(f"target {goal.metric} {goal.value}: {k} layers moved out of 4-bit")
            model = ladder.model(k)
            fid = measure(model)
            seen[k] = (model, fid)
            result.tried.append(tried(k, fid))
        return seen[k]

    low, high, step = 0, None, 1  # low: known short of the target
    while high is None:
        k = min(step, ladder.steps)
        if goal.met(at(k)[1]):
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
            if goal.met(at(mid)[1]):
                high = mid
            else:
                low = mid
        final_k = high
        model, fid = at(final_k)
    result.reached = goal.met(fid)
    result.cosine = fid["mean_cosine"]
    result.value = fid[goal.metric]
    result.fidelity = fid
    result.layers = ladder.levels(final_k)
    result.tried.sort(key=lambda t: t["changes"])
    result.linear_bytes_after = linear_bytes(model)
    return model, result
