"""VectorStore against a real Milvus Lite database; every score checked against numpy."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from accelkit.errors import ConfigError, DataError, InputError
from accelkit.images.config import ServiceConfig, StoreConfig
from accelkit.images.store import (
    CollectionExistsError,
    CollectionNotFoundError,
    IndexSpec,
    StoreError,
    VectorStore,
)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with VectorStore(
        StoreConfig(uri=str(tmp_path_factory.mktemp("milvus") / "store.db"), insert_batch_size=7)
    ) as s:
        yield s


def unit_rows(rng, n, dim):
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def reference_scores(metric, data, query):
    q = query.astype(np.float64)
    d = data.astype(np.float64)
    if metric == "L2":
        return ((d - q) ** 2).sum(axis=1)  # Milvus reports the squared distance
    if metric == "COSINE":
        return d @ q / (np.linalg.norm(d, axis=1) * np.linalg.norm(q))
    return d @ q


@pytest.mark.parametrize("index_type", ["FLAT", "IVF_FLAT"])
@pytest.mark.parametrize("metric", ["COSINE", "IP", "L2"])
def test_search_matches_numpy(store, index_type, metric):
    rng = np.random.default_rng(len(index_type) * 7 + len(metric))
    name = f"s_{index_type}_{metric}".lower()
    data = rng.standard_normal((300, 24)).astype(
        np.float32
    )  # not unit rows: IP, COSINE and L2 differ
    params = (
        {"nlist": 8, "nprobe": 8} if index_type == "IVF_FLAT" else {}
    )  # nprobe = nlist: exhaustive
    info = store.create_collection(
        name,
        dim=24,
        description="t",
        index_type=index_type,
        metric_type=metric,
        index_params=params,
    )
    assert (info["index_type"], info["metric_type"], info["dim"], info["count"]) == (
        index_type,
        metric,
        24,
        0,
    )
    ids = [f"item{i}" for i in range(len(data))]
    store.upsert(name, ids, data, [{"n": i, "parity": i % 2} for i in range(len(data))])
    queries = data[:5] + 0.05 * rng.standard_normal((5, 24)).astype(np.float32)
    for query, hits in zip(queries, store.search(name, queries, topk=10), strict=True):
        expected = reference_scores(metric, data, query)
        order = np.argsort(expected if metric == "L2" else -expected, kind="stable")
        got = [int(h.id[4:]) for h in hits]
        assert got[0] == order[0]
        assert got == list(order[:10])  # FLAT and exhaustive IVF are exact
        for hit in hits:
            assert abs(hit.score - expected[int(hit.id[4:])]) < 1e-4 * max(
                1.0, abs(expected[int(hit.id[4:])])
            )
            assert hit.metadata == {"n": int(hit.id[4:]), "parity": int(hit.id[4:]) % 2}
        # the filter keeps only matching items and is still ranked by the metric
        filtered = store.search(name, query, topk=5, filter_expr='metadata["parity"] == 1')[0]
        odd = [i for i in order if i % 2 == 1]
        assert int(filtered[0].id[4:]) == odd[0]
        assert all(h.metadata["parity"] == 1 for h in filtered) and len(filtered) == 5


def test_hnsw_needs_a_server_and_its_parameters(store):
    with pytest.raises(ConfigError, match="HNSW needs a Milvus server"):
        store.create_collection("hnsw", dim=8, index_type="HNSW")
    assert "hnsw" not in store.list_collections()
    spec = IndexSpec.from_config(StoreConfig(), "hnsw", "ip", {"M": 8})
    assert (spec.index_type, spec.metric_type, spec.params) == (
        "HNSW",
        "IP",
        {"M": 8, "efConstruction": 200, "ef": 64},
    )
    assert spec.build_params() == {"M": 8, "efConstruction": 200}
    assert spec.search_params(10) == {"ef": 64} and spec.search_params(100) == {
        "ef": 100
    }  # ef >= top-k
    ivf = IndexSpec.from_config(StoreConfig(nlist=8, nprobe=32), "IVF_FLAT")
    assert ivf.build_params() == {"nlist": 8} and ivf.search_params(10) == {"nprobe": 8}
    assert IndexSpec.from_config(StoreConfig(), "FLAT").search_params(10) == {}


def test_collections_lifecycle(store):
    store.create_collection("life", dim=8, description="my photos")
    assert "life" in store.list_collections() and store.has_collection("life")
    info = store.describe("life")
    assert (
        info["description"] == "my photos"
        and info["index_type"] == "FLAT"
        and info["metric_type"] == "COSINE"
    )
    with pytest.raises(CollectionExistsError, match="exists already"):
        store.create_collection("life", dim=8)
    assert store.create_collection("life", dim=8, exist_ok=True)["dim"] == 8
    with pytest.raises(DataError, match="8-d"):
        store.create_collection("life", dim=9, exist_ok=True)
    store.drop_collection("life")
    assert "life" not in store.list_collections()
    with pytest.raises(CollectionNotFoundError, match="does not exist"):
        store.describe("life")
    with pytest.raises(CollectionNotFoundError):
        store.drop_collection("life")


def test_upsert_is_idempotent_and_batched(store):
    rng = np.random.default_rng(1)
    store.create_collection("idem", dim=8)
    data = unit_rows(rng, 50, 8)
    ids = [f"a{i}" for i in range(50)]
    store.upsert("idem", ids, data, [{"v": 1}] * 50)  # 8 batches of at most 7 rows
    store.upsert("idem", ids[:10], data[:10], [{"v": 2}] * 10)
    assert store.count("idem") == 50
    got = store.get("idem", ["a3", "a20", "missing"], with_vectors=True)
    assert [g["id"] for g in got] == ["a3", "a20"]
    assert got[0]["metadata"] == {"v": 2} and got[1]["metadata"] == {"v": 1}
    assert np.abs(got[0]["vector"] - data[3]).max() < 1e-6
    # duplicates within one call: the last row wins, as consecutive upserts would
    store.upsert("idem", ["dup", "dup"], data[:2], [{"k": "first"}, {"k": "last"}])
    (dup,) = store.get("idem", ["dup"], with_vectors=True)
    assert dup["metadata"] == {"k": "last"} and np.abs(dup["vector"] - data[1]).max() < 1e-6
    assert store.count("idem") == 51


def test_search_sees_each_insert_at_once(store):
    rng = np.random.default_rng(2)
    store.create_collection("fresh", dim=16, index_type="IVF_FLAT", index_params={"nlist": 4})
    data = unit_rows(rng, 30, 16)
    for i in range(30):
        store.upsert("fresh", [f"f{i}"], data[i : i + 1], [{"i": i}])
        hits = store.search("fresh", data[i], topk=1)[0]
        assert hits[0].id == f"f{i}", i
        assert store.count("fresh") == i + 1


def test_get_and_delete(store):
    rng = np.random.default_rng(3)
    store.create_collection("gd", dim=4, metric_type="L2", index_type="FLAT")
    data = rng.standard_normal((10, 4)).astype(np.float32)
    store.upsert("gd", [f"g{i}" for i in range(10)], data, [{"i": i} for i in range(10)])
    assert store.delete("gd", ["g1", "g2", "nope"]) == 2
    assert store.count("gd") == 8 and store.get("gd", ["g1", "g3"]) == [
        {"id": "g3", "metadata": {"i": 3}}
    ]
    assert all(h.id not in ("g1", "g2") for h in store.search("gd", data[1], topk=10)[0])
    assert store.delete("gd", []) == 0


def test_bad_inputs_are_named(store):
    store.create_collection("bad", dim=4)
    ok = np.ones((1, 4), np.float32)
    cases = [
        (
            lambda: store.create_collection("9starts_with_digit", dim=4),
            InputError,
            "collection name",
        ),
        (lambda: store.create_collection("has-dash", dim=4), InputError, "collection name"),
        (lambda: store.create_collection("x", dim=4, index_type="DISKANN"), ConfigError, "DISKANN"),
        (
            lambda: store.create_collection(
                "x", dim=4, index_type="HNSW", index_params={"nlist": 3}
            ),
            ConfigError,
            "nlist",
        ),
        (
            lambda: store.create_collection("x", dim=4, metric_type="HAMMING"),
            ConfigError,
            "HAMMING",
        ),
        (lambda: store.upsert("bad", ["a"], np.ones((1, 5), np.float32)), DataError, "4-d"),
        (lambda: store.upsert("bad", ["a", "b"], ok), DataError, "one row per id"),
        (lambda: store.upsert("bad", [""], ok), InputError, "non-empty"),
        (lambda: store.upsert("bad", [7], ok), InputError, "string"),
        (lambda: store.upsert("bad", ["a"], ok * np.nan), DataError, "NaN"),
        (lambda: store.upsert("bad", ["a"], ok, ["not a mapping"]), DataError, "JSON object"),
        (lambda: store.upsert("missing", ["a"], ok), CollectionNotFoundError, "missing"),
        (lambda: store.search("bad", np.ones(3, np.float32)), DataError, "3-d"),
        (lambda: store.search("bad", ok, topk=0), InputError, "topk"),
        (lambda: store.search("bad", ok, filter_expr='metadata["a"] =='), InputError, "filter"),
    ]
    for call, error, text in cases:
        with pytest.raises(error, match=text):
            call()
    assert "x" not in store.list_collections()


def test_persistence_and_crash_after_acknowledge(tmp_path):
    """An acknowledged upsert survives the process dying at once (no close, no flush)."""
    uri = str(tmp_path / "crash.db")
    script = textwrap.dedent(f"""
        import os, numpy as np
        from accelkit.images.store import VectorStore
        from accelkit.images.config import StoreConfig
        store = VectorStore(StoreConfig(uri={uri!r}))
        store.create_collection("kept", dim=8, index_type="IVF_FLAT", metric_type="L2", index_params={{"nlist": 4}}, description="d")
        data = np.arange(40 * 8, dtype=np.float32).reshape(40, 8) % 7
        store.upsert("kept", [f"k{{i}}" for i in range(40)], data, [{{"i": i}} for i in range(40)])
        store.delete("kept", ["k0"])
        print("acknowledged", flush=True)
        os._exit(0)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert "acknowledged" in done.stdout, done.stderr[-2000:]
    data = np.arange(40 * 8, dtype=np.float32).reshape(40, 8) % 7
    with VectorStore(StoreConfig(uri=uri)) as store:
        info = store.describe("kept")
        assert (info["count"], info["index_type"], info["metric_type"], info["description"]) == (
            39,
            "IVF_FLAT",
            "L2",
            "d",
        )
        assert info["index_params"]["nlist"] == 4
        hits = store.search("kept", data[5], topk=3)[0]
        assert hits[0].id == "k5" and hits[0].score == pytest.approx(0.0, abs=1e-4)
        assert store.get("kept", ["k0", "k39"]) == [{"id": "k39", "metadata": {"i": 39}}]
        # and a database held by this process cannot be opened by another one: a clear error
        other = subprocess.run(
            [
                sys.executable,
                "-c",
                f"from accelkit.images.store import VectorStore\nVectorStore(uri={uri!r})",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert other.returncode != 0 and "another process" in other.stderr
    with VectorStore(StoreConfig(uri=uri)) as again:  # closed above: the folder lock is released
        assert again.count("kept") == 39


def test_unreachable_server_is_a_clear_error():
    with pytest.raises(StoreError, match=r"cannot connect to Milvus at http://127\.0\.0\.1:9"):
        VectorStore(StoreConfig(uri="http://127.0.0.1:9", timeout=2))
    with pytest.raises(ConfigError, match=r"\.db"):
        VectorStore(StoreConfig(uri="./no_suffix"))


def test_store_config_sources(tmp_path):
    original = tmp_path / "service.yaml"
    original.write_text(
        "milvus:\n  host: milvus.local\n  port: 19531\n  collection_name: photos\n  embedding_dim: 512\n"
        "  index_type: IVF_FLAT\n  metric_type: L2\n  nlist: 64\n  nprobe: 8\n  M: 8\n  efConstruction: 100\n"
    )
    config = ServiceConfig.from_yaml(original, env={})
    s = config.store
    assert (
        s.uri,
        s.collection_name,
        s.embedding_dim,
        s.index_type,
        s.metric_type,
        s.nlist,
        s.nprobe,
    ) == ("http://milvus.local:19531", "photos", 512, "IVF_FLAT", "L2", 64, 8)
    env = {"MILVUS_HOST": "db", "MILVUS_PORT": "19540", "MILVUS_EMBEDDING_DIM": "256"}
    assert (
        ServiceConfig.from_env(env=env).store.uri,
        ServiceConfig.from_env(env=env).store.embedding_dim,
    ) == ("http://db:19540", 256)
    assert ServiceConfig.from_env(env={**env, "ACCELKIT_STORE_URI": "./x.db"}).store.uri == "./x.db"
    assert ServiceConfig.from_env(env={}).store.uri == "./accelkit_images.db"
    server = ServiceConfig.from_env(
        env={"ACCELKIT_SERVER_ALLOWED_ROOTS": "/a,/b", "ACCELKIT_SERVER_ALLOW_URLS": "1"}
    ).server
    assert server.allowed_roots == ["/a", "/b"] and server.allow_urls is True
    assert (
        ServiceConfig.from_env(env={}).server.allowed_roots == []
        and not ServiceConfig.from_env(env={}).server.allow_urls
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("milvus:\n  hots: x\n")
    with pytest.raises(ConfigError, match="hots"):
        ServiceConfig.from_yaml(bad, env={})
    bad.write_text("store:\n  index_type: DISKANN\n")
    with pytest.raises(ConfigError, match="index_type"):
        ServiceConfig.from_yaml(bad, env={})
