"""Shared fixtures: real photos, one ONNX export per test session (in a tmp dir, not the user cache)."""

import io

import numpy as np
import pytest


@pytest.fixture(scope="session")
def photos() -> dict[str, np.ndarray]:
    from accelkit.images.samples import photos

    return photos()


@pytest.fixture(scope="session")
def onnx_path(tmp_path_factory):
    from accelkit.images.models import cached_onnx_path

    return cached_onnx_path(tmp_path_factory.mktemp("onnx-cache"))


@pytest.fixture(scope="session")
def torch_model():
    from accelkit.images.models import load_torch_model

    return load_torch_model()


@pytest.fixture(scope="session")
def pipeline(onnx_path):
    from accelkit.images import ImageEmbeddingPipeline, ServiceConfig

    config = ServiceConfig.from_env(
        env={},
        preprocess={"cache_compiled": False, "batch_size": 8},
        model={"onnx_path": str(onnx_path)},
    )
    with ImageEmbeddingPipeline(config) as p:
        yield p


def encode(array: np.ndarray, fmt: str, **kwargs) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format=fmt, **kwargs)
    return buffer.getvalue()
