"""`accelkit images insert` killed outright (SIGKILL) at its store writes (the crash harness,
benchmarks/reliability/faults.py, kills every writer at 20 points; these are the points that found
something). The store is read back by a separate client (tests/support/crash/store.py) after the
kill and after the command is run again."""

import pytest
from PIL import Image

from tests.support.crash import killed_at, write_events
from tests.support.crash.process import accelkit, run
from tests.support.crash.store import store_state

INSERT = ["images", "insert", "photos", "--config", "images.yaml", "--collection", "pics",
          "--create-collection"]  # fmt: skip


@pytest.fixture
def world(tmp_path, photos, onnx_path):
    """4 photos and a config whose Milvus Lite store does not exist yet, copied per run."""

    def make(name):
        folder = tmp_path / name
        (folder / "photos").mkdir(parents=True)
        for i, key in enumerate(sorted(photos)[:4]):
            Image.fromarray(photos[key]).save(folder / "photos" / f"p{i}.jpg")
        (folder / "images.yaml").write_text(
            "preprocess:\n  cache_compiled: false\n  batch_size: 4\n"
            f"model:\n  onnx_path: {onnx_path}\nstore:\n  uri: {folder / 'store' / 'images.db'}\n"
        )
        return folder

    return make


def pics(folder):
    return store_state(str(folder / "store" / "images.db"))["collections"].get("pics")


def rerun(folder):
    done = run(accelkit(*INSERT), folder)
    assert done.code == 0, done.output[-3000:]


@pytest.mark.parametrize("step", ["create_collection", "create_index"])
def test_a_collection_whose_creation_was_killed_is_finished_by_the_next_insert(world, step):
    """Killed after Milvus made the collection and before its index (or its catalog record of the
    model) was written: the insert run again filled it, and it stayed without an index and
    without a model record for good, so an insert or a search by another model was never refused."""
    counted = world("counted")
    write_events(INSERT, counted, counted / "events.txt")
    clean = pics(counted)
    assert clean["meta"]["model"] and clean["meta"]["indexes"]
    killed = world("killed")
    killed_at(INSERT, killed, rf"^milvus\.{step} pics$")
    rerun(killed)
    assert pics(killed) == clean


def test_an_item_killed_between_its_vector_and_its_thumbnail_is_never_stored_without_one(world):
    """Killed after the store took the vectors and before their thumbnails were kept: the items
    were searchable with no picture on the search page."""
    counted = world("counted")
    write_events(INSERT, counted, counted / "events.txt")
    killed = world("killed")
    killed_at(INSERT, killed, r"^milvus\.upsert pics$")
    held = pics(killed)
    without = [i for i, item in (held or {}).get("items", {}).items() if item["thumbnail"] is None]
    assert not without, f"stored without a thumbnail: {without}"
    rerun(killed)
    assert pics(killed) == pics(counted)


def test_a_delete_killed_between_the_collection_and_its_thumbnails_is_finished_by_the_next(world):
    """`images collection delete` killed after Milvus dropped the collection and before its
    thumbnails went: run again, it said the collection does not exist (exit 2, as it should) and
    left the thumbnails in the side file for good."""
    import sqlite3

    delete = ["images", "collection", "delete", "pics", "--config", "images.yaml"]
    counted, killed = world("counted"), world("killed")
    rerun(counted)  # the collection to delete
    rerun(killed)
    write_events(delete, counted, counted / "events.txt")
    killed_at(delete, killed, r"^milvus\.drop_collection pics$")
    again = run(accelkit(*delete), killed)
    assert again.code == 2 and "does not exist" in again.output, again.output[-2000:]
    with sqlite3.connect(killed / "store" / "images.db.thumbnails.sqlite") as db:
        left = db.execute("SELECT count(*) FROM thumbnails WHERE collection = 'pics'").fetchone()
    assert left == (0,), f"{left[0]} thumbnails of the deleted collection left"
