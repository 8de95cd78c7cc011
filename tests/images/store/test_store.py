"""VectorStore against a real Milvus Lite database; every score checked against numpy."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from accelkit.errors import ConfigError, DataError, InputError
from accelkit.images.settings.config import ServiceConfig, StoreConfig
from accelkit.images.settings.schema import check_filter
from accelkit.images.store import (
    CollectionExistsError,
    CollectionNotFoundError,
    FilterError,
    IndexSpec,
    StoreError,
    StoreTimeoutError,
    VectorStore,
    literal,
)
from accelkit.images.store.lite import lite_generation
from tests.support.require import not_applicable


@pytest.fixture(scope="module")
def store(store_settings):
    """Every test here runs on Milvus Lite and on a real Milvus server."""
    with VectorStore(StoreConfig(**store_settings, insert_batch_size=7)) as s:
        yield s


def index_types(store) -> list[str]:
    return ["FLAT", "IVF_FLAT", "HNSW"] if store.is_server else ["FLAT", "IVF_FLAT"]


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


@pytest.mark.parametrize("index_type", ["FLAT", "IVF_FLAT", "HNSW"])
@pytest.mark.parametrize("metric", ["COSINE", "IP", "L2"])
def test_search_matches_numpy(store, index_type, metric):
    if index_type not in index_types(store):
        not_applicable("Milvus Lite builds FLAT and IVF_FLAT only (HNSW is tested on the server)")
    if store.is_server and index_type != "FLAT" and metric != "COSINE":
        not_applicable(
            "on the server every metric runs on FLAT, the indexes on COSINE (each index waits ~15 s for its hand-off)"
        )
    rng = np.random.default_rng(len(index_type) * 7 + len(metric))
    name = f"s_{index_type}_{metric}".lower()
    data = rng.standard_normal((300, 24)).astype(
        np.float32
    )  # not unit rows: IP, COSINE and L2 differ
    params = {  # nprobe = nlist: exhaustive; ef 300 over 300 rows: exact in practice
        "IVF_FLAT": {"nlist": 8, "nprobe": 8},
        "HNSW": {"M": 16, "efConstruction": 200, "ef": 300},
    }.get(index_type, {})
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
    if store.is_server and index_type != "FLAT":  # seal the segment: searches use the index
        assert store.wait_for_index(name, timeout=120)["pending_rows"] == 0
    queries = data[:5] + 0.05 * rng.standard_normal((5, 24)).astype(np.float32)
    for query, hits in zip(queries, store.search(name, queries, topk=10), strict=True):
        expected = reference_scores(metric, data, query)
        order = np.argsort(expected if metric == "L2" else -expected, kind="stable")
        got = [int(h.id[4:]) for h in hits]
        assert got[0] == order[0]
        assert got == list(order[:10])  # FLAT, exhaustive IVF and HNSW at ef >= n are exact
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


def test_hnsw_needs_a_server_or_lite_3_and_its_parameters(store):
    if store.is_server or store.lite == 3:
        assert store.create_collection("hnsw", dim=8, index_type="HNSW")["index_type"] == "HNSW"
        store.drop_collection("hnsw")
    else:
        with pytest.raises(ConfigError, match=r"HNSW needs Milvus Lite 3 .* or a Milvus server"):
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
    # a filtered search walks 4x further (FILTERED_EF_FACTOR), never past the largest parameter
    assert spec.search_params(10, filtered=True) == {"ef": 256}
    assert spec.search_params(100, filtered=True) == {"ef": 400}
    wide = IndexSpec("HNSW", "COSINE", {"M": 8, "efConstruction": 200, "ef": 60_000})
    assert wide.search_params(10, filtered=True) == {"ef": 65_536}
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
    # on a server each read after a write waits for the write's timestamp (~0.4 s): fewer rounds
    for i in range(8 if store.is_server else 30):
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
        (lambda: store.upsert("bad", [""], ok), InputError, "is empty"),
        (lambda: store.upsert("bad", [7], ok), InputError, "string"),
        (lambda: store.upsert("bad", ["x" * 257], ok), InputError, "257 characters"),
        (lambda: store.upsert("bad", ["a b"], ok), InputError, "contains ' '"),
        (lambda: store.create_collection("name\n", dim=4), InputError, "collection name"),
        (lambda: store.create_collection("x", dim=1.5), InputError, "dim"),
        (lambda: store.create_collection("x", dim=True), InputError, "dim"),
        (lambda: store.search("bad", ok, consistency="Weird"), InputError, "consistency"),
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


INJECTIONS = [
    "x') OR ('1'='1",  # once emptied a Milvus Lite collection through its upsert SQL
    "zz'] or id not in ['",  # once deleted everything through pymilvus' pasted pk expression
    "Bob's photo",  # once stored on a server and then unreadable and undeletable
    'a" or id != "',
    "a\\",
    "ok\nsecond",
    "",
]


def test_injection_payloads_change_nothing(store):
    """No id changes the meaning of an operation: each payload fails with a clear error and the
    collection's count and contents stay exactly as they were."""
    rng = np.random.default_rng(9)
    store.create_collection("victims", dim=4)
    ids = [f"v{i}" for i in range(6)]
    data = unit_rows(rng, 6, 4)
    store.upsert("victims", ids, data, [{"i": i} for i in range(6)])
    before = store.get("victims", ids, with_vectors=True)
    for payload in INJECTIONS:
        for method, args in (
            (store.upsert, (["v0", payload], data[:2])),  # nothing of the batch lands
            (store.upsert, ([payload], data[:1])),
            (store.delete, ([payload],)),
            (store.delete, (["v1", payload],)),
            (store.get, ([payload],)),
        ):
            with pytest.raises(InputError, match="ids are 1-256 characters"):
                method("victims", *args)
    assert store.count("victims", consistency="Strong") == 6
    after = store.get("victims", ids, with_vectors=True)
    assert [a["id"] for a in after] == ids
    for a, b in zip(before, after, strict=True):
        assert a["metadata"] == b["metadata"] and np.array_equal(a["vector"], b["vector"])
    # every character the id rules allow round-trips through get and delete
    odd = ["A-z.0_9:/@+=~", "-", "~" * 256, "x/../y"]
    store.upsert("victims", odd, unit_rows(rng, 4, 4))
    assert [g["id"] for g in store.get("victims", odd)] == odd
    assert store.delete("victims", odd) == 4 and store.count("victims") == 6


def test_literals_are_escaped_on_the_engine(store):
    """`literal` quotes any string so the engine reads back exactly that value."""
    rng = np.random.default_rng(10)
    store.create_collection("quoting", dim=4)
    names = ['say "hi"', "it's", "back\\slash", "mix \\\" ' end", "plain"]
    store.upsert(
        "quoting", [f"q{i}" for i in range(5)], unit_rows(rng, 5, 4), [{"name": n} for n in names]
    )
    for i, name in enumerate(names):
        hits = store.search(
            "quoting",
            unit_rows(rng, 1, 4),
            topk=5,
            filter_expr=f'metadata["name"] == {literal(name)}',
        )[0]
        assert [h.id for h in hits] == [f"q{i}"], name


def test_filters_are_bounded_and_errors_are_one_clean_line(store):
    store.create_collection("filters", dim=4)
    store.upsert("filters", ["f0"], np.ones((1, 4), np.float32), [{"k": 1}])
    query = np.ones(4, np.float32)
    with pytest.raises(InputError, match="over the limit of 4,096"):
        store.search(
            "filters",
            query,
            filter_expr="id in [" + ",".join(f'"x{i}"' for i in range(20000)) + "]",
        )
    with pytest.raises(InputError, match="control character"):
        store.search("filters", query, filter_expr='metadata["k"] == 1\x00')
    mixed = 'metadata["k"] in [1, "a"]'  # Milvus refuses a list of mixed types after a key
    if store.lite == 3:  # sent to Lite 3 as (k == 1 or k == "a"), which it reads as written
        assert [h.id for h in store.search("filters", query, filter_expr=mixed)[0]] == ["f0"]
    for bad in ('json_contains(id, "a")', "id == 1", "id < [1]", *[mixed] * (store.lite != 3)):
        with pytest.raises(FilterError) as caught:
            store.search("filters", query, filter_expr=bad)
        message = str(caught.value)
        assert "\n" not in message and "refused" in message, message
        for internal in ("/workspace", ".cpp", "segcore", "code=", "MilvusException", "Traceback"):
            assert internal not in message, message
    # Milvus applies only the first complete expression of a filter (and ignores the rest),
    # retries {placeholders} until the timeout, and `id like 1` kills Milvus Lite: refused here
    for bad, why in (
        ("metadata[", "write keys as"),
        ('id != "zzz") and (metadata["k"] == 1', "expected the end"),
        ('id != "zzz" (metadata["k"] == 1)', "expected the end"),
        ('metadata["k"] >= 0 AND metadata["k"] == 2', "expected the end"),
        ('id in ["f0"]) or (1==1', "expected the end"),
        ('metadata["k"] == 1; DROP TABLE c', "';' at character 19"),
        ("{a}", "'{' at character 1"),
        ('id == "f0', "never closed"),
        ("id like 1", "prefix pattern"),  # killed the Milvus Lite engine until restart
        ('id == "\\z\'f0\' or id != " or id == "none"', "never closed"),  # a skipped escape
        ('id != "none" and["k"] == ["j"]', "directly followed by"),  # and[...] is a field to Milvus
        ('metadata["k"] == 1 / 0', "no arithmetic"),  # killed the Milvus Lite engine
    ):
        with pytest.raises(InputError, match=why):
            store.search("filters", query, filter_expr=bad)
        with pytest.raises(InputError, match=why):
            store.delete_matching("filters", bad)
    assert store.count("filters") == 1
    # brackets and quotes inside string literals are data, not structure
    store.upsert(
        "filters", ["f1"], np.ones((1, 4), np.float32), [{"k": 2, "s": 'a) or (b ] {x} ; "q"'}]
    )
    odd = store.search("filters", query, filter_expr='metadata["s"] == "a) or (b ] {x} ; \\"q\\""')[
        0
    ]
    assert [h.id for h in odd] == ["f1"]
    assert [h.id for h in store.search("filters", query, filter_expr='metadata["k"] == 1')[0]] == [
        "f0"
    ]


def test_accepted_filters_are_read_whole_by_the_engine(store):
    """Milvus reads only the first complete expression of a filter and drops the rest without a
    word; in parentheses, a dropped rest is a syntax error instead. So a filter that our grammar
    accepts must give the same items with and without parentheses (or be refused both ways)."""
    from tests.support.search import ACCEPTED

    rng = np.random.default_rng(12)
    store.create_collection("grammar", dim=4)
    metadata = [
        {
            "k": i % 3,
            "a": {"b": i},
            "c": i / 10,
            "year": 2018 + i % 5,
            "tag": "ab"[i % 2],
            "x": [0, 0.25, 0.5][i % 3],
            "tags": ["a", "b", "c"][: 1 + i % 3],
            "s": ["abc", "axcde", 'a) or (b ] {x} ; "q"'][i % 3],
            "arr": [-3, i],
            "n": i,
            "m": 600 - 50 * i,
            "even": i % 2 == 0,
            "sp key": ["it's", "x"][i % 2],
        }
        for i in range(12)
    ]
    ids = ["a", "b", "q", "x", "ab1", "abc"] + [f"g{i}" for i in range(6)]
    store.upsert("grammar", ids, unit_rows(rng, 12, 4), metadata)
    query = np.ones(4, np.float32)
    matched = 0
    for expr in ACCEPTED:
        outcomes = []
        for text in (expr, f"({expr})"):
            try:
                outcomes.append(sorted(h.id for h in store.search("grammar", query, 12, text)[0]))
            except FilterError:
                outcomes.append("refused")
        assert outcomes[0] == outcomes[1], (expr, outcomes)
        matched += outcomes[0] != "refused" and len(outcomes[0]) > 0
    assert matched >= len(ACCEPTED) // 2  # most of them select something here


# Keys that Milvus might read as array indexes ("0", "1"), that look numeric but are not indexes
# ("-1", "01"), and that mean something in a JSON pointer ("a/b", "~1").
MIXED_KEYS = ["0", "1", "-1", "01", "a", "a/b", "~1"]
MISSING = object()


def mixed_value(rng, depth: int):
    """A JSON value of objects (keys from MIXED_KEYS) and arrays, with leaves "x" and "y"."""
    kind = int(rng.integers(0, 3)) if depth < 3 else 2
    if kind == 0:
        keys = rng.choice(MIXED_KEYS, size=int(rng.integers(1, 4)), replace=False)
        return {str(k): mixed_value(rng, depth + 1) for k in keys}
    if kind == 1:
        return [mixed_value(rng, depth + 1) for _ in range(int(rng.integers(1, 4)))]
    return str(rng.choice(["x", "y"]))


def resolve(value, steps):
    """What a path names in Python: a key only in an object, an index only in an array."""
    for step in steps:
        found = (isinstance(step, int) and isinstance(value, list) and step < len(value)) or (
            isinstance(step, str) and isinstance(value, dict) and step in value
        )
        if not found:
            return MISSING
        value = value[step]
    return value


def mixed_paths(value, prefix=()):
    """Every path in `value` with the value it leads to, as (key or index) steps."""
    yield prefix, value
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from mixed_paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from mixed_paths(inner, (*prefix, i))


def mixed_filter(rng, leaves, arrays):
    """(filter text, Python predicate): a comparison on a path to a leaf (or json_contains on a
    path to an array) of the stored documents, its integer steps written as indexes or as quoted
    keys at random, sometimes two joined by or."""

    def one():
        form = int(rng.integers(3))
        paths = arrays if form == 2 else leaves
        steps = paths[int(rng.integers(len(paths)))]
        written, meant = [], []
        for step in steps:
            as_key = isinstance(step, str) or bool(rng.integers(2))
            written.append(f'["{step}"]' if as_key else f"[{step}]")
            meant.append(str(step) if as_key else step)
        field, meant = "metadata" + "".join(written), tuple(meant)
        if form == 0:
            return f'{field} == "x"', lambda doc: resolve(doc, meant) == "x"
        if form == 1:
            return f'{field} in ["y"]', lambda doc: resolve(doc, meant) == "y"
        return (
            f'json_contains({field}, "x")',
            lambda doc: isinstance(resolve(doc, meant), list) and "x" in resolve(doc, meant),
        )

    text, predicate = one()
    if rng.integers(4) == 0:
        other, second = one()
        return f"{text} or {other}", lambda doc: predicate(doc) or second(doc)
    return text, predicate


def test_filters_on_mixed_paths_delete_exactly_what_they_name(store):
    """`metadata["arr"][0] == "x"` deleted `{"arr": {"0": "x"}}` too. Documents mix
    arrays and objects with keys such as "0", "-1" and "01"; every generated filter that the
    grammar accepts deletes exactly the items a Python evaluator names, no more and no fewer,
    and the filters it refuses are the ones with an integer step below the first."""
    rng = np.random.default_rng(27)
    store.create_collection("mixed_paths", dim=4)
    docs = {
        f"d{i}": {str(k): mixed_value(rng, 1) for k in rng.choice(MIXED_KEYS, 2)} for i in range(40)
    }
    docs["d40"] = {"a": ["x", "y"]}  # the pair: an array, and an object with key "0"
    docs["d41"] = {"a": {"0": "x"}}
    vectors = {item: unit_rows(rng, 1, 4)[0] for item in docs}

    def put(items):
        store.upsert(
            "mixed_paths", items, np.stack([vectors[i] for i in items]), [docs[i] for i in items]
        )

    put(list(docs))
    found = {path: value for doc in docs.values() for path, value in mixed_paths(doc) if path}

    def by_text(path):
        return [(type(step).__name__, str(step)) for step in path]

    leaves = sorted((p for p, v in found.items() if isinstance(v, str)), key=by_text)
    arrays = sorted((p for p, v in found.items() if isinstance(v, list)), key=by_text)
    filters = [mixed_filter(rng, leaves, arrays) for _ in range(80)]
    filters.append(('metadata["a"][0] == "x"', lambda doc: resolve(doc, ("a", 0)) == "x"))
    accepted = refused = matched = 0
    for text, predicate in filters:
        try:
            check_filter(text)
        except InputError as exc:
            assert "as an array index and as an object key" in str(exc), (text, str(exc))
            refused += 1
            continue
        expected = sorted(item for item, doc in docs.items() if predicate(doc))
        deleted = store.delete_matching("mixed_paths", text)
        left = [g["id"] for g in store.get("mixed_paths", list(docs), consistency="Strong")]
        assert (deleted, sorted(set(docs) - set(left))) == (len(expected), expected), text
        accepted += 1
        matched += bool(expected)
        if expected:
            put(expected)
    print(
        f"mixed paths: {accepted} filters accepted ({matched} deleted something), {refused} refused"
    )
    assert accepted >= 15 and matched >= 10 and refused >= 15


def test_every_call_is_bounded_by_the_timeout(store, request):
    """Every RPC the store makes carries store.timeout, and running past it is a clear error."""
    store.create_collection("slow", dim=4)
    store.upsert("slow", ["s0"], np.ones((1, 4), np.float32))
    client, calls = store._client, []

    class Recorder:
        def __getattr__(self, name):
            method = getattr(client, name)
            if not callable(method) or name in ("prepare_index_params", "create_schema"):
                return method

            def call(*args, **kwargs):
                calls.append((name, kwargs.get("timeout")))
                return method(*args, **kwargs)

            return call

    store._client = Recorder()
    try:
        store.upsert("slow", ["s1"], np.ones((1, 4), np.float32))
        store.search("slow", np.ones(4, np.float32), filter_expr='id == "s1"')
        store.get("slow", ["s0"])
        store.describe("slow")
        store.delete("slow", ["s1"])
        store.flush("slow")
        store.index_progress("slow")
        store.create_collection("slow2", dim=4)
        store.drop_collection("slow2")
        store.list_collections()
    finally:
        store._client = client
    names = {name for name, _ in calls}
    assert {
        "upsert",
        "search",
        "query",
        "delete",
        "flush",
        "create_collection",
        "create_index",
    } <= names
    assert all(timeout == store.config.timeout for _, timeout in calls), calls


def test_a_stalled_engine_costs_each_call_its_timeout(store, request):
    """A stalled engine (its process stopped with SIGSTOP): each call gives up after the
    timeout."""
    if store.lite == 3:
        not_applicable("Milvus Lite 3 runs in threads of this process: no engine process to stop")
    store.create_collection("stalled", dim=4)
    store.upsert("stalled", ["s0"], np.ones((1, 4), np.float32))
    saved = store.config.timeout
    store.config.timeout = 1.5
    pid = engine_pid(store, request)
    outcome: dict = {}

    def attempt():
        for name, call in (
            ("search", lambda: store.search("stalled", np.ones(4, np.float32))),
            ("count", lambda: store.count("stalled")),
            ("upsert", lambda: store.upsert("stalled", ["s2"], np.ones((1, 4), np.float32))),
        ):
            try:
                call()
                outcome[name] = "answered"
            except StoreTimeoutError as exc:
                outcome[name] = str(exc)

    os.kill(pid, signal.SIGSTOP)
    try:
        worker = threading.Thread(target=attempt, daemon=True)
        worker.start()
        worker.join(120)  # a call without a deadline would hang here
    finally:
        os.kill(pid, signal.SIGCONT)
        store.config.timeout = saved
    worker.join(60)
    assert set(outcome) == {"search", "count", "upsert"}, outcome
    assert all("took longer than store.timeout (1.5 s)" in v for v in outcome.values()), outcome
    assert store.count("stalled", consistency="Strong") in (1, 2)  # the upsert may have landed


def engine_pid(store, request) -> int:
    """The process that answers this store's RPCs: the server's forwarder, or Milvus Lite."""
    if store.is_server:
        return request.getfixturevalue("milvus_server").forwarder.pid
    from pathlib import Path

    from milvus_lite.server_manager import server_manager_instance

    return server_manager_instance._servers[str(Path(store.config.uri).resolve())]._p.pid


def test_delete_by_filter_flush_and_reindex(store):
    rng = np.random.default_rng(11)
    store.create_collection("bulk", dim=8)
    data = unit_rows(rng, 200, 8)
    store.upsert(
        "bulk", [f"b{i}" for i in range(200)], data, [{"even": i % 2 == 0} for i in range(200)]
    )
    store.flush("bulk")
    progress = store.wait_for_index("bulk", timeout=120)
    assert progress["pending_rows"] == 0 and progress["index_type"] == "FLAT"
    assert store.delete_matching("bulk", 'metadata["even"] == true') == 100
    assert store.count("bulk") == 100
    with pytest.raises(FilterError):
        store.delete_matching("bulk", "id == 1")  # a type error: refused by Milvus
    assert store.count("bulk") == 100
    if not store.is_server:
        with pytest.raises(ConfigError, match="cannot change a collection's index"):
            store.rebuild_index("bulk", "IVF_FLAT")
        return
    info = store.rebuild_index("bulk", "HNSW", "COSINE", {"M": 8, "efConstruction": 100, "ef": 200})
    assert (info["index_type"], info["count"]) == ("HNSW", 100)
    assert store.wait_for_index("bulk", timeout=120)["index_type"] == "HNSW"
    hits = store.search("bulk", data[1], topk=1)[0]
    assert hits[0].id == "b1" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    # an index type given alone keeps the collection's metric: the config's default (COSINE)
    # made an L2 collection COSINE, silently
    store.create_collection("measured", dim=8, index_type="FLAT", metric_type="L2")
    assert store.rebuild_index("measured", "HNSW")["metric_type"] == "L2"


def test_lite_3_index_coverage_reads_the_engines_segments(store):
    """`lite.index_coverage` reads Milvus Lite 3's private segment objects (listed in
    docs/architecture.md, "Other projects' internals"): it falls back to `describe_index` when
    they change, so this test is what tells that they did."""
    from accelkit.images.store.lite import index_coverage
    from accelkit.images.store.records import VECTOR_FIELD

    if store.lite != 3:
        not_applicable("Lite 3's segments: this store is not on Milvus Lite 3")
    rng = np.random.default_rng(13)
    store.create_collection("segments", dim=8)
    store.upsert("segments", [f"s{i}" for i in range(300)], unit_rows(rng, 300, 8))
    store.flush("segments")
    store.search("segments", unit_rows(rng, 1, 8)[0], topk=1)  # loaded, as a search has it
    coverage = index_coverage(os.path.abspath(store.config.uri), "segments", VECTOR_FIELD)
    assert coverage is not None and coverage[1] == 300, coverage


def test_a_flushed_bulk_insert_is_searchable_at_once_by_any_client(store):
    """`flush` (how a bulk insert ends) returns once the server serves the rows: another client,
    whose reads carry no session and so wait for nothing, finds each of them right away; a
    filtered search (4x ef) finds the exact filtered top-10; deletes are honoured by both; and on
    a server `wait_for_index` ends once the query node holds the index itself."""
    rng = np.random.default_rng(12)
    n, dim = 3000, 64
    data = unit_rows(rng, n, dim)
    ids = [f"v{i}" for i in range(n)]
    config = store.config.model_copy(update={"insert_batch_size": 1000})
    with VectorStore(config) as writer, VectorStore(config) as reader:
        writer.create_collection(
            "visible", dim=dim, index_type="HNSW" if store.is_server else "FLAT"
        )
        writer.upsert("visible", ids, data, [{"k": i % 10} for i in range(n)])
        writer.flush("visible")
        assert reader.count("visible", consistency="Eventually") == n
        for i in (n - 1, n // 2, 0):
            assert reader.search("visible", data[i], 1, consistency="Eventually")[0][0].id == ids[i]
        query = data[7] + 0.3 * unit_rows(rng, 1, dim)[0]
        scores = data.astype(np.float64) @ query / np.linalg.norm(query)
        scores[[i % 10 != 3 for i in range(n)]] = -np.inf
        expected = {ids[i] for i in np.argsort(-scores)[:10]}
        hits = reader.search("visible", query, 10, 'metadata["k"] == 3', consistency="Eventually")
        assert len({h.id for h in hits[0]} & expected) >= 9
        assert all(h.metadata["k"] == 3 for h in hits[0])
        assert writer.delete("visible", ids[:5]) == 5
        assert writer.get("visible", ids[:6]) == [{"id": ids[5], "metadata": {"k": 5}}]
        assert writer.search("visible", data[0], 1)[0][0].id != ids[0]
        assert reader.count("visible", consistency="Strong") == n - 5
        if store.is_server:  # the wait ends when the query node holds the HNSW index itself
            writer.wait_for_index("visible", timeout=300)
            segments = writer._client.list_loaded_segments("visible")
            assert sum(s.num_rows for s in segments) >= n - 5
            assert all(s.index_id for s in segments), segments
        writer.drop_collection("visible")


def test_persistence_and_crash_after_acknowledge(tmp_path):
    """An acknowledged upsert survives the process dying at once (no close, no flush)."""
    uri = str(tmp_path / "crash.db")
    script = textwrap.dedent(f"""
        import os, numpy as np
        from accelkit.images.store import VectorStore
        from accelkit.images.settings.config import StoreConfig
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
        assert other.returncode != 0 and f"process {os.getpid()} holds it" in other.stderr, (
            other.stderr
        )
        # ... and a service started on it says so in one line, exit 2 (it was a traceback, 3)
        config = tmp_path / "held.yaml"
        config.write_text(f"store:\n  uri: {uri}\n")
        service = subprocess.run(
            [
                *(sys.executable, "-m", "accelkit", "images", "serve"),
                *("--config", str(config), "--port", "0"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert service.returncode == 2, service.stderr
        assert service.stderr.startswith("error: ") and service.stderr.count("\n") == 1
        assert f"process {os.getpid()} holds it" in service.stderr
    with VectorStore(StoreConfig(uri=uri)) as again:  # closed above: the folder lock is released
        assert again.count("kept") == 39
    # closed in this process (milvus_lite's `release_server`): another process opens it at once
    reopened = subprocess.run(
        [
            sys.executable,
            "-c",
            "from accelkit.images.store import VectorStore\n"
            f"print(VectorStore(uri={uri!r}).count('kept'))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert reopened.returncode == 0 and reopened.stdout.strip() == "39", reopened.stderr[-2000:]


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
        config.model.embedding_dim,
        s.index_type,
        s.metric_type,
        s.nlist,
        s.nprobe,
    ) == ("http://milvus.local:19531", "photos", 512, "IVF_FLAT", "L2", 64, 8)
    env = {"MILVUS_HOST": "db", "MILVUS_PORT": "19540", "MILVUS_EMBEDDING_DIM": "256"}
    assert (
        ServiceConfig.from_env(env=env).store.uri,
        ServiceConfig.from_env(env=env).model.embedding_dim,
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


def test_a_file_held_by_an_engine_whose_owner_exited_is_waited_for(tmp_path):
    """A Ctrl-C'd or killed command leaves its Milvus Lite engine stopping for a moment (longer
    under load) with the file still open: the next command waits for it instead of failing."""
    from accelkit.images.store.lite import _lite_holders, check_lite_free, lite_lock_holder

    if lite_generation() == 3:
        not_applicable("Milvus Lite 3 runs in threads of the process that owns it: no orphans")
    db = tmp_path / "store.db"
    db.write_bytes(b"")
    owner = textwrap.dedent(
        """
        import os, sys, time
        r, w = os.pipe()
        if os.fork() == 0:  # the "engine": holds the file, outlives its owner by a moment
            held = open(sys.argv[1], "rb")
            os.write(w, b"x")
            time.sleep(float(sys.argv[2]))
            os._exit(0)
        os.read(r, 1)  # the owner exits once the engine holds the file
        """
    )
    subprocess.run([sys.executable, "-c", owner, str(db), "2"], check=True, timeout=60)
    holders = _lite_holders(str(db))
    assert holders  # orphaned, still holding it
    if any(parent != 1 for _, parent in holders):
        not_applicable("orphans are reparented to a subreaper here, not to init")
    assert lite_lock_holder(str(db)) is None  # no live owner to name
    check_lite_free(str(db))
    assert _lite_holders(str(db)) == []  # it returned once the engine was gone


def _engine_home(db) -> str:
    """HOME of the Milvus Lite engine this process started for `db` (its argv names the file)."""
    for proc in os.listdir("/proc"):
        try:
            argv = Path(f"/proc/{proc}/cmdline").read_bytes().split(b"\0")
            if str(db).encode() not in argv:
                continue
            environ = Path(f"/proc/{proc}/environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        return next(v[5:].decode() for v in environ if v.startswith(b"HOME="))
    raise AssertionError(f"no engine for {db}")


def test_lite_engines_never_share_their_scratch_folder(tmp_path, monkeypatch):
    """Every Milvus Lite engine deletes and re-creates `$HOME/.cache/milvus` at its first
    collection call: two engines of one user starting together (a loaded trial's two test
    workers) left one failing every collection call with "Mmap manager has not been init", and
    a `~/.cache` that is not a folder broke them all. Here the user's `~/.cache` is a file —
    the same failure, every time, on the old code — and two stores open at once."""
    if lite_generation() == 3:
        not_applicable("Milvus Lite 3 runs in threads of this process: it has no scratch folder")
    home = tmp_path / "home"
    home.mkdir()
    (home / ".cache").write_text("not a folder")
    monkeypatch.setenv("HOME", str(home))
    dbs = [tmp_path / "a" / "one.db", tmp_path / "b" / "two.db"]
    for db in dbs:
        db.parent.mkdir()
    stores = [VectorStore(StoreConfig(uri=str(db))) for db in dbs]
    try:
        engines = [_engine_home(db) for db in dbs]
        assert len(set(engines)) == len(engines) == 2, engines
        assert str(home) not in engines
        rng = np.random.default_rng(0)
        for store in stores:
            store.create_collection("c", dim=4)
            store.upsert("c", ["x", "y"], unit_rows(rng, 2, 4), [{}, {}])
            assert store.count("c", consistency="Strong") == 2
    finally:
        for store in stores:
            store.close()
    assert os.environ["HOME"] == str(home)  # the swap was only for the engines' start


def test_threads_writing_and_searching_at_once_lose_nothing_and_fail_nothing(tmp_path):
    """8 threads of one store, each upserting and searching in turn (the service's pattern).
    Milvus Lite 3 takes its calls on a thread pool with no lock of its own: before accelkit
    let one call at a time into it, flushes failed ("current_seq is monotonic; tried to set
    18 < 19", 3 of 480 calls)."""
    from concurrent.futures import ThreadPoolExecutor

    errors: list[str] = []
    acknowledged: list[str] = []
    lock = threading.Lock()
    with VectorStore(StoreConfig(uri=str(tmp_path / "threads.db"))) as store:
        store.create_collection("c", dim=64)

        def client(c: int) -> None:
            rng = np.random.default_rng(c)
            for r in range(60):
                try:
                    if r % 2 == 0:
                        store.upsert("c", [f"c{c}-{r}"], rng.random((1, 64), dtype=np.float32))
                        with lock:
                            acknowledged.append(f"c{c}-{r}")
                    else:
                        store.search("c", rng.random(64, dtype=np.float32), topk=5)
                except Exception as exc:  # every failure is the finding
                    with lock:
                        errors.append(f"{type(exc).__name__}: {exc}")

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(client, range(8)))
        assert errors == []
        assert store.count("c") == len(acknowledged) == 240
        assert len(store.get("c", acknowledged)) == 240


def test_first_searches_from_many_threads_at_once_all_answer(tmp_path):
    """pymilvus executes a second copy of scipy.sparse the first time a search asks whether its
    vectors are sparse; service threads asking first at once met a partly imported module (a 503
    in CI). The store imports scipy.sparse when it connects, before any search thread."""
    pytest.importorskip("scipy")
    uri = str(tmp_path / "threads.db")
    script = textwrap.dedent(f"""
        import sys, threading, numpy as np
        from accelkit.images.store import VectorStore
        from accelkit.images.settings.config import StoreConfig
        store = VectorStore(StoreConfig(uri={uri!r}))
        store.create_collection("c", dim=4, index_type="FLAT", metric_type="IP")
        print("imported at connect:", "scipy.sparse" in sys.modules, flush=True)
        store.upsert("c", ["a", "b"], np.eye(2, 4, dtype=np.float32), [{{}}, {{}}])
        failed = []
        def search():
            try:
                store.search("c", np.eye(1, 4, dtype=np.float32), topk=1)
            except Exception as exc:
                failed.append(repr(exc))
        threads = [threading.Thread(target=search) for _ in range(16)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        print("failed:", failed, flush=True)
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert "imported at connect: True" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "failed: []" in done.stdout, done.stdout + done.stderr[-2000:]
