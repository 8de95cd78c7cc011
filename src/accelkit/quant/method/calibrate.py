"""Calibration: an explicit eager pass that records each selected Linear's input activations.

Forward hooks live only for the duration of `collect_inputs`; nothing is stored on the modules.
Per layer we keep the exact per-channel max|x| over every calibration token (for smoothing) and a
bounded, seeded random sample of token rows (for the rotation search, the clipping search and
static activation ranges). With dict batches that carry an `attention_mask`, padding positions are
not calibration tokens: a layer input with one row per (batch, position) keeps only the rows whose
mask is 1, so neither the statistics nor the token count see padding.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

from accelkit.errors import DataError
from accelkit.quant.method.transforms import Transform


@dataclass
class LayerInputs:
    absmax: torch.Tensor | None = None
    chunks: list[torch.Tensor] = field(default_factory=list)
    rows: int = 0
    empty_calls: int = 0
    tokens: int = 0

    def sample(self) -> torch.Tensor:
        return torch.cat(self.chunks) if self.chunks else torch.empty(0)


def call_model(model: nn.Module, batch):
    """Batch conventions of `quantize`: tensor -> model(x), tuple/list -> model(*x), dict -> model(**x)."""
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, list | tuple):
        return model(*batch)
    return model(batch)


def _thin(entry: LayerInputs, max_rows: int, generator: torch.Generator) -> None:
    rows = torch.cat(entry.chunks)
    keep = torch.randperm(rows.shape[0], generator=generator)[:max_rows].sort().values
    entry.chunks = [rows[keep]]
    entry.rows = max_rows


def _real_positions(batch) -> torch.Tensor | None:
    """The flattened attention mask of a dict batch (True = a real token), else None."""
    mask = batch.get("attention_mask") if isinstance(batch, dict) else None
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2:
        return None
    return mask.reshape(-1).bool()


@torch.no_grad()
def collect_inputs(
    model: nn.Module,
    layers: dict[str, nn.Linear],
    batches: Iterable,
    *,
    max_rows: int = 2048,
    seed: int = 0,
) -> dict[str, LayerInputs]:
    """Run every batch through `model` eagerly and return the recorded inputs of `layers`."""
    found = {name: LayerInputs() for name in layers}
    generator = torch.Generator().manual_seed(seed)
    bad: list[str] = []

    real: list[torch.Tensor | None] = [None]  # the current batch's attention mask, flattened

    def hook_for(name: str):
        def hook(_module, args):
            x = args[0].detach().reshape(-1, args[0].shape[-1])
            if real[0] is not None and x.shape[0] == real[0].numel():
                x = x[real[0]]
            x = x.to(torch.float32)
            if x.shape[0] == 0:  # an empty batch adds nothing (and has no max)
                found[name].empty_calls += 1
                return
            if not bool(torch.isfinite(x).all()):
                bad.append(name)
                return
            entry = found[name]
            amax = x.abs().amax(dim=0)
            entry.absmax = amax if entry.absmax is None else torch.maximum(entry.absmax, amax)
            entry.chunks.append(x.clone())
            entry.rows += x.shape[0]
            entry.tokens += x.shape[0]
            if entry.rows > 4 * max_rows:
                _thin(entry, max_rows, generator)

        return hook

    handles = [module.register_forward_pre_hook(hook_for(name)) for name, module in layers.items()]
    seen = 0
    was_training = model.training
    model.eval()
    try:
        for batch in batches:
            seen += 1
            real[0] = _real_positions(batch)
            call_model(model, batch)
            if bad:
                raise DataError(
                    f"calibration batch {seen - 1}: the input of layer {bad[0]!r} contains NaN or Inf; "
                    "check the calibration data (and the layers before it)"
                )
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    if seen == 0:
        raise DataError(
            "calibration data is empty; pass at least one batch (a tensor, tuple or dict of tensors)"
        )
    for name, entry in found.items():
        if entry.absmax is None and entry.empty_calls:
            raise DataError(
                f"layer {name!r} saw 0 calibration tokens (every batch that reached it was empty); "
                "pass batches with at least one token"
            )
        if entry.absmax is None:
            raise DataError(
                f"layer {name!r} never ran during calibration; exclude it or use data that reaches it"
            )
        if entry.rows > max_rows:
            _thin(entry, max_rows, generator)
    return found


@dataclass
class SharedCalibration:
    """What every quantization of one FP32 model on the same calibration batches can share (an
    evaluation's rows: methods × weight bits): the recorded layer inputs, per layer set, row budget
    and seed — `collect_inputs` gives the same rows whichever method asks — and each layer's
    fitted transform (smoothing, rotations: they depend on the inputs, the weight and the method's
    settings, never on the bits). Use one per FP32 model and batches, with copies of that model."""

    inputs: dict[tuple, dict[str, LayerInputs]] = field(default_factory=dict)
    transforms: dict[tuple, Transform] = field(default_factory=dict)

    def collect(self, model, layers, batches, *, max_rows: int, seed: int):
        """`collect_inputs`, run once per (layers, max_rows, seed) and then reused."""
        key = (tuple(layers), max_rows, seed)
        if key not in self.inputs:
            self.inputs[key] = collect_inputs(model, layers, batches, max_rows=max_rows, seed=seed)
        return self.inputs[key]
