"""PIL-exact resampling, the pure core under both preprocessing engines: the taps of PIL's
antialiased bilinear filter computed on the host, the geometry of each `fit` mode, the bucket
ladders that bound the compiled shapes, and the two device passes that apply the taps.

How it stays exact and compiles a bounded number of times:

* The resampling taps are computed on the host exactly as PIL's `precompute_coeffs` does
  (antialiased triangle filter whose support grows with the downscale factor, PIL's 22-bit
  fixed-point coefficients) and passed to the device as *data*: per output row/column a run of
  source indices and weights. The device gathers and sums them in int32, one pass per axis in
  PIL's order, rounding the intermediate image to uint8 as PIL does. The resized pixels are
  therefore PIL's bit for bit (normalization adds only float rounding), for down- and upscaling
  and any box (center crop, letterbox).
* Images are padded into a small fixed ladder of bucket shapes; the taps never read the padding.
  A pair of compiled programs (one per pass) exists per (batch, bucket height, bucket width, taps
  per row, taps per column, pass order), each from a fixed ladder, so the count is bounded whatever the input sizes are.

`fit` modes: "stretch" resizes the whole image to the target; "center-crop" keeps the aspect ratio
and crops the centre (the largest centred box of the target's aspect ratio, resampled with PIL's
`box`); "letterbox" keeps all content, scaled to fit, centred, and pads the rest with 0 after
normalization, i.e. the mean colour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np

from accelkit.errors import ConfigError

Fit = Literal["stretch", "center-crop", "letterbox"]
FITS = ("stretch", "center-crop", "letterbox")
# Bucket sides: an image is zero-padded up to the next one. Ratios <= 1.5 keep padding waste small.
BUCKET_SIDES = (32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
# Taps per output pixel, padded up to one of these. Steps <= 1.5x: the passes cost time in proportion.
TAP_BUCKETS = (2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
_PRECISION_BITS = 32 - 8 - 2  # PIL's Resample.c fixed-point precision for 8-bit images


# --------------------------------------------------------------------------- pure host-side core


def pil_taps(
    in_size: int, out_size: int, box0: float, box1: float
) -> tuple[np.ndarray, np.ndarray]:
    """PIL's bilinear resampling taps for one axis: (first source index [out], weights [out, K]).

    A transcription of `precompute_coeffs` in Pillow's Resample.c, vectorized over outputs. The
    weights are PIL's 22-bit fixed-point integers (weight × 2**22, rounded): the device sums
    `pixel × weight` in int32 exactly as PIL's 8-bit path does, so the results are bit-exact.
    """
    scale = (box1 - box0) / out_size
    filterscale = max(scale, 1.0)
    support = 1.0 * filterscale  # the bilinear (triangle) filter has support 1
    ksize = math.ceil(support) * 2 + 1
    center = box0 + (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    xmin = np.trunc(center - support + 0.5).astype(np.int64)  # C casts truncate toward zero
    xmin = np.maximum(xmin, 0)
    xmax = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), in_size) - xmin
    taps = np.arange(ksize)
    x = (taps[None, :] + xmin[:, None] - center[:, None] + 0.5) / filterscale
    weights = np.clip(1.0 - np.abs(x), 0.0, None)
    weights[taps[None, :] >= xmax[:, None]] = 0.0
    total = weights.sum(axis=1, keepdims=True)
    weights = np.divide(weights, total, out=np.zeros_like(weights), where=total != 0)
    fixed = np.where(
        weights < 0,
        np.trunc(weights * (1 << _PRECISION_BITS) - 0.5),
        np.trunc(weights * (1 << _PRECISION_BITS) + 0.5),
    )
    return xmin, fixed.astype(np.int32)


def bucket_side(n: int) -> int:
    for side in BUCKET_SIDES:
        if n <= side:
            return side
    raise ValueError(f"side {n} exceeds the largest bucket {BUCKET_SIDES[-1]}")


def tap_bucket(k: int) -> int:
    for size in TAP_BUCKETS:
        if k <= size:
            return size
    raise ValueError(f"{k} taps exceed the largest tap bucket {TAP_BUCKETS[-1]}")


def pil_vertical_first(in_h: int, in_w: int, out_h: int, out_w: int) -> bool:
    """Pillow's pass order (Resample.c, `ImagingResampleInner`): the vertical pass runs first when
    the height shrinks by more than twice as many pixels as the width. The order matters because
    each pass rounds to uint8."""
    return (in_h - out_h) > 0 and (in_h - out_h) > (in_w - out_w) * 2


@dataclass(frozen=True)
class AxisPlan:
    """Where one output axis reads from: `index` [out, K] source indices, `weight` [out, K],
    `valid` [out] (False on letterbox padding)."""

    index: np.ndarray
    weight: np.ndarray
    valid: np.ndarray


def _axis_plan(
    in_size: int, out_size: int, box0: float, box1: float, content: int, offset: int
) -> AxisPlan:
    """Taps for an output axis of `out_size` whose [offset, offset+content) part shows the source
    box [box0, box1) resampled to `content` pixels; the rest is padding."""
    start, weights = pil_taps(in_size, content, box0, box1)
    # PIL's kernel size over-counts the taps any output uses by up to two; drop the all-zero tail.
    used = np.flatnonzero(weights.any(axis=0))
    weights = weights[:, : used[-1] + 1 if used.size else 1]
    k = weights.shape[1]
    index = np.zeros((out_size, k), np.int32)
    weight = np.zeros((out_size, k), np.int32)
    valid = np.zeros(out_size, bool)
    idx = np.minimum(start[:, None] + np.arange(k)[None, :], in_size - 1)
    index[offset : offset + content] = idx
    weight[offset : offset + content] = weights
    valid[offset : offset + content] = True
    return AxisPlan(index, weight, valid)


def fit_geometry(height: int, width: int, out_h: int, out_w: int, fit: str):
    """For an H×W source: per axis (box0, box1, content, offset) as `_axis_plan` takes them.

    Also the PIL calls that reproduce it, documented in `pil_reference`.
    """
    if fit == "stretch":
        return (0.0, float(height), out_h, 0), (0.0, float(width), out_w, 0)
    if fit == "center-crop":
        # The side that binds is kept whole, exactly: dividing by a float scale once gave a
        # 214-row crop of 214.00000000000003 rows, a box starting at -1e-14, which PIL refuses.
        if out_h * width >= out_w * height:
            crop_h, crop_w = float(height), out_w * height / out_h
        else:
            crop_h, crop_w = out_h * width / out_w, float(width)
        top, left = max(0.0, (height - crop_h) / 2.0), max(0.0, (width - crop_w) / 2.0)
        return (top, top + crop_h, out_h, 0), (left, left + crop_w, out_w, 0)
    if fit == "letterbox":
        scale = min(out_h / height, out_w / width)
        content_h = min(out_h, max(1, round(height * scale)))
        content_w = min(out_w, max(1, round(width * scale)))
        return (
            (0.0, float(height), content_h, (out_h - content_h) // 2),
            (0.0, float(width), content_w, (out_w - content_w) // 2),
        )
    raise ConfigError(f"fit={fit!r} is not one of {', '.join(FITS)}")


def pil_reference(
    image: np.ndarray, size: tuple[int, int], fit: str
) -> tuple[np.ndarray, np.ndarray]:
    """What PIL produces for this fit mode: (uint8 H×W×3 image, bool H×W content mask).

    The independent reference the tests compare against: stretch is `resize(BILINEAR)`,
    center-crop is `resize(BILINEAR, box=centred box)`, letterbox is `resize` to the fitted size
    pasted at the centre of the canvas.
    """
    from PIL import Image

    out_h, out_w = size
    pil = Image.fromarray(image)
    (y0, y1, ch, oy), (x0, x1, cw, ox) = fit_geometry(
        image.shape[0], image.shape[1], out_h, out_w, fit
    )
    resized = np.asarray(pil.resize((cw, ch), Image.Resampling.BILINEAR, box=(x0, y0, x1, y1)))
    canvas = np.zeros((out_h, out_w, 3), np.uint8)
    mask = np.zeros((out_h, out_w), bool)
    canvas[oy : oy + ch, ox : ox + cw] = resized
    mask[oy : oy + ch, ox : ox + cw] = True
    return canvas, mask


@dataclass(frozen=True)
class ImagePlan:
    """One decoded image, the taps that resample it, and its bucket key."""

    pixels: np.ndarray
    rows: AxisPlan
    cols: AxisPlan
    vertical_first: bool

    @property
    def key(self) -> tuple[int, int, int, int, bool]:
        return (
            bucket_side(self.pixels.shape[0]),
            bucket_side(self.pixels.shape[1]),
            tap_bucket(self.rows.weight.shape[1]),
            tap_bucket(self.cols.weight.shape[1]),
            self.vertical_first,
        )


def host_reduce_factors(
    height: int, width: int, size: tuple[int, int], fit: str, reducing_gap: float | None
) -> tuple[int, int]:
    """Integer (y, x) factors to box-reduce a source by on the host before the device resize.

    Sides above the largest bucket are always reduced. With `reducing_gap` g, a side whose
    resampling scale (source box / output content) is s >= 2g is reduced by floor(s / g), as PIL's
    `resize(..., reducing_gap=g)` does: the device then works on at most ~(2g × target) pixels per
    side, which bounds its memory and time for huge photos.
    """
    (y0, y1, ch, _), (x0, x1, cw, _) = fit_geometry(height, width, size[0], size[1], fit)
    fy = math.ceil(height / BUCKET_SIDES[-1])
    fx = math.ceil(width / BUCKET_SIDES[-1])
    if reducing_gap:
        fy = max(fy, int((y1 - y0) / ch / reducing_gap))
        fx = max(fx, int((x1 - x0) / cw / reducing_gap))
    return max(1, fy), max(1, fx)


def host_reduce(pixels: np.ndarray, factors: tuple[int, int]) -> np.ndarray:
    if factors == (1, 1):
        return pixels
    from PIL import Image

    return np.asarray(Image.fromarray(pixels).reduce((factors[1], factors[0])))


def plan_image(
    pixels: np.ndarray, size: tuple[int, int], fit: str, reducing_gap: float | None = None
) -> ImagePlan:
    """Decide the taps for one decoded image; pure, host-side, cheap (a few small arrays)."""
    pixels = host_reduce(
        pixels, host_reduce_factors(pixels.shape[0], pixels.shape[1], size, fit, reducing_gap)
    )
    rows, cols, vertical_first = _geometry_taps(pixels.shape[0], pixels.shape[1], tuple(size), fit)
    return ImagePlan(pixels, rows, cols, vertical_first)


@lru_cache(maxsize=1024)
def _geometry_taps(
    height: int, width: int, size: tuple[int, int], fit: str
) -> tuple[AxisPlan, AxisPlan, bool]:
    """The taps depend only on the geometry; photos come in few sizes, so they are computed once
    per size (the arrays are shared and never written)."""
    (y0, y1, ch, oy), (x0, x1, cw, ox) = fit_geometry(height, width, size[0], size[1], fit)
    rows = _axis_plan(height, size[0], y0, y1, ch, oy)
    cols = _axis_plan(width, size[1], x0, x1, cw, ox)
    # Pad the tap count to its bucket with zero-weight taps (index 0 is always a valid row).
    rows = _pad_taps(rows, tap_bucket(rows.weight.shape[1]))
    cols = _pad_taps(cols, tap_bucket(cols.weight.shape[1]))
    for array in (*vars(rows).values(), *vars(cols).values()):
        array.flags.writeable = False
    return rows, cols, pil_vertical_first(height, width, ch, cw)


def _pad_taps(plan: AxisPlan, k: int) -> AxisPlan:
    extra = k - plan.weight.shape[1]
    if extra == 0:
        return plan
    return AxisPlan(
        np.pad(plan.index, ((0, 0), (0, extra))),
        np.pad(plan.weight, ((0, 0), (0, extra))),
        plan.valid,
    )


# --------------------------------------------------------------------------- device kernel


def resample_pass(pixels, index, weight, *, axis: int):
    """One PIL resampling pass over a batch: pixels [B, H, W, 3] uint8 -> uint8, along `axis`
    (1: rows, the vertical pass; 2: columns, the horizontal pass), with taps `index`/`weight`
    [B, out, K].

    PIL's 8-bit arithmetic: int32 sums of pixel × fixed-point weight, rounded half up by adding
    2**21 and shifting by 22, clipped to uint8 (PIL rounds its intermediate image the same way).
    """
    import jax
    import jax.numpy as jnp

    half = jnp.int32(1 << (_PRECISION_BITS - 1))

    def one(image, index, weight):
        out, k = index.shape
        taken = jnp.take(image, index.reshape(-1), axis=axis - 1).astype(jnp.int32)
        if axis == 1:
            total = jnp.sum(
                taken.reshape(out, k, *image.shape[1:]) * weight[:, :, None, None], axis=1
            )
        else:
            total = jnp.sum(
                taken.reshape(image.shape[0], out, k, 3) * weight[None, :, :, None], axis=2
            )
        return jnp.clip((total + half) >> _PRECISION_BITS, 0, 255).astype(jnp.uint8)

    return jax.vmap(one)(pixels, index, weight)


def normalize(resized, row_valid, col_valid, mean, std, *, channels_first: bool, dtype):
    """uint8 [B, H, W, 3] -> (x / 255 - mean) / std, 0 outside the content (letterbox padding)."""
    import jax.numpy as jnp

    normalized = (resized.astype(jnp.float32) * (1.0 / 255.0) - mean) / std
    inside = row_valid[:, :, None, None] & col_valid[:, None, :, None]
    out = jnp.where(inside, normalized, 0.0)
    if channels_first:
        out = jnp.transpose(out, (0, 3, 1, 2))
    return out.astype(dtype)
