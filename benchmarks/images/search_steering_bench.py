"""What cutting and steering a search costs (`ImageIndex.search(..., steering=...)`), against the
plain search in the same run, on Milvus Lite (FLAT, COSINE).

    python -m benchmarks.images.search_steering_bench [--rows 10000] [--queries 40]

Random unit vectors of the default model's width (1280) and query vectors (no model runs, so
only the store and `accelkit.images.index.ranking` are timed); the variants run interleaved, query
by query, in an order rotated per query (the first search of a new vector is slower), so the
machine's load hits them alike. Writes benchmarks/results/search_steering.json.
"""

from __future__ import annotations

import json
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import numpy as np

from benchmarks.common import REPO, ArgumentParser, positive

OUT = REPO / "benchmarks" / "results" / "search_steering.json"
DIM = 1280


def main() -> int:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=positive(), default=10000)
    parser.add_argument("--queries", type=positive(), default=40)
    parser.add_argument("--topk", type=positive(), default=10)
    args = parser.parse_args()

    from accelkit.images.index.base import Steering
    from accelkit.images.index.local import open_local_index
    from accelkit.images.settings.config import ServiceConfig
    from accelkit.runtime.files import write_json_atomic

    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(args.rows, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    queries = rng.normal(size=(args.queries, DIM)).astype(np.float32)
    variants = {
        "plain": Steering(),
        "min_score": Steering.checked(min_score=0.05),
        "auto_cut": Steering.checked(auto_cut=True),
        "negative_id": Steering.checked(negative_ids=["r0"]),
        "fold_0.95": Steering.checked(fold=0.95),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as folder:
        config = ServiceConfig.from_env(
            env={}, store={"uri": str(Path(folder) / "bench.db"), "thumbnails": "off"}
        )
        with open_local_index(config) as index:
            index.create_collection("bench")
            for start in range(0, args.rows, 2000):
                part = vectors[start : start + 2000]
                ids = [f"r{start + i}" for i in range(len(part))]
                index.store.upsert("bench", ids, part, [{} for _ in ids])
            for steering in variants.values():  # warm-up, once each
                index.search(queries[0], args.topk, collection="bench", steering=steering)
            names = list(variants)
            for n, q in enumerate(queries):  # each variant first as often as the others
                for name in names[n % len(names) :] + names[: n % len(names)]:
                    steering = variants[name]
                    started = time.perf_counter()
                    index.search(q, args.topk, collection="bench", steering=steering)
                    times[name].append(time.perf_counter() - started)
    plain = float(np.median(times["plain"]))
    results = {
        name: {
            "p50_ms": round(float(np.median(t)) * 1000, 2),
            "p99_ms": round(float(np.percentile(t, 99)) * 1000, 2),
            "ratio_to_plain_p50": round(float(np.median(t)) / plain, 2),
        }
        for name, t in times.items()
    }
    data = {
        "command": "python -m benchmarks.images.search_steering_bench",
        "rows": args.rows,
        "dim": DIM,
        "queries": args.queries,
        "topk": args.topk,
        "store": f"milvus-lite {version('milvus-lite')} FLAT COSINE",
        "loadavg": Path("/proc/loadavg").read_text().split()[0],
        "results": results,
    }
    write_json_atomic(OUT, data, trailing_newline=True)
    print(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
