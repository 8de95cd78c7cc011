"""Shared fixtures: real photos, one ONNX export per test session (in a tmp dir, not the user cache)."""

import io

import numpy as np
import pytest


def _photos() -> dict[str, np.ndarray]:
    import skimage.data as data
    from sklearn.datasets import load_sample_images

    def rgb(a):
        return np.repeat(a[:, :, None], 3, axis=2) if a.ndim == 2 else a[:, :, :3]

    base = {
        name: rgb(getattr(data, name)())
        for name in (
            "astronaut",
            "camera",
            "chelsea",
            "coffee",
            "coins",
            "hubble_deep_field",
            "immunohistochemistry",
            "moon",
            "retina",
            "rocket",
            "page",
            "text",
            "clock",
            "brick",
            "grass",
        )
    }
    base["motorcycle"] = data.stereo_motorcycle()[0]
    china, flower = load_sample_images().images
    base["china"], base["flower"] = china, flower
    crops = {
        "astronaut_face": base["astronaut"][20:220, 140:340],
        "china_left": china[:, :320],
        "flower_center": flower[100:350, 150:500],
        "coffee_cup": base["coffee"][50:350, 100:450],
        "rocket_top": base["rocket"][:220, 200:500],
        "retina_crop": base["retina"][300:900, 300:900],
        "motorcycle_crop": base["motorcycle"][100:400, 200:600],
    }
    base.update({k: np.ascontiguousarray(v) for k, v in crops.items()})
    return base


@pytest.fixture(scope="session")
def photos() -> dict[str, np.ndarray]:
    return _photos()


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
