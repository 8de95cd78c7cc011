"""Memory of `accelkit images serve` (Milvus Lite) around a burst of deletes by id.

One delete of 1,000,000 ids once took 7-12 s and left the service's process tree (the service and
its Milvus Lite engine) 0.6-0.9 GB larger, for good. Now a request holds at most
`server.max_ids_per_request` ids (10,000) and the store deletes them 1,000 at a time. This script
stores --stored items, starts the service on that database, and records the resident memory of
the whole process tree (sum of VmRSS over the service and its children) when idle, right after a
burst of --requests deletes of --ids ids each (the first ones delete stored items, the rest name
absent ids), after --settle seconds of idle, and the tree's peak (sum of VmHWM).

    python -m benchmarks.images.delete_burst                         # 20 deletes of 10,000 ids
    python -m benchmarks.images.delete_burst --ids 1000000 --requests 5   # the issue's request
                                                              # (refused with 413 since the fix)

Writes JSON to benchmarks/results/delete_burst.json (or --output). Timings are of one run on a
shared machine: read them as sizes, not as a benchmark.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import (
    REPO,
    ArgumentParser,
    not_negative,
    out_file,
    positive,
    write_results,
)

SCHEMA = "accelkit.delete_burst/1"


def tree(pid: int) -> list[int]:
    """`pid` and all its descendants (from /proc)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        pending.extend(parents.get(current, []))
    return found


def memory_mb(pid: int, key: str = "VmRSS") -> float:
    total = 0
    for member in tree(pid):
        try:
            for line in Path(f"/proc/{member}/status").read_text().splitlines():
                if line.startswith(key + ":"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return round(total / 1024, 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def burst(args, workdir: Path) -> dict:
    """Store the items in `workdir`, serve them, send the burst; what was measured."""
    import httpx

    from accelkit.images.settings.config import StoreConfig
    from accelkit.images.store import VectorStore

    uri = str(workdir / "burst.db")
    rng = np.random.default_rng(0)
    with VectorStore(StoreConfig(uri=uri)) as store:
        store.create_collection("burst", dim=1280)
        for start in range(0, args.stored, 1000):
            count = min(1000, args.stored - start)
            vectors = rng.standard_normal((count, 1280)).astype(np.float32)
            store.upsert("burst", [f"item{start + i}" for i in range(count)], vectors)
    config = workdir / "service.yaml"
    config.write_text(f"preprocess:\n  cache_compiled: false\nstore:\n  uri: {uri}\n")
    port = free_port()
    log = open(workdir / "server.log", "wb")  # noqa: SIM115 - the server writes until it exits
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "accelkit", "images", "serve"),
            *("--config", str(config), "--port", str(port)),
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                tail = (workdir / "server.log").read_text(errors="replace")[-3000:]
                raise SystemExit(f"the service did not start; its log ends:\n{tail}")
            time.sleep(0.5)
        time.sleep(5)
        out: dict = {
            "schema": SCHEMA,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "stored": args.stored,
            "ids_per_request": args.ids,
            "requests": args.requests,
            "rss_idle_mb": memory_mb(process.pid),
        }
        answers, seconds = [], []
        with httpx.Client(base_url=url, timeout=600) as http:
            for r in range(args.requests):
                ids = [f"item{r * args.ids + i}" for i in range(args.ids)]
                started = time.perf_counter()
                response = http.request(
                    "DELETE", "/items", json={"collection": "burst", "ids": ids}
                )
                seconds.append(round(time.perf_counter() - started, 3))
                body = response.json()
                answers.append(
                    [response.status_code, body.get("deleted", body.get("error", {}).get("code"))]
                )
        out["answers"] = answers
        out["seconds_per_request"] = seconds
        out["rss_after_burst_mb"] = memory_mb(process.pid)
        time.sleep(args.settle)
        out["rss_after_settle_mb"] = memory_mb(process.pid)
        out["peak_mb"] = memory_mb(process.pid, "VmHWM")
        out["count_after"] = httpx.get(url + "/collections/burst").json()["count"]
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
    return out


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", type=positive(), default=10_000, help="ids per delete request")
    parser.add_argument("--requests", type=positive(), default=20, help="delete requests")
    parser.add_argument("--stored", type=positive(), default=20_000, help="items stored first")
    parser.add_argument(
        "--settle", type=not_negative, default=10.0, help="idle seconds after the burst"
    )
    parser.add_argument(
        "--output", type=out_file, default=REPO / "benchmarks/results/delete_burst.json"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="delete-burst-") as tmp:  # removed, also on error
        out = burst(args, Path(tmp))
    print(json.dumps(out, indent=2))
    write_results(args.output, out)


if __name__ == "__main__":
    main()
