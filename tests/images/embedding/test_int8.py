"""The int8 EfficientNet-Lite0 (`model.name: efficientnet-lite0-int8`): built from the FP32 export
and the shipped calibration ranges, judged against the FP32 model on the shipped photos, cached
and written atomically, and recorded as a model of its own."""

import functools
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from accelkit.images.embedding import int8, models
from accelkit.images.testing import altered


@pytest.fixture(scope="module")
def int8_path(onnx_path):
    return models.cached_int8_path(onnx_path.parent)


def int8_weights(onnx_path) -> str:
    from accelkit.images.settings.config import ModelConfig

    return models.image_weights(ModelConfig(**int8_settings(onnx_path)))


def int8_settings(onnx_path) -> dict:
    return {"name": int8.INT8_MODEL_NAME, "cache_dir": str(onnx_path.parent)}


@pytest.fixture(scope="module")
def int8_pipeline(int8_path, onnx_path):
    from accelkit.images import ImageEmbeddingPipeline, ServiceConfig

    config = ServiceConfig.from_env(
        env={},
        preprocess={"cache_compiled": False, "batch_size": 8},
        model=int8_settings(onnx_path),
    )
    with ImageEmbeddingPipeline(config) as p:
        yield p


def top10(vectors: np.ndarray) -> np.ndarray:
    similarity = vectors @ vectors.T
    np.fill_diagonal(similarity, -np.inf)
    return np.argsort(-similarity, axis=1)[:, :10]


def test_int8_embeddings_stay_near_the_fp32_models(pipeline, int8_pipeline, int8_path, photos):
    """On the 25 photos, their mirror images and their altered copies: cosine to the FP32 vector
    of each image, and recall@10 of the int8 neighbours against the FP32 ones (brute force)."""
    assert int8_pipeline.backend.path == int8_path
    names = sorted(photos)
    images = [photos[n] for n in names]
    images += [np.ascontiguousarray(p[:, ::-1]) for p in images[:25]]
    images += [altered(photos[n]) for n in names]
    fp32 = pipeline.embed_images(images)
    quantized = int8_pipeline.embed_images(images)
    assert quantized.shape == fp32.shape == (75, models.EMBEDDING_DIM)
    assert np.allclose(np.linalg.norm(quantized, axis=1), 1.0, atol=1e-5)
    cosine = np.sum(fp32 * quantized, axis=1)
    assert np.median(cosine) > 0.99 and cosine.min() > 0.95, (np.median(cosine), cosine.min())
    assert cosine.max() < 1 - 1e-6  # the int8 file runs, not the FP32 one
    ours, theirs = top10(quantized), top10(fp32)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ours, theirs, strict=True)])
    assert recall >= 0.9, recall  # 0.94 measured: beyond each photo's 2 versions, near ties


def test_int8_finds_each_photos_altered_copy_first(int8_pipeline, photos):
    """tests/images/embedding/test_pipeline.py's retrieval test, with the int8 model."""
    names = sorted(photos)
    originals = int8_pipeline.embed_images([photos[n] for n in names])
    copies = int8_pipeline.embed_images([altered(photos[n]) for n in names])
    similarity = copies @ originals.T
    wrong = [(names[i], names[j]) for i, j in enumerate(similarity.argmax(axis=1)) if i != j]
    assert not wrong, wrong
    np.fill_diagonal(similarity, -1)
    assert (np.diag(copies @ originals.T) - similarity.max(axis=1)).min() > 0.05


@pytest.mark.slow  # ~20 s on 2 idle cores: ORT pre-processes and calibrates the FP32 model
def test_the_shipped_ranges_are_what_quantize_static_calibrates_on_the_photos(onnx_path, tmp_path):
    """The shipped ranges are ORT's MinMax calibration of the FP32 model on the calibration
    photos, and the int8 file built from ranges is the one ORT's quantize_static makes
    calibrating on the photos itself, byte for byte. The ranges were made on an Intel Xeon; on
    another CPU (an AMD EPYC) ONNX Runtime's float kernels differ in the last bits, and so
    did 53 of the 94 ranges (at most 5.9e-7 relative): equal within float32 rounding there,
    and the bytes compared with the ranges calibrated on this machine."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    from accelkit.images.embedding.preprocess import make_preprocessor
    from accelkit.images.settings.config import PreprocessConfig

    preprocessor = make_preprocessor(config=PreprocessConfig())
    tensors = np.asarray(preprocessor.preprocess_batch(int8.calibration_images()), np.float32)
    assert len(tensors) == json.loads(int8.RANGES_FILE.read_text())["images"] == 50
    here = int8.calibration_ranges(onnx_path, tensors)
    shipped = int8.load_ranges()
    assert sorted(here) == sorted(shipped)
    for name, bounds in shipped.items():
        np.testing.assert_allclose(here[name], bounds, rtol=1e-5, atol=1e-6, err_msg=name)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"pixels": tensors[i : i + 10]} for i in range(0, 50, 10)])

        def get_next(self):
            return next(self.batches, None)

    from onnxruntime.quantization import quant_pre_process

    pre = tmp_path / "pre.onnx"
    quant_pre_process(str(onnx_path), str(pre))
    reference = tmp_path / "reference.onnx"
    quantize_static(
        str(pre), str(reference), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
        calibrate_method=CalibrationMethod.MinMax, nodes_to_exclude=list(int8.FLOAT_NODES),
    )  # fmt: skip
    built = int8.build_int8(onnx_path, tmp_path / "built.onnx", ranges=here)
    assert reference.read_bytes() == built.read_bytes()


def test_the_int8_file_is_cached_by_recipe_and_built_atomically(
    onnx_path, int8_path, tmp_path, monkeypatch
):
    import onnx
    import onnxruntime.quantization as quantization

    assert int8_path.parent == onnx_path.parent
    assert int8_path.name == f"{int8.INT8_MODEL_NAME}-{int8_weights(onnx_path)}.onnx"
    stamp = int8_path.stat().st_mtime_ns
    assert models.cached_int8_path(onnx_path.parent) == int8_path
    assert int8_path.stat().st_mtime_ns == stamp  # reused, not rebuilt
    ops = {node.op_type for node in onnx.load(str(int8_path)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops

    # (the same inputs give the same bytes: the reference test above builds it independently)
    # an interrupted build leaves neither the target nor its scratch
    @functools.wraps(quantization.quantize_static)
    def fail(*args, **kwargs):
        raise RuntimeError("interrupted")

    monkeypatch.setattr(quantization, "quantize_static", fail)
    folder = tmp_path / "interrupted"
    with pytest.raises(RuntimeError, match="interrupted"):
        int8.build_int8(onnx_path, folder / "int8.onnx")
    assert list(folder.iterdir()) == []
    monkeypatch.undo()
    # a damaged file is rebuilt; another recipe or other ranges make another file
    monkeypatch.setattr(models, "cached_onnx_path", lambda cache_dir=None: onnx_path)
    damaged = tmp_path / "cache"
    damaged.mkdir()
    (damaged / int8_path.name).write_bytes(b"half a file")
    assert models.cached_int8_path(damaged).read_bytes() == int8_path.read_bytes()
    monkeypatch.setattr(int8, "QUANT_RECIPE", "another-recipe")
    assert int8_weights(onnx_path) not in int8_path.name
    ranges = tmp_path / "ranges.json"
    table = json.loads(int8.RANGES_FILE.read_text())
    monkeypatch.undo()
    first = next(iter(table["ranges"]))
    table["ranges"][first][1][0] *= 2
    ranges.write_text(json.dumps(table))
    monkeypatch.setattr(int8, "RANGES_FILE", ranges)
    assert int8_weights(onnx_path) not in int8_path.name


def test_a_collection_of_one_model_refuses_the_other(onnx_path, photos, tmp_path):
    """Collections record the int8 model by its name and weights: one filled by the FP32 model
    refuses the int8 model's queries and inserts, and the reverse; each searches itself."""
    from accelkit import images
    from accelkit.images.index.base import ModelMismatchError

    paths = []
    for name in ("chelsea", "coffee", "rocket"):
        path = tmp_path / f"{name}.png"
        Image.fromarray(photos[name]).save(path)
        paths.append(str(path))
    database = json.dumps(str(tmp_path / "mixed.db"))
    configs = {}
    for label, model in (("fp32", "efficientnet-lite0"), ("int8", int8.INT8_MODEL_NAME)):
        configs[label] = tmp_path / f"{label}.yaml"
        configs[label].write_text(
            f"model:\n  name: {model}\n  cache_dir: {json.dumps(str(onnx_path.parent))}\n"
            f"preprocess:\n  cache_compiled: false\nstore:\n  uri: {database}\n"
        )
        report = images.insert(paths, label, create_collection=True, config=configs[label])
        assert report.ok and len(report.stored) == 3
    for mine, theirs in (("fp32", "int8"), ("int8", "fp32")):
        hits = images.search(paths[1], collection=mine, config=configs[mine]).hits
        assert hits[0].metadata["source"].endswith("coffee.png")
        with pytest.raises(ModelMismatchError, match="holds vectors of model"):
            images.search(paths[1], collection=theirs, config=configs[mine])
        with pytest.raises(ModelMismatchError):
            images.insert(paths[:1], theirs, config=configs[mine])
    recorded = images.describe_collection("int8", config=configs["int8"])["model"]
    assert recorded["name"] == int8.INT8_MODEL_NAME
    assert recorded["image_tower"]["weights"] == int8_weights(onnx_path)
    fp32 = images.describe_collection("fp32", config=configs["fp32"])["model"]
    assert fp32["image_tower"]["weights"] != recorded["image_tower"]["weights"]


def test_cpu_int8_features_reads_the_flags():
    features = int8.cpu_int8_features()
    assert set(features) <= {"avx512_vnni", "avx_vnni", "amx_int8"}
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    for name in ("avx512_vnni", "avx_vnni", "amx_int8"):
        assert (name in features) == (f" {name}" in flags)
