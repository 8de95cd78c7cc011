"""The Milvus server half of `service_bench.py` (`--server` / `--uri`): each stage of a server's
work timed as wall time, this process's CPU and the server's CPU, the first search after a bulk
insert per consistency level, and the verdict against the server targets. Run it through
`python -m benchmarks.images.service_bench --server` (the module docstring there says what is measured)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import REPO, milvus_server
from benchmarks.images.vectors import (
    DIM,
    FILTER,
    SCHEMA,
    clustered_vectors,
    environment,
    exact_top10,
    timed_searches,
    unit_vectors,
)

SERVER_TARGETS = {
    "hnsw_p99_ms": 20.0,
    "hnsw_recall_at_10": 0.95,
    "filtered_p99_ms": 20.0,
    "insert_vectors_per_s": 5000.0,
    "first_search_after_bulk_insert_ms": 100.0,
    "benchmark_minutes": 20.0,
}
SERVER_PID: int | None = None  # the Milvus process, when this script started it (--server)


def server_cpu_s() -> float | None:
    """CPU seconds the Milvus server process has used (user + system), when its PID is known."""
    if SERVER_PID is None:
        return None
    try:
        fields = Path(f"/proc/{SERVER_PID}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Stage:
    """Wall time, this process's CPU time and the server's CPU time of one stage, into `out[key]`:
    the server's share says whether a wait is the server working or the client."""

    def __init__(self, out: dict, key: str):
        self.out, self.key = out, key

    def __enter__(self) -> Stage:
        self.wall, self.cpu, self.server = time.perf_counter(), time.process_time(), server_cpu_s()
        return self

    def __exit__(self, *exc) -> None:
        server = server_cpu_s()
        self.out[self.key] = {
            "wall_s": time.perf_counter() - self.wall,
            "client_cpu_s": time.process_time() - self.cpu,
            "server_cpu_s": None if server is None else server - self.server,
        }


def bench_server(
    uri: str,
    token: str | None,
    data: np.ndarray,
    queries: np.ndarray,
    n_queries: int,
    sources: np.ndarray,
    index_types: tuple[str, ...] = ("HNSW",),
    sweep: tuple[int, ...] = (32, 64, 128),
) -> dict:
    """Index types on a Milvus server, each stage timed (wall, client CPU, server CPU): create,
    upsert, the first search right after it, flush (which waits until the rows are applied),
    index build + hand-off, searches (altered copies, filtered, off-data), Strong reads, sweeps."""
    from accelkit.images.settings.config import StoreConfig
    from accelkit.images.store import IndexSpec, VectorStore, records

    n = len(data)
    ids = [str(i) for i in range(n)]
    metadata = [{"k": i % 10} for i in range(n)]
    mask = np.array([i % 10 == 3 for i in range(n)])
    random_queries = unit_vectors(n_queries, 3)
    exact = {
        "altered": exact_top10(data, queries[:n_queries], None),
        "altered_filter": exact_top10(data, queries[:n_queries], mask),
        "random": exact_top10(data, random_queries, None),
    }
    config = StoreConfig(
        uri=uri, token=token, timeout=600, nlist=1024, nprobe=32, M=16, efConstruction=200, ef=64
    )
    out: dict = {
        "vectors": n,
        "dim": DIM,
        "filtered_ef_factor": records.FILTERED_EF_FACTOR,
        "indexes": {},
    }
    with VectorStore(config) as store:
        import pymilvus

        out["server_version"] = store._client.get_server_version()
        out["pymilvus"] = pymilvus.__version__
        for index_type in index_types:
            name = f"bench_server_{index_type.lower()}"
            if store.has_collection(name):
                store.drop_collection(name)
            stages: dict = {}
            with Stage(stages, "create"):
                store.create_collection(name, dim=DIM, index_type=index_type)
            with Stage(stages, "upsert"):
                store.upsert(name, ids, data, metadata)
            entry: dict = {
                "insert_vectors_per_s": n / stages["upsert"]["wall_s"],
                "insert_s": stages["upsert"]["wall_s"],
                "stages": stages,
            }
            with Stage(stages, "first_search_session"):  # waits for this client's own writes
                store.search(name, queries[0], 10)
            entry["first_search_after_insert_ms"] = stages["first_search_session"]["wall_s"] * 1000
            with Stage(stages, "flush_and_apply"):
                store.flush(name)
            with Stage(stages, "index_build_and_handoff"):
                progress = store.wait_for_index(name, timeout=3600)
            entry["flush_and_index_s"] = (
                stages["flush_and_apply"]["wall_s"] + stages["index_build_and_handoff"]["wall_s"]
            )
            entry["indexed_rows"] = progress["indexed_rows"]
            entry["segments"] = sorted(
                int(s.num_rows) for s in store._client.list_loaded_segments(name)
            )
            store.search(name, queries[0], 10)  # warm
            search: dict = {}
            with Stage(stages, "searches_no_filter"):
                search["no_filter"] = timed_searches(
                    store, name, queries, n_queries, None, exact["altered"], sources, mask
                )
            with Stage(stages, "searches_filter"):
                search["filter"] = timed_searches(
                    store, name, queries, n_queries, FILTER, exact["altered_filter"], sources, mask
                )
            # the baseline in the same run: a filtered search at the plain ef, as before 4x ef
            factor, records.FILTERED_EF_FACTOR = records.FILTERED_EF_FACTOR, 1
            try:
                search["filter_unscaled_ef"] = timed_searches(
                    store, name, queries, n_queries, FILTER, exact["altered_filter"], sources, mask
                )
            finally:
                records.FILTERED_EF_FACTOR = factor
            search["random_queries"] = timed_searches(
                store, name, random_queries, n_queries, None, exact["random"]
            )
            search["strong_consistency"] = timed_searches(
                store,
                name,
                queries,
                min(n_queries, 10),
                None,
                exact["altered"],
                consistency="Strong",
            )
            entry["search"] = search
            sweep_key, values = {"HNSW": ("ef", sweep), "IVF_FLAT": ("nprobe", (16, 64))}.get(
                index_type, (None, ())
            )
            for value in values:
                params = {**store._spec(name).params, sweep_key: value}
                store._specs[name] = IndexSpec(index_type, "COSINE", params)  # search-time only
                search[f"{sweep_key}{value}"] = {
                    "no_filter": timed_searches(
                        store, name, queries, n_queries, None, exact["altered"]
                    ),
                    "filter": timed_searches(
                        store, name, queries, n_queries, FILTER, exact["altered_filter"]
                    ),
                }
            print(
                f"server {index_type}: {entry['insert_vectors_per_s']:.0f} vectors/s, first search "
                f"{entry['first_search_after_insert_ms']:.0f} ms, index {entry['flush_and_index_s']:.0f} s; "
                f"p99 {search['no_filter']['p99_ms']:.1f} ms (recall {search['no_filter']['recall_at_10']:.3f}), "
                f"filtered {search['filter']['p99_ms']:.1f} ms",
                flush=True,
            )
            out["indexes"][index_type] = entry
            store.drop_collection(name)  # the next index type gets the server's memory and cores
    return out


VISIBILITY_LEVELS = ("Session", "Bounded", "Eventually", "Strong")


def bench_visibility(uri: str, token: str | None, data: np.ndarray) -> dict:
    """The first search right after a bulk upsert of `data` into a fresh HNSW collection: at
    each consistency level (does it see the last row? how long until an Eventually read does?),
    and after the bulk path (upsert + flush, as `images insert` ends) from this client and from
    a second one (another process's reads carry no session)."""
    from accelkit.images.settings.config import StoreConfig
    from accelkit.images.store import VectorStore

    n = len(data)
    ids, metadata, last = [str(i) for i in range(n)], [{"k": i % 10} for i in range(n)], data[-1]
    config = StoreConfig(uri=uri, token=token, timeout=600)
    out: dict = {"vectors": n, "levels": {}}

    def sees_last(store, name, level) -> bool:
        hits = store.search(name, last, 10, consistency=level)[0]
        return bool(hits) and hits[0].id == ids[-1]

    with VectorStore(config) as store, VectorStore(config) as other:
        for level in (*VISIBILITY_LEVELS, "bulk_path_plain_flush", "bulk_path"):
            name = f"bench_visible_{level.lower()}"
            if store.has_collection(name):
                store.drop_collection(name)
            store.create_collection(name, dim=DIM, index_type="HNSW")
            entry: dict = {}
            with Stage(entry, "upsert"):
                store.upsert(name, ids, data, metadata)
            if level.startswith("bulk_path"):
                with Stage(entry, "flush_and_apply"):
                    if level == "bulk_path":
                        store.flush(name)
                    else:  # the baseline: Milvus' flush alone, as `flush` was before
                        store._call("flushing", store._client.flush, name)
                for who, client in (("same_client", store), ("other_client", other)):
                    with Stage(entry, f"first_search_{who}"):
                        seen = sees_last(client, name, None)
                    entry[f"first_search_{who}"]["sees_last"] = seen
            else:
                with Stage(entry, "first_search"):
                    seen = sees_last(store, name, level)
                entry["first_search"]["sees_last"] = seen
                start = time.perf_counter()
                while not sees_last(store, name, "Eventually"):
                    time.sleep(0.01)
                entry["visible_to_eventually_after_s"] = time.perf_counter() - start
            with Stage(entry, "second_search"):
                store.search(name, data[0], 10)
            out["levels"][level] = entry
            first = entry.get("first_search") or entry["first_search_other_client"]
            print(
                f"visibility {level}: upsert {entry['upsert']['wall_s']:.2f} s, first search "
                f"{first['wall_s'] * 1000:.0f} ms (sees the last row: {first['sees_last']})",
                flush=True,
            )
            store.drop_collection(name)
    return out


def bench_lite_flat(
    uri: str, data: np.ndarray, queries: np.ndarray, n_queries: int, sources: np.ndarray
) -> dict:
    """Milvus Lite's default (FLAT) on the same vectors and queries, for the same-run comparison."""
    from accelkit.images.settings.config import StoreConfig
    from accelkit.images.store import VectorStore

    n = len(data)
    mask = np.array([i % 10 == 3 for i in range(n)])
    with VectorStore(StoreConfig(uri=uri)) as store:
        store.create_collection("bench_flat", dim=DIM, index_type="FLAT")
        start = time.perf_counter()
        store.upsert(
            "bench_flat", [str(i) for i in range(n)], data, [{"k": i % 10} for i in range(n)]
        )
        entry = {"insert_vectors_per_s": n / (time.perf_counter() - start)}
        entry["search"] = {
            "no_filter": timed_searches(
                store,
                "bench_flat",
                queries,
                n_queries,
                None,
                exact_top10(data, queries[:n_queries], None),
                sources,
                mask,
            ),
            "filter": timed_searches(
                store,
                "bench_flat",
                queries,
                n_queries,
                FILTER,
                exact_top10(data, queries[:n_queries], mask),
                sources,
                mask,
            ),
        }
    print(
        f"lite FLAT: {entry['insert_vectors_per_s']:.0f} vectors/s; p99 {entry['search']['no_filter']['p99_ms']:.1f} ms",
        flush=True,
    )
    return entry


def server_verdict(server: dict) -> dict:
    hnsw = server["indexes"]["HNSW"]["search"]
    sweeps = {k: v for k, v in hnsw.items() if k.startswith("ef")}
    passing = [
        (int(k[2:]), v)
        for k, v in sweeps.items()
        if v["no_filter"]["recall_at_10"] >= SERVER_TARGETS["hnsw_recall_at_10"]
    ]
    best = min(passing, key=lambda kv: kv[0]) if passing else None
    best_insert = max(e["insert_vectors_per_s"] for e in server["indexes"].values())
    filtered = {k: e["search"]["filter"]["p99_ms"] for k, e in server["indexes"].items()}
    return {
        "hnsw_default_ef": {
            "p99_ms": hnsw["no_filter"]["p99_ms"],
            "recall_at_10": hnsw["no_filter"]["recall_at_10"],
        },
        "hnsw_smallest_ef_with_recall_target": None
        if best is None
        else {
            "ef": best[0],
            "p99_ms": best[1]["no_filter"]["p99_ms"],
            "recall_at_10": best[1]["no_filter"]["recall_at_10"],
            "met": best[1]["no_filter"]["p99_ms"] < SERVER_TARGETS["hnsw_p99_ms"],
        },
        "filtered_p99_ms": filtered,
        "filtered_met_by": [
            k for k, v in filtered.items() if v < SERVER_TARGETS["filtered_p99_ms"]
        ],
        "insert_vectors_per_s": {
            "measured": best_insert,
            "met": best_insert >= SERVER_TARGETS["insert_vectors_per_s"],
        },
    }


def run_server_bench(args, data, queries, sources, load_start) -> None:
    """Clustered vectors (the shape of real embeddings) on the chosen index types, the first
    search after a bulk insert at each consistency level, uniform random vectors on HNSW (with
    --random: the worst case), and Milvus Lite's FLAT on the clustered set, one run. With
    --server, the test suite's loopback-only server (tests/support/milvus_server.py) is started
    on a temporary folder for the run and stopped at its end."""
    global SERVER_PID
    from accelkit.images.store import redact_uri
    from accelkit.runtime.files import write_json_atomic

    started = time.perf_counter()
    out_path = args.out or REPO / "benchmarks" / "results" / (
        "service_bench_server_quick.json" if args.quick else "service_bench_server.json"
    )
    clustered = clustered_vectors(args.vectors, 10)
    rng = np.random.default_rng(11)
    c_sources = rng.choice(args.vectors, args.queries, replace=False)
    c_queries = clustered[c_sources] + 0.02 * unit_vectors(args.queries, 12)  # an altered copy
    c_queries /= np.linalg.norm(c_queries, axis=1, keepdims=True)
    index_types = tuple(t.strip().upper() for t in args.index_types.split(","))
    with contextlib.ExitStack() as stack:
        uri = args.uri
        if args.server:
            boot = time.perf_counter()
            server = milvus_server(stack, "accelkit-milvus-bench-")
            SERVER_PID, uri = server.server.pid, server.uri
            print(f"server up in {time.perf_counter() - boot:.0f} s at {uri}", flush=True)
        result = {
            "visibility": bench_visibility(
                uri, args.token, clustered_vectors(args.visibility_rows, 20)
            ),
            "clustered": bench_server(
                uri, args.token, clustered, c_queries, args.queries, c_sources, index_types
            ),
        }
        if args.random:
            result["random"] = bench_server(
                uri, args.token, data, queries, args.queries, sources, ("HNSW",)
            )
    with tempfile.TemporaryDirectory(prefix="accelkit-store-bench-") as tmp:
        lite = bench_lite_flat(
            str(Path(tmp) / "bench.db"), clustered, c_queries, args.queries, c_sources
        )
    minutes = (time.perf_counter() - started) / 60
    visibility = result["visibility"]["levels"]
    payload = {
        "schema": SCHEMA,
        **environment(load_start),
        "load_avg_end": os.getloadavg(),
        "quick": args.quick,
        "uri": "the test server (--server)" if args.server else redact_uri(uri),
        "targets": SERVER_TARGETS,
        "minutes": minutes,
        "data": {
            "clustered": "1000 Gaussian clusters in 64-d, mapped to 1280-d + noise; queries: stored items + 0.02 noise",
            "random": "uniform unit 1280-d; queries: stored items + 0.75 noise (cosine ~0.8)",
        },
        "server": {k: v for k, v in result.items() if k != "visibility"},
        "visibility": result["visibility"],
        "lite_flat_same_run": lite,
        "verdict": {
            **{name: server_verdict(r) for name, r in result.items() if name != "visibility"},
            "first_search_after_bulk_insert_ms": {
                level: entry.get("first_search", entry.get("first_search_other_client"))["wall_s"]
                * 1000
                for level, entry in visibility.items()
            },
            "benchmark_minutes": {"measured": minutes, "met": minutes <= 20},
        },
    }
    write_json_atomic(out_path, payload, trailing_newline=True)
    print(f"wrote {out_path} ({minutes:.1f} min)")
    print(json.dumps(payload["verdict"], indent=1))
