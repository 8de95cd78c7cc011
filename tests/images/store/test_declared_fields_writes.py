"""Declared filter fields (`store.fields`) where items enter: a bulk insert checks each item's
declared types with its other per-item checks, before anything is embedded or stored, and names
the input (not its place in a chunk); an insert whose `store.fields` names other fields than the
collection's is refused, not silently ignored; a migrate whose DST declares fields that cannot
hold SRC's items is refused before DST's collection is made (no "run again" that cannot help);
the Milvus Lite 2.x file reader takes a collection that declares fields."""

import numpy as np
import pytest

from accelkit.errors import ConfigError, InputError
from accelkit.images.embedding.batching import ItemResult
from accelkit.images.index.base import ImageInput, insert_in_chunks
from accelkit.images.index.local import LocalIndex
from accelkit.images.settings.config import StoreConfig
from accelkit.images.settings.fields import check_fields
from accelkit.images.store import VectorStore
from tests.support.require import not_applicable


def vectors(n: int, seed: int = 60) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


def index_on(store: VectorStore) -> LocalIndex:
    """An index whose 'model' gives each item the vector its data names (an int)."""
    table = vectors(16)
    return LocalIndex(store, lambda data: [ItemResult(table[d]) for d in data], "pics", 4)


def declaring_store(tmp_path, fields) -> VectorStore:
    store = VectorStore(StoreConfig(uri=str(tmp_path / "s.db"), fields=fields))
    if store.lite == 3:
        store.close()
        not_applicable("declared filter fields: Milvus Lite 3 refuses them")
    return store


def test_a_bulk_insert_refuses_only_the_item_its_declared_field_cannot_hold(tmp_path):
    """The fifth of seven items, in the third chunk of two: on the old code the store refused
    the whole chunk after two chunks were written, naming 'metadata #0' of that chunk."""
    with declaring_store(tmp_path, {"year": "int64"}) as store:
        items = [
            ImageInput(i, f"id{i}", {"year": 2000 + i}, label=f"photo{i}.jpg") for i in range(7)
        ]
        items[4] = ImageInput(4, "id4", {"year": "2004"}, label="photo4.jpg")
        result = insert_in_chunks(index_on(store), items, "pics", create_collection=True, chunk=2)
        assert result.ids == ["id0", "id1", "id2", "id3", "id5", "id6"]
        assert list(result.failures) == [4]
        reason = result.failures[4]
        assert reason.startswith("photo4.jpg: ") and '"year" holds "2004"' in reason, reason
        assert "year: int64" in reason and "#" not in reason and "\n" not in reason
        assert store.count("pics", consistency="Strong") == 6
        assert store.describe("pics")["fields"] == {"year": "int64"}


def test_an_insert_asking_for_fields_the_collection_lacks_is_refused(tmp_path):
    with VectorStore(StoreConfig(uri=str(tmp_path / "s.db"))) as plain:
        plain.create_collection("pics", dim=4)
        plain.upsert("pics", ["a"], vectors(1), [{"year": "old"}])
    with declaring_store(tmp_path, {"year": "int64"}) as store:
        with pytest.raises(ConfigError) as caught:
            index_on(store).insert([ImageInput(1, "b", {"year": "y"})], "pics")
        message = str(caught.value)
        assert "\n" not in message and "store.fields" in message and "'pics'" in message
        assert "delete" not in message.lower() and "drop" not in message.lower()
        assert store.count("pics", consistency="Strong") == 1


def test_migrate_refuses_a_declaration_that_cannot_hold_the_items_before_copying(tmp_path):
    from accelkit.images.store.migrate import migrate

    source = StoreConfig(uri=str(tmp_path / "s.db"))
    target = StoreConfig(uri=str(tmp_path / "t.db"), fields={"year": "int64"})
    with VectorStore(source) as s:
        if s.lite == 3:
            not_applicable("declared filter fields: Milvus Lite 3 refuses them")
        s.create_collection("pics", dim=4)
        s.upsert("pics", ["a", "b", "c"], vectors(3), [{"year": 1}, {"year": "x"}, {}])
    for _ in range(2):  # the same answer every time: nothing to resume
        with pytest.raises(InputError) as caught:
            migrate(source, target, ["pics"])
        message = str(caught.value)
        assert "\n" not in message and "'b'" in message and '"year" holds "x"' in message
        assert "again" not in message and "--restart" not in message, message
        with VectorStore(target) as t:
            assert not t.has_collection("pics")
    migrate(source, StoreConfig(uri=str(tmp_path / "t.db")), ["pics"])  # undeclared: copied
    with VectorStore(StoreConfig(uri=str(tmp_path / "t.db"))) as t:
        assert t.count("pics", consistency="Strong") == 3 and t.describe("pics")["fields"] == {}


def test_the_lite2_file_reader_takes_a_collection_that_declares_fields(tmp_path):
    from accelkit.images.store.lite2_file import Lite2Store
    from accelkit.images.store.migrate import migrate

    fields = {"year": "int64", "album": "varchar", "score": "double", "seen": "bool"}
    metadata = [{"year": 1, "album": "a", "score": 0.5, "seen": True}, {"year": None}, {}]
    source = StoreConfig(uri=str(tmp_path / "s.db"))
    with VectorStore(source) as s:
        if s.lite != 2:
            not_applicable("a Milvus Lite 2.x file is written by the 2.5 engine")
        s.create_collection("pics", dim=4, fields=fields)
        s.upsert("pics", ["a", "b", "c"], vectors(3), metadata)
    with Lite2Store(source) as reader:
        assert reader.describe("pics")["fields"] == fields
        rows = [row for rows in reader.iterate("pics") for row in rows]
        assert [r["metadata"] for r in rows] == metadata
    target = StoreConfig(uri=str(tmp_path / "t.db"))
    migrate(source, target, ["pics"], lite2_reader=True)
    with VectorStore(target) as t:
        assert t.describe("pics")["fields"] == fields and t.count("pics") == 3


def test_store_fields_refuse_a_key_given_twice_and_say_what_json_must_be():
    for text in ("a:int,a:bool", '{"a": "int", "a": "bool"}'):
        with pytest.raises(ValueError, match='declares "a" twice'):
            check_fields(text)
    with pytest.raises(ValueError, match="must map metadata keys to types"):
        check_fields("[]")


def test_migrate_again_declaring_other_fields_is_refused_not_ignored(tmp_path):
    """A finished copy, migrated again with a DST config declaring fields its copy lacks: once
    'nothing to do, verified again' (exit 0, the config ignored); now refused in one line."""
    from accelkit.images.store.migrate import migrate

    source = StoreConfig(uri=str(tmp_path / "s.db"))
    with VectorStore(source) as s:
        if s.lite == 3:
            not_applicable("declared filter fields: Milvus Lite 3 refuses them")
        s.create_collection("pics", dim=4)
        s.upsert("pics", ["a", "b"], vectors(2), [{"year": 1}, {}])
    migrate(source, StoreConfig(uri=str(tmp_path / "t.db")), ["pics"])
    declaring = StoreConfig(uri=str(tmp_path / "t.db"), fields={"year": "int64"})
    with pytest.raises(ConfigError) as caught:
        migrate(source, declaring, ["pics"])
    message = str(caught.value)
    assert "\n" not in message and "'pics'" in message and "store.fields" in message
    assert "delete" not in message.lower() and "drop" not in message.lower()
    with VectorStore(StoreConfig(uri=str(tmp_path / "t.db"))) as t:
        assert t.describe("pics")["fields"] == {} and t.count("pics", consistency="Strong") == 2


def test_a_copy_into_lite3_declaring_fields_runs_again_as_it_ran_first(tmp_path):
    """Milvus Lite 3 takes no declared fields, so a copy into it is made without them (a warning
    says so). Run again (a resume, a check), the same DST config was refused: its store.fields
    named fields the copy lacks, and the copy could never be finished or verified."""
    from accelkit.images.store.migrate import migrate

    source = StoreConfig(uri=str(tmp_path / "s.db"))
    with VectorStore(source) as s:
        if s.lite != 3:
            not_applicable("Milvus Lite 3 sets declared fields aside; the others keep them")
        s.create_collection("pics", dim=4)
        s.upsert("pics", ["a", "b"], vectors(2), [{"year": 1}, {}])
    declaring = StoreConfig(uri=str(tmp_path / "t.db"), fields={"year": "int64"})
    migrate(source, declaring, ["pics"])
    migrate(source, declaring, ["pics"])
    with VectorStore(StoreConfig(uri=str(tmp_path / "t.db"))) as t:
        assert t.describe("pics")["fields"] == {} and t.count("pics", consistency="Strong") == 2
