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
        fresh(first, name)
        first.create_collection(name, dim=4, fields=before)
        first.upsert(name, ["old"], rows(1, 4, 1), [{"year": 1999}])
        second.drop_collection(name)
        second.create_collection(name, dim=4, fields=after)
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
        fresh(first, "resized")
        first.create_collection("resized", dim=4)
        first.upsert("resized", ["old"], rows(1, 4, 1))
        second.drop_collection("resized")
        second.create_collection("resized", dim=8)
        with pytest.raises(DataError, match="holds 8-d vectors; got 4-d"):
            first.upsert("resized", ["a"], rows(1, 4, 3))
        assert first.upsert("resized", ["a"], rows(1, 8, 3)) == ["a"]
        assert second.count("resized", consistency="Strong") == 1
