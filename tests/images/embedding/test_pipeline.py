import json

import numpy as np
import pytest
from PIL import Image

from accelkit.errors import DataError
from accelkit.images.testing import altered
from tests.support.photos import encode


def test_retrieval_each_photo_finds_its_altered_copy(pipeline, photos):
    names = sorted(photos)
    assert len(names) >= 20
    originals = pipeline.embed_images([photos[n] for n in names])
    copies = pipeline.embed_images([altered(photos[n]) for n in names])
    assert originals.shape == (len(names), 1280)
    similarity = copies @ originals.T  # unit vectors: cosine similarity
    nearest = similarity.argmax(axis=1)
    wrong = [(names[i], names[j]) for i, j in enumerate(nearest) if i != j]
    assert not wrong, wrong
    # and the match is not a near tie with an unrelated photo
    np.fill_diagonal(similarity, -1)
    assert (np.diag(copies @ originals.T) - similarity.max(axis=1)).min() > 0.05


def test_per_item_failures_and_order(pipeline, photos, tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_text("text")
    inputs = [photos["chelsea"], str(bad), encode(photos["coffee"], "PNG"), b"", photos["chelsea"]]
    result = pipeline.embed(inputs)
    assert result.indices == [0, 2, 4]
    assert set(result.failures) == {1, 3} and "bad.jpg" in result.failures[1]
    assert np.allclose(result.embeddings[0], result.embeddings[2], atol=1e-6)
    dense = pipeline.embed_images(inputs, errors="nan")
    assert (
        np.isnan(dense[1]).all()
        and np.isnan(dense[3]).all()
        and np.isfinite(dense[[0, 2, 4]]).all()
    )
    with pytest.raises(DataError, match="2 of 5 images failed"):
        pipeline.embed_images(inputs)


def test_pipeline_matches_preprocess_then_model(pipeline, photos):
    from accelkit.images.embedding.models import l2_normalize

    images = [photos[n] for n in ("rocket", "astronaut", "coins")]
    batch = np.asarray(pipeline.preprocessor.preprocess_batch(images))
    expected = l2_normalize(pipeline.backend.embed(batch))
    assert np.abs(pipeline.embed_images(images) - expected).max() < 1e-5


def test_cli_embed_writes_outputs(tmp_path, photos, onnx_path, monkeypatch):
    from accelkit.cli import main

    folder = tmp_path / "imgs"
    (folder / "sub").mkdir(parents=True)
    Image.fromarray(photos["chelsea"]).save(folder / "cat.jpg")
    Image.fromarray(photos["coffee"]).save(folder / "sub" / "coffee.png")
    (folder / "broken.jpg").write_bytes(b"")
    config = tmp_path / "cfg.yaml"
    config.write_text(f"preprocess:\n  cache_compiled: false\nmodel:\n  onnx_path: {onnx_path}\n")
    out = tmp_path / "out" / "emb.npy"
    with pytest.raises(SystemExit) as done:
        main(
            [
                "images",
                "embed",
                str(folder),
                str(tmp_path / "missing.png"),
                "--output",
                str(out),
                "--config",
                str(config),
                "--batch-size",
                "2",
                "--no-progress",
            ]
        )
    assert done.value.code in (0, None)
    embeddings = np.load(out)
    inputs = (tmp_path / "out" / "emb.inputs.txt").read_text().splitlines()
    failures = json.loads((tmp_path / "out" / "emb.failures.json").read_text())
    assert embeddings.shape == (2, 1280) and [p.rsplit("/", 1)[-1] for p in inputs] == [
        "cat.jpg",
        "coffee.png",
    ]
    assert set(failures) == {str(folder / "broken.jpg"), str(tmp_path / "missing.png")}
    # the glob form picks the same files
    from accelkit.images.operations.inputs import expand_inputs

    assert expand_inputs([str(folder / "**" / "*.*")]) == sorted(
        str(p) for p in folder.rglob("*.*")
    )


def test_cli_bad_input_exits_2(tmp_path, capsys, onnx_path):
    from accelkit.cli import main

    config = tmp_path / "cfg.yaml"
    config.write_text(f"preprocess:\n  cache_compiled: false\nmodel:\n  onnx_path: {onnx_path}\n")
    for args in (
        ["--batch-size", "0"],
        ["--config", str(tmp_path / "nope.yaml")],
        ["--config", str(config)],
    ):
        with pytest.raises(SystemExit) as done:
            main(
                [
                    "images",
                    "embed",
                    str(tmp_path / "missing.jpg"),
                    "--no-progress",
                    "--output",
                    str(tmp_path / "e.npy"),
                    *args,
                ]
            )
        assert done.value.code == 2
        assert capsys.readouterr().err.startswith("error: ")


def test_nhwc_and_bfloat16_configs_embed_the_same(pipeline, photos, onnx_path):
    from accelkit.images import ImageEmbeddingPipeline, ServiceConfig

    images = [photos["chelsea"], photos["rocket"]]
    reference = pipeline.embed_images(images)
    for preprocess in ({"data_format": "NHWC"}, {"dtype": "bfloat16"}):
        config = ServiceConfig.from_env(
            env={},
            preprocess={"cache_compiled": False, "batch_size": 2, **preprocess},
            model={"onnx_path": str(onnx_path)},
        )
        with ImageEmbeddingPipeline(config) as other:
            vectors = other.embed_images(images)
        tolerance = (
            1e-5 if "data_format" in preprocess else 2e-2
        )  # bf16 inputs carry 8 significant bits
        assert np.abs(vectors - reference).max() < tolerance, preprocess
        assert (np.sum(vectors * reference, axis=1) > 0.99).all()
