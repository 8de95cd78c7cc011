"""PIL-exact resampling, the pure core under both preprocessing engines: the taps of PIL's
antialiased bilinear or bicubic filter computed on the host, the geometry of each `fit` mode,
the bucket ladders that bound the compiled shapes, and the two device passes that apply the taps.

How it stays exact and compiles a bounded number of times:

* The resampling taps are computed on the host exactly as PIL's `precompute_coeffs` does
  (antialiased filter whose support grows with the downscale factor: the triangle for
  "bilinear", support 1, or Keys' cubic with a = -0.5 for "bicubic", support 2; PIL's 22-bit
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
`box`); "shortest-edge-crop" is CLIP's processor (transformers' `CLIPImageProcessor`): the short
side resized to the target's longer side S, the long side to int(S × long / short), then the
centre target cut out in whole pixels from offset (resized − target) // 2; "letterbox" keeps all
content, scaled to fit, centred, and pads the rest with 0 after normalization, i.e. the mean
colour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, NamedTuple

import numpy as np

from accelkit.errors import ConfigError

Fit = Literal["stretch", "center-crop", "shortest-edge-crop", "letterbox"]
FITS = ("stretch", "center-crop", "shortest-edge-crop", "letterbox")
Resample = Literal["bilinear", "bicubic"]
RESAMPLES = ("bilinear", "bicubic")
# Bucket sides: an image is zero-padded up to the next one. Ratios <= 1.5 keep padding waste small.
BUCKET_SIDES = (32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192)
# Taps per output pixel, padded up to one of these. Steps <= 1.5x: the passes cost time in proportion.
TAP_BUCKETS = (2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
_PRECISION_BITS = 32 - 8 - 2  # PIL's Resample.c fixed-point precision for 8-bit images


# --------------------------------------------------------------------------- pure host-side core


def pil_taps(
    in_size: int, out_size: int, box0: float, box1: float, resample: str = "bilinear"
) -> tuple[np.ndarray, np.ndarray]:
    """PIL's resampling taps for one axis: (first source index [out], weights [out, K]).

    A transcription of `precompute_coeffs` in Pillow's Resample.c, vectorized over outputs. The
    weights are PIL's 22-bit fixed-point integers (weight × 2**22, rounded): the device sums
    `pixel × weight` in int32 exactly as PIL's 8-bit path does, so the results are bit-exact.
    """
    if resample == "bicubic":
        # PIL takes the box as C floats and subtracts them in float: a fractional box (a
        # center-crop's) is rounded to float32 first, or a level in some pixels differs.
        in0, in1 = np.float32(box0), np.float32(box1)
        box0, scale = float(in0), float(in1 - in0) / out_size
    else:  # the bilinear arithmetic as first shipped: its vectors stay bit-identical
        scale = (box1 - box0) / out_size
    filterscale = max(scale, 1.0)
    support = (2.0 if resample == "bicubic" else 1.0) * filterscale
    ksize = math.ceil(support) * 2 + 1
    center = box0 + (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    xmin = np.trunc(center - support + 0.5).astype(np.int64)  # C casts truncate toward zero
    xmin = np.maximum(xmin, 0)
    xmax = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), in_size) - xmin
    taps = np.arange(ksize)
    if resample == "bicubic":
        weights, total = _bicubic_weights(taps, xmin, xmax, center, filterscale)
    else:
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


def _bicubic_weights(taps, xmin, xmax, center, filterscale):
    """PIL's `bicubic_filter` (a = -0.5) at each tap, in C's operation order (the argument times
    `ss = 1 / filterscale`, the total summed tap by tap), so that the float weights, and with
    them the rounded fixed-point ones, are PIL's to the last bit despite the negative lobes."""
    a = -0.5
    x = np.abs((taps[None, :] + xmin[:, None] - center[:, None] + 0.5) * (1.0 / filterscale))
    inner = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    outer = (((x - 5.0) * x + 8.0) * x - 4.0) * a
    weights = np.where(x < 1.0, inner, np.where(x < 2.0, outer, 0.0))
    weights[taps[None, :] >= xmax[:, None]] = 0.0
    total = np.zeros((weights.shape[0], 1))
    for k in range(weights.shape[1]):
        total[:, 0] += weights[:, k]
    return weights, total


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


class AxisGeometry(NamedTuple):
    """One output axis of a `fit` mode: the source box [box0, box1) is resized (PIL's `box`) to
    `resized` pixels, of which `content` from `skip` on are kept and placed at `offset`; the rest
    of the output axis is padding (letterbox)."""

    box0: float
    box1: float
    content: int
    offset: int
    resized: int
    skip: int = 0


def _axis_plan(
    in_size: int, out_size: int, geometry: AxisGeometry, resample: str = "bilinear"
) -> AxisPlan:
    """Taps for an output axis of `out_size` laid out as `geometry` says."""
    box0, box1, content, offset, resized, skip = geometry
    start, weights = pil_taps(in_size, resized, box0, box1, resample)
    start, weights = start[skip : skip + content], weights[skip : skip + content]
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


def fit_geometry(
    height: int, width: int, out_h: int, out_w: int, fit: str
) -> tuple[AxisGeometry, AxisGeometry]:
    """For an H×W source: the rows' and the columns' `AxisGeometry`.

    Also the PIL calls that reproduce it, documented in `pil_reference`.
    """
    if fit == "stretch":
        return AxisGeometry(0.0, float(height), out_h, 0, out_h), AxisGeometry(
            0.0, float(width), out_w, 0, out_w
        )
    if fit == "center-crop":
        # The side that binds is kept whole, exactly: dividing by a float scale once gave a
        # 214-row crop of 214.00000000000003 rows, a box starting at -1e-14, which PIL refuses.
        if out_h * width >= out_w * height:
            crop_h, crop_w = float(height), out_w * height / out_h
        else:
            crop_h, crop_w = out_h * width / out_w, float(width)
        top, left = max(0.0, (height - crop_h) / 2.0), max(0.0, (width - crop_w) / 2.0)
        return AxisGeometry(top, top + crop_h, out_h, 0, out_h), AxisGeometry(
            left, left + crop_w, out_w, 0, out_w
        )
    if fit == "shortest-edge-crop":
        # transformers' get_resize_output_image_size(default_to_square=False) and center_crop
        edge = max(out_h, out_w)
        short, long = min(height, width), max(height, width)
        new_long = int(edge * long / short)
        resized_h, resized_w = (new_long, edge) if width <= height else (edge, new_long)
        return AxisGeometry(
            0.0, float(height), out_h, 0, resized_h, (resized_h - out_h) // 2
        ), AxisGeometry(0.0, float(width), out_w, 0, resized_w, (resized_w - out_w) // 2)
    if fit == "letterbox":
        scale = min(out_h / height, out_w / width)
        content_h = min(out_h, max(1, round(height * scale)))
        content_w = min(out_w, max(1, round(width * scale)))
        return AxisGeometry(
            0.0, float(height), content_h, (out_h - content_h) // 2, content_h
        ), AxisGeometry(0.0, float(width), content_w, (out_w - content_w) // 2, content_w)
    raise ConfigError(f"fit={fit!r} is not one of {', '.join(FITS)}")


def pil_reference(
    image: np.ndarray, size: tuple[int, int], fit: str, resample: str = "bilinear"
) -> tuple[np.ndarray, np.ndarray]:
    """What PIL produces for this fit mode: (uint8 H×W×3 image, bool H×W content mask).

    The reference the tests compare against: stretch is `resize(filter)`, center-crop is
    `resize(filter, box=centred box)`, shortest-edge-crop is `resize` to the short side's size
    then the centre cut out in whole pixels, letterbox is `resize` to the fitted size pasted at
    the centre of the canvas; `resample` names the filter (PIL's BILINEAR or BICUBIC).
    """
    from PIL import Image

    check_resample(resample)
    out_h, out_w = size
    pil = Image.fromarray(image)
    rows, cols = fit_geometry(image.shape[0], image.shape[1], out_h, out_w, fit)
    method = Image.Resampling.BICUBIC if resample == "bicubic" else Image.Resampling.BILINEAR
    box = (cols.box0, rows.box0, cols.box1, rows.box1)
    resized = np.asarray(pil.resize((cols.resized, rows.resized), method, box=box))
    ch, cw = rows.content, cols.content
    resized = resized[rows.skip : rows.skip + ch, cols.skip : cols.skip + cw]
    canvas = np.zeros((out_h, out_w, 3), np.uint8)
    mask = np.zeros((out_h, out_w), bool)
    canvas[rows.offset : rows.offset + ch, cols.offset : cols.offset + cw] = resized
    mask[rows.offset : rows.offset + ch, cols.offset : cols.offset + cw] = True
    return canvas, mask


def check_resample(resample: str) -> None:
    if resample not in RESAMPLES:
        raise ConfigError(f"resample={resample!r} must be one of {', '.join(RESAMPLES)}")


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
    rows, cols = fit_geometry(height, width, size[0], size[1], fit)
    fy = math.ceil(height / BUCKET_SIDES[-1])
    fx = math.ceil(width / BUCKET_SIDES[-1])
    if reducing_gap:
        fy = max(fy, int((rows.box1 - rows.box0) / rows.resized / reducing_gap))
        fx = max(fx, int((cols.box1 - cols.box0) / cols.resized / reducing_gap))
    return max(1, fy), max(1, fx)


def tap_limited_factors(
    height: int, width: int, size: tuple[int, int], fit: str, resample: str, factors
) -> tuple[int, int]:
    """`factors`, raised where a downscale would need more taps per output pixel than the largest
    tap bucket holds (without `reducing_gap`: a scale above ~127 bilinear, ~63 bicubic): the JAX
    engine box-reduces such a side first, as PIL's `reducing_gap` would, instead of failing it."""
    support = 2.0 if resample == "bicubic" else 1.0
    reach = (TAP_BUCKETS[-1] // 2 - 2) / support - 1  # a scale whose taps fit after a reduce
    out = list(factors)
    for axis, geometry in enumerate(fit_geometry(height, width, size[0], size[1], fit)):
        scale = (geometry.box1 - geometry.box0) / geometry.resized / out[axis]
        if math.ceil(support * scale) * 2 + 1 > TAP_BUCKETS[-1]:
            out[axis] = max(out[axis], math.ceil(scale * out[axis] / reach))
    return out[0], out[1]


def host_reduce(pixels: np.ndarray, factors: tuple[int, int]) -> np.ndarray:
    if factors == (1, 1):
        return pixels
    from PIL import Image

    return np.asarray(Image.fromarray(pixels).reduce((factors[1], factors[0])))


def plan_image(
    pixels: np.ndarray,
    size: tuple[int, int],
    fit: str,
    reducing_gap: float | None = None,
    resample: str = "bilinear",
) -> ImagePlan:
    """Decide the taps for one decoded image; pure, host-side, cheap (a few small arrays)."""
    height, width = pixels.shape[:2]
    factors = host_reduce_factors(height, width, size, fit, reducing_gap)
    factors = tap_limited_factors(height, width, size, fit, resample, factors)
    pixels = host_reduce(pixels, factors)
    rows, cols, vertical_first = _geometry_taps(
        pixels.shape[0], pixels.shape[1], tuple(size), fit, resample
    )
    return ImagePlan(pixels, rows, cols, vertical_first)


@lru_cache(maxsize=1024)
def _geometry_taps(
    height: int, width: int, size: tuple[int, int], fit: str, resample: str = "bilinear"
) -> tuple[AxisPlan, AxisPlan, bool]:
    """The taps depend only on the geometry and the filter; photos come in few sizes, so they are
    computed once per size (the arrays are shared and never written)."""
    row_geometry, col_geometry = fit_geometry(height, width, size[0], size[1], fit)
    rows = _axis_plan(height, size[0], row_geometry, resample)
    cols = _axis_plan(width, size[1], col_geometry, resample)
    # Pad the tap count to its bucket with zero-weight taps (index 0 is always a valid row).
    rows = _pad_taps(rows, tap_bucket(rows.weight.shape[1]))
    cols = _pad_taps(cols, tap_bucket(cols.weight.shape[1]))
    for array in (*vars(rows).values(), *vars(cols).values()):
        array.flags.writeable = False
    return rows, cols, pil_vertical_first(height, width, row_geometry.resized, col_geometry.resized)


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


def normalize_table(mean, std, dtype) -> np.ndarray:
    """[3, 256] table: channel c's value v as (v / 255 - mean[c]) / std[c], computed in float64
    and rounded once to float32 (then to `dtype`): the normalization of every uint8 pixel."""
    values = np.arange(256, dtype=np.float64)[None, :] / 255.0
    table = (values - np.asarray(mean, np.float64)[:, None]) / np.asarray(std, np.float64)[:, None]
    return table.astype(np.float32).astype(dtype, copy=False)


def lookup_normalize(
    pixels: np.ndarray, inside: np.ndarray, table: np.ndarray, data_format: str
) -> np.ndarray:
    """H×W×3 uint8 `pixels` normalized by `table` (`normalize_table`) into a new contiguous
    [3, H, W] (NCHW) or [H, W, 3] array, 0 outside the `inside` mask: one table lookup per value
    instead of float64 arithmetic on every pixel (the same numbers)."""
    height, width = pixels.shape[:2]
    out = np.empty((3, height, width), table.dtype)
    for channel in range(3):
        np.take(table[channel], pixels[:, :, channel], out=out[channel])
    if not inside.all():
        out[:, ~inside] = 0
    return out if data_format == "NCHW" else np.ascontiguousarray(out.transpose(1, 2, 0))
