"""The pipeline's store API on real photos: insert, search quality, failures, ids, delete."""

import numpy as np
import pytest
from PIL import Image

from accelkit.errors import InputError
from accelkit.images.store import CollectionNotFoundError
from accelkit.images.testing import altered
from tests.support.photos import encode


@pytest.fixture(scope="module")
def store_pipeline(onnx_path, store_settings):
    """The pipeline's store API on Milvus Lite and on a real Milvus server."""
    from accelkit.images import ImageEmbeddingPipeline, ServiceConfig

    config = ServiceConfig.from_env(
        env={},
        preprocess={"cache_compiled": False, "batch_size": 8},
        model={"onnx_path": str(onnx_path)},
        store={**store_settings, "collection_name": "photos"},
    )
    with ImageEmbeddingPipeline(config) as pipeline:
        yield pipeline


def test_each_photo_is_found_from_its_altered_copy(store_pipeline, photos):
    names = sorted(photos)
    info = store_pipeline.create_collection(description="real photos")
    assert info["dim"] == 1280 and info["name"] == "photos"
    groups = {
        n: ("sky" if n in ("rocket", "moon", "hubble_deep_field") else "earth") for n in names
    }
    result = store_pipeline.insert_images(
        [photos[n] for n in names], ids=names, metadata=[{"group": groups[n]} for n in names]
    )
    assert result.ids == names and not result.failures
    assert store_pipeline.collection_stats()["count"] == len(names)
    for name in names:
        hits = store_pipeline.search_images(altered(photos[name]), topk=3)
        assert hits[0].id == name, (name, hits)
        assert hits[0].score > hits[1].score
    # the stored vectors are the pipeline's own embeddings: scores match numpy on them
    reference = store_pipeline.embed_images([photos[n] for n in names])
    query = store_pipeline.embed_images([altered(photos["coffee"])])[0]
    hits = store_pipeline.search_images(query, topk=len(names))
    expected = reference @ query
    assert [h.id for h in hits] == [names[i] for i in np.argsort(-expected, kind="stable")]
    assert max(abs(h.score - expected[names.index(h.id)]) for h in hits) < 1e-4
    sky = store_pipeline.search_images(
        altered(photos["rocket"]), topk=10, filter_expr='metadata["group"] == "sky"'
    )
    assert sky[0].id == "rocket" and {h.id for h in sky} == {"rocket", "moon", "hubble_deep_field"}


def test_bad_item_fails_only_itself_and_generated_ids_are_idempotent(
    store_pipeline, photos, tmp_path
):
    store_pipeline.create_collection("mixed", exist_ok=True)
    cat = tmp_path / "cat.jpg"
    Image.fromarray(photos["chelsea"]).save(cat)
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff garbage")
    inputs = [
        str(cat),
        str(broken),
        encode(photos["coffee"], "PNG"),
        str(tmp_path / "missing.png"),
        photos["rocket"],
    ]
    result = store_pipeline.insert_images(
        inputs, collection_name="mixed", metadata=[{"i": i} for i in range(5)]
    )
    assert result.indices == [0, 2, 4] and set(result.failures) == {1, 3}
    assert "missing.png" in result.failures[3]
    assert len(set(result.ids)) == 3 and all(len(i) == 32 for i in result.ids)
    again = store_pipeline.insert_images([str(cat), photos["rocket"]], collection_name="mixed")
    assert again.ids == [result.ids[0], result.ids[2]]  # same bytes, same id: stored once
    assert store_pipeline.collection_stats("mixed")["count"] == 3
    assert store_pipeline.delete([result.ids[0], "nope"], collection_name="mixed") == 1
    assert store_pipeline.collection_stats("mixed")["count"] == 2
    assert "mixed" in store_pipeline.list_collections()
    with pytest.raises(InputError, match="2 ids"):
        store_pipeline.insert_images([str(cat)], ids=["a", "b"], collection_name="mixed")
    with pytest.raises(CollectionNotFoundError):
        store_pipeline.insert_images([str(cat)], collection_name="absent")
    created = store_pipeline.insert_images(
        [str(cat)], collection_name="absent", create_collection=True
    )
    assert created.ids == [result.ids[0]]
    store_pipeline.drop_collection("absent")
    assert "absent" not in store_pipeline.list_collections()


def test_bad_ids_fail_their_own_item_and_paths_record_their_name(store_pipeline, photos, tmp_path):
    store_pipeline.create_collection("items", exist_ok=True)
    cat = tmp_path / "cat.jpg"
    Image.fromarray(photos["chelsea"]).save(cat)
    result = store_pipeline.insert_images(
        [str(cat), photos["rocket"], photos["coffee"]],
        ids=["Bob's photo", "good", "x') OR ('1'='1"],
        metadata=[None, {"source": "mine"}, None],
        collection_name="items",
    )
    assert result.ids == ["good"] and result.indices == [1] and set(result.failures) == {0, 2}
    assert all("ids are 1-256 characters" in reason for reason in result.failures.values())
    named = store_pipeline.insert_images([str(cat)], ids=["cat"], collection_name="items")
    assert named.ids == ["cat"]
    hits = store_pipeline.search_images(str(cat), topk=2, collection_name="items")
    assert hits[0].id == "cat" and hits[0].metadata == {"source": "cat.jpg"}
    assert {h.id: h.metadata for h in hits}["good"] == {"source": "mine"}  # the caller's own kept
    assert store_pipeline.collection_stats("items")["count"] == 2
