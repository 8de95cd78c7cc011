"""cProfile of Milvus Lite 3.x's engine search (embedded API, no gRPC), to attribute per-search
cost. Usage: nice -n 19 venv/bin/python profile_engine.py [N]"""

import cProfile
import io
import os
import pstats
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_lite3 import make_data  # noqa: E402

from milvus_lite import CollectionSchema, DataType, FieldSchema, MilvusLite  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
data, tags, queries = make_data(N, 1280, 20)
d = tempfile.mkdtemp(prefix="lite_prof_", dir="/work/research-lite3")
db = MilvusLite(d)
schema = CollectionSchema(fields=[
    FieldSchema(name="id", dtype=DataType.VARCHAR, is_primary=True, max_length=64),
    FieldSchema(name="vec", dtype=DataType.FLOAT_VECTOR, dim=1280),
    FieldSchema(name="tag", dtype=DataType.INT64),
])
col = db.create_collection("p", schema)
t = time.perf_counter()
for s in range(0, N, 1000):
    col.insert([{"id": str(i), "vec": data[i].tolist(), "tag": int(tags[i])} for i in range(s, min(N, s + 1000))])
print(f"engine insert {N / (time.perf_counter() - t):.0f} rows/s (no gRPC)")
try:
    col.load()
except Exception as e:
    print("load:", e)


def prof(label, fn, reps=5, top=14):
    fn()  # warm
    pr = cProfile.Profile()
    t = time.perf_counter()
    pr.enable()
    for _ in range(reps):
        fn()
    pr.disable()
    ms = (time.perf_counter() - t) / reps * 1000
    print(f"\n=== {label}: {ms:.1f} ms/search (under cProfile) ===")
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(top)
    print("\n".join(s.getvalue().splitlines()[6:6 + top + 3]))


def timed(label, fn, reps=10):
    fn()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    print(f"{label}: {(time.perf_counter() - t) / reps * 1000:.1f} ms/search (no profiler)")


q1 = [queries[0].tolist()]
for metric in ("L2", "IP"):
    timed(f"memtable {N} {metric}", lambda: col.search(q1, top_k=10, metric_type=metric, anns_field="vec"), reps=3)
prof(f"memtable {N} L2", lambda: col.search(q1, top_k=10, metric_type="L2", anns_field="vec"), reps=2)
t = time.perf_counter()
col.flush()
col._wait_for_bg()
print(f"\nflush+bg: {time.perf_counter() - t:.2f}s")
for metric in ("L2", "IP"):
    timed(f"segment(no index) {N} {metric}", lambda: col.search(q1, top_k=10, metric_type=metric, anns_field="vec"))
timed(f"segment {N} L2 filtered", lambda: col.search(q1, top_k=10, metric_type="L2", anns_field="vec", expr="tag == 3"))
prof(f"segment(no index) {N} L2", lambda: col.search(q1, top_k=10, metric_type="L2", anns_field="vec"))
col.release()
t = time.perf_counter()
col.create_index("vec", {"index_type": "HNSW", "metric_type": "L2", "params": {"M": 16, "efConstruction": 200}})
col.load()
print(f"\nHNSW build (M16 efC200) {N}: {time.perf_counter() - t:.2f}s")
timed(f"HNSW {N} ef64", lambda: col.search(q1, top_k=10, anns_field="vec", search_params={"ef": 64}))
timed(f"HNSW {N} ef64 filtered", lambda: col.search(q1, top_k=10, anns_field="vec", expr="tag == 3", search_params={"ef": 64}))
prof(f"HNSW {N} ef64", lambda: col.search(q1, top_k=10, anns_field="vec", search_params={"ef": 64}))
db.close()
import shutil  # noqa: E402
shutil.rmtree(d, ignore_errors=True)
