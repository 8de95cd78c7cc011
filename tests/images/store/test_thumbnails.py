"""Thumbnails: bounded in pixels and bytes, faithful to a plain PIL reference, kept by
(collection, id) in the SQLite side store, and made by every insert of the application layer."""

import io

import numpy as np
import pytest
from PIL import Image

from accelkit.images.store.thumbnails import (
    MAX_BYTES,
    MAX_SIDE,
    ThumbnailStore,
    make_thumbnail,
    thumbnail_path,
)
from tests.support.photos import encode


def decoded(jpeg: bytes) -> np.ndarray:
    image = Image.open(io.BytesIO(jpeg))
    assert image.format == "JPEG"
    return np.asarray(image.convert("RGB"), np.float64)


@pytest.mark.parametrize("name", ["chelsea", "astronaut", "coffee_cup", "moon"])
@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_thumbnail_matches_a_pil_reference(photos, name, fmt):
    data = encode(photos[name], fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    ours = decoded(make_thumbnail(data))
    full = Image.open(io.BytesIO(data)).convert("RGB")  # full decode, then PIL's thumbnail
    expected = full.copy()
    expected.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.LANCZOS)
    # a reduced-scale JPEG decode may round the short side one pixel the other way
    assert max(ours.shape[:2]) == MAX_SIDE
    assert abs(ours.shape[0] - expected.size[1]) + abs(ours.shape[1] - expected.size[0]) <= 1
    size = (ours.shape[1], ours.shape[0])
    exact = full.resize(size, Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    exact.save(buffer, format="JPEG", quality=80, optimize=True)
    reference = decoded(buffer.getvalue())  # PIL's own resize, as a quality-80 JPEG
    exact = np.asarray(exact, np.float64)
    if fmt == "PNG":  # the same pixels, the same encoder: the same thumbnail
        np.testing.assert_array_equal(ours, reference)
    # a JPEG is decoded at a reduced DCT scale first: measured 0.02-0.74 levels more error
    assert np.abs(ours - exact).mean() <= np.abs(reference - exact).mean() + 1.0


def test_thumbnail_bytes_are_bounded_for_noise_and_odd_shapes(rng):
    noise = rng.integers(0, 256, (3000, 4000, 3), dtype=np.uint8)
    jpeg = make_thumbnail(encode(noise, "PNG"))
    assert len(jpeg) <= MAX_BYTES and max(Image.open(io.BytesIO(jpeg)).size) <= MAX_SIDE
    tiny = make_thumbnail(noise, max_bytes=2000)  # arrays work too; a tighter bound still holds
    assert len(tiny) <= 2000
    strip = make_thumbnail(np.zeros((10, 2000, 3), np.uint8))
    assert Image.open(io.BytesIO(strip)).size == (MAX_SIDE, 1)
    small = make_thumbnail(np.full((20, 30, 3), 200, np.uint8))  # never enlarged
    assert Image.open(io.BytesIO(small)).size == (30, 20)


def test_thumbnail_store_by_collection_and_id(tmp_path):
    store = ThumbnailStore(str(tmp_path / "t.sqlite"))
    assert store.get("a", "x") is None and not (tmp_path / "t.sqlite").exists()  # made lazily
    store.put("a", [("x", b"1"), ("y", b"2")])
    store.put("b", [("x", b"3")])
    store.put("a", [("x", b"4")])  # a second insert of an id replaces its thumbnail
    assert (store.get("a", "x"), store.get("a", "y"), store.get("b", "x")) == (b"4", b"2", b"3")
    store.delete("a", ["y", "missing"])
    assert store.get("a", "y") is None and store.count("a") == 1
    store.drop("a")
    assert store.count("a") == 0 and store.get("b", "x") == b"3"
    again = ThumbnailStore(str(tmp_path / "t.sqlite"))  # another process opening the same file
    assert again.get("b", "x") == b"3"


def test_thumbnail_path_rules(tmp_path):
    lite = str(tmp_path / "images.db")
    assert thumbnail_path(lite, "auto") == lite + ".thumbnails.sqlite"
    assert thumbnail_path("http://127.0.0.1:19530", "auto") is None
    assert thumbnail_path(lite, "off") is None
    assert thumbnail_path("http://h:19530", str(tmp_path / "t.sqlite")) == str(
        tmp_path / "t.sqlite"
    )


def test_every_insert_of_the_index_makes_thumbnails(pipeline, photos, tmp_path):
    """The application layer makes them, so the CLI, the Python API and the service all do; a
    delete removes them and only stored items have one."""
    from accelkit.images import ServiceConfig
    from accelkit.images.index.base import ImageInput, ItemNotFoundError
    from accelkit.images.index.local import open_local_index

    config = ServiceConfig.from_env(
        env={},
        preprocess={"cache_compiled": False, "batch_size": 8},
        model={"onnx_path": pipeline.config.model.onnx_path},
        store={"uri": str(tmp_path / "images.db")},
    )
    with open_local_index(config) as index:
        names = ["chelsea", "coffee", "rocket"]
        result = index.insert(
            [ImageInput(encode(photos[n], "JPEG"), id=n, source=f"{n}.jpg") for n in names]
            + [ImageInput(b"not an image", id="broken")],
            create_collection=True,
        )
        assert result.ids == names and list(result.failures) == [3]
        for n in names:
            thumb = decoded(index.thumbnail(n))
            assert max(thumb.shape[:2]) == MAX_SIDE
        assert index.thumbnail("broken") is None and index.thumbnail("nope") is None
        vector = index.stored_vector("coffee")
        assert index.search(vector, topk=1)[0].id == "coffee"
        with pytest.raises(ItemNotFoundError):
            index.stored_vector("nope")
        index.delete(["rocket"])
        assert (
            index.thumbnail("rocket") is None and index.thumbnails.get("images", "rocket") is None
        )
        index.delete(filter='metadata["source"] == "coffee.jpg"')  # its thumbnail is left ...
        assert index.thumbnails.get("images", "coffee") is not None
        assert index.thumbnail("coffee") is None  # ... and never shown
        index.drop_collection("images")
        assert index.thumbnails.count("images") == 0
    assert (tmp_path / "images.db.thumbnails.sqlite").exists()
