"""Client-side levers on Milvus Lite 3.x, A/B interleaved inside ONE process (so each ratio comes
from one run under one load). Usage: nice -n 19 venv/bin/python levers_lite3.py [N] [METRIC]

Measured on a flushed collection of N rows:
  FLAT (numpy brute force) vs HNSW (M16, efC 200, ef 64); faiss OpenMP threads 1 vs default;
  queries per call 1/10/50; pymilvus+gRPC vs the engine called in-process (same server object);
  filtered (`tag == 3`) vs not.
"""

import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_lite3 import exact_topk, make_data, pct  # noqa: E402

import faiss  # noqa: E402
from pymilvus import DataType, MilvusClient  # noqa: E402
from milvus_lite.server_manager import server_manager_instance  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
METRIC = sys.argv[2] if len(sys.argv) > 2 else "L2"
K = 10
data, tags, queries = make_data(N, 1280, 100)
truth = exact_topk(data, queries, K)
print(f"N={N} metric={METRIC} loadavg={os.getloadavg()} faiss omp default={faiss.omp_get_max_threads()}")

base = tempfile.mkdtemp(prefix="lite_lev_", dir="/work/research-lite3")
uri = os.path.join(base, "lev.db")
c = MilvusClient(uri)
schema = c.create_schema(auto_id=False, enable_dynamic_field=False)
schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
schema.add_field("vec", DataType.FLOAT_VECTOR, dim=1280)
schema.add_field("tag", DataType.INT64)
ip = c.prepare_index_params()
ip.add_index("vec", index_type="FLAT", metric_type=METRIC)
c.create_collection("lev", schema=schema, index_params=ip, consistency_level="Strong")
for s in range(0, N, 1000):
    c.insert("lev", [{"id": str(i), "vec": data[i].tolist(), "tag": int(tags[i])} for i in range(s, min(N, s + 1000))])
c.flush("lev")
engine_db = server_manager_instance._servers[os.path.abspath(uri)][1]
col = engine_db.get_collection("lev")
col._wait_for_bg()


def client_search(qs, params, filt="", out=("tag",)):
    return c.search("lev", data=qs.tolist(), limit=K, filter=filt, output_fields=list(out),
                    search_params={"metric_type": METRIC, "params": params}, consistency_level="Strong")


def engine_search(qs, params, filt=""):
    return col.search(qs.tolist(), top_k=K, metric_type=METRIC, expr=filt or None,
                      output_fields=["tag"], anns_field="vec", search_params=params)


def lat(fn, qs, reps_per_block=10, blocks=None):
    out = []
    for i in range(0, len(qs)):
        t = time.perf_counter()
        fn(qs[i:i + 1])
        out.append((time.perf_counter() - t) * 1000)
    return out


def ab(label_fns, qs, block=10):
    """Interleave blocks of `block` single-query calls among the variants."""
    res = {k: [] for k in label_fns}
    for s in range(0, len(qs), block):
        for k, (setup, fn) in label_fns.items():
            setup()
            for i in range(s, min(len(qs), s + block)):
                t = time.perf_counter()
                fn(qs[i:i + 1])
                res[k].append((time.perf_counter() - t) * 1000)
    for k, v in res.items():
        print(f"  {k:42s} p50 {pct(v, 50):7.1f} ms  p99 {pct(v, 99):7.1f} ms  (n={len(v)})")
    return res


def recall(fn, params):
    hits = [[int(h["id"]) for h in fn(queries[i:i + 1], params)[0]] for i in range(len(queries))]
    return np.mean([len(set(h) & set(truth[i].tolist())) / K for i, h in enumerate(hits)])


noop = lambda: None  # noqa: E731
print("\n[FLAT, flushed, one segment] client vs engine-in-process, filtered or not")
ab({"client FLAT": (noop, lambda q: client_search(q, {})),
    "engine FLAT (no gRPC)": (noop, lambda q: engine_search(q, {})),
    "client FLAT tag==3": (noop, lambda q: client_search(q, {}, "tag == 3"))}, queries[:40])

t = time.perf_counter()
c.release_collection("lev")
c.drop_index("lev", "vec")
ip = c.prepare_index_params()
ip.add_index("vec", index_type="HNSW", metric_type=METRIC, params={"M": 16, "efConstruction": 200})
c.create_index("lev", ip)
c.load_collection("lev")
print(f"\nHNSW build+load: {time.perf_counter() - t:.2f}s; recall@10 ef64 = "
      f"{recall(lambda q, p: client_search(q, p), {'ef': 64}):.3f}")

dflt = faiss.omp_get_max_threads()
print("\n[HNSW ef64] faiss threads, client vs engine, output_fields, filter")
ab({f"client ef64 omp={dflt}": (lambda: faiss.omp_set_num_threads(dflt), lambda q: client_search(q, {"ef": 64})),
    "client ef64 omp=1": (lambda: faiss.omp_set_num_threads(1), lambda q: client_search(q, {"ef": 64})),
    "engine ef64 omp=1 (no gRPC)": (lambda: faiss.omp_set_num_threads(1), lambda q: engine_search(q, {"ef": 64})),
    "client ef64 omp=1 no output_fields": (lambda: faiss.omp_set_num_threads(1),
                                           lambda q: client_search(q, {"ef": 64}, out=())),
    "client ef64 omp=1 tag==3": (lambda: faiss.omp_set_num_threads(1),
                                 lambda q: client_search(q, {"ef": 64}, "tag == 3")),
    }, queries)
faiss.omp_set_num_threads(dflt)

print("\n[HNSW ef64] queries per call (per-query ms), client")
for nq in (1, 10, 50):
    ts = []
    for s in range(0, 100, nq):
        t = time.perf_counter()
        client_search(queries[s:s + nq], {"ef": 64})
        ts.append((time.perf_counter() - t) * 1000)
    print(f"  nq={nq:3d}: {statistics.median(ts):8.1f} ms/call, {sum(ts) / 100:6.2f} ms/query")

print(f"\nloadavg end={os.getloadavg()}")
c.close()
import shutil  # noqa: E402
shutil.rmtree(base, ignore_errors=True)
