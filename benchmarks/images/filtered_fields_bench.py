"""Filtered top-10 search on a Milvus server three ways, one run, interleaved:
the JSON `metadata` filter (`metadata["k"] == 3`, as before), the same filter on a collection that
declares `k` as a filter field (`store.fields: {k: int64}`: the store rewrites the filter to the
scalar fields, settings/fields.py), and (for comparison only: not a store feature) a partition
key on `k`, Milvus routing `k == 3` to its partition. Same vectors, same queries, HNSW (M 16,
efConstruction 200, a filtered search at ef 64 × 4 as the store sends it), 10 % of the items
matching; p50/p99 and recall@10 against the exact filtered top-10 (numpy float64). Each query is
sent to the three collections in turn (the order rotating per query), so a change of the
machine's load falls on all three alike.

    nice -n 10 python -m benchmarks.images.filtered_fields_bench --server        # 100k x 1280
    python -m benchmarks.images.filtered_fields_bench --server --vectors 30000   # smaller
    python -m benchmarks.images.filtered_fields_bench --uri http://host:19530    # your server
    python -m benchmarks.docs                                                   # docs' table

--server starts the test suite's loopback-only server (tests/support/milvus_server.py; root
needed) on a temporary folder and stops it at the end. Writes
benchmarks/results/filtered_fields_bench.json."""

from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np

from benchmarks.common import (
    REPO,
    ArgumentParser,
    check_server,
    milvus_server,
    out_file,
    positive,
    server_uri,
)
from benchmarks.docs.blocks import Table
from benchmarks.images.vectors import (
    DIM,
    FILTER,
    clustered_vectors,
    environment,
    exact_top10,
    percentile,
    unit_vectors,
)

RESULT = REPO / "benchmarks" / "results" / "filtered_fields_bench.json"
SCHEMA = "accelkit.filtered_fields_bench/1"
ARMS = ("json", "declared", "partition_key")
LABELS = {
    "json": 'JSON metadata (`metadata["k"] == 3`, as before)',
    "declared": "declared field (`store.fields: {k: int64}`), same filter text",
    "partition_key": "partition key on `k` (`k == 3`; pymilvus directly, for comparison)",
    "declared_no_filter": "declared-field collection, no filter (reference)",
}


def _partition_collection(client, name: str, n_partitions: int) -> None:
    """id, vector, metadata and `k` as an INT64 partition key, HNSW as the store builds it."""
    from pymilvus import DataType

    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=512)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
    schema.add_field("metadata", DataType.JSON)
    schema.add_field("k", DataType.INT64, is_partition_key=True)
    index = client.prepare_index_params()
    index.add_index(
        "vector", index_type="HNSW", metric_type="COSINE", params={"M": 16, "efConstruction": 200}
    )
    client.create_collection(
        name,
        schema=schema,
        index_params=index,
        num_partitions=n_partitions,
        consistency_level="Strong",
    )


def build(store, name: str, arm: str, ids, data, metadata, args) -> dict:
    """One collection of the arm, upserted, flushed and indexed; the stage times."""
    started = time.perf_counter()
    if store.has_collection(name):
        store.drop_collection(name)
    if arm == "partition_key":
        client = store._milvus
        _partition_collection(client, name, args.partitions)
        step = 1000
        for at in range(0, len(ids), step):
            rows = [
                {"id": ids[i], "vector": data[i], "metadata": metadata[i], "k": metadata[i]["k"]}
                for i in range(at, min(at + step, len(ids)))
            ]
            client.insert(name, rows, timeout=600)
        inserted = time.perf_counter()
        client.flush(name, timeout=600)
        client.load_collection(name, timeout=600)
    else:
        fields = {"k": "int64"} if arm == "declared" else {}
        store.create_collection(name, dim=DIM, index_type="HNSW", fields=fields)
        store.upsert(name, ids, data, metadata)
        inserted = time.perf_counter()
        store.flush(name)
    store.wait_for_index(name, timeout=3600)
    return {
        "insert_s": inserted - started,
        "flush_and_index_s": time.perf_counter() - inserted,
        "segments": sorted(int(s.num_rows) for s in store._milvus.list_loaded_segments(name)),
    }


def measure(store, names: dict[str, str], queries, exact, exact_all, args) -> dict:
    """Every query on every arm, the arms' order rotating per query; p50/p99, recall@10."""
    from accelkit.images.store import IndexSpec

    ef = IndexSpec.from_config(store.config, "HNSW").search_params(10, filtered=True)["ef"]
    times: dict[str, list[float]] = {arm: [] for arm in (*ARMS, "declared_no_filter")}
    recalls: dict[str, list[float]] = {arm: [] for arm in times}

    def partition_search(q):
        hits = store._milvus.search(
            names["partition_key"],
            data=[q.tolist()],
            limit=10,
            filter="k == 3",
            search_params={"metric_type": "COSINE", "params": {"ef": ef}},
            consistency_level="Session",
        )[0]
        return [int(h["id"]) for h in hits]

    def run(arm: str, q) -> list[int]:
        if arm == "partition_key":
            return partition_search(q)
        if arm == "declared_no_filter":
            return [int(h.id) for h in store.search(names["declared"], q, 10)[0]]
        return [int(h.id) for h in store.search(names[arm], q, 10, FILTER)[0]]

    order = [*ARMS, "declared_no_filter"]
    for arm in order:  # one warm-up search each
        run(arm, queries[0])
    for i, q in enumerate(queries):
        for arm in order[i % len(order) :] + order[: i % len(order)]:
            start = time.perf_counter()
            got = run(arm, q)
            times[arm].append((time.perf_counter() - start) * 1000)
            truth = exact_all[i] if arm == "declared_no_filter" else exact[i]
            recalls[arm].append(len(set(got) & truth) / 10)
    return {
        arm: {
            "p50_ms": percentile(times[arm], 50),
            "p99_ms": percentile(times[arm], 99),
            "mean_ms": float(np.mean(times[arm])),
            "recall_at_10": float(np.mean(recalls[arm])),
            "queries": len(times[arm]),
        }
        for arm in order
    } | {"ef": ef}


def main() -> int:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vectors", type=positive(), default=100_000)
    parser.add_argument("--queries", type=positive(), default=200)
    parser.add_argument(
        "--partitions", type=positive(), default=16, help="partition key's partitions"
    )
    parser.add_argument("--uri", type=server_uri, help="a Milvus server (http://host:19530)")
    parser.add_argument("--token", default=None)
    parser.add_argument("--server", action="store_true", help="start the test suite's server")
    parser.add_argument("--out", type=out_file, default=RESULT)
    args = parser.parse_args()
    if not (args.uri or args.server):
        parser.error("give --server or --uri")
    if args.uri and not args.server:
        check_server(args.uri, args.token)
    from accelkit.images.settings.config import StoreConfig
    from accelkit.images.store import VectorStore
    from accelkit.runtime.files import write_json_atomic

    load_start, started = os.getloadavg(), time.perf_counter()
    data = clustered_vectors(args.vectors, 10)
    rng = np.random.default_rng(11)
    sources = rng.choice(args.vectors, args.queries, replace=False)
    queries = data[sources] + 0.02 * unit_vectors(args.queries, 12)  # altered copies
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    ids = [str(i) for i in range(args.vectors)]
    metadata = [{"k": i % 10} for i in range(args.vectors)]
    mask = np.arange(args.vectors) % 10 == 3
    exact = exact_top10(data, queries, mask)
    exact_all = exact_top10(data, queries, None)
    names = {arm: f"filtered_{arm}" for arm in ARMS}
    with contextlib.ExitStack() as stack:
        uri = args.uri
        if args.server:
            uri = milvus_server(stack, "accelkit-filtered-").uri
        config = StoreConfig(
            uri=uri, token=args.token, timeout=600, M=16, efConstruction=200, ef=64
        )
        with VectorStore(config) as store:
            version = store._milvus.get_server_version()
            stages = {}
            for arm in ARMS:
                stages[arm] = build(store, names[arm], arm, ids, data, metadata, args)
                print(f"{arm}: built {stages[arm]}", flush=True)
            load_searches = os.getloadavg()
            searches = measure(store, names, queries, exact, exact_all, args)
            for arm in ARMS:
                store.drop_collection(names[arm])
    payload = {
        "schema": SCHEMA,
        **environment(load_start),
        "load_avg_searches": load_searches,
        "load_avg_end": os.getloadavg(),
        "minutes": (time.perf_counter() - started) / 60,
        "server_version": version,
        "vectors": args.vectors,
        "dim": DIM,
        "queries": args.queries,
        "filter": FILTER,
        "match": 0.1,
        "partitions": args.partitions,
        "stages": stages,
        "search": searches,
    }
    write_json_atomic(args.out, payload, trailing_newline=True)
    print(table(payload))
    print(f"wrote {args.out}")
    return 0


def table(doc: dict) -> str:
    """| filtered top-10 on the server | p50 | p99 | recall@10 |, and the run's context."""
    search = doc["search"]
    lines = [
        f"| {doc['vectors']:,} × {doc['dim']}, HNSW, filter matching 10 %"
        f" (ef {search['ef']}) | p50, ms | p99, ms | recall@10 | build: insert + index, s |",
        "|---|---|---|---|---|",
    ]
    for arm in (*ARMS, "declared_no_filter"):
        row = search[arm]
        stage = doc["stages"].get(arm.removesuffix("_no_filter"), {})
        built = (
            f"{stage['insert_s']:.0f} + {stage['flush_and_index_s']:.0f}"
            if stage and arm != "declared_no_filter"
            else ""
        )
        lines.append(
            f"| {LABELS[arm]} | {row['p50_ms']:.1f} | {row['p99_ms']:.1f} |"
            f" {row['recall_at_10']:.3f} | {built} |"
        )
    env = doc.get("environment", {})
    lines.append(
        f"\n({doc['queries']} queries per row, sent in turn to each collection;"
        f" {doc['server_version']} server; written {env.get('time_utc', '?')}; load average"
        f" {env.get('load_avg_start', ['?'])[0]:.1f} at the start,"
        f" {doc['load_avg_searches'][0]:.1f} when the searches began,"
        f" {doc['load_avg_end'][0]:.1f} at the end; the whole run {doc['minutes']:.1f} min.)"
    )
    return "\n".join(lines)


TABLES = {"server-filtered-fields": Table(RESULT, table)}  # for the docs engine

if __name__ == "__main__":
    sys.exit(main())
