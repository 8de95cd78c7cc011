"""The vectors, the exact answers and the timed searches that `service_bench.py` (Milvus Lite and
the service) and `service_bench_server.py` (a Milvus server) share, and the record both write."""

from __future__ import annotations

import statistics
import time

import numpy as np

from benchmarks.common import machine

SCHEMA = "accelkit.service_bench/1"
DIM = 1280
FILTER = 'metadata["k"] == 3'


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def clustered_vectors(n: int, seed: int, clusters: int = 1000, latent: int = 64) -> np.ndarray:
    """Unit vectors with the structure of real embeddings: a mixture of `clusters` Gaussian
    clusters in a `latent`-dimensional space, mapped linearly to 1280-d, plus a little isotropic
    noise (CNN embeddings have a low intrinsic dimension; uniform random 1280-d vectors, whose
    nearest neighbours are near-ties, are the worst case for any approximate index)."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, latent)).astype(np.float32)
    points = centers[rng.integers(0, clusters, n)] + 0.35 * rng.standard_normal((n, latent)).astype(
        np.float32
    )
    projection = rng.standard_normal((latent, DIM)).astype(np.float32) / np.sqrt(latent)
    v = points @ projection + 0.05 * rng.standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def unit_vectors(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def exact_top10(data: np.ndarray, queries: np.ndarray, mask: np.ndarray | None) -> list[set[int]]:
    scores = queries.astype(np.float64) @ data.astype(np.float64).T
    if mask is not None:
        scores[:, ~mask] = -np.inf
    return [set(np.argsort(-row, kind="stable")[:10].tolist()) for row in scores]


def timed_searches(
    store, name, queries, n_queries, expr, exact, sources=None, mask=None, **kw
) -> dict:
    """p50/p99 latency and recall@10 (vs exact numpy top-10) of `n_queries` top-10 searches."""
    times, recalls, top1 = [], [], []
    for q in range(n_queries):
        start = time.perf_counter()
        hits = store.search(name, queries[q], 10, expr, **kw)[0]
        times.append((time.perf_counter() - start) * 1000)
        recalls.append(len({int(h.id) for h in hits} & exact[q]) / 10)
        if sources is not None and (expr is None or mask[sources[q]]):
            top1.append(int(hits[0].id) == sources[q])
    out = {
        "p50_ms": percentile(times, 50),
        "p99_ms": percentile(times, 99),
        "mean_ms": statistics.fmean(times),
        "recall_at_10": statistics.fmean(recalls),
    }
    if top1:
        out["source_at_rank_1"] = statistics.fmean(top1)
    return out


def environment(load_start) -> dict:
    """accelkit's run record, with the load when the benchmark started and Milvus' versions."""
    packages = ("numpy", "pymilvus", "milvus-lite", "milvus")
    return {"environment": machine(packages, load_avg_start=load_start)}
