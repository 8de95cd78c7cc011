"""Resize and normalize on the JAX device, matching PIL `Image.resize(BILINEAR)`.

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
  per row, taps per column, pass order), each from a fixed ladder, so the count is bounded whatever the input sizes are;
  `compile_count` reports it.
* Decoding runs in a thread pool; JAX dispatch is asynchronous, so the device resizes one bucket
  group while the threads decode the next images.

`fit` modes: "stretch" resizes the whole image to the target; "center-crop" keeps the aspect ratio
and crops the centre (the largest centred box of the target's aspect ratio, resampled with PIL's
`box`); "letterbox" keeps all content, scaled to fit, centred, and pads the rest with 0 after
normalization, i.e. the mean colour.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any, Literal

import numpy as np

from accelkit.errors import ConfigError
from accelkit.images.decode import DecodeOptions, ImageDecodeError, decode_image, describe_input

log = logging.getLogger(__name__)

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
        scale = max(out_h / height, out_w / width)
        crop_h, crop_w = out_h / scale, out_w / scale
        top, left = (height - crop_h) / 2.0, (width - crop_w) / 2.0
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


def _host_reduce(pixels: np.ndarray, factors: tuple[int, int]) -> np.ndarray:
    if factors == (1, 1):
        return pixels
    from PIL import Image

    return np.asarray(Image.fromarray(pixels).reduce((factors[1], factors[0])))


def plan_image(
    pixels: np.ndarray, size: tuple[int, int], fit: str, reducing_gap: float | None = None
) -> ImagePlan:
    """Decide the taps for one decoded image; pure, host-side, cheap (a few small arrays)."""
    pixels = _host_reduce(
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


def _batch_ladder(max_batch: int) -> tuple[int, ...]:
    sizes, b = [], 1
    while b < max_batch:
        sizes.append(b)
        b *= 2
    sizes.append(max_batch)
    return tuple(sizes)


@dataclass
class PreprocessResult:
    """Per-item outcome of `JAXImagePreprocessor.preprocess`: `array` holds the successful items
    in input order; `indices[i]` is the input position of `array[i]`; `failures` maps input
    positions to their error."""

    array: Any
    indices: list[int]
    failures: dict[int, ImageDecodeError]


class ImagePreprocessor:
    """What both engines share: the settings (checked here), the decode pool, the stream of
    bucket groups with per-item failures, and `preprocess_batch`. `JAXImagePreprocessor` resizes
    on a JAX device; `HostImagePreprocessor` with PIL in the decode threads. `make_preprocessor`
    picks one."""

    def __init__(
        self,
        image_size: int | tuple[int, int] = (224, 224),
        mean: Sequence[float] = (0.485, 0.456, 0.406),
        std: Sequence[float] = (0.229, 0.224, 0.225),
        data_format: Literal["NCHW", "NHWC"] = "NCHW",
        dtype: Literal["float32", "bfloat16"] = "float32",
        fit: Fit = "stretch",
        *,
        max_batch: int = 32,
        num_workers: int = 4,
        max_pixels: int | None = None,
        fast_jpeg_downscale: bool = True,
        reducing_gap: float | None = 3.0,
    ):
        size = (
            (image_size, image_size)
            if isinstance(image_size, int)
            else tuple(int(s) for s in image_size)
        )
        if len(size) != 2 or min(size) < 1 or max(size) > 4096:
            raise ConfigError(
                f"image_size={image_size!r} must be one or two positive sides up to 4096"
            )
        if data_format not in ("NCHW", "NHWC"):
            raise ConfigError(f"data_format={data_format!r} must be NCHW or NHWC")
        if dtype not in ("float32", "bfloat16"):
            raise ConfigError(f"dtype={dtype!r} must be float32 or bfloat16")
        if fit not in FITS:
            raise ConfigError(f"fit={fit!r} must be one of {', '.join(FITS)}")
        if len(mean) != 3 or len(std) != 3 or any(s <= 0 for s in std):
            raise ConfigError(
                "mean and std need three values each (R, G, B) and std must be positive"
            )
        if max_batch < 1 or num_workers < 1:
            raise ConfigError("max_batch and num_workers must be at least 1")
        self.image_size = size
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        self.data_format = data_format
        self.dtype = dtype
        self.fit = fit
        if reducing_gap is not None and reducing_gap < 1:
            raise ConfigError(
                f"reducing_gap={reducing_gap!r} must be at least 1 (or None for no host reduction)"
            )
        self.reducing_gap = reducing_gap
        self.max_batch = int(max_batch)
        self.batch_sizes = _batch_ladder(self.max_batch)
        self.decode_options = DecodeOptions(
            max_pixels=max_pixels or DecodeOptions().max_pixels,
            # Reduced-size JPEG decoding only helps modes that read the whole image downscaled.
            min_size=size if fast_jpeg_downscale else None,
        )
        self._executor = ThreadPoolExecutor(
            max_workers=int(num_workers), thread_name_prefix="accelkit-decode"
        )
        self._lock = threading.Lock()
        self._compiled: set[tuple] = set()
        self._out_dtype = "bfloat16" if dtype == "bfloat16" else "float32"

    @property
    def compile_count(self) -> int:
        """How many distinct shapes were compiled in this process (bounded by the bucket ladders)."""
        return len(self._compiled)

    @property
    def compiled_shapes(self) -> list[tuple]:
        """(batch, bucket height, bucket width, row taps, column taps, vertical first) of every
        compiled shape."""
        return sorted(self._compiled)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _decode_and_plan(self, item: Any):
        pixels = decode_image(item, self.decode_options)
        return plan_image(pixels, self.image_size, self.fit, self.reducing_gap)

    def _run_group(self, plans: list) -> Any:
        raise NotImplementedError

    def group_limit(self, key: tuple) -> int:
        """Images per dispatch for a bucket: large buckets get smaller batches, which bounds the
        device memory (~2**24 source pixels per batch) whatever the photos' sizes."""
        limit = max(1, (1 << 24) // (key[0] * key[1]))
        return (
            max(b for b in self.batch_sizes if b <= limit)
            if limit < self.max_batch
            else self.max_batch
        )

    def iter_groups(
        self,
        inputs: Iterable[Any],
        failures: dict[int, ImageDecodeError],
        prefetch: int | None = None,
    ) -> Iterator[tuple[list[int], Any]]:
        """Stream over `inputs`: yields (input positions, device array) per dispatched bucket
        group; the array may have padding rows beyond `len(positions)`. Decoding runs `prefetch`
        items ahead in the thread pool while the device works on earlier groups. Bad items are
        recorded in `failures` (input position -> `ImageDecodeError`) and skipped."""
        prefetch = prefetch or max(2 * self.max_batch, 8)
        pending: list[tuple[int, Future, Any]] = []
        groups: dict[tuple, list[tuple[int, ImagePlan]]] = {}
        iterator = iter(enumerate(inputs))
        exhausted = False

        def fill():
            nonlocal exhausted
            while not exhausted and len(pending) < prefetch:
                try:
                    index, item = next(iterator)
                except StopIteration:
                    exhausted = True
                    return
                pending.append((index, self._executor.submit(self._decode_and_plan, item), item))

        fill()
        while pending:
            index, future, item = pending.pop(0)
            fill()
            try:
                plan = future.result()
            except ImageDecodeError as exc:
                failures[index] = exc
                continue
            except Exception as exc:  # an unexpected decoder failure still fails only this item
                failures[index] = ImageDecodeError(
                    f"{describe_input(item)}: {type(exc).__name__}: {exc}"
                )
                continue
            group = groups.setdefault(plan.key, [])
            group.append((index, plan))
            if len(group) >= self.group_limit(plan.key):
                del groups[plan.key]
                yield [i for i, _ in group], self._run_group([p for _, p in group])
        for group in groups.values():
            yield [i for i, _ in group], self._run_group([p for _, p in group])

    def preprocess_batch(self, inputs: Sequence[Any] | Any) -> Any:
        """All inputs -> one array on `.device`; any bad item raises `ImageDecodeError` naming it."""
        if not isinstance(inputs, (list, tuple)):
            inputs = [inputs]
        result = self.preprocess(inputs)
        if result.failures:
            first = min(result.failures)
            more = len(result.failures) - 1
            message = str(result.failures[first]) + (
                f" (and {more} more bad inputs)" if more else ""
            )
            raise ImageDecodeError(message)
        return result.array


class JAXImagePreprocessor(ImagePreprocessor):
    """Decode, resize (PIL-exact antialiased bilinear) and normalize images on a JAX device.

    `preprocess_batch(inputs)` takes paths, bytes, PIL images and H×W×C uint8 arrays, mixed, and
    returns a `jax.Array` [N, 3, H, W] (NCHW) or [N, H, W, 3] (NHWC) on `.device`.

    Platform: `platform` ("cpu", "gpu", "tpu") > environment (`ACCELKIT_PLATFORM`, `JAX_PLATFORM`,
    `JAX_USE_GPU`, `JAX_PLATFORMS`) > auto; EmbeddingTrident's `use_gpu=True` is `platform="gpu"`.
    A GPU that JAX cannot start falls back to CPU with one warning.
    """

    def __init__(
        self,
        image_size: int | tuple[int, int] = (224, 224),
        mean: Sequence[float] = (0.485, 0.456, 0.406),
        std: Sequence[float] = (0.229, 0.224, 0.225),
        data_format: Literal["NCHW", "NHWC"] = "NCHW",
        platform: str | None = None,
        cache_compiled: bool = True,
        dtype: Literal["float32", "bfloat16"] = "float32",
        fit: Fit = "stretch",
        *,
        cache_dir: str | None = None,
        **options: Any,
    ):
        super().__init__(image_size, mean, std, data_format, dtype, fit, **options)
        from accelkit.runtime.devices import choose_platform, devices_for, enable_compilation_cache

        self.platform_choice = choose_platform(platform)
        self._device = devices_for(self.platform_choice, 1)[0]
        if self.platform_choice.platform == "gpu":
            log.info("JAX configured to use GPU: %s", f"gpu:{self._device.id}")
        self.cache_dir = enable_compilation_cache(cache_dir) if cache_compiled else None
        self._kernel = self._build_kernel()
        if cache_compiled:
            self.warm_up()

    @property
    def device(self):
        """The JAX device the resize runs on."""
        return self._device

    def _build_kernel(self) -> Callable:
        """The device side: two compiled programs per bucket shape, run back to back.

        They are separate programs on purpose. Inside one program XLA fuses both passes into a
        single loop that recomputes the first pass for every tap of the second (K times the work,
        3x slower on CPU); two programs materialize the intermediate image, as PIL does.
        """
        import jax

        mean = np.asarray(self.mean, np.float32)
        std = np.asarray(self.std, np.float32)
        dtype = self._out_dtype
        channels_first = self.data_format == "NCHW"
        first_pass = jax.jit(resample_pass, static_argnames="axis")

        @partial(jax.jit, static_argnames="axis")
        def second_pass_and_normalize(intermediate, index, weight, rv, cv, axis):
            resized = resample_pass(intermediate, index, weight, axis=axis)
            return normalize(resized, rv, cv, mean, std, channels_first=channels_first, dtype=dtype)

        def kernel(pixels, ri, rw, rv, ci, cw, cv, vertical_first: bool):
            if vertical_first:
                intermediate = first_pass(pixels, ri, rw, axis=1)
                return second_pass_and_normalize(intermediate, ci, cw, rv, cv, axis=2)
            intermediate = first_pass(pixels, ci, cw, axis=2)
            return second_pass_and_normalize(intermediate, ri, rw, rv, cv, axis=1)

        return kernel

    def warm_up(self) -> None:
        """Compile the common shape (a batch of photos up to 512² reduced to the target)."""
        probe = np.zeros((512, 512, 3), np.uint8)
        self.preprocess_batch([probe] * self.max_batch)

    def _run_group(self, plans: list[ImagePlan]):
        """Dispatch one bucket group (asynchronously) and return the device array [n, ...]."""
        import jax

        batch = next(b for b in self.batch_sizes if b >= len(plans))
        hb, wb, kr, kc, vertical_first = plans[0].key
        pixels = np.zeros((batch, hb, wb, 3), np.uint8)
        ri = np.zeros((batch, self.image_size[0], kr), np.int32)
        rw = np.zeros((batch, self.image_size[0], kr), np.int32)
        rv = np.zeros((batch, self.image_size[0]), bool)
        ci = np.zeros((batch, self.image_size[1], kc), np.int32)
        cw = np.zeros((batch, self.image_size[1], kc), np.int32)
        cv = np.zeros((batch, self.image_size[1]), bool)
        for i, plan in enumerate(plans):
            h, w = plan.pixels.shape[:2]
            pixels[i, :h, :w] = plan.pixels
            ri[i], rw[i], rv[i] = plan.rows.index, plan.rows.weight, plan.rows.valid
            ci[i], cw[i], cv[i] = plan.cols.index, plan.cols.weight, plan.cols.valid
        with self._lock:  # jit compiles once per new shape: that is the compile count
            self._compiled.add((batch, hb, wb, kr, kc, vertical_first))
        args = jax.device_put((pixels, ri, rw, rv, ci, cw, cv), self._device)
        return self._kernel(*args, vertical_first)

    def preprocess(self, inputs: Iterable[Any]) -> PreprocessResult:
        """Per-item preprocessing: successes in input order plus the failures with their reasons."""
        import jax
        import jax.numpy as jnp

        indices: list[int] = []
        parts: list[Any] = []
        failures: dict[int, ImageDecodeError] = {}
        for positions, array in self.iter_groups(inputs, failures):
            parts.append(array if array.shape[0] == len(positions) else array[: len(positions)])
            indices.extend(positions)
        if not parts:
            shape = (3, *self.image_size) if self.data_format == "NCHW" else (*self.image_size, 3)
            empty = np.zeros((0, *shape), np.float32)
            return PreprocessResult(
                jax.device_put(empty, self._device).astype(self._out_dtype), [], failures
            )
        # Assembled on the device: the groups never make a round trip through host memory.
        stacked = parts[0] if len(parts) == 1 else jnp.concatenate(parts)
        order = np.argsort(np.asarray(indices), kind="stable")
        if not np.array_equal(order, np.arange(len(order))):
            stacked = jnp.take(stacked, jax.device_put(order, self._device), axis=0)
            indices = [indices[i] for i in order]
        return PreprocessResult(stacked, indices, failures)


@dataclass(frozen=True)
class HostImage:
    """One image resized and normalized on the host: its model input [3, H, W] or [H, W, 3]."""

    array: np.ndarray

    @property
    def key(self) -> tuple[str]:
        return ("host",)  # one group: the arrays all have the model's shape already


class HostImagePreprocessor(ImagePreprocessor):
    """The same inputs, outputs and per-item failures as `JAXImagePreprocessor`, without JAX: each
    decode thread also resizes with PIL (`Image.resize(BILINEAR, box=…)`, after the same integer
    reduction — the pixels the JAX kernel reproduces bit for bit) and normalizes in float64,
    rounded once to the output dtype. Where the model runs on the CPU this is the faster engine:
    no JAX start-up and no per-shape tracing (a process of `images embed` traced ~134 programs for
    2,000 photos of mixed sizes). Returns numpy arrays; `device` is None and nothing compiles.
    """

    def __init__(
        self,
        image_size: int | tuple[int, int] = (224, 224),
        mean: Sequence[float] = (0.485, 0.456, 0.406),
        std: Sequence[float] = (0.229, 0.224, 0.225),
        data_format: Literal["NCHW", "NHWC"] = "NCHW",
        platform: str | None = None,
        cache_compiled: bool = True,
        dtype: Literal["float32", "bfloat16"] = "float32",
        fit: Fit = "stretch",
        *,
        cache_dir: str | None = None,
        **options: Any,
    ):
        super().__init__(image_size, mean, std, data_format, dtype, fit, **options)
        from accelkit.runtime.devices import PlatformChoice

        self.platform_choice = PlatformChoice(
            "cpu", platform, "engine", False, "images resized on the host (PIL)"
        )
        self.cache_dir = None
        self._mean = np.asarray(self.mean, np.float64)
        self._std = np.asarray(self.std, np.float64)
        self._numpy_dtype = _host_dtype(dtype)

    @property
    def device(self) -> None:
        """None: the arrays stay in host memory."""
        return None

    def _decode_and_plan(self, item: Any) -> HostImage:
        pixels = decode_image(item, self.decode_options)
        factors = host_reduce_factors(
            pixels.shape[0], pixels.shape[1], self.image_size, self.fit, self.reducing_gap
        )
        resized, inside = pil_reference(_host_reduce(pixels, factors), self.image_size, self.fit)
        normalized = (resized / 255.0 - self._mean) / self._std  # float64, rounded once below
        normalized[~inside] = 0.0
        out = normalized.astype(np.float32).astype(self._numpy_dtype, copy=False)
        if self.data_format == "NCHW":
            out = out.transpose(2, 0, 1)
        return HostImage(np.ascontiguousarray(out))

    def _run_group(self, plans: list[HostImage]) -> np.ndarray:
        return np.stack([plan.array for plan in plans])

    def group_limit(self, key: tuple) -> int:
        return self.max_batch

    def preprocess(self, inputs: Iterable[Any]) -> PreprocessResult:
        """Per-item preprocessing: successes in input order plus the failures with their reasons."""
        indices: list[int] = []
        parts: list[np.ndarray] = []
        failures: dict[int, ImageDecodeError] = {}
        for positions, array in self.iter_groups(inputs, failures):
            parts.append(array)
            indices.extend(positions)
        shape = (3, *self.image_size) if self.data_format == "NCHW" else (*self.image_size, 3)
        if not parts:
            return PreprocessResult(np.zeros((0, *shape), self._numpy_dtype), [], failures)
        stacked = np.concatenate(parts)
        order = np.argsort(np.asarray(indices), kind="stable")
        if not np.array_equal(order, np.arange(len(order))):
            stacked = stacked[order]
            indices = [indices[i] for i in order]
        return PreprocessResult(stacked, indices, failures)


def _host_dtype(dtype: str):
    if dtype == "float32":
        return np.dtype(np.float32)
    try:
        import ml_dtypes
    except ImportError:
        raise ConfigError(
            "dtype bfloat16 on the host engine needs ml_dtypes (pip install ml_dtypes), "
            "or set preprocess.engine: jax"
        ) from None
    return np.dtype(ml_dtypes.bfloat16)


ENGINES = ("auto", "jax", "host")


def make_preprocessor(engine: str = "auto", **kwargs: Any) -> ImagePreprocessor:
    """`engine` "jax" or "host", or "auto": the host where the resize would run on the CPU
    without needing JAX otherwise (the CPU was asked for, or no JAX accelerator plugin is
    installed), JAX where an accelerator can take it."""
    if engine not in ENGINES:
        raise ConfigError(f"engine={engine!r} must be one of {', '.join(ENGINES)}")
    if engine == "auto":
        from accelkit.runtime.devices import cpu_without_jax

        engine = "host" if cpu_without_jax(kwargs.get("platform")) is not None else "jax"
    cls = HostImagePreprocessor if engine == "host" else JAXImagePreprocessor
    return cls(**kwargs)
