import os

import numpy as np
import pytest

from accelkit.errors import ConfigError, InputError
from accelkit.images.embedding import models
from accelkit.images.embedding.preprocess import JAXImagePreprocessor

CAT_CLASSES = range(281, 286)  # ImageNet tabby, tiger cat, Persian, Siamese, Egyptian cat
COFFEE_CLASSES = {967, 968, 504}  # espresso, cup, coffee mug


@pytest.fixture(scope="module")
def batch(photos):
    pp = JAXImagePreprocessor(cache_compiled=False, batch_size=4)
    return np.asarray(
        pp.preprocess_batch([photos[n] for n in ("chelsea", "coffee", "astronaut", "rocket")])
    )


def test_onnxruntime_matches_pytorch(onnx_path, torch_model, batch):
    backend = models.OnnxRuntimeBackend(onnx_path)
    ort_embedding, ort_logits = backend.run(batch, [models.EMBEDDING_OUTPUT, models.LOGITS_OUTPUT])
    torch_embedding, torch_logits = models.torch_embed(torch_model, batch)
    assert ort_embedding.shape == (4, models.EMBEDDING_DIM)
    assert np.abs(ort_embedding - torch_embedding).max() < 1e-4
    assert np.abs(ort_logits - torch_logits).max() < 1e-4 * max(1.0, np.abs(torch_logits).max())
    assert backend.layout == "NCHW"
    assert (
        np.abs(backend.embed(batch.transpose(0, 2, 3, 1)) - ort_embedding).max() < 1e-5
    )  # NHWC batches are rearranged
    unit = models.l2_normalize(backend.embed(batch))
    assert np.allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-6)
    assert np.abs(unit - models.l2_normalize(torch_embedding)).max() < 1e-4


def test_onnx_sessions_do_not_spin(onnx_path):
    """ORT's pool threads spin between ops by default; beside the decode threads on two cores
    the spinning took the cores decoding needed (an int8 `images embed`: 29 CPU-s, 4 of them
    spinning; 21 without). Every session accelkit makes has spinning off."""
    options = models.OnnxRuntimeBackend(onnx_path).session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_weights_are_real_imagenet(onnx_path, batch):
    logits = models.OnnxRuntimeBackend(onnx_path).run(batch, [models.LOGITS_OUTPUT])[0]
    top1 = logits.argmax(axis=1)
    assert top1[0] in CAT_CLASSES, top1
    assert top1[1] in COFFEE_CLASSES, top1
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    assert probs[1, 967] > 0.5  # espresso, confidently


def test_onnx_cache_is_reused_and_repaired(onnx_path, monkeypatch):
    folder = onnx_path.parent
    stamp = onnx_path.stat().st_mtime_ns
    assert models.cached_onnx_path(folder) == onnx_path and onnx_path.stat().st_mtime_ns == stamp
    assert models.file_sha256(models.weights_path())[:8] != ""  # key source exists
    # A stale (corrupt) file is re-exported; a new recipe gives a new file name.
    broken = folder / "broken"
    broken.mkdir()
    target = broken / onnx_path.name
    target.write_bytes(b"half a file")
    repaired = models.cached_onnx_path(broken)
    assert repaired == target and target.stat().st_size > 1_000_000
    monkeypatch.setattr(models, "EXPORT_RECIPE", "another-recipe")
    monkeypatch.setattr(models, "export_onnx", lambda path, image_size=(224, 224): path)
    assert models.cached_onnx_path(broken).name != onnx_path.name
    assert not any(p.name.endswith(".tmp") for p in broken.iterdir())  # atomic: no leftovers


def test_user_onnx_file_and_names(onnx_path, batch, tmp_path):
    named = models.OnnxRuntimeBackend(onnx_path, input_name="pixels", output_name="logits")
    assert named.embed(batch[:1]).shape == (1, 1000)
    with pytest.raises(ConfigError, match="no output named 'feat'"):
        models.OnnxRuntimeBackend(onnx_path, output_name="feat")
    with pytest.raises(InputError, match="does not exist"):
        models.OnnxRuntimeBackend(tmp_path / "none.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not onnx")
    with pytest.raises(InputError, match="cannot load"):
        models.OnnxRuntimeBackend(junk)


def test_triton_backend_config_and_errors():
    # No Triton server can run here: this checks configuration and failure reporting only.
    from accelkit.images.settings.config import ModelConfig

    with pytest.raises(ConfigError, match="without a scheme"):
        models.TritonBackend("http://localhost:8000", "m", None, None)
    with pytest.raises(ConfigError, match="http or grpc"):
        models.TritonBackend("localhost:8000", "m", None, None, protocol="ws")
    for protocol in ("http", "grpc"):
        config = ModelConfig(
            backend="triton",
            triton_url="127.0.0.1:9",
            triton_protocol=protocol,
            triton_max_retries=1,
            triton_retry_delay=0.0,
            triton_timeout=2.0,
            input_name="in0",
            output_name="out0",
        )
        backend = models.make_backend(config)
        assert (backend.input_name, backend.output_name, backend.model_name) == (
            "in0",
            "out0",
            "efficientnet_lite0",
        )
        with pytest.raises(InputError, match="failed after 2 attempts"):
            backend.embed(np.zeros((1, 3, 224, 224), np.float32))
        backend.close()


def test_export_writes_to_the_cache_dir_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("ACCELKIT_CACHE_DIR", str(tmp_path))
    assert models.default_cache_dir() == tmp_path / "models"
    assert os.fspath(models.weights_path()).endswith(".pth")
