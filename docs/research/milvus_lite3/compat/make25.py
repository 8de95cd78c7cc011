from pymilvus import MilvusClient
import milvus_lite; print("milvus_lite", milvus_lite.__version__)
c = MilvusClient("/work/research-lite3/compat/v25.db")
c.create_collection("docs", dimension=4)
c.insert("docs", [{"id": i, "vector": [0.1*i]*4} for i in range(10)])
c.flush("docs")
try:
    print("get_server_version:", c.get_server_version())
except Exception as e:
    print("get_server_version error:", type(e).__name__, str(e)[:200].replace("\n"," "))
try:
    print("detail:", c.get_server_version(detail=True))
except Exception as e:
    print("detail error:", type(e).__name__, str(e)[:200].replace("\n"," "))
print(c.query("docs", filter="id < 3", output_fields=["id"]))
c.close()
