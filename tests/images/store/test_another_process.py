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
import pytest

from accelkit.images.settings.config import StoreConfig
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


# on the Lite 3 pass's xdist worker: one process at a time makes `.venv-lite3/`
@pytest.mark.xdist_group("lite3-venv")
def test_a_2x_file_held_by_a_running_25_engine_is_refused_under_lite_3(tmp_path):
    """The holder check follows the database's format, not the installed engine: a Lite 2.x file
    that a running 2.5 engine holds is refused by a Lite 3 process (migrate copied it, exit 0,
    while it could still change)."""
    from accelkit.images.store.lite import lite_generation
    from tests.support.lite3_env import lite3_python
    from tests.support.require import not_applicable

    if lite_generation() != 2:
        not_applicable("needs this environment's Milvus Lite 2.5 to hold the file")
    src = tmp_path / "held.db"
    with VectorStore(StoreConfig(uri=str(src))) as store:
        store.create_collection("pics", 4)
        store.upsert("pics", ["a"], np.eye(1, 4, dtype=np.float32), [{}])
    code = (
        "import time\nfrom accelkit.images.store import StoreConfig, VectorStore\n"
        f"s = VectorStore(StoreConfig(uri={str(src)!r})); s.count('pics')\n"
        "print('ready', flush=True); time.sleep(120)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        command = [str(lite3_python()), "-m", "accelkit", "images", "migrate"]
        run = subprocess.run(
            [*command, str(src), str(tmp_path / "copy.db")],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert run.returncode == 2, (run.returncode, run.stdout, run.stderr)
        assert f"process {holder.pid} holds it" in run.stderr, run.stderr
        assert not (tmp_path / "copy.db").exists()
    finally:
        holder.kill()
        holder.wait(timeout=30)
