"""Milvus Lite 2.5 and 3 side by side, through accelkit's own `VectorStore`:
what accelkit does with each engine, not raw pymilvus.

Both engines are the module `milvus_lite`, so they never share a process: this driver makes the
data and the exact answers once per size, then runs this file as a worker (`--worker`) once per
engine and size, in a subprocess of that engine's Python (the system `python3` for Lite 2.5; the
Lite 3 one from `--lite3-python`, default the test suite's `.venv-lite3/`, made on first use by
tests/support/lite3_env.py). Sizes are the outer loop, so the engines' runs interleave
(2.5, 3 at 10k, then 2.5, 3 at 100k). After every worker the JSON so far is written (atomically)
to `lite_engines.partial.json` beside `--out`, so a run cut short keeps what it measured
("complete": false); `--out` itself is written only when the run ends with every worker done.

Data: N 1280-d unit vectors in gaussian clusters (`service_bench.clustered_vectors`), metadata
`{"tag": i % 10}`; queries are further draws from the same mixture (not stored); COSINE, top-10.
Per engine, size and index type (FLAT; HNSW M 16 / efConstruction 200 / ef 64 where the engine
has it: Lite 3; Lite 2.5 refuses it, said in the JSON):
  insert       `store.upsert` in 1,000-row calls, then `store.flush` (as `images insert` ends a
               bulk insert): rows/s including the flush
  ready        `store.wait_for_index` after that: until searchable with every row indexed (Lite 3
               builds segment indexes on a background thread)
  search       single-query p50/p99 (after one warm-up search), batched (10 queries per call)
               ms/query, recall@10 against exact numpy float64 top-10; filtered `tag == 3` (10 %
               match) p50/p99 and recall against the exact filtered top-10
  after upsert the first search right after an upsert of 1,000 new rows (Lite 3 flushes them
               first: `_settle`), and the one after it
  disk, RSS    the database on disk (du: a 2.5 file, a 3 folder); the peak RSS of the process that
               measured that collection (each index type in a process of its own), and of Lite
               2.5's engine process
  durability   (once per engine and size) a child process upserts 2,000 rows, prints
               "acknowledged" once `upsert` returned and is SIGKILLed at once; the reopened store
               must hold all 2,000 (count, 20 vectors compared), with the time to reopen

A measurement stops after `--queries` queries, or earlier once it has run `--budget-s` seconds and
has at least `--min-queries` (Lite 3's FLAT at 100k takes seconds a query); the JSON gives each
count.

    nice -n 10 python -m benchmarks.images.lite_engines                  # 10k and 100k, both engines
    nice -n 10 python -m benchmarks.images.lite_engines --sizes 2000 --queries 20 --out /tmp/x.json
    python -m benchmarks.docs                                # docs/images.md's table

Writes benchmarks/results/lite_engines.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import (
    REPO,
    ArgumentParser,
    existing_dir,
    interpreter,
    listed,
    module_command,
    numbers,
    out_file,
    partial,
    positive,
    repo_env,
    whole_number,
    write_progress,
    write_results,
)

SCHEMA = "accelkit.lite_engines/1"
MODULE = "benchmarks.images.lite_engines"
DIM = 1280
TAGS = 10
FILTER = 'metadata["tag"] == 3'
BATCH = 1000  # rows per upsert call, as `images insert` sends them
BATCH_QUERIES = 10
EXTRA = 1000  # rows upserted before the first-search-after-upsert figure
DURABLE = 2000  # rows the SIGKILLed child upserts
OUT = REPO / "benchmarks" / "results" / "lite_engines.json"


def say(*parts) -> None:
    print(*parts, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------- driver


def exact_top10(data: np.ndarray, queries: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """[nq, 10] row numbers of the exact top-10 by cosine (unit vectors: the dot product), in
    float64, over the rows `mask` keeps."""
    q = queries.astype(np.float64)
    scores = np.empty((len(q), len(data)))
    for start in range(0, len(data), 20_000):  # float64 copies of the data a chunk at a time
        scores[:, start : start + 20_000] = q @ data[start : start + 20_000].astype(np.float64).T
    if mask is not None:
        scores[:, ~mask] = -np.inf
    return np.argsort(-scores, axis=1, kind="stable")[:, :10]


def make_inputs(folder: Path, size: int, queries: int, seed: int) -> None:
    from benchmarks.images.vectors import clustered_vectors

    # float32, as a model's embeddings are (the generator's arithmetic comes out float64)
    everything = clustered_vectors(size + queries + EXTRA, seed).astype(np.float32)
    data, query, extra = np.split(everything, [size, size + queries])
    mask = np.arange(size) % TAGS == 3
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "data.npy", data)
    np.save(folder / "queries.npy", query)
    np.save(folder / "extra.npy", extra)
    np.save(folder / "exact.npy", exact_top10(data, query, None))
    np.save(folder / "exact_filtered.npy", exact_top10(data, query, mask))


def default_lite3_python() -> str:
    from tests.support.lite3_env import lite3_python

    return str(lite3_python())


def run_worker(python: str, inputs: Path, workdir: Path, args, phase: str | None = None) -> dict:
    """This file as a worker in `python` (an engine's worker, or with `phase` one index type's
    phase of it, in a process of its own so that its peak RSS is its own); its JSON result."""
    out = workdir / (f"{phase.lower()}.json" if phase else "worker.json")
    command = [
        *module_command(MODULE, python=python),
        *("--worker", str(inputs), "--workdir", str(workdir), "--out", str(out)),
        *("--queries", str(args.queries), "--min-queries", str(args.min_queries)),
        *("--budget-s", str(args.budget_s), "--index-timeout", str(args.index_timeout)),
        *(("--phase", phase) if phase else ()),
    ]
    env = repo_env({**os.environ, "PYTHONPATH": ""}, str(REPO / "src"))
    started = time.perf_counter()
    done = subprocess.run(command, env=env, timeout=args.worker_timeout)
    if done.returncode:
        return {"failed": f"worker exited {done.returncode}", "python": python}
    result = json.loads(out.read_text())
    result["worker_wall_s"] = time.perf_counter() - started
    return result


def driver(args) -> int:
    from accelkit.runtime.environment import record

    sizes = [int(s) for s in args.sizes.split(",")]
    pythons = {"2": args.lite2_python, "3": args.lite3_python or default_lite3_python()}
    started = time.perf_counter()
    payload = {
        "schema": SCHEMA,
        "environment": {
            **record(("numpy", "pymilvus")),
            "load_avg_start": os.getloadavg(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "niceness": os.nice(0),
        },
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "settings": {
            "dim": DIM,
            "metric": "COSINE",
            "topk": 10,
            "filter": FILTER,
            "filter_selectivity": 1 / TAGS,
            "upsert_rows_per_call": BATCH,
            "batched_queries_per_call": BATCH_QUERIES,
            "queries": args.queries,
            "min_queries": args.min_queries,
            "budget_s": args.budget_s,
            "seed": args.seed,
            "data": "service_bench.clustered_vectors (1,000 gaussian clusters in 64-d, mapped to 1280-d)",
        },
        "pythons": pythons,
        "sizes": {},
        "complete": False,
    }
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="accelkit-lite-engines-", dir=args.tmp) as tmp:
        for size in sizes:
            inputs = Path(tmp) / f"inputs-{size}"
            say(f"[lite_engines] making {size:,} vectors and their exact top-10 ...")
            make_inputs(inputs, size, args.queries, args.seed)
            payload["sizes"][str(size)] = {}
            for engine in args.engines.split(","):
                workdir = Path(tmp) / f"lite{engine}-{size}"
                workdir.mkdir()
                load = os.getloadavg()
                say(f"[lite_engines] Milvus Lite {engine} at {size:,} (load {load[0]:.1f}) ...")
                result = run_worker(pythons[engine], inputs, workdir, args)
                result["load_avg_before"] = load
                result["load_avg_after"] = os.getloadavg()
                payload["sizes"][str(size)][f"lite{engine}"] = result
                payload["minutes"] = (time.perf_counter() - started) / 60
                payload["load_avg_end"] = os.getloadavg()
                write_progress(out, payload)
    failed = [
        f"lite{engine} at {size}"
        for size, engines in payload["sizes"].items()
        for engine, result in engines.items()
        if "failed" in result
    ]
    if failed:  # the committed result stays as it was
        say(f"error: {', '.join(failed)} failed; what was measured is in {partial(out)}")
        return 1
    payload["complete"] = True
    payload["minutes"] = (time.perf_counter() - started) / 60
    payload["load_avg_end"] = os.getloadavg()
    write_results(out, payload)
    say(f"[lite_engines] wrote {out} ({payload['minutes']:.1f} min)")
    return 0


# ---------------------------------------------------------------------------------------- worker


def status_kib(pid: int | str, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def reset_peak() -> bool:
    """Reset this process's VmHWM (Linux: write 5 to clear_refs), so a phase's peak is its own."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def engine_children() -> list[int]:
    """Our descendant processes (Lite 2.5 runs its engine in a child)."""
    from benchmarks.images.delete_burst import tree

    return [pid for pid in tree(os.getpid()) if pid != os.getpid()]


def disk_bytes(path: Path) -> dict:
    """Allocated (du) and apparent bytes of a file or folder."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    stats = [p.stat() for p in files]
    return {
        "du_bytes": sum(s.st_blocks * 512 for s in stats),
        "apparent_bytes": sum(s.st_size for s in stats),
        "files": len(files),
    }


def timed(fn, count: int, args) -> tuple[list[float], list]:
    """Run `fn(i)` for i = 0.. until `count`, or earlier past the budget with enough runs."""
    times, results = [], []
    begun = time.perf_counter()
    for i in range(count):
        start = time.perf_counter()
        results.append(fn(i))
        times.append((time.perf_counter() - start) * 1000)
        if time.perf_counter() - begun > args.budget_s and i + 1 >= args.min_queries:
            break
    return times, results


def recall(hits, exact_row) -> float:
    return len({int(h.id) for h in hits} & set(exact_row.tolist())) / 10


def latency(times: list[float], recalls: list[float]) -> dict:
    return {
        "queries": len(times),
        "p50_ms": float(np.percentile(times, 50)),
        "p99_ms": float(np.percentile(times, 99)),
        "mean_ms": statistics.fmean(times),
        "recall_at_10": statistics.fmean(recalls),
    }


def searches(store, name: str, queries, exact, exact_filtered, args) -> dict:
    out = {}
    for key, expr, truth in (("single", None, exact), ("filtered", FILTER, exact_filtered)):
        times, hits = timed(
            lambda i, expr=expr: store.search(name, queries[i], 10, expr)[0], len(queries), args
        )
        out[key] = latency(times, [recall(h, truth[i]) for i, h in enumerate(hits)])
    calls = len(queries) // BATCH_QUERIES
    per = max(1, -(-args.min_queries // BATCH_QUERIES))  # at least min_queries queries
    times, hits = timed(
        lambda c: store.search(name, queries[c * BATCH_QUERIES : (c + 1) * BATCH_QUERIES], 10),
        calls,
        argparse.Namespace(budget_s=args.budget_s, min_queries=per),
    )
    recalls = [
        recall(h, exact[c * BATCH_QUERIES + j])
        for c, got in enumerate(hits)
        for j, h in enumerate(got)
    ]
    out["batched"] = {
        "calls": len(times),
        "queries_per_call": BATCH_QUERIES,
        "ms_per_query": statistics.fmean(times) / BATCH_QUERIES,
        "recall_at_10": statistics.fmean(recalls),
    }
    return out


def bench_index(index_type: str, inputs: Path, workdir: Path, args) -> dict:
    from accelkit.errors import ConfigError
    from accelkit.images.settings.config import StoreConfig
    from accelkit.images.store import VectorStore

    data = np.load(inputs / "data.npy")
    queries = np.load(inputs / "queries.npy")
    extra = np.load(inputs / "extra.npy")
    exact, exact_filtered = np.load(inputs / "exact.npy"), np.load(inputs / "exact_filtered.npy")
    n = len(data)
    ids = [str(i) for i in range(n)]
    metadata = [{"tag": i % TAGS} for i in range(n)]
    db = workdir / f"{index_type.lower()}.db"
    peak_reset = reset_peak()
    rss_start = status_kib("self", "VmRSS")
    out: dict = {"index_type": index_type}
    name = "bench"
    begun = time.perf_counter()
    with VectorStore(StoreConfig(uri=str(db), index_type=index_type)) as store:
        out["open_s"] = time.perf_counter() - begun
        try:
            store.create_collection(name, dim=DIM)
        except ConfigError as exc:
            return {"index_type": index_type, "refused": str(exc)}
        spec = store._spec(name)
        out["params"] = dict(spec.params)
        out["search_params"] = spec.search_params(10)
        out["filtered_search_params"] = spec.search_params(10, True)
        say(f"  {index_type}: upserting {n:,} rows ...")
        start = time.perf_counter()
        calls = []
        for s in range(0, n, BATCH):
            call = time.perf_counter()
            store.upsert(name, ids[s : s + BATCH], data[s : s + BATCH], metadata[s : s + BATCH])
            calls.append((time.perf_counter() - call) * 1000)
        upserted = time.perf_counter()
        store.flush(name)
        flushed = time.perf_counter()
        state = store.wait_for_index(name, timeout=args.index_timeout)
        ready = time.perf_counter()
        out["insert"] = {
            "rows": n,
            "upsert_s": upserted - start,
            "flush_s": flushed - upserted,
            "rows_per_s": n / (flushed - start),
            "rows_per_s_without_flush": n / (upserted - start),
            # per 1,000-row call: Lite 3 flushes its memtable inside the call that fills it
            "call_ms": {
                "p50": float(np.percentile(calls, 50)),
                "p99": float(np.percentile(calls, 99)),
                "max": max(calls),
            },
        }
        out["wait_for_index_s"] = ready - flushed
        out["index_state"] = state
        out["insert_to_indexed_s"] = ready - start
        say(
            f"  {index_type}: {n / (flushed - start):,.0f} rows/s, ready after {ready - flushed:.1f} s"
        )
        first = time.perf_counter()
        store.search(name, queries[0], 10)
        out["first_search_after_index_ms"] = (time.perf_counter() - first) * 1000
        out["search"] = searches(store, name, queries, exact, exact_filtered, args)
        say(
            f"  {index_type}: p50 {out['search']['single']['p50_ms']:.1f} ms, p99"
            f" {out['search']['single']['p99_ms']:.1f}, recall {out['search']['single']['recall_at_10']:.3f};"
            f" batched {out['search']['batched']['ms_per_query']:.1f} ms/query"
        )
        out["count"] = store.count(name)
        out["disk"] = disk_bytes(db)
        new_ids = [f"new{i}" for i in range(EXTRA)]
        start = time.perf_counter()
        store.upsert(name, new_ids, extra, [{"tag": 3}] * EXTRA)
        upserted = time.perf_counter()
        hits = store.search(name, extra[0], 10)[0]
        first = time.perf_counter()
        store.search(name, extra[1], 10)
        second = time.perf_counter()
        out["after_upsert"] = {
            "rows": EXTRA,
            "upsert_s": upserted - start,
            "first_search_ms": (first - upserted) * 1000,
            "second_search_ms": (second - first) * 1000,
            "first_hit_is_the_new_row": bool(hits) and hits[0].id == new_ids[0],
        }
        out["engine_children_peak_rss_kib"] = [
            status_kib(pid, "VmHWM") for pid in engine_children()
        ]
    out["rss_kib"] = {
        "at_start": rss_start,
        "peak": status_kib("self", "VmHWM") if peak_reset else None,
        "peak_reset_per_phase": peak_reset,
        "own_process": bool(getattr(args, "phase", None)),
        "inputs_bytes": data.nbytes + queries.nbytes + extra.nbytes,
    }
    return out


def durable_rows(inputs: Path) -> np.ndarray:
    """The DURABLE rows the killed child upserts: the first stored vectors (repeated when the
    size is smaller)."""
    return np.resize(np.load(inputs / "data.npy", mmap_mode="r")[:DURABLE], (DURABLE, DIM))


def durability_child(db: str, inputs: Path) -> int:
    from accelkit.images.settings.config import StoreConfig
    from accelkit.images.store import VectorStore

    data = durable_rows(inputs)
    store = VectorStore(StoreConfig(uri=db))
    store.create_collection("durable", dim=DIM)
    store.upsert(
        "durable",
        [f"d{i}" for i in range(DURABLE)],
        data,
        [{"tag": i % TAGS} for i in range(DURABLE)],
    )
    print("acknowledged", flush=True)
    time.sleep(600)  # SIGKILLed before this ends
    return 1


def durability(inputs: Path, workdir: Path) -> dict:
    from accelkit.images.settings.config import StoreConfig
    from accelkit.images.store import VectorStore

    db = str(workdir / "durable.db")
    child = subprocess.Popen(
        module_command(MODULE, "--durability-child", db, str(inputs)),
        env=repo_env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    line = child.stdout.readline().strip()
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    child.stdout.close()
    if line != "acknowledged":
        return {"failed": f"the child printed {line!r} instead of 'acknowledged'"}
    start = time.perf_counter()
    with VectorStore(StoreConfig(uri=db)) as store:
        count = store.count("durable")
        reopened = time.perf_counter() - start
        sample = [f"d{i}" for i in range(0, DURABLE, DURABLE // 20)]
        got = store.get("durable", sample, with_vectors=True)
    data = durable_rows(inputs)
    # the engines hand back a stored unit vector within float32 rounding of what was sent
    diff = max(
        (float(np.abs(g["vector"] - data[int(g["id"][1:])]).max()) for g in got), default=None
    )
    return {
        "acknowledged": DURABLE,
        "count_after_reopen": count,
        "all_held": count == DURABLE,
        "sampled": len(got),
        "sampled_found": len(got) == len(sample),
        "sampled_max_abs_diff": diff,
        "sampled_vectors_equal": diff is not None and diff <= 1e-6,
        "reopen_and_count_s": reopened,
    }


def worker(args) -> int:
    from importlib.metadata import PackageNotFoundError, version

    from accelkit.images.store.lite import lite_generation

    inputs, workdir = Path(args.worker), Path(args.workdir)

    def installed(package: str) -> str | None:
        try:
            return version(package)
        except PackageNotFoundError:
            return None

    result: dict = {
        "lite": lite_generation(),
        "python": sys.executable,
        "versions": {
            p: installed(p) for p in ("milvus-lite", "pymilvus", "faiss-cpu", "pyarrow", "numpy")
        },
        "indexes": {},
    }
    for index_type in ("FLAT", "HNSW"):
        result["indexes"][index_type] = run_worker(
            sys.executable, inputs, workdir, args, index_type
        )
    say("  durability after SIGKILL ...")
    result["durability"] = durability(inputs, workdir)
    result["peak_rss_kib_whole_worker"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    from accelkit.runtime.files import write_json_atomic

    write_json_atomic(args.out, result, trailing_newline=True)
    return 0


def main() -> int:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", type=numbers, default="10000,100000", help="comma-separated row counts"
    )
    parser.add_argument(
        "--engines",
        type=listed(("2", "3")),
        default="2,3",
        help="Milvus Lite generations, in order",
    )
    parser.add_argument("--queries", type=positive(), default=100, help="queries per measurement")
    parser.add_argument("--min-queries", type=positive(), default=10)
    parser.add_argument(
        "--budget-s", type=positive(float), default=60.0, help="seconds per measurement"
    )
    parser.add_argument("--index-timeout", type=positive(float), default=3600.0)
    parser.add_argument("--worker-timeout", type=positive(float), default=7200.0)
    parser.add_argument("--seed", type=whole_number, default=0)
    parser.add_argument("--lite2-python", type=interpreter, default="python3")
    parser.add_argument(
        "--lite3-python", type=interpreter, default=None, help="default: tests' .venv-lite3"
    )
    parser.add_argument(
        "--tmp", type=existing_dir, default=None, help="folder for the databases (default: $TMPDIR)"
    )
    parser.add_argument("--out", type=out_file, default=OUT)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--phase", choices=("FLAT", "HNSW"), help=argparse.SUPPRESS)
    parser.add_argument("--durability-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.durability_child:
        return durability_child(args.durability_child[0], Path(args.durability_child[1]))
    if args.worker and args.phase:
        from accelkit.runtime.files import write_json_atomic

        result = bench_index(args.phase, Path(args.worker), Path(args.workdir), args)
        write_json_atomic(args.out, result, trailing_newline=True)
        return 0
    if args.worker:
        return worker(args)
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
