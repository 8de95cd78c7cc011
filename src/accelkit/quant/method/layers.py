"""`QuantLinear`: a drop-in for `nn.Linear` whose forward is pure.

Everything forward reads is a buffer registered in `__init__` with its final shape, so a compiled
graph (and a CUDA graph) sees fixed addresses; forward writes nothing, reads no Python flag that
changes, calls no `.item()` and branches only on constants fixed at construction (the `LayerSpec`).
Calibration fills the buffers in an explicit eager step (`load_from_float`) before any compile.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import cast

import torch
from torch import nn

from accelkit.errors import ConfigError
from accelkit.quant.method import kernels
from accelkit.quant.method import quantizers as qz
from accelkit.quant.method.transforms import Transform

DENSE_TRANSFORM_MAX_BLOCKS = 4
CUDA_INT_MM_MIN_ROWS = 17  # torch._int_mm on CUDA: more than 16 rows, k and n multiples of 8


def is_conv1d(module: nn.Module) -> bool:
    """transformers' `Conv1D` (GPT-2, GPT-J's ancestors, …): a Linear whose weight is stored
    transposed, [in, out], computing addmm(bias, x, weight). Recognized by its shape, not
    imported: transformers stays optional here."""
    weight = getattr(module, "weight", None)
    return (
        type(module).__name__ == "Conv1D"
        and isinstance(weight, torch.Tensor)
        and weight.dim() == 2
        and getattr(module, "nf", None) == weight.shape[1]
    )


def as_linear(module: nn.Module) -> nn.Linear | None:
    """`module` as the `nn.Linear` it is: a Linear itself, a `Conv1D` as a Linear whose weight is
    the transposed view of the Conv1D's (same storage; F.linear(x, Wᵀ, b) runs the very addmm
    Conv1D runs, bit for bit — tested), else None."""
    if type(module) is nn.Linear:
        return module
    if not is_conv1d(module):
        return None
    weight, bias = module.weight, module.bias
    assert isinstance(weight, torch.Tensor)  # checked by is_conv1d
    n, m = weight.shape
    linear = nn.Linear(n, m, bias=bias is not None, device="meta")
    linear.weight = nn.Parameter(weight.t(), requires_grad=weight.requires_grad)
    if bias is not None:
        linear.bias = cast(nn.Parameter, bias)  # Conv1D's bias is a Parameter
    return linear


def linear_layers(model: nn.Module) -> dict[str, nn.Linear]:
    """Every layer of `model` that is a Linear in all but name (`as_linear`), by qualified name."""
    found = {}
    for name, module in model.named_modules():
        linear = as_linear(module)
        if linear is not None and name:
            found[name] = linear
    return found


@dataclass(frozen=True)
class LayerSpec:
    """Everything that fixes a QuantLinear's buffer shapes; stored with a saved model."""

    in_features: int
    out_features: int
    bias: bool
    wbits: int
    abits: int
    group_size: int | None
    act_granularity: str  # "per-token-dynamic" | "per-tensor-static"
    act_clip: float
    smooth: bool
    block: int | None  # rotation block size; None = no rotations
    permutation: bool
    rotation_steps: int = 0  # width of the stored greedy-step records
    seed: int = 0  # seeds the base block matrix the rotations are built from
    # "progressive": int4 groups over per-channel int8 (QServe); "int8": symmetric int8 per channel
    weight_format: str = "plain"

    @property
    def progressive(self) -> bool:
        return self.weight_format == "progressive"

    @property
    def int8(self) -> bool:
        """Symmetric int8 per output channel (8-bit layers of the progressive family)."""
        return self.weight_format == "int8"

    @property
    def dense_transform(self) -> bool:
        """Apply smoothing, R₁, P and R₂ as one precomputed n×n product (narrow layers only).

        With torch.compile on CPU one dense product beats the two block products and the gather
        on a few blocks, and loses on many (n² against 2·n·b multiply-adds), so wide layers keep
        the block form (figures: docs/performance.md, "Figures behind code comments").
        """
        return (
            self.block is not None
            and self.permutation
            and self.in_features <= DENSE_TRANSFORM_MAX_BLOCKS * self.block
        )

    @property
    def fused_blocks(self) -> bool:
        """Without the permutation, smoothing·R₁·R₂ is block diagonal: one precomputed b×b matrix
        per block, applied by one block product (k·b² multiply-adds per token against n² dense:
        a third at 3 blocks, a twelfth of the block form's two products and gather at 12)."""
        return self.block is not None and not self.permutation

    @property
    def integer_matmul(self) -> bool:
        """On CPU, run the matmul in int8 with int32 accumulation instead of dequantizing.

        Needs weight codes minus zero point that fit int8 (wbits ≤ 7), activations of ≤ 8 bits and
        one weight scale per output channel. Plain weight groups stay on the dequantized float
        path: one int8 GEMM per group plus the per-group rescaling ran slower than float32
        (docs/performance.md, "Figures behind code comments").
        Progressive groups rebuild exact int8 weights with one scale per output channel, so they
        run here too. Same result as the float path up to float32 rounding of the final scaling.
        """
        return self.abits <= 8 and (
            self.progressive or self.int8 or (self.wbits <= 7 and self.group_size is None)
        )

    @property
    def weight_bound(self) -> int:
        """The largest |b| the integer path's int8 weights can hold for this format: 127 for
        int8 and progressive weights (rebuilt ≤ 119 + 8), 2^wbits − 1 for plain codes minus
        their zero point."""
        return 127 if self.progressive or self.int8 else 2**self.wbits - 1

    @property
    def packed(self) -> bool:
        return self.wbits <= 4 and self.in_features % 2 == 0

    def to_dict(self) -> dict:
        return asdict(self)


class QuantLinear(nn.Module):
    """y = fakequant_a(T(x)) · dequant(Q(T(W)))ᵀ + b, with T the layer's folded equivalent transform."""

    # the buffers `__init__` registers (which of them a layer has follows its spec), typed here:
    # nn.Module types an attribute it looks up as `Tensor | Module`
    weight: torch.Tensor
    qweight: torch.Tensor
    w_scale: torch.Tensor
    w_gscale: torch.Tensor
    w_gzero: torch.Tensor
    w_zero: torch.Tensor
    weight_int8: torch.Tensor
    weight_rowsum: torch.Tensor
    bias: torch.Tensor | None
    inv_smooth: torch.Tensor
    rot1: torch.Tensor
    rot2: torch.Tensor
    perm: torch.Tensor
    steps1: torch.Tensor
    steps2: torch.Tensor
    transform: torch.Tensor
    transform_blocks: torch.Tensor
    act_scale: torch.Tensor
    act_zero: torch.Tensor

    def __init__(self, spec: LayerSpec):
        super().__init__()
        self.spec = spec
        n, m = spec.in_features, spec.out_features
        # the CPU kernel (`kernels.py`: an exact int8 GEMM, the fastest measured here, or the
        # float path) is chosen by `refresh_derived` once the weights are known; on CUDA
        # torch._int_mm where it takes the shapes (k, n multiples of 8; rows checked per call)
        self.kernel = "float"
        self.cuda_integer = (
            spec.integer_matmul and torch.cuda.is_available() and n % 8 == 0 and m % 8 == 0
        )
        self.integer_gemm = spec.integer_matmul  # the int8 buffers exist
        if spec.progressive and (spec.wbits != 4 or not spec.group_size or n % spec.group_size):
            raise ConfigError(
                f"progressive weights are int4 groups over int8 (wbits 4, a group size dividing"
                f" {n}); got wbits {spec.wbits}, group size {spec.group_size}"
            )
        if spec.int8 and (spec.wbits != 8 or spec.group_size):
            raise ConfigError(
                f"int8 weights are 8 bits per output channel; got wbits {spec.wbits}, group size"
                f" {spec.group_size}"
            )
        self.in_features, self.out_features = n, m
        f32 = torch.float32
        if spec.wbits == 16:
            self.register_buffer("weight", torch.zeros(m, n, dtype=f32))
        else:
            # what model code reads of a Linear it calls (T5's feed-forward casts its input to
            # `wo.weight.dtype` unless that is int8): an empty int8 marker, never stored, never
            # read by forward — the input keeps its dtype, which forward returns
            self.register_buffer("weight", torch.zeros(0, dtype=torch.int8), persistent=False)
            groups = 1 if spec.group_size is None else n // spec.group_size
            cols = n // 2 if spec.packed else n
            code_dtype = torch.int8 if spec.int8 else torch.uint8
            self.register_buffer("qweight", torch.zeros(m, cols, dtype=code_dtype))
            if spec.int8:  # one scale per output channel, no zero point
                self.register_buffer("w_scale", torch.ones(m, 1, dtype=f32))
            elif spec.progressive:  # s₁ per output channel; integer s₂ and z per group (uint8)
                self.register_buffer("w_scale", torch.ones(m, 1, dtype=f32))
                self.register_buffer("w_gscale", torch.ones(m, groups, dtype=torch.uint8))
                self.register_buffer("w_gzero", torch.zeros(m, groups, dtype=torch.uint8))
            else:
                self.register_buffer("w_scale", torch.ones(m, groups, dtype=f32))
                self.register_buffer("w_zero", torch.zeros(m, groups, dtype=f32))
            if self.integer_gemm:
                # derived by `refresh_derived` (never stored): unpacking int4 and summing rows on
                # every call cost more than the GEMM itself at small batches; kept resident
                # instead, one byte per weight beside the packed codes
                self.register_buffer(
                    "weight_int8", torch.zeros(m, n, dtype=torch.int8), persistent=False
                )
                self.register_buffer(
                    "weight_rowsum", torch.zeros(m, dtype=torch.int32), persistent=False
                )
        if spec.bias:
            self.register_buffer("bias", torch.zeros(m, dtype=f32))
        else:
            self.bias = None
        if spec.smooth:
            self.register_buffer("inv_smooth", torch.ones(n, dtype=f32))
        if spec.block is not None:
            k, b = n // spec.block, spec.block
            self.register_buffer("rot1", torch.eye(b, dtype=f32).repeat(k, 1, 1))
            self.register_buffer("rot2", torch.eye(b, dtype=f32).repeat(k, 1, 1))
            if spec.permutation:
                self.register_buffer("perm", torch.arange(n))
            # the greedy choices that rebuild rot1/rot2 (storage keeps these, not the matrices);
            # forward never reads them
            self.register_buffer(
                "steps1", torch.full((k, spec.rotation_steps), -1, dtype=torch.int16)
            )
            self.register_buffer(
                "steps2", torch.full((k, spec.rotation_steps), -1, dtype=torch.int16)
            )
            if spec.dense_transform:
                # derived from the buffers above by `refresh_derived`; never stored
                self.register_buffer("transform", torch.eye(n, dtype=f32))
            if spec.fused_blocks:  # derived likewise
                self.register_buffer("transform_blocks", torch.eye(b, dtype=f32).repeat(k, 1, 1))
        if spec.abits < 16 and spec.act_granularity == "per-tensor-static":
            self.register_buffer("act_scale", torch.ones(1, dtype=f32))
            self.register_buffer("act_zero", torch.zeros(1, dtype=f32))

    # ---- the pure forward ----

    def transform_input(self, x: torch.Tensor) -> torch.Tensor:
        if self.spec.dense_transform:
            return x @ self.transform.to(x.dtype)
        if self.spec.fused_blocks:
            b = self.spec.block
            assert b is not None  # fused_blocks: rotations in blocks
            k = self.in_features // b
            lead = x.shape[:-1]
            return torch.einsum(
                "...kb,kbc->...kc", x.reshape(*lead, k, b), self.transform_blocks.to(x.dtype)
            ).reshape(*lead, k * b)
        return self._transform_blockwise(x)

    def _transform_blockwise(self, x: torch.Tensor) -> torch.Tensor:
        """Smoothing, R₁, P, R₂ from their buffers, in x's dtype."""
        spec = self.spec
        if spec.smooth:
            x = x * self.inv_smooth.to(x.dtype)
        if spec.block is not None:
            k, b = self.in_features // spec.block, spec.block
            lead = x.shape[:-1]
            x = torch.einsum(
                "...kb,kbc->...kc", x.reshape(*lead, k, b), self.rot1.to(x.dtype)
            ).reshape(*lead, k * b)
            if spec.permutation:
                x = x[..., self.perm]
            x = torch.einsum(
                "...kb,kbc->...kc", x.reshape(*lead, k, b), self.rot2.to(x.dtype)
            ).reshape(*lead, k * b)
        return x

    @torch.no_grad()
    def refresh_derived(self, prefer: str | None = None) -> None:
        """Recompute the buffers derived from the stored ones (an eager step after filling them by
        calibration, loading or by hand): `transform` = the block path applied to the identity (in
        float64), and the int8 weights and their row sums of the integer path; then the kernel
        (`prefer`: the one a saved layer was validated with, where exact here)."""
        if self.spec.dense_transform:
            eye = torch.eye(self.in_features, dtype=torch.float64, device=self.transform.device)
            self.transform.copy_(self._transform_blockwise(eye).to(torch.float32))
        if self.spec.fused_blocks:  # block k of the block-diagonal diag(1/s)·R₁·R₂, in float64
            b = self.spec.block
            assert b is not None  # fused_blocks: rotations in blocks
            k = self.in_features // b
            blocks = self.rot1.double() @ self.rot2.double()
            if self.spec.smooth:
                blocks = self.inv_smooth.double().reshape(k, b, 1) * blocks
            self.transform_blocks.copy_(blocks.to(torch.float32))
        if self.integer_gemm:
            if self.spec.progressive or self.spec.int8:
                b = (
                    self.qweight
                    if self.spec.int8
                    else qz.progressive_int8(self.weight_codes(), self.w_gscale, self.w_gzero)
                )
                rowsum = b.sum(dim=1, dtype=torch.int32)
            else:
                b, rowsum = qz.int8_weight(self.weight_codes(), self.w_zero)
            kernels.forget(self.weight_int8)
            self.weight_int8.copy_(b)
            self.weight_rowsum.copy_(rowsum)
        self.choose_kernel(prefer)

    def choose_kernel(self, prefer: str | None = None) -> None:
        """The CPU kernel for this layer's input width, weights and activation bits
        (`kernels.py`): `prefer` where it is exact here, else the fastest exact integer GEMM
        measured on this machine, else the float path; the fbgemm packing is made now, in this
        eager step, not on the first call."""
        spec = self.spec
        self.kernel = "float"
        if self.integer_gemm and spec.abits <= 8:
            wmax = int(self.weight_int8.abs().max()) if self.weight_int8.numel() else 0
            self.kernel = kernels.table().pick(
                self.in_features, self.out_features, spec.abits, wmax, prefer
            )
        if self.kernel == "fbgemm":
            kernels.prepack(self.weight_int8)

    def dequantized_weight(self) -> torch.Tensor:
        if self.spec.wbits == 16:
            return self.weight
        if self.spec.int8:
            return self.qweight.to(self.w_scale.dtype) * self.w_scale
        if self.spec.progressive:
            return qz.progressive_dequantize(
                self.weight_codes(), self.w_scale, self.w_gscale, self.w_gzero
            )
        return qz.dequantize_weight(self.weight_codes(), self.w_scale, self.w_zero)

    def weight_codes(self) -> torch.Tensor:
        return qz.unpack_int4(self.qweight) if self.spec.packed else self.qweight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spec = self.spec
        dtype = x.dtype
        x = self.transform_input(x.to(torch.float32))
        # constants per layer and the device fixed per graph: no recompiles; on CUDA the row count
        # (fewer than 17 rows: the float path) is a shape guard, as batch 1 already is
        if self.use_integer(x):
            return self._integer_forward(x).to(dtype)
        if spec.abits < 16:
            if spec.act_granularity == "per-tensor-static":
                x = qz.fake_quant_static(x, self.act_scale, self.act_zero, spec.abits)
            else:
                x = qz.fake_quant_per_token(x, spec.abits, spec.act_clip)
        return nn.functional.linear(x, self.dequantized_weight(), self.bias).to(dtype)

    def use_integer(self, x: torch.Tensor) -> bool:
        if x.device.type == "cpu":
            return self.kernel != "float"
        return (
            x.device.type == "cuda"
            and self.cuda_integer
            and x.numel() // self.in_features >= CUDA_INT_MM_MIN_ROWS
        )

    def _integer_forward(self, x: torch.Tensor) -> torch.Tensor:
        spec = self.spec
        rows = x.reshape(-1, self.in_features)
        if spec.act_granularity == "per-tensor-static":
            scale, zero = self.act_scale, self.act_zero
        else:
            scale, zero = qz.per_token_params(rows, spec.abits, spec.act_clip)
        codes = qz.quantize_asym(rows, scale, zero, spec.abits)
        kernel = self.kernel if x.device.type == "cpu" else "onednn"  # CUDA: torch._int_mm
        sums = kernels.integer_sums(
            kernel, codes, self.weight_int8, self.weight_rowsum, zero, spec.abits
        )
        y = sums.to(x.dtype) * (scale * self.w_scale.reshape(1, -1))
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        s = self.spec
        parts = [f"in={s.in_features}", f"out={s.out_features}", f"w{s.wbits}a{s.abits}"]
        if s.group_size:
            parts.append(f"{'progressive ' if s.progressive else ''}group={s.group_size}")
        if s.int8:
            parts.append("int8")
        if s.smooth:
            parts.append("smooth")
        if s.block:
            parts.append(f"rot{s.block}" + ("+perm" if s.permutation else ""))
        return ", ".join(parts)

    # ---- eager, explicit filling (calibration / loading) ----

    @torch.no_grad()
    def load_from_float(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        transform: Transform,
        calib_x: torch.Tensor | None,
        clip: str | float,
        act_range: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> None:
        """Fold `transform` into the weight, quantize it and fill every buffer (float64 math)."""
        spec = self.spec
        w = transform.weight(weight.to(torch.float64))
        x_t = transform.activations(calib_x.to(torch.float64)) if calib_x is not None else None
        if spec.wbits == 16:
            self.weight.copy_(w.to(torch.float32))
        else:
            if clip == "search":
                if x_t is None:
                    raise ValueError("weight_clip='search' needs calibration activations")
                ratio = qz.search_weight_clip(
                    w,
                    x_t,
                    spec.wbits,
                    spec.group_size,
                    progressive=spec.progressive,
                    int8=spec.int8,
                )
            else:
                ratio = float(clip)
            if spec.int8:
                q, scale = qz.int8_quantize(w, ratio)
                self.w_scale.copy_(scale.to(torch.float32))
            elif spec.progressive:
                assert spec.group_size is not None  # progressive weights: checked by __init__
                q, s1, s2, zero = qz.progressive_quantize(w, spec.group_size, ratio)
                self.w_scale.copy_(s1.to(torch.float32))
                self.w_gscale.copy_(s2)
                self.w_gzero.copy_(zero)
            else:
                q, scale, zero = qz.quantize_weight(w, spec.wbits, spec.group_size, ratio)
                self.w_scale.copy_(scale.to(torch.float32))
                self.w_zero.copy_(zero.to(torch.float32))
            self.qweight.copy_(qz.pack_int4(q) if spec.packed else q)
        # the parts the spec names are there (`transform` was made for it: `method/convert.py`)
        if bias is not None:
            assert self.bias is not None
            self.bias.copy_(bias.to(torch.float32))
        if spec.smooth:
            assert transform.smooth is not None
            self.inv_smooth.copy_((1.0 / transform.smooth).to(torch.float32))
        if spec.block is not None:
            t = transform
            assert t.rot1 is not None and t.rot2 is not None
            assert t.steps1 is not None and t.steps2 is not None
            self.rot1.copy_(t.rot1.to(torch.float32))
            self.rot2.copy_(t.rot2.to(torch.float32))
            self.steps1.copy_(t.steps1.to(torch.int16))
            self.steps2.copy_(t.steps2.to(torch.int16))
            if spec.permutation:
                assert t.perm is not None
                self.perm.copy_(t.perm)
        if spec.abits < 16 and spec.act_granularity == "per-tensor-static":
            assert act_range is not None  # static activation scales are calibrated
            lo, hi = act_range
            scale, zero = qz.asym_params(lo * spec.act_clip, hi * spec.act_clip, spec.abits)
            self.act_scale.copy_(scale.reshape(1).to(torch.float32))
            self.act_zero.copy_(zero.reshape(1).to(torch.float32))
        self.refresh_derived()
