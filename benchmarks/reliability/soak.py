"""A busy hour, shortened: `accelkit images serve` under many concurrent clients for minutes.

Each client (a thread of this process; all traffic to 127.0.0.1) loops until the deadline over a
seeded mix: insert (1-4 images, ids of its own, metadata), search by image, search by words (a
two-tower model built here with random weights, tests/support/two_tower.py), filtered search,
delete of its own acknowledged items, get by id, and collection admin (list, describe, create and
delete a scratch collection of its own). A 429 (busy) is honoured by waiting its Retry-After.

Measured and checked at the end:
  statuses     per route; the run fails on any 5xx or any transport error (a hang past 60 s)
  latency      client-side p50/p99 per route
  durability   every insert acknowledged (200) and not deleted is found by id, exactly once, with
               its metadata; every acknowledged delete is gone
  memory       the service's RSS after warm-up and at the end (target: within 10 %), file
               descriptors after warm-up and at the end (no leak)

    python -m benchmarks.reliability.soak                          # Milvus Lite, 16 clients, 10 minutes
    python -m benchmarks.reliability.soak --store server           # a real Milvus server (root: a loopback-only
                                                       # network namespace, tests/support/milvus_server)
    python -m benchmarks.reliability.soak --minutes 1 --clients 4  # a quick look

Writes benchmarks/results/soak_<store>.json."""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from benchmarks.common import (
    REPO,
    RESULTS,
    ArgumentParser,
    not_negative,
    out_file,
    positive,
    whole_number,
    write_results,
)

SCHEMA = "accelkit.soak/1"
COLLECTION = "soak"
TAGS = ("red", "green", "blue", "grey")
MIX = {  # relative weights of the operations
    "insert": 25,
    "search_image": 18,
    "search_text": 18,
    "search_filtered": 14,
    "delete": 10,
    "get": 8,
    "admin": 7,
}


def percentile(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def jpeg(rng: np.random.Generator, side: int = 80) -> str:
    """A small photo-like JPEG (smooth gradients plus noise), base64."""
    from PIL import Image

    y, x = np.mgrid[0:side, 0:side] / side
    colour = rng.uniform(0, 255, (3,))
    image = np.stack([colour[c] * (x if c % 2 else y) for c in range(3)], axis=-1)
    image = np.clip(image + rng.normal(0, 12, image.shape), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=85)
    return base64.b64encode(buffer.getvalue()).decode()


def process_figures(pid: int) -> dict:
    """RSS (MiB) and open file descriptors of the service process."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return {"rss_mib": rss / 1024, "fds": len(os.listdir(f"/proc/{pid}/fd"))}


class Recorder:
    """What the clients saw, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.statuses: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        self.latency: dict[str, list[float]] = defaultdict(list)
        self.errors: list[str] = []
        self.inserted: dict[str, dict] = {}  # acknowledged id -> metadata
        self.deleted: set[str] = set()

    def seen(self, route: str, status: int, ms: float) -> None:
        with self.lock:
            self.statuses[route][status] += 1
            self.latency[route].append(ms)
            if status >= 500:
                self.errors.append(f"{route}: HTTP {status}")


class Client(threading.Thread):
    def __init__(self, number: int, url: str, deadline: float, record: Recorder, seed: int):
        super().__init__(daemon=True)
        self.number, self.url, self.deadline, self.record = number, url, deadline, record
        self.rng = np.random.default_rng([seed, number])
        self.pick = random.Random(seed * 1000 + number)
        self.mine: list[str] = []  # acknowledged, not yet deleted
        self.serial = 0

    def call(self, http, route: str, method: str, path: str, **kwargs):
        while time.monotonic() < self.deadline + 60:
            started = time.perf_counter()
            try:
                response = http.request(method, path, **kwargs)
            except Exception as exc:  # a transport error or a hang past the timeout
                with self.record.lock:
                    self.record.errors.append(f"{route}: {type(exc).__name__}: {exc}")
                return None
            self.record.seen(route, response.status_code, (time.perf_counter() - started) * 1000)
            if response.status_code != 429:
                return response
            time.sleep(float(response.headers.get("Retry-After", "1")))
        return None

    def run(self) -> None:
        import httpx

        names, weights = zip(*MIX.items(), strict=True)
        with httpx.Client(base_url=self.url, timeout=60) as http:
            while time.monotonic() < self.deadline:
                getattr(self, self.pick.choices(names, weights)[0])(http)

    def insert(self, http) -> None:
        count = int(self.rng.integers(1, 5))
        items = []
        for _ in range(count):
            self.serial += 1
            item_id = f"c{self.number}-{self.serial}"
            metadata = {"client": self.number, "n": self.serial, "tag": self.pick.choice(TAGS)}
            items.append({"image_base64": jpeg(self.rng), "id": item_id, "metadata": metadata})
        body = {"collection": COLLECTION, "items": items}
        response = self.call(http, "POST /insert", "POST", "/insert", json=body)
        if response is not None and response.status_code == 200:
            stored = set(response.json()["ids"])
            with self.record.lock:
                for item in items:
                    if item["id"] in stored:
                        self.record.inserted[item["id"]] = item["metadata"]
            self.mine.extend(i["id"] for i in items if i["id"] in stored)

    def search_image(self, http) -> None:
        body = {"collection": COLLECTION, "image_base64": jpeg(self.rng), "topk": 10}
        self.call(http, "POST /search (image)", "POST", "/search", json=body)

    def search_text(self, http) -> None:
        from tests.support.two_tower import WORDS

        words = " ".join(self.pick.choices(WORDS, k=3))
        body = {"collection": COLLECTION, "text": words, "topk": 10}
        self.call(http, "POST /search (text)", "POST", "/search", json=body)

    def search_filtered(self, http) -> None:
        tag = self.pick.choice(TAGS)
        body = {
            "collection": COLLECTION,
            "image_base64": jpeg(self.rng),
            "topk": 10,
            "filter": f'metadata["tag"] == "{tag}"',
        }
        self.call(http, "POST /search (filtered)", "POST", "/search", json=body)

    def delete(self, http) -> None:
        if not self.mine:
            return self.insert(http)
        ids = [self.mine.pop(self.pick.randrange(len(self.mine)))]
        body = {"collection": COLLECTION, "ids": ids}
        response = self.call(http, "DELETE /items", "DELETE", "/items", json=body)
        if response is not None and response.status_code == 200:
            with self.record.lock:
                self.record.deleted.update(ids)
        else:
            self.mine.extend(ids)  # not acknowledged: still ours, still expected

    def get(self, http) -> None:
        ids = self.pick.sample(self.mine, min(3, len(self.mine))) if self.mine else ["none"]
        params = [("collection", COLLECTION), *(("ids", i) for i in ids)]
        self.call(http, "GET /items", "GET", "/items", params=params)

    def admin(self, http) -> None:
        scratch = f"scratch_{self.number}"
        step = self.pick.randrange(4)
        if step == 0:
            self.call(http, "GET /collections", "GET", "/collections")
        elif step == 1:
            self.call(http, "GET /collections/{name}", "GET", f"/collections/{COLLECTION}")
        elif step == 2:
            body = {"name": scratch, "exist_ok": True}
            self.call(http, "POST /collections/create", "POST", "/collections/create", json=body)
        else:
            self.call(http, "DELETE /collections/{name}", "DELETE", f"/collections/{scratch}")


def verify(url: str, record: Recorder) -> dict:
    """Every acknowledged insert not deleted is there once with its metadata; deletes are gone."""
    import httpx

    expected = {i: m for i, m in record.inserted.items() if i not in record.deleted}
    ids = sorted(set(record.inserted) | record.deleted)
    found: dict[str, list[dict]] = defaultdict(list)
    with httpx.Client(base_url=url, timeout=120) as http:
        for start in range(0, len(ids), 200):
            chunk = ids[start : start + 200]
            params = [("collection", COLLECTION), *(("ids", i) for i in chunk)]
            response = http.get("/items", params=params)
            response.raise_for_status()
            for item in response.json()["items"]:
                found[item["id"]].append(item)
    missing = sorted(i for i in expected if i not in found)
    duplicated = sorted(i for i, items in found.items() if len(items) > 1)
    resurrected = sorted(i for i in record.deleted if i in found)
    wrong = sorted(
        i
        for i, metadata in expected.items()
        if i in found and any(found[i][0]["metadata"].get(k) != v for k, v in metadata.items())
    )
    return {
        "acknowledged_inserts": len(record.inserted),
        "acknowledged_deletes": len(record.deleted),
        "expected_present": len(expected),
        "missing": missing[:20],
        "missing_count": len(missing),
        "duplicated_count": len(duplicated),
        "deleted_but_present_count": len(resurrected),
        "wrong_metadata_count": len(wrong),
        "ok": not (missing or duplicated or resurrected or wrong),
    }


@contextlib.contextmanager
def store_uri(kind: str, workdir: Path):
    if kind == "lite":
        yield str(workdir / "soak.db")
        return
    from tests.support.milvus_server import MilvusServer, unavailable

    reason = unavailable()
    if reason:
        raise SystemExit(f"no Milvus server here: {reason}")
    with MilvusServer(workdir / "milvus") as server:
        yield server.uri


def serve(config: Path, port: int, log: Path) -> subprocess.Popen:
    import httpx

    command = [sys.executable, "-m", "accelkit", "images", "serve", "--config", str(config)]
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        cwd=REPO,
        stdout=open(log, "wb"),  # noqa: SIM115 - the service writes until it exits
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(
                f"the service exited ({process.returncode}): {log.read_text()[-2000:]}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process
        time.sleep(0.3)
    process.kill()
    raise SystemExit("the service did not answer /health in 300 s")


def main() -> None:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=("lite", "server"), default="lite")
    parser.add_argument("--clients", type=positive(), default=16)
    parser.add_argument("--minutes", type=positive(float), default=10.0)
    parser.add_argument(
        "--warmup-s", type=not_negative, default=60.0, help="RSS/fd baseline after this"
    )
    parser.add_argument("--seed", type=whole_number, default=0)
    parser.add_argument("--output", type=out_file, default=None)
    args = parser.parse_args()
    output = args.output or RESULTS / f"soak_{args.store}.json"

    import httpx
    from tests.support import two_tower

    from accelkit.runtime.environment import record as environment

    with tempfile.TemporaryDirectory(prefix="accelkit-soak-") as tmp:
        workdir = Path(tmp)
        _, files = two_tower.build(workdir / "model")
        with store_uri(args.store, workdir) as uri:
            config = workdir / "service.yaml"
            config.write_text(
                two_tower.config_yaml(files, uri)
                + "server:\n  max_concurrency: 8\n  max_queue: 64\n"
            )
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            service = serve(config, port, workdir / "service.log")
            try:
                body = {"name": COLLECTION, "dim": two_tower.DIM, "exist_ok": True}
                httpx.post(url + "/collections/create", json=body, timeout=120).raise_for_status()
                # the collection records its model at the first insert
                seed_item = {"image_base64": jpeg(np.random.default_rng(-1 % 2**32)), "id": "seed"}
                httpx.post(
                    url + "/insert",
                    json={"collection": COLLECTION, "items": [seed_item]},
                    timeout=120,
                ).raise_for_status()
                record = Recorder()
                started = time.monotonic()
                deadline = started + args.minutes * 60
                clients = [Client(n, url, deadline, record, args.seed) for n in range(args.clients)]
                for client in clients:
                    client.start()
                time.sleep(min(args.warmup_s, args.minutes * 60 / 2))
                warm = process_figures(service.pid)
                print(f"after warm-up: {warm}", flush=True)
                while any(c.is_alive() for c in clients):
                    time.sleep(5)
                    done = sum(sum(s.values()) for s in record.statuses.values())
                    print(f"{time.monotonic() - started:6.0f} s: {done} requests", flush=True)
                end = process_figures(service.pid)
                wall = time.monotonic() - started
                checked = verify(url, record)
            finally:
                service.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    service.wait(timeout=60)
                if service.poll() is None:
                    service.kill()

    routes = {
        route: {
            "requests": sum(codes.values()),
            "statuses": {str(k): v for k, v in sorted(codes.items())},
            "p50_ms": percentile(record.latency[route], 50),
            "p99_ms": percentile(record.latency[route], 99),
        }
        for route, codes in sorted(record.statuses.items())
    }
    total = sum(r["requests"] for r in routes.values())
    server_errors = sum(
        n for r in routes.values() for code, n in r["statuses"].items() if int(code) >= 500
    )
    rss_growth = (end["rss_mib"] - warm["rss_mib"]) / warm["rss_mib"]
    result = {
        "schema": SCHEMA,
        "store": args.store,
        "clients": args.clients,
        "minutes": args.minutes,
        "wall_s": wall,
        "requests": total,
        "requests_per_s": total / wall,
        "responses_5xx": server_errors,
        "transport_errors": [e for e in record.errors if "HTTP" not in e][:20],
        "routes": routes,
        "durability": checked,
        "memory": {"after_warmup": warm, "end": end, "rss_growth": rss_growth},
        "median_p99_ms": statistics.median(
            r["p99_ms"] for r in routes.values() if r["p99_ms"] is not None
        ),
        "verdict": {
            "no_5xx": server_errors == 0 and not record.errors,
            "durable": checked["ok"],
            "rss_within_10_percent": abs(rss_growth) <= 0.10,
            "no_fd_leak": end["fds"] <= warm["fds"] + 4,
        },
        "environment": environment(("numpy", "pymilvus", "milvus-lite", "fastapi", "uvicorn")),
    }
    write_results(output, result)
    print(json.dumps({k: result[k] for k in ("requests", "responses_5xx", "verdict")}, indent=2))
    print(f"wrote {output}")
    sys.exit(0 if all(result["verdict"].values()) else 1)


if __name__ == "__main__":
    main()
