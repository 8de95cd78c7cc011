"""insert vs upsert (new ids) vs upsert (existing ids), rows/s, one process, 1,000-row batches.
Usage: nice -n 19 <python> upsert_rate.py [N]  (venv python: Lite 3; system python3: Lite 2.5)"""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from bench_lite3 import make_data  # noqa: E402

import milvus_lite  # noqa: E402
from pymilvus import DataType, MilvusClient  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
data, tags, _ = make_data(2 * N, 1280, 1)
base = tempfile.mkdtemp(prefix="lite_ups_", dir="/work/research-lite3")
c = MilvusClient(os.path.join(base, "u.db"))
schema = c.create_schema(auto_id=False, enable_dynamic_field=False)
schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
schema.add_field("vec", DataType.FLOAT_VECTOR, dim=1280)
schema.add_field("tag", DataType.INT64)
ip = c.prepare_index_params()
ip.add_index("vec", index_type="FLAT", metric_type="L2")
c.create_collection("u", schema=schema, index_params=ip, consistency_level="Strong")


def write(fn, lo, hi, ids_from=None):
    t = time.perf_counter()
    for s in range(lo, hi, 1000):
        fn("u", [{"id": str((ids_from or 0) + i - lo if ids_from is not None else i),
                  "vec": data[i].tolist(), "tag": int(tags[i])} for i in range(s, min(hi, s + 1000))])
    return (hi - lo) / (time.perf_counter() - t)


print(f"milvus_lite {milvus_lite.__version__} N={N} loadavg={os.getloadavg()}")
print(f"insert new ids:       {write(c.insert, 0, N):7.0f} rows/s")
print(f"upsert new ids:       {write(c.upsert, N, 2 * N):7.0f} rows/s")
print(f"upsert existing ids:  {write(c.upsert, N, 2 * N, ids_from=0):7.0f} rows/s")
print(f"loadavg={os.getloadavg()}")
c.close()
import shutil  # noqa: E402
shutil.rmtree(base, ignore_errors=True)
