"""Milvus Lite 2.5 vs 3.x benchmark through pymilvus MilvusClient (the way accelkit uses it).

Run with the venv python for Lite 3.x and with the system python for Lite 2.5:
    nice -n 19 venv/bin/python bench_lite3.py --n 10000 --out r3.json
    nice -n 19 python3        bench_lite3.py --n 10000 --out r25.json

Workload: N unit float32 vectors (dim 1280, 100 gaussian clusters), VARCHAR pk, INT64 `tag`
(0..9), L2 metric. Inserted in 1,000-row batches into a collection created with an index
(FLAT by default) and loaded, like accelkit. Then k=10 searches (one query per call, as an
accelkit request does) unflushed, after flush, and (Lite 3 only) after release/drop_index/
create_index HNSW(M, efConstruction)/load; plus a filtered search (`tag == 3`), a batched
search (all queries in one call) and recall@10 against exact numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

METRIC, BATCH_NQ = "L2", 10


def make_data(n, dim, nq, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((100, dim)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)

    def sample(m):
        c = centers[rng.integers(0, 100, m)]
        x = c + 0.9 * rng.standard_normal((m, dim)).astype(np.float32) / np.sqrt(dim)
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    data = np.concatenate([sample(min(10000, n - i)) for i in range(0, n, 10000)])
    tags = rng.integers(0, 10, n).astype(np.int64)
    queries = sample(nq)
    return data, tags, queries


def exact_topk(data, queries, k, mask=None):
    idx = np.arange(len(data)) if mask is None else np.flatnonzero(mask)
    sub = data[idx]
    d = (queries**2).sum(1)[:, None] - 2 * queries @ sub.T + (sub**2).sum(1)[None, :]
    top = np.argsort(d, axis=1)[:, :k]
    return idx[top]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def run_searches(client, name, queries, truth, k, params, filt=None, nq_single=None, bnq=None):
    """One query per call (latency) + all queries in one call (throughput). Returns stats."""
    nq_single = nq_single or len(queries)
    lat, hits = [], []
    sp = {"metric_type": METRIC, "params": params}
    for q in queries[:nq_single]:
        t = time.perf_counter()
        r = client.search(name, data=[q.tolist()], limit=k, filter=filt or "",
                          output_fields=["tag"], search_params=sp, consistency_level="Strong")
        lat.append((time.perf_counter() - t) * 1000)
        hits.append([int(h["id"]) for h in r[0]])
    t = time.perf_counter()
    bnq = bnq or BATCH_NQ
    for s in range(0, len(queries), bnq):  # chunks: Lite 3's L2 brute force allocates nq*n*dim floats
        client.search(name, data=queries[s:s + bnq].tolist(), limit=k, filter=filt or "",
                      output_fields=["tag"], search_params=sp, consistency_level="Strong")
    batch_ms = (time.perf_counter() - t) * 1000
    rec = np.mean([len(set(h) & set(truth[i].tolist())) / k for i, h in enumerate(hits)])
    return {"n_lat": len(lat), "p50_ms": round(pct(lat, 50), 1), "p99_ms": round(pct(lat, 99), 1),
            "max_ms": round(max(lat), 1), "batched_total_ms": round(batch_ms, 1),
            "batch_per_query_ms": round(batch_ms / len(queries), 2), "recall@10": round(float(rec), 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--dim", type=int, default=1280)
    ap.add_argument("--nq", type=int, default=100)
    ap.add_argument("--nq-unflushed", type=int, default=20,
                    help="single-query calls on the unflushed memtable (slow on Lite 3)")
    ap.add_argument("--nq-flushed", type=int, default=0, help="single-query calls on the flushed FLAT phase (0: all)")
    ap.add_argument("--flat-batch-nq", type=int, default=0, help="queries per call, batched FLAT phases (0: --batch-nq)")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds to wait after the final flush")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--index", default="FLAT", help="index at creation (FLAT like accelkit)")
    ap.add_argument("--hnsw", default="16,200", help="M,efConstruction for the HNSW phase")
    ap.add_argument("--efs", default="16,64,128", help="ef values to search with after HNSW")
    ap.add_argument("--flush-every", type=int, default=0, help="flush after every N rows (0: only at the end)")
    ap.add_argument("--skip-unflushed", action="store_true")
    ap.add_argument("--skip-hnsw", action="store_true")
    ap.add_argument("--metric", default="L2", help="L2 (accelkit), IP or COSINE (same ranking on unit vectors)")
    ap.add_argument("--batch-nq", type=int, default=10, help="queries per call in the batched measurement")
    ap.add_argument("--upsert", action="store_true", help="write with upsert (as accelkit does)")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    import milvus_lite
    import pymilvus
    from pymilvus import DataType, MilvusClient

    k = 10
    global METRIC, BATCH_NQ
    METRIC, BATCH_NQ = a.metric, a.batch_nq
    res = {"milvus_lite": milvus_lite.__version__, "pymilvus": pymilvus.__version__,
           "n": a.n, "dim": a.dim, "index": a.index, "metric": a.metric, "upsert": a.upsert, "batch_nq": a.batch_nq, "flush_every": a.flush_every,
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
           "MEMTABLE_LIMIT": os.environ.get("MILVUS_LITE_MEMTABLE_MEMORY_LIMIT_BYTES"),
           "loadavg_start": os.getloadavg()}
    data, tags, queries = make_data(a.n, a.dim, a.nq)
    truth = exact_topk(data, queries, k)
    truth_f = exact_topk(data, queries, k, mask=(tags == 3))

    base = a.dir or tempfile.mkdtemp(prefix="lite_bench_", dir="/work/research-lite3")
    uri = os.path.join(base, "bench.db")
    client = MilvusClient(uri)
    try:
        res["server_version"] = client.get_server_version()
    except Exception as e:  # Lite 2.5: GetVersion is UNIMPLEMENTED
        res["server_version"] = f"error: {type(e).__name__}: {str(e)[:120]}"
    name = "bench"
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
    schema.add_field("vec", DataType.FLOAT_VECTOR, dim=a.dim)
    schema.add_field("tag", DataType.INT64)
    ip = client.prepare_index_params()
    ip.add_index("vec", index_type=a.index, metric_type=a.metric,
                 **({"params": {"M": 16, "efConstruction": 200}} if a.index == "HNSW" else {}))
    client.create_collection(name, schema=schema, index_params=ip, consistency_level="Strong")

    # ── insert ──
    t0 = time.perf_counter()
    flush_s = 0.0
    for s in range(0, a.n, a.batch):
        rows = [{"id": str(i), "vec": data[i].tolist(), "tag": int(tags[i])}
                for i in range(s, min(a.n, s + a.batch))]
        (client.upsert if a.upsert else client.insert)(name, rows)
        if a.flush_every and (s + a.batch) % a.flush_every == 0 and s + a.batch < a.n:
            tf = time.perf_counter()
            client.flush(name)
            flush_s += time.perf_counter() - tf
    ins = time.perf_counter() - t0
    res["insert_per_s"] = round(a.n / ins, 1)
    res["insert_s"] = round(ins, 2)
    res["intermediate_flush_s"] = round(flush_s, 2)
    print(json.dumps(res), flush=True)

    fparams = {"ef": 64} if a.index == "HNSW" else {}
    if not a.skip_unflushed and not a.flush_every:
        res["unflushed"] = run_searches(client, name, queries, truth, k, fparams,
                                        nq_single=a.nq_unflushed)
        res["unflushed_filtered"] = run_searches(client, name, queries, truth_f, k, fparams,
                                                 filt="tag == 3", nq_single=a.nq_unflushed)
        print("unflushed", res["unflushed"], res["unflushed_filtered"], flush=True)

    t = time.perf_counter()
    client.flush(name)
    res["flush_s"] = round(time.perf_counter() - t, 2)
    time.sleep(a.settle)  # let Lite 3's background compaction/index task start/finish
    if milvus_lite.__version__.startswith("3"):
        # Lite 3 builds segment indexes after a flush on a background thread; until they are
        # built, searches brute-force those segments. Wait for it (engine object, same process).
        from milvus_lite.server_manager import server_manager_instance
        t = time.perf_counter()
        server_manager_instance._servers[os.path.abspath(uri)][1].get_collection(name)._wait_for_bg()
        res["bg_wait_s"] = round(time.perf_counter() - t, 2)
    nqf = a.nq_flushed or None
    res["flushed"] = run_searches(client, name, queries[: nqf or len(queries)], truth, k, fparams, nq_single=nqf,
                                   bnq=a.flat_batch_nq or None)
    res["flushed_filtered"] = run_searches(client, name, queries[: nqf or len(queries)], truth_f, k, fparams,
                                           filt="tag == 3", nq_single=nqf, bnq=a.flat_batch_nq or None)
    print("flushed", res["flush_s"], res["flushed"], res["flushed_filtered"], flush=True)
    segdir = os.path.join(uri, "collections")
    if os.path.isdir(uri):
        res["parquet_files"] = sum(f.endswith(".parquet") for _, _, fs in os.walk(uri) for f in fs)

    if not a.skip_hnsw and a.index != "HNSW":
        M, efc = (int(x) for x in a.hnsw.split(","))
        t = time.perf_counter()
        client.release_collection(name)
        client.drop_index(name, "vec")
        ip = client.prepare_index_params()
        ip.add_index("vec", index_type="HNSW", metric_type=a.metric, params={"M": M, "efConstruction": efc})
        client.create_index(name, ip)
        client.load_collection(name)
        res["hnsw_build_s"] = round(time.perf_counter() - t, 2)
        res["hnsw_params"] = {"M": M, "efConstruction": efc}
        for ef in (int(x) for x in a.efs.split(",")):
            res[f"hnsw_ef{ef}"] = run_searches(client, name, queries, truth, k, {"ef": ef})
            res[f"hnsw_ef{ef}_filtered"] = run_searches(client, name, queries, truth_f, k, {"ef": ef},
                                                        filt="tag == 3")
            print("hnsw ef", ef, res[f"hnsw_ef{ef}"], res[f"hnsw_ef{ef}_filtered"], flush=True)
    res["loadavg_end"] = os.getloadavg()
    client.close()
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    if not a.dir:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
