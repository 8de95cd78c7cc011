"""The two preprocessing engines: decode → resize (PIL-exact, `accelkit.images.embedding.resample`) →
normalize, per item, with failures kept per item.

`JAXImagePreprocessor` runs the resize on a JAX device: images are padded into bucket shapes and
one pair of compiled programs exists per bucket (`compile_count` reports them); decoding runs in
a thread pool while JAX dispatch is asynchronous, so the device resizes one bucket group while the
threads decode the next images. `HostImagePreprocessor` resizes with PIL in the decode threads.
`make_preprocessor` picks one.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from accelkit.errors import ConfigError
from accelkit.images.embedding.decode import (
    DecodeOptions,
    ImageDecodeError,
    decode_image,
    describe_input,
)
from accelkit.images.embedding.resample import (
    ImagePlan,
    host_reduce,
    host_reduce_factors,
    lookup_normalize,
    normalize,
    normalize_table,
    pil_reference,
    plan_image,
    resample_pass,
)
from accelkit.images.settings.config import PreprocessConfig
from accelkit.runtime.devices import (
    PlatformChoice,
    choose_platform,
    cpu_without_jax,
    devices_for,
    enable_compilation_cache,
)
from accelkit.runtime.options import keyword_signature

__all__ = [
    "HostImagePreprocessor",
    "ImagePreprocessor",
    "JAXImagePreprocessor",
    "PreprocessResult",
    "make_preprocessor",
    "pil_reference",
    "plan_image",
]

log = logging.getLogger(__name__)


def _batch_ladder(batch_size: int) -> tuple[int, ...]:
    sizes, b = [], 1
    while b < batch_size:
        sizes.append(b)
        b *= 2
    sizes.append(batch_size)
    return tuple(sizes)


def preprocess_config(config: PreprocessConfig | None, options: dict[str, Any]) -> PreprocessConfig:
    """`config` with `options` (its fields by name) in place of its own values, validated once
    (an unknown name is a ConfigError naming it)."""
    return PreprocessConfig(**options) if config is None else config.updated(**options)


@dataclass
class PreprocessResult:
    """Per-item outcome of `preprocess`: `array` holds the successful items in input order;
    `indices[i]` is the input position of `array[i]`; `failures` maps input positions to their
    error."""

    array: Any
    indices: list[int]
    failures: dict[int, ImageDecodeError]


class ImagePreprocessor:
    """What both engines share: the settings (checked here), the decode pool, the stream of
    bucket groups with per-item failures, and `preprocess_batch`. `JAXImagePreprocessor` resizes
    on a JAX device; `HostImagePreprocessor` with PIL in the decode threads. `make_preprocessor`
    picks one.

    Built from a `PreprocessConfig` (`config`), or from its fields by name (`image_size`,
    `batch_size`, `fit`, …: one declaration each, validated there); `config` with fields given
    too: those replace the config's. `platform`, `cache_compiled` and `cache_dir` concern the JAX
    engine (the device, and JAX's persistent compilation cache); the host engine takes and
    ignores them, so that either engine is built from the same settings."""

    def __init__(
        self,
        config: PreprocessConfig | None = None,
        *,
        cache_dir: str | None = None,
        **options: Any,
    ):
        config = preprocess_config(config, options)
        self.config = config
        self.image_size = config.image_size
        self.mean = tuple(float(m) for m in config.mean)
        self.std = tuple(float(s) for s in config.std)
        self.data_format = config.data_format
        self.dtype = config.dtype
        self.fit = config.fit
        self.resample = config.resample
        self.reducing_gap = config.reducing_gap
        self.batch_size = config.batch_size
        self.batch_sizes = _batch_ladder(self.batch_size)
        self.decode_options = DecodeOptions(
            max_pixels=config.max_pixels,
            # Reduced-size JPEG decoding only helps modes that read the whole image downscaled.
            min_size=config.image_size if config.fast_jpeg_downscale else None,
        )
        self._executor = ThreadPoolExecutor(
            max_workers=config.num_workers, thread_name_prefix="accelkit-decode"
        )
        self._lock = threading.Lock()
        self._compiled: set[tuple] = set()
        self._out_dtype = "bfloat16" if config.dtype == "bfloat16" else "float32"
        self._start(config.platform, config.cache_compiled, cache_dir)

    def _start(self, platform: str | None, cache_compiled: bool, cache_dir: str | None) -> None:
        """The engine's own start-up (its device, its caches)."""

    @property
    def device(self) -> Any:
        """Where the engine leaves its arrays: a JAX device, or None for host memory."""
        raise NotImplementedError

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
        return plan_image(pixels, self.image_size, self.fit, self.reducing_gap, self.resample)

    def _run_group(self, plans: list) -> Any:
        raise NotImplementedError

    def group_limit(self, key: tuple) -> int:
        """Images per dispatch for a bucket: large buckets get smaller batches, which bounds the
        device memory (~2**24 source pixels per batch) whatever the photos' sizes."""
        limit = max(1, (1 << 24) // (key[0] * key[1]))
        return (
            max(b for b in self.batch_sizes if b <= limit)
            if limit < self.batch_size
            else self.batch_size
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
        prefetch = prefetch or max(2 * self.batch_size, 8)
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

    def preprocess(self, inputs: Iterable[Any]) -> PreprocessResult:
        """Per-item preprocessing: successes in input order plus the failures with their reasons."""
        indices: list[int] = []
        parts: list[Any] = []
        failures: dict[int, ImageDecodeError] = {}
        for positions, array in self.iter_groups(inputs, failures):
            parts.append(array if array.shape[0] == len(positions) else array[: len(positions)])
            indices.extend(positions)
        if not parts:
            shape = (3, *self.image_size) if self.data_format == "NCHW" else (*self.image_size, 3)
            return PreprocessResult(self._empty((0, *shape)), [], failures)
        stacked = parts[0] if len(parts) == 1 else self._concatenate(parts)
        order = np.argsort(np.asarray(indices), kind="stable")
        if not np.array_equal(order, np.arange(len(order))):
            stacked = self._take(stacked, order)
            indices = [indices[i] for i in order]
        return PreprocessResult(stacked, indices, failures)

    # the engine's arrays: numpy on the host, jax.Array on the device
    def _empty(self, shape: tuple[int, ...]) -> Any:
        raise NotImplementedError

    def _concatenate(self, parts: list[Any]) -> Any:
        raise NotImplementedError

    def _take(self, array: Any, order: np.ndarray) -> Any:
        raise NotImplementedError


def _signature(function, *, exclude: tuple[str, ...] = ()) -> None:
    """`function`'s keywords shown as `PreprocessConfig`'s fields (help(), IPython)."""
    own = inspect.signature(function, eval_str=True).parameters.values()
    function.__signature__ = keyword_signature(
        PreprocessConfig,
        leading=tuple(p for p in own if p.kind is p.POSITIONAL_OR_KEYWORD),
        extra=tuple(p for p in own if p.kind is p.KEYWORD_ONLY),
        exclude=exclude,
        returns=inspect.signature(function, eval_str=True).return_annotation,
    )


_signature(ImagePreprocessor.__init__)


class JAXImagePreprocessor(ImagePreprocessor):
    """Decode, resize (PIL-exact antialiased bilinear or bicubic) and normalize images on a JAX
    device.

    `preprocess_batch(inputs)` takes paths, bytes, PIL images and H×W×C uint8 arrays, mixed, and
    returns a `jax.Array` [N, 3, H, W] (NCHW) or [N, H, W, 3] (NHWC) on `.device`.

    Platform: `platform` ("cpu", "gpu", "tpu") > environment (`ACCELKIT_PLATFORM`, `JAX_PLATFORM`,
    `JAX_USE_GPU`, `JAX_PLATFORMS`) > auto; EmbeddingTrident's `use_gpu=True` is `platform="gpu"`.
    A GPU that JAX cannot start falls back to CPU with one warning.
    """

    def _start(self, platform: str | None, cache_compiled: bool, cache_dir: str | None) -> None:
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
        self.preprocess_batch([probe] * self.batch_size)

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

    def _empty(self, shape: tuple[int, ...]) -> Any:
        import jax

        return jax.device_put(np.zeros(shape, np.float32), self._device).astype(self._out_dtype)

    def _concatenate(self, parts: list[Any]) -> Any:
        import jax.numpy as jnp

        # Assembled on the device: the groups never make a round trip through host memory.
        return jnp.concatenate(parts)

    def _take(self, array: Any, order: np.ndarray) -> Any:
        import jax
        import jax.numpy as jnp

        return jnp.take(array, jax.device_put(order, self._device), axis=0)


@dataclass(frozen=True)
class HostImage:
    """One image resized and normalized on the host: its model input [3, H, W] or [H, W, 3]."""

    array: np.ndarray

    @property
    def key(self) -> tuple[str]:
        return ("host",)  # one group: the arrays all have the model's shape already


class HostImagePreprocessor(ImagePreprocessor):
    """The same inputs, outputs and per-item failures as `JAXImagePreprocessor`, without JAX: each
    decode thread also resizes with PIL (`Image.resize(BILINEAR or BICUBIC, box=…)`, after the
    same integer reduction — the pixels the JAX kernel reproduces bit for bit) and normalizes in float64,
    rounded once to the output dtype. Where the model runs on the CPU this is the faster engine:
    no JAX start-up and no per-shape tracing (a process of `images embed` traced ~134 programs for
    2,000 photos of mixed sizes). Returns numpy arrays; `device` is None and nothing compiles.
    """

    def _start(self, platform: str | None, cache_compiled: bool, cache_dir: str | None) -> None:
        self.platform_choice = PlatformChoice(
            "cpu", platform, "engine", False, "images resized on the host (PIL)"
        )
        self.cache_dir = None
        self._numpy_dtype = _host_dtype(self.dtype)
        self._table = normalize_table(self.mean, self.std, self._numpy_dtype)

    @property
    def device(self) -> None:
        """None: the arrays stay in host memory."""
        return None

    def _decode_and_plan(self, item: Any) -> HostImage:
        pixels = decode_image(item, self.decode_options)
        factors = host_reduce_factors(
            pixels.shape[0], pixels.shape[1], self.image_size, self.fit, self.reducing_gap
        )
        resized, inside = pil_reference(
            host_reduce(pixels, factors), self.image_size, self.fit, self.resample
        )
        return HostImage(lookup_normalize(resized, inside, self._table, self.data_format))

    def _run_group(self, plans: list[HostImage]) -> np.ndarray:
        return np.stack([plan.array for plan in plans])

    def group_limit(self, key: tuple) -> int:
        return self.batch_size

    def _empty(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.zeros(shape, self._numpy_dtype)

    def _concatenate(self, parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts)

    def _take(self, array: np.ndarray, order: np.ndarray) -> np.ndarray:
        return array[order]


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


def make_preprocessor(
    engine: str | None = None,
    config: PreprocessConfig | None = None,
    *,
    cache_dir: str | None = None,
    **options: Any,
) -> ImagePreprocessor:
    """`engine` (default: the config's) "jax" or "host", or "auto": the host where the resize
    would run on the CPU without needing JAX otherwise (the CPU was asked for, or no JAX
    accelerator plugin is installed), JAX where an accelerator can take it. `config` and
    `options` as for `ImagePreprocessor`."""
    if engine is not None and engine not in ENGINES:
        raise ConfigError(f"engine={engine!r} must be one of {', '.join(ENGINES)}")
    config = preprocess_config(config, options)
    engine = engine or config.engine
    if engine == "auto":
        engine = "host" if cpu_without_jax(config.platform) is not None else "jax"
    cls = HostImagePreprocessor if engine == "host" else JAXImagePreprocessor
    return cls(config, cache_dir=cache_dir)


_signature(make_preprocessor, exclude=("engine",))
