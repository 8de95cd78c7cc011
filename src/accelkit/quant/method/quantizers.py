"""Pure quantizers: asymmetric integer grids for weights and activations, and int4 packing.

Every function here is a pure function of its tensor arguments (no module state), so the same code
serves calibration in float64 and the compiled forward in float32. Asymmetric means a scale and an
integer zero point per row (or group, or token): q = clamp(round(x / scale) + zero, 0, 2^bits - 1),
x ≈ (q - zero) * scale.
"""

from __future__ import annotations

import torch

from accelkit.errors import ConfigError

SCALE_FLOOR = (
    1e-8  # a constant row or token has range 0; keep the scale positive so x / scale is finite
)


def asym_params(lo: torch.Tensor, hi: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and integer zero point that map [lo, hi] (widened to include 0) onto 0..2^bits-1."""
    qmax = 2**bits - 1
    lo = torch.clamp(lo, max=0.0)
    hi = torch.clamp(hi, min=0.0)
    scale = torch.clamp((hi - lo) / qmax, min=SCALE_FLOOR)
    zero = torch.clamp(torch.round(-lo / scale), 0, qmax)
    return scale, zero


def quantize_asym(
    x: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int
) -> torch.Tensor:
    """Integer codes (in x's float dtype) of x on the grid (scale, zero)."""
    return torch.clamp(torch.round(x / scale) + zero, 0, 2**bits - 1)


def dequantize_asym(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    return (q - zero) * scale


# ---- weights: per output channel, optionally per group of input channels ----


def _grouped(w: torch.Tensor, group_size: int | None) -> torch.Tensor:
    """(m, n) -> (m, groups, group_size); no groups means one group spanning the row."""
    m, n = w.shape
    g = n if group_size is None else group_size
    if n % g:
        raise ConfigError(
            f"weight_group_size={group_size} does not divide the input width {n}; pick a divisor of {n}"
        )
    return w.reshape(m, n // g, g)


def weight_quant_params(
    w: torch.Tensor, bits: int, group_size: int | None, clip: torch.Tensor | float = 1.0
):
    """Scale and zero of shape (m, groups) for weight w (m, n); clip (scalar or per row) shrinks the range."""
    wg = _grouped(w, group_size)
    clip_t = (
        torch.as_tensor(clip, dtype=w.dtype).reshape(-1, 1) if torch.as_tensor(clip).ndim else clip
    )
    lo = wg.amin(dim=-1) * clip_t
    hi = wg.amax(dim=-1) * clip_t
    return asym_params(lo, hi, bits)


def quantize_weight(
    w: torch.Tensor, bits: int, group_size: int | None, clip: torch.Tensor | float = 1.0
):
    """Codes (m, n) uint8 and scale, zero (m, groups) in w's dtype."""
    scale, zero = weight_quant_params(w, bits, group_size, clip)
    q = quantize_asym(_grouped(w, group_size), scale[..., None], zero[..., None], bits)
    return q.reshape(w.shape).to(torch.uint8), scale, zero


def dequantize_weight(q: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    """Float weight (m, n) from codes (m, n) and scale/zero (m, groups); pure, compile-friendly."""
    m, n = q.shape
    groups = scale.shape[-1]
    qg = q.reshape(m, groups, n // groups).to(scale.dtype)
    return ((qg - zero[..., None]) * scale[..., None]).reshape(m, n)


def fake_quant_weight(
    w: torch.Tensor, bits: int, group_size: int | None, clip: torch.Tensor | float = 1.0
) -> torch.Tensor:
    q, scale, zero = quantize_weight(w, bits, group_size, clip)
    return dequantize_weight(q, scale, zero)


CLIP_SEARCH_ELEMENTS = 1 << 23  # weight copies (rows × width × ratios) quantized in one batch


def search_weight_clip(
    w: torch.Tensor,
    x: torch.Tensor,
    bits: int,
    group_size: int | None,
    grid: tuple[float, ...] = tuple(1.0 - 0.05 * i for i in range(11)),
    progressive: bool = False,
    int8: bool = False,
) -> torch.Tensor:
    """Per output channel clip ratio minimizing the output error ||x (w_i - ŵ_i)ᵀ||² on calibration rows x.

    Each output channel's error depends only on its own row, so the search is exact per row: with
    H = xᵀx the error of row i is e_i H e_iᵀ (e = w - ŵ), evaluated for every ratio on the grid
    (the first of equal errors wins). Every quantizer here is row-wise with a per-row clip, so the
    grid's ratios run as one batch of stacked row copies (a few thousand large tensor operations
    per model instead of one pass per ratio of small ones), `CLIP_SEARCH_ELEMENTS` at a time.
    `progressive`: ŵ is the two-level weight of `progressive_quantize` (the clip is level 1's);
    `int8`: ŵ is the symmetric int8 weight of `int8_quantize`.
    """
    if progressive and group_size is None:
        raise ValueError("progressive weights come in groups: give group_size")
    m, n = w.shape
    # e H eᵀ = ||x eᵀ||²: through x when it has fewer rows than w has columns (fewer products)
    thin = x.shape[0] < n
    h = x.T if thin else x.T @ x
    ratios = torch.tensor(grid, dtype=w.dtype)
    rows = max(1, CLIP_SEARCH_ELEMENTS // (n * len(grid)))
    best = torch.empty(m, dtype=w.dtype)
    for start in range(0, m, rows):
        part = w[start : start + rows]
        copies = part.repeat(len(grid), 1)  # ratio-major: copy j holds every row at grid[j]
        clip = ratios.repeat_interleave(part.shape[0])
        if progressive:
            assert group_size is not None
            e = copies - progressive_dequantize(*progressive_quantize(copies, group_size, clip))
        elif int8:
            q, scale = int8_quantize(copies, clip)
            e = copies - q.to(w.dtype) * scale
        else:
            e = copies - fake_quant_weight(copies, bits, group_size, clip)
        err = ((e @ h) ** 2 if thin else (e @ h) * e).sum(dim=1).reshape(len(grid), part.shape[0])
        best[start : start + rows] = ratios[err.argmin(dim=0)]
    return best


# ---- progressive groups (QServe's W4A8): int4 groups with integer scales over per-channel int8 ----

PROGRESSIVE_INT8_MAX = 119  # level 1's protective range: level 2 then rebuilds values within ±127


def progressive_quantize(w: torch.Tensor, group_size: int, clip: torch.Tensor | float = 1.0):
    """QServe's progressive two-level weights for w (m, n), computed in w's float dtype.

    Level 1, per output channel, symmetric int8 on the protective range ±119:
    s₁ = clip · max|wᵢ| / 119, w₈ = clamp(round(w / s₁), −119, 119).
    Level 2, per group of `group_size` int8 values, asymmetric uint4 with an integer scale s₂ and
    an integer zero point z ∈ 0..15: q = clamp(round(w₈ / s₂) + z, 0, 15). Integer scales are
    coarse where a group's range is small (a range of 20 gives s₂ = 2 where 1.33 would do), so each
    group takes the (s₂, z) with the least squared error among s₂ ∈ {s − 1, s, s + 1} ∩ 1..16
    (s = ⌈(hi − lo) / 15⌉, [lo, hi] the group's range widened to include 0) and z ∈ round(−lo / s₂)
    ± 1: on MiniLM this closes most of the gap to float group scales.
    The rebuilt values (q − z)·s₂ are integers with |·| ≤ |w₈| + s₂/2 ≤ 119 + 8 = 127 (clamping q
    only moves a value toward 0): exact int8, so one int8 GEMM with the per-channel s₁ runs the
    layer. Returns codes q (m, n) uint8, s₁ (m, 1) in w's dtype, s₂ and z (m, groups) uint8.
    """
    m, n = w.shape
    clip_t = (
        torch.as_tensor(clip, dtype=w.dtype).reshape(-1, 1) if torch.as_tensor(clip).ndim else clip
    )
    top = PROGRESSIVE_INT8_MAX
    s1 = torch.clamp(w.abs().amax(dim=1, keepdim=True) * clip_t / top, min=SCALE_FLOOR)
    # level 2 works on integers: w₈ (|·| ≤ 119), s₂ (1..16), z (0..15), and squared errors summed
    # over a group (< 2^24) are all exact in float32, and w₈ / s₂ is at least 1/32 from a rounding
    # tie, so float32 gives the float64 codes bit for bit, at half the memory traffic
    w8 = _grouped(torch.clamp(torch.round(w / s1), -top, top), group_size).to(torch.float32)
    lo = torch.clamp(w8.amin(dim=-1), max=0.0)
    hi = torch.clamp(w8.amax(dim=-1), min=0.0)
    base = torch.ceil((hi - lo) / 15)
    best_err = torch.full_like(lo, float("inf"))
    s2 = torch.ones_like(lo)
    zero = torch.zeros_like(lo)
    for step in (-1.0, 0.0, 1.0):
        scale = torch.clamp(base + step, 1.0, 16.0)
        rounded = torch.round(w8 / scale[..., None])  # the same for every zero point
        centre = torch.round(-lo / scale)
        for shift in (-1.0, 0.0, 1.0):
            z = torch.clamp(centre + shift, 0, 15)
            q = torch.clamp(rounded + z[..., None], 0, 15)
            err = (((q - z[..., None]) * scale[..., None] - w8) ** 2).sum(dim=-1)
            better = err < best_err
            best_err = torch.where(better, err, best_err)
            s2 = torch.where(better, scale, s2)
            zero = torch.where(better, z, zero)
    q = torch.clamp(torch.round(w8 / s2[..., None]) + zero[..., None], 0, 15)
    return q.reshape(m, n).to(torch.uint8), s1, s2.to(torch.uint8), zero.to(torch.uint8)


def progressive_int8(codes: torch.Tensor, s2: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    """Level 1's int8 weights (m, n) rebuilt from level 2: (q − z)·s₂, exactly (int16 math)."""
    m, n = codes.shape
    groups = s2.shape[-1]
    q = codes.reshape(m, groups, n // groups).to(torch.int16)
    w8 = (q - zero.to(torch.int16)[..., None]) * s2.to(torch.int16)[..., None]
    return w8.reshape(m, n).to(torch.int8)


def progressive_dequantize(
    codes: torch.Tensor, s1: torch.Tensor, s2: torch.Tensor, zero: torch.Tensor
) -> torch.Tensor:
    """The float weight s₁ · (q − z)·s₂ (pure: the compiled float path and the clip search)."""
    return progressive_int8(codes, s2, zero).to(s1.dtype) * s1


# ---- symmetric int8 per output channel: 8-bit weights that run as they are on the int8 GEMM ----


def int8_quantize(w: torch.Tensor, clip: torch.Tensor | float = 1.0):
    """Symmetric int8 weights per output channel: s = clip · max|wᵢ| / 127,
    q = clamp(round(w / s), −127, 127). Returns q (m, n) int8 and s (m, 1) in w's dtype."""
    clip_t = (
        torch.as_tensor(clip, dtype=w.dtype).reshape(-1, 1) if torch.as_tensor(clip).ndim else clip
    )
    scale = torch.clamp(w.abs().amax(dim=1, keepdim=True) * clip_t / 127, min=SCALE_FLOOR)
    return torch.clamp(torch.round(w / scale), -127, 127).to(torch.int8), scale


# ---- activations ----


def per_token_params(x: torch.Tensor, bits: int, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and zero per token (over the last dim, kept as a size-1 dim) of the clipped range."""
    return asym_params(
        x.amin(dim=-1, keepdim=True) * clip, x.amax(dim=-1, keepdim=True) * clip, bits
    )


def fake_quant_per_token(x: torch.Tensor, bits: int, clip: float) -> torch.Tensor:
    """Per-token dynamic asymmetric fake quantization over the last dim; no state, compile-pure."""
    scale, zero = per_token_params(x, bits, clip)
    return dequantize_asym(quantize_asym(x, scale, zero, bits), scale, zero)


def int8_weight(codes: torch.Tensor, zero: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """b = codes − zero as int8 (exact while wbits ≤ 7; zero is (out, 1)) and its row sums in int32."""
    b = (codes.to(torch.int16) - zero.to(torch.int16)).to(torch.int8)
    return b, b.sum(dim=1, dtype=torch.int32)


def fake_quant_static(
    x: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, bits: int
) -> torch.Tensor:
    """Per-tensor static fake quantization with calibrated (scale, zero) buffers."""
    return dequantize_asym(quantize_asym(x, scale, zero, bits), scale, zero)


# ---- int4 packing: two codes per byte, low nibble first ----


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """uint8 codes in 0..15 with an even last dim -> uint8 with half the last dim."""
    if q.dtype != torch.uint8:
        raise TypeError(f"pack_int4 expects uint8 codes, got {q.dtype}")
    if q.shape[-1] % 2:
        raise ValueError(f"pack_int4 needs an even last dimension, got {q.shape[-1]}")
    if q.numel() and int(q.max()) > 15:
        raise ValueError("pack_int4 got a code above 15")
    return q[..., 0::2] | (q[..., 1::2] << 4)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of pack_int4; pure tensor ops so it fuses into the compiled forward."""
    low = packed & 0x0F
    high = packed >> 4
    return torch.stack((low, high), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)
