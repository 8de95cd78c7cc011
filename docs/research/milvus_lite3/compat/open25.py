from pymilvus import MilvusClient
try:
    c = MilvusClient("/work/research-lite3/compat/v3.db"); print(c.list_collections())
except Exception as e:
    print("2.5 opening a Lite 3 dir:", type(e).__name__, str(e)[:300])
