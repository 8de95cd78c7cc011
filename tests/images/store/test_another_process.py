"""A store that another process made: what a new process reads of it, through the real CLI.

Every test here runs on Milvus Lite and on a real Milvus server, and again on Milvus Lite 3
(tests/images/store/test_engines.py), against one expected behaviour: the differential rule
of docs/reliability.md ("Milvus Lite 2.5, 3 and a server")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from accelkit.images.config import StoreConfig
from accelkit.images.store import VectorStore
from tests.support.cli import result_of

ROOT = Path(__file__).resolve().parents[3]
ROWS = 3000  # past a server's minimum for an index on a segment (MIN_INDEXED_ROWS)


def accelkit(args: list[str], store: dict, timeout_s: float = 10) -> subprocess.CompletedProcess:
    """`accelkit images ARGS` in a new process on the store `store` (settings)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        "ACCELKIT_STORE_URI": str(store["uri"]),
        "ACCELKIT_STORE_DB_NAME": store.get("db_name", ""),
        "ACCELKIT_STORE_TIMEOUT": str(timeout_s),
    }
    command = [sys.executable, "-m", "accelkit", "images", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_index_and_flush_in_a_new_process_see_the_index_another_process_built(store_settings):
    """Milvus Lite 3 keeps a collection's index per segment in memory, read back when the
    collection loads: a new process that had not loaded it read no index at all (`collection
    index --wait` waited 10 x store.timeout and said the index "keeps building on the server";
    `collection flush` said InProgress 0/3000)."""
    config = StoreConfig(**store_settings, index_type="IVF_FLAT", metric_type="L2", nlist=8)
    vectors = np.random.default_rng(5).standard_normal((ROWS, 16)).astype(np.float32)
    with VectorStore(config) as store:
        if store.has_collection("built"):
            store.drop_collection("built")
        store.create_collection("built", 16)
        store.upsert("built", [f"i{i}" for i in range(ROWS)], vectors)
        built = store.wait_for_index("built", timeout=300)
    finished = ("Finished", ROWS, ROWS, 0)
    keys = ("state", "indexed_rows", "total_rows", "pending_rows")
    assert tuple(built[k] for k in keys) == finished, built
    for args in (["collection", "index", "built", "--wait"], ["collection", "flush", "built"]):
        done = accelkit([*args, "--json"], store_settings)
        assert done.returncode == 0, done.stderr[-2000:]
        result = result_of(done.stdout)
        assert tuple(result[k] for k in keys) == finished, (args, result)
