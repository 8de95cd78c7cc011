"""Two clients on one store, one of them dropping a collection and making it anew: the other's
next insert stores its items in the collection as it is now, on every engine (the differential
rule of docs/reliability.md). A client keeps a collection's dimension and declared fields after
it first reads them (searches should not pay two extra calls); on the old code a server client
kept sending rows for the dropped collection's schema, and every insert was refused (503) until
the service was restarted."""

from __future__ import annotations

import numpy as np
import pytest

from accelkit.errors import DataError
from accelkit.images.settings.config import StoreConfig
from accelkit.images.store import VectorStore
from tests.support.require import not_applicable


def rows(n: int, dim: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def fresh(store: VectorStore, name: str) -> None:
    if store.has_collection(name):
        store.drop_collection(name)


def remake(first, second, name: str, old: dict, new: dict, metadata=None) -> None:
    """`first` makes `name` with `old` (create_collection's keywords) and stores an item, so it
    keeps what it read of it; then `second` drops it and makes it anew with `new`."""
    fresh(first, name)
    first.create_collection(name, **old)
    first.upsert(name, ["old"], rows(1, old["dim"], 1), metadata)
    second.drop_collection(name)
    second.create_collection(name, **new)


@pytest.mark.parametrize(
    ("before", "after"), [({}, {"year": "int64"}), ({"year": "int64"}, {})], ids=["gains", "loses"]
)
def test_an_insert_after_another_client_remade_the_collection_with_other_fields(
    store_settings, before, after
):
    with (
        VectorStore(StoreConfig(**store_settings)) as first,
        VectorStore(StoreConfig(**store_settings)) as second,
    ):
        if first.lite == 3:
            not_applicable("declared filter fields: Milvus Lite 3 refuses them")
        name = f"remade_{'_'.join(before) or 'none'}"
        remake(first, second, name, {"dim": 4, "fields": before}, {"dim": 4, "fields": after},
               [{"year": 1999}])  # fmt: skip
        first.upsert(name, ["a", "b"], rows(2, 4, 2), [{"year": 2001}, {"year": 2002}])
        assert first.describe(name)["fields"] == after
        hits = second.search(name, rows(1, 4, 2)[0], topk=5, filter_expr='metadata["year"] > 2001')
        assert [h.id for h in hits[0]] == ["b"]
        assert second.count(name, consistency="Strong") == 2


def test_an_insert_after_another_client_remade_the_collection_with_another_dimension(
    store_settings,
):
    with (
        VectorStore(StoreConfig(**store_settings)) as first,
        VectorStore(StoreConfig(**store_settings)) as second,
    ):
        remake(first, second, "resized", {"dim": 4}, {"dim": 8})
        with pytest.raises(DataError, match="holds 8-d vectors; got 4-d"):
            first.upsert("resized", ["a"], rows(1, 4, 3))
        assert first.upsert("resized", ["a"], rows(1, 8, 3)) == ["a"]
        assert second.count("resized", consistency="Strong") == 1


def test_a_client_that_read_a_declaration_filters_and_deletes_by_the_new_one(store_settings):
    """A declaration kept by a client while another made the collection anew with a key's type
    changed (varchar → int64): the kept one rewrote `year == 2001` to match nothing and
    `year != 2001` to match everything, so a search said "no match" and a delete by filter
    emptied the collection; an item whose year fits the new type was refused before sending."""
    with (
        VectorStore(StoreConfig(**store_settings)) as first,
        VectorStore(StoreConfig(**store_settings)) as second,
    ):
        if first.lite == 3:
            not_applicable("declared filter fields: Milvus Lite 3 refuses them")
        old, new = (
            {"dim": 4, "fields": {"year": "varchar"}},
            {"dim": 4, "fields": {"year": "int64"}},
        )
        remake(first, second, "retyped", old, new, [{"year": "1999"}])
        second.upsert("retyped", ["p", "q"], rows(2, 4, 4), [{"year": 2001}, {"year": 2002}])
        found = first.search(
            "retyped", rows(2, 4, 4), topk=5, filter_expr='metadata["year"] == 2001'
        )
        assert [[h.id for h in hits] for hits in found] == [["p"], ["p"]]
        first.upsert("retyped", ["r"], rows(1, 4, 5), [{"year": 2003}])
        assert first.delete_matching("retyped", 'metadata["year"] != 2001') == 2
        kept = second.get("retyped", ["p", "q", "r"], consistency="Strong")  # another client's
        assert [r["id"] for r in kept] == ["p"]


def test_a_client_that_read_a_dimension_searches_the_new_one(store_settings):
    with (
        VectorStore(StoreConfig(**store_settings)) as first,
        VectorStore(StoreConfig(**store_settings)) as second,
    ):
        remake(first, second, "resized_search", {"dim": 4}, {"dim": 8})
        second.upsert("resized_search", ["n"], rows(1, 8, 6))
        # a query of the kept (old) dimension: refused as the new collection's, not sent (a
        # server answered with an internal assertion, StoreError → 503, at every retry)
        with pytest.raises(DataError, match="holds 8-d vectors; the query is 4-d"):
            first.search("resized_search", rows(1, 4, 6)[0], topk=3, consistency="Strong")
        hits = first.search("resized_search", rows(1, 8, 6)[0], topk=3, consistency="Strong")
        assert [h.id for h in hits[0]] == ["n"]


def test_making_an_existing_collection_with_other_fields_says_it_exists(store_settings):
    """The fields check ran before the existence check: 400 invalid_request, not 409."""
    from accelkit.images.store import CollectionExistsError

    with VectorStore(StoreConfig(**store_settings)) as store:
        if store.lite == 3:
            not_applicable("declared filter fields: Milvus Lite 3 refuses them")
        fresh(store, "taken")
        store.create_collection("taken", dim=4)
        with pytest.raises(CollectionExistsError):
            store.create_collection("taken", dim=4, fields={"year": "int64"})


def test_a_client_searches_an_index_another_client_replaced_with_its_parameters(store_settings):
    """`images collection index` from another process while a service searches: the service
    kept the FLAT spec and searched the new IVF index with Milvus' default nprobe — 200s with
    recall@10 0.45 against the fresh client's 1.0 (a tester, 2026-12-07)."""
    with (
        VectorStore(StoreConfig(**store_settings)) as first,
        VectorStore(StoreConfig(**store_settings)) as second,
    ):
        if not first.is_server:
            not_applicable("Milvus Lite keeps one index per collection for good: no rebuild")
        fresh(first, "reindexed")
        first.create_collection("reindexed", dim=16, index_type="FLAT", metric_type="L2")
        data = rows(3000, 16, 7)
        first.upsert("reindexed", [f"i{i}" for i in range(3000)], data)
        queries = data[:20] + 0.01 * rows(20, 16, 8)
        exact = [[h.id for h in hits] for hits in first.search("reindexed", queries, topk=10)]
        params = {"nlist": 64, "nprobe": 64}  # every list probed: exact again
        second.rebuild_index("reindexed", "IVF_FLAT", "L2", params)
        assert first.describe("reindexed")["index_type"] == "IVF_FLAT"
        again = first.search("reindexed", queries, topk=10, consistency="Strong")
        assert [[h.id for h in hits] for hits in again] == exact


def test_a_client_searches_a_collection_another_made_anew_with_another_index_and_metric(
    store_settings,
):
    """Two clients of one Milvus Lite database in one process (a service and an index, two
    indexes): the first kept the FLAT/L2 spec of a collection the second made anew as
    IVF_FLAT/IP, and every search of it was refused ("metric type not match") until a restart —
    or, with the same metric and other index parameters, answered another top-k as if right."""
    with (
        VectorStore(StoreConfig(**store_settings)) as first,
        VectorStore(StoreConfig(**store_settings)) as second,
    ):
        fresh(first, "remetric")
        first.create_collection("remetric", dim=8, index_type="FLAT", metric_type="L2")
        data = rows(300, 8, 11)
        data[:, 0] *= 10  # L2 and IP disagree on the neighbours
        ids = [f"i{i}" for i in range(300)]
        first.upsert("remetric", ids, data)
        queries = rows(5, 8, 12)
        first.search("remetric", queries, topk=5)
        second.drop_collection("remetric")
        ivf = {"nlist": 4, "nprobe": 4}  # every list probed: exact
        second.create_collection(
            "remetric", dim=8, index_type="IVF_FLAT", metric_type="IP", index_params=ivf
        )
        second.upsert("remetric", ids, data)
        found = first.search("remetric", queries, topk=5, consistency="Strong")
        expected = np.argsort(-(queries.astype(np.float64) @ data.T.astype(np.float64)), axis=1)
        assert [[h.id for h in hits] for hits in found] == [
            [f"i{i}" for i in row[:5]] for row in expected
        ]
        assert first.describe("remetric")["metric_type"] == "IP"


def test_a_client_reads_the_model_record_another_client_made(store_settings):
    """The model check before each insert reads the collection's model record: on Milvus Lite
    a second client's new record went unread (`fresh` held for a server only), so an index
    could have filled a collection made anew for another model with its own vectors."""
    with (
        VectorStore(StoreConfig(**store_settings)) as first,
        VectorStore(StoreConfig(**store_settings)) as second,
    ):
        remake(first, second, "remodelled", {"dim": 4}, {"dim": 4, "model": {"name": "two"}})
        assert first.recorded("remodelled", "model", fresh=True) == {"name": "two"}
        second.record("remodelled", {"model": {"name": "three"}})
        assert first.recorded("remodelled", "model", fresh=True) == {"name": "three"}


def test_a_collection_another_client_dropped_is_not_found(store_settings):
    """Each operation on a collection another client dropped says it does not exist (404):
    a server client that had read it answered 503 "failed" (a fault of the store, retry),
    a filtered search 400 invalid_filter — advice that cannot help."""
    from accelkit.images.store import CollectionNotFoundError

    with (
        VectorStore(StoreConfig(**store_settings)) as first,
        VectorStore(StoreConfig(**store_settings)) as second,
    ):
        fresh(first, "gone")
        first.create_collection("gone", dim=4)
        first.upsert("gone", ["a"], rows(1, 4, 13), [{"n": 1}])
        calls = {
            "search": lambda: first.search("gone", rows(1, 4, 13), topk=1),
            "filtered search": lambda: first.search(
                "gone", rows(1, 4, 13), topk=1, filter_expr='metadata["n"] == 1'
            ),
            "get": lambda: first.get("gone", ["a"]),
            "upsert": lambda: first.upsert("gone", ["b"], rows(1, 4, 14)),
            "delete": lambda: first.delete("gone", ["a"]),
            "delete by filter": lambda: first.delete_matching("gone", 'metadata["n"] == 1'),
            "count": lambda: first.count("gone"),
        }
        for call in calls.values():  # each one read and kept what it needs
            call()
        second.drop_collection("gone")
        for what, call in calls.items():
            with pytest.raises(CollectionNotFoundError, match="does not exist") as raised:
                call()
            assert "\n" not in str(raised.value), what
        assert not first.has_collection("gone")


def test_an_insert_asked_to_create_makes_a_collection_another_client_dropped(store_settings):
    """A long-lived index (a service) kept that the collection existed; after another client
    dropped it, an insert asked to create it answered 404 "create it first, or insert with
    --create-collection" — what it had been asked."""
    from accelkit.images.embedding.batching import ItemResult
    from accelkit.images.index.base import ImageInput, insert_in_chunks
    from accelkit.images.index.local import LocalIndex

    table = rows(4, 4, 15)
    with (
        VectorStore(StoreConfig(**store_settings)) as first,
        VectorStore(StoreConfig(**store_settings)) as second,
    ):
        fresh(first, "made_again")
        index = LocalIndex(first, lambda data: [ItemResult(table[d]) for d in data], "pics", 4)
        made = insert_in_chunks(index, [ImageInput(0, "a")], "made_again", create_collection=True)
        assert made.ids == ["a"]
        second.drop_collection("made_again")
        again = insert_in_chunks(index, [ImageInput(1, "b")], "made_again", create_collection=True)
        assert again.ids == ["b"] and not again.failures
        assert second.count("made_again", consistency="Strong") == 1


def test_a_collection_another_program_made_is_refused_as_not_ours(store_settings):
    """A collection made with pymilvus' quick setup (an int64 id, no metadata field): a write
    answered 503 "failed" (retry), a read by id "cannot be casted to Int64", a filtered search
    an empty list as if nothing matched; each is now one 409-class line naming its fields."""
    from accelkit.images.store import ForeignCollectionError

    with VectorStore(StoreConfig(**store_settings)) as store:
        fresh(store, "foreign")
        store._milvus.create_collection("foreign", dimension=4)  # another program's
        calls = {
            "upsert": lambda: store.upsert("foreign", ["a"], rows(1, 4, 16)),
            "get": lambda: store.get("foreign", ["a"]),
            "delete": lambda: store.delete("foreign", ["a"]),
            "delete by filter": lambda: store.delete_matching("foreign", 'metadata["n"] == 1'),
            "search": lambda: store.search("foreign", rows(1, 4, 16), topk=1),
            "filtered search": lambda: store.search(
                "foreign", rows(1, 4, 16), topk=1, filter_expr='metadata["n"] == 1'
            ),
        }
        for what, call in calls.items():
            with pytest.raises(ForeignCollectionError, match="not made by accelkit") as raised:
                call()
            assert "id: int64" in str(raised.value) and "\n" not in str(raised.value), what
        store.drop_collection("foreign")


class Model:
    """The record of a model (what `embedding.models.ModelRecords` gives an index) by name."""

    def __init__(self, name: str):
        self.name = name

    def image(self) -> dict:
        return {"version": 2, "name": self.name, "dim": 4, "image_tower": {"weights": self.name}}

    def text(self) -> None:
        return None

    def full(self) -> dict:
        return {**self.image(), "text": False}


def test_a_search_refuses_a_collection_another_client_made_anew_for_another_model(
    store_settings,
):
    """A service kept the model record it first read: after another client made the collection
    anew for another model (the int8 one), its image searches answered 200, the other model's
    vectors ranked by this model's query; a fresh client said 409 model_mismatch."""
    from accelkit.images.embedding.batching import ItemResult
    from accelkit.images.index.base import ImageInput, ModelMismatchError, insert_in_chunks
    from accelkit.images.index.local import LocalIndex

    table = rows(4, 4, 17)
    with (
        VectorStore(StoreConfig(**store_settings)) as first,
        VectorStore(StoreConfig(**store_settings)) as second,
    ):
        fresh(first, "other_model")
        index = LocalIndex(
            first, lambda data: [ItemResult(table[d]) for d in data], "other_model", 4,
            model=Model("fp32"),
        )  # fmt: skip
        assert insert_in_chunks(index, [ImageInput(0, "a")], "other_model", True).ids == ["a"]
        assert [h.id for h in index.search(ImageInput(0), 1)] == ["a"]
        second.drop_collection("other_model")
        second.create_collection("other_model", dim=4, model=Model("int8").full())
        second.upsert("other_model", ["b"], table[1:2])
        with pytest.raises(ModelMismatchError, match="holds vectors of model 'int8'"):
            index.search(ImageInput(0), 1, consistency="Strong")


def test_a_pymilvus_client_of_this_process_remaking_a_collection_is_seen_by_the_next_search(
    store_settings,
):
    """A user's own pymilvus client of the same database in the same process, beside accelkit's
    bookkeeping (which counts only accelkit's stores' changes on Milvus Lite): after it made the
    collection anew with another metric, a search that had kept the old spec answered Lite 3's
    other-metric scores as if right and was refused as a store fault ("metric type not match")
    on Lite 2.5; after it made one by its quick setup, the search answered its hits."""
    from pymilvus import DataType, MilvusClient

    from accelkit.images.store import ForeignCollectionError

    with VectorStore(StoreConfig(**store_settings)) as store:
        fresh(store, "theirs")
        store.create_collection("theirs", dim=8, index_type="FLAT", metric_type="COSINE")
        data = rows(60, 8, 21)
        data[:, 0] *= 10  # L2 and COSINE disagree on the neighbours
        ids = [f"i{i}" for i in range(60)]
        store.upsert("theirs", ids, data)
        queries = rows(3, 8, 22)
        store.search("theirs", queries, topk=5)  # dimension, spec and fields kept
        theirs = store._milvus  # the same connection, as a pymilvus client of this process
        theirs.drop_collection("theirs")
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=512)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=8)
        schema.add_field("metadata", DataType.JSON)
        index = theirs.prepare_index_params()
        index.add_index("vector", index_type="FLAT", metric_type="L2")
        theirs.create_collection("theirs", schema=schema, index_params=index)
        theirs.insert(
            "theirs",
            [
                {"id": i, "vector": v.tolist(), "metadata": {}}
                for i, v in zip(ids, data, strict=True)
            ],
        )
        theirs.flush("theirs")
        theirs.load_collection("theirs")
        found = store.search("theirs", queries, topk=5, consistency="Strong")
        q, d = queries.astype(np.float64), data.astype(np.float64)
        distances = ((q[:, None, :] - d[None, :, :]) ** 2).sum(-1)
        assert [[h.id for h in hits] for hits in found] == [
            [f"i{i}" for i in row[:5]] for row in np.argsort(distances, axis=1)
        ]
        assert [h.score for h in found[0]] == pytest.approx(np.sort(distances[0])[:5], rel=1e-4)
        assert store.describe("theirs")["metric_type"] == "L2"
        theirs.drop_collection("theirs")
        theirs.create_collection("theirs", dimension=8)  # its quick setup: an int64 id
        with pytest.raises(ForeignCollectionError, match="not made by accelkit"):
            store.search("theirs", queries, topk=5)
        theirs.drop_collection("theirs")
