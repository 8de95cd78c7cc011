"""The library API (`accelkit.images.api`) and the one application layer under it: every
operation is written once in `ImageIndex`, the backends supply only their own steps."""

import inspect

import numpy as np
import pytest

from accelkit.errors import ConfigError, DataError, InputError

PUBLIC = (
    "insert",
    "search",
    "get",
    "delete",
    "create_collection",
    "describe",
    "drop_collection",
    "flush",
    "index_progress",
    "rebuild_index",
)


def test_each_operation_is_written_once_in_the_application_layer():
    from accelkit.images.index.base import ImageIndex
    from accelkit.images.index.local import LocalIndex
    from accelkit.images.index.remote import RemoteIndex

    for backend in (LocalIndex, RemoteIndex):
        assert issubclass(backend, ImageIndex)
        for name in PUBLIC:
            assert name not in vars(backend), f"{backend.__name__} repeats {name}"
        assert not inspect.isabstract(backend)


def test_the_package_exports_the_operations_a_user_runs():
    from accelkit import images

    for name in (
        "embed",
        "insert",
        "search",
        "serve",
        "health",
        "list_collections",
        "create_collection",
        "describe_collection",
        "flush_collection",
        "index_collection",
        "set_model",
        "delete_collection",
        "open_index",
    ):
        assert callable(getattr(images, name)), name


def test_load_settings_applies_sections_to_a_given_config_and_validates_them():
    from accelkit.images import ServiceConfig, load_settings

    base = ServiceConfig(store={"collection_name": "base"})
    merged = load_settings(base, preprocess={"fit": "letterbox"}, store={"uri": "./x.db"})
    assert merged.preprocess.fit == "letterbox" and merged.store.uri == "./x.db"
    assert merged.store.collection_name == "base" and base.store.uri != "./x.db"
    with pytest.raises(ConfigError, match="fit"):
        load_settings(base, preprocess={"fit": "sideways"})


def test_inputs_are_refused_before_a_store_or_model_opens(tmp_path):
    """A store URI that cannot be opened is never reached: the input is refused first."""
    from accelkit import images

    config = images.load_settings(store={"uri": str(tmp_path / "no" / "such" / "folder.db")})
    with pytest.raises(DataError, match="no such file"):
        images.search(str(tmp_path / "missing.jpg"), config=config)
    (tmp_path / "notes.txt").write_text("not an image")
    with pytest.raises(DataError, match="not an image"):
        images.search(str(tmp_path / "notes.txt"), config=config)
    with pytest.raises(InputError, match="--topk 0"):
        images.search(str(tmp_path / "notes.txt"), 0, config=config)
    with pytest.raises(DataError, match="none of the 1 inputs can be read"):
        images.insert([str(tmp_path / "missing.jpg")], "c", config=config)
    with pytest.raises(InputError, match="got 1 images but 2 ids"):
        images.insert([str(tmp_path / "notes.txt")], "c", ids=["a", "b"], config=config)
    with pytest.raises(InputError, match="metadata must be one JSON object or a list of 1"):
        images.insert([str(tmp_path / "notes.txt")], "c", metadata=[{}, {}], config=config)
    assert not (tmp_path / "no").exists()


def test_the_base_checks_arguments_once_for_every_backend():
    """The remote index refuses a bad call before any request (no service runs here)."""
    from accelkit.images.index.remote import RemoteIndex

    with RemoteIndex("http://127.0.0.1:9") as index:
        with pytest.raises(InputError, match="give either ids or a filter"):
            index.delete()
        with pytest.raises(InputError, match="topk 0"):
            index.search(np.zeros(4, np.float32), topk=0)
        with pytest.raises(InputError, match="contains"):
            index.get(["it's"])


def test_every_result_object_gives_its_json_document_as_document():
    """One name per thing: images' result objects once had `.to_dict()` where stats and bench have
    `.document()` (docs/architecture.md promises `.document()`)."""
    from accelkit.images import EmbedReport, HealthReport, InsertReport, SearchReport
    from accelkit.images.index.base import InsertResult
    from accelkit.images.store.migrate import CollectionCopy, MigrateReport
    from accelkit.images.store.records import Hit

    classes = (EmbedReport, HealthReport, InsertReport, SearchReport, InsertResult, Hit)
    for cls in (*classes, CollectionCopy, MigrateReport):
        assert callable(getattr(cls, "document", None)), cls.__name__
        assert not hasattr(cls, "to_dict"), cls.__name__
    report = MigrateReport("a.db", "b.db", [CollectionCopy("photos", 2, copied=2)])
    assert report.document()["collections"][0] == CollectionCopy("photos", 2, copied=2).document()
    assert Hit("x", 0.5).document() == {"id": "x", "score": 0.5, "metadata": {}}
