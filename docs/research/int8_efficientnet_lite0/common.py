"""Shared helpers: snapshot of accelkit (copied from /work/main/src at 2176e5b), the FP32 ONNX file
accelkit uses, and accelkit's own preprocessing."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "snap"))  # the snapshot, not /work/main (being restructured)

import numpy as np  # noqa: E402

MODELS = HERE / "models"


def fp32_path() -> Path:
    from accelkit.images.models import cached_onnx_path

    return cached_onnx_path()


def preprocessor():
    from accelkit.images.preprocess import make_preprocessor

    from accelkit.images.settings.config import ServiceConfig

    cfg = ServiceConfig.from_env(env={})
    return make_preprocessor(config=cfg.preprocess)


def preprocess(images) -> np.ndarray:
    """Images (arrays, bytes) -> [N,3,224,224] float32 exactly as accelkit's default config does."""
    pre = preprocessor()
    return np.asarray(pre.preprocess_batch(list(images)), np.float32)


def altered(photo: np.ndarray) -> bytes:
    """tests/images/test_pipeline.py: rescaled to 70 %, brightness +10 %, JPEG quality 40."""
    from PIL import Image, ImageEnhance

    image = Image.fromarray(photo)
    image = image.resize(
        (max(1, int(image.width * 0.7)), max(1, int(image.height * 0.7))), Image.Resampling.BILINEAR
    )
    image = ImageEnhance.Brightness(image).enhance(1.1)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=40)
    return buffer.getvalue()


def session(path, threads=None, level=None, denormal=False, extra=None):
    import onnxruntime as ort

    o = ort.SessionOptions()
    if threads:
        o.intra_op_num_threads = threads
    if level is not None:
        o.graph_optimization_level = level
    if denormal:
        o.add_session_config_entry("session.set_denormal_as_zero", "1")
    for k, v in (extra or {}).items():
        o.add_session_config_entry(k, v)
    return ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])


def loadavg() -> str:
    return open("/proc/loadavg").read().split()[0]
