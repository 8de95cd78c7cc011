"""save_quantized / load_quantized: int4 packed two per byte in safetensors, bit-exact reload.

The file holds, per QuantLinear, its compact tensors (packed codes, scales, zero points, bias,
smoothing, permutation and the greedy rotation *steps*; the b×b rotation matrices are rebuilt from
the steps and the seeded base matrix by the same function `quantize` used), every other tensor of
the model's state dict in FP32 under `float/`, and in the metadata each layer's `LayerSpec`.
`load_quantized(path, model_factory)` builds the float model, swaps in empty QuantLinear layers
with the stored specs, fills them and returns the model; outputs match the saved model bit for bit.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from accelkit.errors import InputError, require
from accelkit.quant.method.layers import LayerSpec, QuantLinear, as_linear
from accelkit.quant.method.transforms import block_base, rotation_from_steps
from accelkit.runtime.files import atomic_open

FORMAT = "accelkit-quant/1"
DERIVED = (
    "rot1",
    "rot2",
    "transform",
    "transform_blocks",
    "weight_int8",
    "weight_rowsum",
)  # rebuilt from the others on load


def _derived(layer: QuantLinear, name: str) -> bool:
    """A buffer rebuilt on load, or a 4-bit layer's empty `weight` marker (never stored)."""
    return name in DERIVED or (name == "weight" and layer.spec.wbits != 16)


def compact_tensors(layer: QuantLinear) -> dict[str, torch.Tensor]:
    """The tensors that define a QuantLinear, without the derivable rotation matrices."""
    out = {}
    for name, buf in layer.named_buffers(recurse=False):
        if _derived(layer, name):
            continue
        if name == "perm":
            buf = buf.to(torch.int32)
        out[name] = buf.detach().cpu().contiguous()
    return out


def rebuild_derived(layer: QuantLinear, prefer: str | None = None) -> None:
    """Rotations from their greedy steps, then every other derived buffer and the kernel
    (`prefer`: the one the layer was saved with, where exact here)."""
    spec = layer.spec
    if spec.block is not None:
        base = block_base(spec.block, spec.seed)
        with torch.no_grad():
            layer.rot1.copy_(rotation_from_steps(base, layer.steps1.long()).to(torch.float32))
            layer.rot2.copy_(rotation_from_steps(base, layer.steps2.long()).to(torch.float32))
    layer.refresh_derived(prefer)


def save_quantized(model: nn.Module, path: str | os.PathLike) -> Path:
    st = require("safetensors.torch", "quant")
    quant = {name: mod for name, mod in model.named_modules() if isinstance(mod, QuantLinear)}
    if not quant:
        raise InputError(
            "save_quantized: the model holds no QuantLinear layer; run quantize() first"
        )
    tensors: dict[str, torch.Tensor] = {}
    for name, mod in quant.items():
        for key, t in compact_tensors(mod).items():
            tensors[f"quant/{name}/{key}"] = t
    prefixes = tuple(f"{name}." for name in quant)
    tied: dict[str, str] = {}  # a float tensor that is another's (lm_head tied to the embeddings)
    first: dict[tuple, str] = {}
    for key, t in model.state_dict().items():
        if not key.startswith(prefixes):
            same = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.dtype)
            if t.numel() and same in first:  # safetensors refuses shared memory: stored once
                tied[key] = first[same]
                continue
            first[same] = key
            tensors[f"float/{key}"] = t.detach().cpu().contiguous()
    meta = {
        "tied": json.dumps(tied),
        "format": FORMAT,
        "layers": json.dumps({name: mod.spec.to_dict() for name, mod in quant.items()}),
        # the CPU kernel each layer ran on here, exact for its width, weights and bits (load
        # runs it again where it is exact there)
        "kernels": json.dumps({name: mod.kernel for name, mod in quant.items()}),
    }
    data = _sorted_header(st.save(tensors, metadata=meta))
    with atomic_open(path, "wb") as handle:
        handle.write(data)
    return Path(path)


def _sorted_header(data: bytes) -> bytes:
    """safetensors writes its JSON header from a hash map, its keys in an order that changes from
    save to save: the same header with its keys sorted (as long: compact JSON, space-padded), so
    the same model is the same bytes (a rerun after a crash writes what a clean run writes)."""
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    text = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    if len(text) > size:  # never seen: keep the library's bytes
        return data
    return data[:8] + text.ljust(size, b" ") + data[8 + size :]


def load_quantized(path: str | os.PathLike, model_factory: Callable[[], nn.Module]) -> nn.Module:
    st = require("safetensors", "quant")
    file = Path(path)
    if not file.is_file():
        raise InputError(
            f"{file} does not exist; give the path written by save_quantized / `accelkit quant apply`"
        )
    try:
        with st.safe_open(str(file), framework="pt") as handle:
            meta = handle.metadata() or {}
            tensors = {k: handle.get_tensor(k) for k in handle.keys()}  # noqa: SIM118
    except Exception as exc:
        raise InputError(
            f"{file} is not a readable safetensors file ({exc}); re-create it with `accelkit quant apply`"
        ) from exc
    if meta.get("format") != FORMAT:
        raise InputError(
            f"{file} is not an accelkit quantized model (format {meta.get('format')!r}, expected {FORMAT!r})"
        )
    specs = json.loads(meta["layers"])
    saved_kernels = json.loads(meta.get("kernels") or "{}")  # absent in files of before
    switched: dict[tuple[str, str], int] = {}
    model = model_factory()
    for name, spec_dict in specs.items():
        try:
            old = model.get_submodule(name)
        except AttributeError as exc:
            raise InputError(
                f"{file}: the model from model_factory has no layer {name!r}; pass the factory of the model that was quantized"
            ) from exc
        spec = LayerSpec(**spec_dict)
        linear = as_linear(old)  # a Linear, or a Conv1D as the Linear it is
        shape = (linear.in_features, linear.out_features) if linear is not None else None
        if linear is None or shape != (spec.in_features, spec.out_features):
            raise InputError(
                f"{file}: layer {name!r} was quantized as Linear({spec.in_features}, "
                f"{spec.out_features}) but the model from model_factory has {old!r} there; pass the "
                "factory of the model that was quantized"
            )
        layer = QuantLinear(spec)
        with torch.no_grad():
            for key, buf in layer.named_buffers(recurse=False):
                if _derived(layer, key):
                    continue
                saved = tensors.get(f"quant/{name}/{key}")
                if saved is None or saved.shape != buf.shape:
                    raise InputError(
                        f"{file}: tensor quant/{name}/{key} is missing or has the wrong shape; "
                        "the file is damaged, re-create it with `accelkit quant apply`"
                    )
                buf.copy_(saved.to(buf.dtype))
        saved = saved_kernels.get(name)
        rebuild_derived(layer, saved)
        if saved is not None and saved != layer.kernel:
            switched[(saved, layer.kernel)] = switched.get((saved, layer.kernel), 0) + 1
        parent, _, child = name.rpartition(".")
        setattr(
            model.get_submodule(parent) if parent else model,
            child,
            layer.to(next(old.buffers(), next(old.parameters())).device),
        )
    rest = {k[len("float/") :]: v for k, v in tensors.items() if k.startswith("float/")}
    for alias, source in json.loads(meta.get("tied") or "{}").items():
        if source in rest:
            rest[alias] = rest[source]
    try:
        missing, unexpected = model.load_state_dict(rest, strict=False)
    except RuntimeError as exc:  # size mismatches
        first = str(exc).split("\n\t", 2)[1] if "\n\t" in str(exc) else str(exc)
        raise InputError(
            f"{file} does not fit the model from model_factory: {first.strip()}; pass the factory of "
            "the model that was quantized"
        ) from exc
    bad_missing = [k for k in missing if not k.startswith(tuple(f"{n}." for n in specs))]
    if bad_missing or unexpected:
        raise InputError(
            f"{file} does not fit the model from model_factory (missing {bad_missing[:3]}, unexpected {unexpected[:3]})"
        )
    if switched:
        _say_switched(file, switched)
    return model.eval()


def _say_switched(file: Path, switched: dict[tuple[str, str], int]) -> None:
    """One line: layers whose saved kernel is not exact (or is overridden) here, and what runs
    them; outputs stay bit-identical only between exact integer kernels."""
    parts = ", ".join(f"{n} from {old} to {new}" for (old, new), n in switched.items())
    floats = any("float" in pair for pair in switched)
    logging.getLogger(__name__).warning(
        "quant: %s: layers saved on a CPU kernel that is not exact here for them (or another is"
        " forced) run on another: %s; %s",
        file,
        parts,
        "the float path rounds differently, so outputs differ from the saved model's in the"
        " last bits"
        if floats
        else "both sum exactly, so the outputs are the same",
    )
