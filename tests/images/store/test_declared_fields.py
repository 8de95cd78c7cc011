"""Filter fields a collection declares (`store.fields`): what a declared field
takes at insert (a value it cannot store is refused in one line naming the key and the type,
nothing of the call written; null and a missing key are taken), that a collection's declaration
cannot be changed in place (refused in one line, with advice that loses nothing), that migrate
carries it, and that an engine without it refuses it. What filters on declared fields select is
tests/images/test_filter_engines.py's (the whole corpus, every engine, one evaluator)."""

import contextlib

import numpy as np
import pytest

from accelkit.errors import ConfigError, DataError
from accelkit.images.settings.config import ServiceConfig, StoreConfig
from accelkit.images.store import VectorStore
from tests.support.require import not_applicable

FIELDS = {"year": "int64", "album": "varchar", "score": "double", "seen": "bool"}
GOOD = [
    {"year": 2020, "album": "a", "score": 0.5, "seen": True},
    {"year": None, "album": "", "score": 3},  # null, an integer in a double, "seen" missing
    {"other": [1, 2]},  # no declared key at all
]
BAD = [  # (metadata, the key and the type its refusal names)
    ({"year": "2020"}, "year", "int64"),
    ({"year": True}, "year", "int64"),
    ({"year": 1.5}, "year", "int64"),
    ({"score": "0.5"}, "score", "double"),
    ({"score": 2**53 + 1}, "score", "double"),  # a double cannot hold it exactly
    ({"album": 3}, "album", "varchar"),
    ({"album": ["a"]}, "album", "varchar"),
    ({"seen": 1}, "seen", "bool"),
]


def vectors(n: int, seed: int = 59) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 4)).astype(np.float32)


@pytest.fixture(scope="module")
def store(store_settings):
    with VectorStore(StoreConfig(**store_settings)) as s:
        if s.lite == 3:
            not_applicable("declared filter fields: Milvus Lite 3 refuses them (tested below)")
        s.create_collection("declared", dim=4, fields=FIELDS)
        s.upsert("declared", ["g0", "g1", "g2"], vectors(3), GOOD)
        yield s


def test_the_settings_name_the_types_and_refuse_others():
    assert StoreConfig(fields={"year": "int", "album": "string", "x": "float"}).fields == {
        "year": "int64",
        "album": "varchar",
        "x": "double",
    }
    assert ServiceConfig.from_env(
        {"ACCELKIT_STORE_FIELDS": "year:int, album:string"}
    ).store.fields == {
        "year": "int64",
        "album": "varchar",
    }
    assert ServiceConfig.from_env({"ACCELKIT_STORE_FIELDS": '{"seen": "bool"}'}).store.fields == {
        "seen": "bool"
    }
    for fields, named in (({"a b": "int"}, "'a b'"), ({"year": "date"}, "'date'")):
        with pytest.raises(ConfigError) as caught:
            StoreConfig(fields=fields)
        assert named in str(caught.value) and "\n" not in str(caught.value)


def test_declared_keys_are_kept_twice_and_read_back_whole(store):
    assert store.describe("declared")["fields"] == FIELDS
    got = {item["id"]: item["metadata"] for item in store.get("declared", ["g0", "g1", "g2"])}
    assert got == {"g0": GOOD[0], "g1": GOOD[1], "g2": GOOD[2]}
    query = np.ones(4, np.float32)
    assert {h.id for h in store.search("declared", query, 3, 'metadata["year"] != 2020')[0]} == {
        "g1",
        "g2",
    }  # null and a missing key: != holds, as on the JSON field
    assert {h.id for h in store.search("declared", query, 3, 'metadata["score"] == 3')[0]} == {"g1"}
    rows = store._milvus.query(
        "declared", filter='id == "g1"', output_fields=["field_score", "has_year", "has_score"]
    )
    assert rows[0]["field_score"] == 3.0 and not rows[0]["has_year"] and rows[0]["has_score"]


@contextlib.contextmanager
def round_trips(store):
    """The names of the store's describing calls made inside the block, in order."""
    client = store._milvus
    calls: list[str] = []
    spied = {
        name: getattr(client, name)
        for name in ("describe_collection", "has_collection", "list_indexes", "describe_index")
    }

    def spy(name):
        def call(*args, **kwargs):
            calls.append(name)
            return spied[name](*args, **kwargs)

        return call

    try:
        for name in spied:
            setattr(client, name, spy(name))
        yield calls
    finally:
        for name, fn in spied.items():
            setattr(client, name, fn)


def test_a_filtered_search_reads_the_collection_once(store):
    """A filtered search on declared fields reads what it needs of the collection (its
    dimension, index spec and declaration, read at each search: another client may have made it
    anew) in one round trip on a server (on Milvus Lite three): it made
    three (has_collection and two describes) besides the search, ~1 ms each of a 20 ms budget;
    through an index (a service), four (the answer's ignored settings read the spec again)."""
    from accelkit.images.embedding.batching import ItemResult
    from accelkit.images.index.local import LocalIndex

    query = np.ones(4, np.float32)
    index = LocalIndex(store, lambda data: [ItemResult(query) for _ in data], "declared", 4)
    # Milvus Lite keeps no collection properties: its index spec is read from the index
    once = ["describe_collection"] + ([] if store.is_server else ["list_indexes", "describe_index"])
    for search in (
        lambda: store.search("declared", query, 3, 'metadata["year"] == 2020')[0],
        lambda: index.search(query, 3, 'metadata["year"] == 2020', "declared"),
    ):
        search()  # what is kept, kept
        with round_trips(store) as calls:
            hits = search()
        assert [h.id for h in hits] == ["g0"]
        assert calls == once, calls


@pytest.mark.parametrize(("metadata", "key", "kind"), BAD)
def test_a_value_a_declared_field_cannot_store_is_refused_naming_key_and_type(
    store, metadata, key, kind
):
    before = store.count("declared")
    with pytest.raises(DataError) as caught:  # the good item of the same call is not written
        store.upsert("declared", ["ok", "bad"], vectors(2, 1), [{"year": 1}, metadata])
    message = str(caught.value)
    assert "\n" not in message and f'"{key}"' in message and f"{key}: {kind}" in message, message
    assert "metadata #1" in message
    assert store.count("declared", consistency="Strong") == before
    assert store.get("declared", ["ok", "bad"], consistency="Strong") == []


def test_changing_a_collections_declaration_is_refused_with_advice_that_loses_nothing(store):
    for other in ({"year": "varchar"}, {**FIELDS, "extra": "int64"}):
        with pytest.raises(ConfigError) as caught:
            store.create_collection("declared", dim=4, exist_ok=True, fields=other)
        message = str(caught.value)
        assert "\n" not in message and "'declared'" in message and "migrate" in message
        assert "delete" not in message.lower() and "drop" not in message.lower()
    store.create_collection("declared", dim=4, exist_ok=True, fields=FIELDS)  # the same: fine
    store.create_collection("declared", dim=4, exist_ok=True, fields={})  # none given: fine
    assert store.count("declared") == 3


def test_migrate_carries_the_declaration(tmp_path):
    from accelkit.images.store.migrate import migrate

    source, target = (
        StoreConfig(uri=str(tmp_path / "s.db")),
        StoreConfig(uri=str(tmp_path / "t.db")),
    )
    with VectorStore(source) as s:
        if s.lite == 3:
            not_applicable("declared filter fields: Milvus Lite 3 refuses them")
        s.create_collection("pics", dim=4, fields=FIELDS)
        s.upsert("pics", ["g0", "g1", "g2"], vectors(3), GOOD)
    migrate(source, target, ["pics"])
    with VectorStore(target) as t:
        assert t.describe("pics")["fields"] == FIELDS
        hits = t.search("pics", np.ones(4, np.float32), 3, 'metadata["album"] like "a%"')[0]
        assert [h.id for h in hits] == ["g0"] and hits[0].metadata == GOOD[0]
        assert "field_album" in t._engine_filter("pics", 'metadata["album"] like "a%"')


def test_an_engine_without_declared_fields_refuses_them_in_one_line(tmp_path):
    with VectorStore(StoreConfig(uri=str(tmp_path / "s.db"), fields={"year": "int"})) as s:
        if s.lite != 3:
            not_applicable("Milvus Lite 2.5 and the server take declared fields")
        with pytest.raises(ConfigError) as caught:
            s.create_collection("pics", dim=4)
        assert "\n" not in str(caught.value) and "store.fields" in str(caught.value)
        assert not s.has_collection("pics")


def test_conditions_on_declared_keys_read_the_fields_and_the_rest_the_json():
    """The speed-up is in the rewrite: each comparison, in, not in and like on a declared key
    reads the scalar fields; what the fields cannot answer keeps the JSON form (exact as
    written), and a filter naming no declared key is sent unchanged."""
    from accelkit.images.settings.fields import scalar_filter

    fields = {"year": "int64", "album": "varchar", "seen": "bool"}
    for text in (
        'metadata["year"] == 2020',
        'metadata["year"] != 2020',
        'metadata["year"] >= 2020.0',
        'metadata["year"] in [2020, 2021]',
        'metadata["year"] not in [2020]',
        'metadata["album"] like "2026-%"',
        'not (metadata["album"] < "b" or metadata["seen"] == true)',
    ):
        sent = scalar_filter(text, fields)
        assert "metadata" not in sent and "field_" in sent and "has_" in sent, (text, sent)
    for text in (
        'json_contains(metadata["year"], 1)',  # a scalar is no array: false, as the JSON says
        'metadata["year"]["x"] == 1',
        'metadata["year"] < 2.5',  # a non-integer against an int64
        'metadata["seen"] < true',  # an order on booleans
        'metadata["other"] == 1',
    ):
        assert scalar_filter(text, fields) == text
    assert (
        scalar_filter('metadata["year"] == "2020"', fields) == 'id == ""'
    )  # never: ids are not empty
    assert scalar_filter('metadata["year"] != "2020"', fields) == 'id != ""'
