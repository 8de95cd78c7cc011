import os, traceback
from pymilvus import MilvusClient
import milvus_lite; print("milvus_lite", milvus_lite.__version__)
p = "/work/research-lite3/compat/v25.db"
print("is file:", os.path.isfile(p), os.path.getsize(p))
try:
    c = MilvusClient(p)
    print(c.list_collections())
except Exception as e:
    print("MilvusClient error:", type(e).__name__, e)
from milvus_lite import MilvusLite
try:
    MilvusLite(p)
except Exception as e:
    print("MilvusLite(p) error:", type(e).__name__, e)
# version detection on a fresh Lite 3 db
c = MilvusClient("/work/research-lite3/compat/v3.db")
print("get_server_version:", c.get_server_version())
print("detail:", c.get_server_version(detail=True))
c.close()
