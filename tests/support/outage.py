"""A dead Milvus server under load, for tests/images/test_outage.py and benchmarks/reliability/outage.py.

`Load` drives a running `accelkit images serve` with inserts (one small image each, an id of its
own) and searches (a vector) from a few threads, and records every answer: when it came, its
status, its Retry-After, how long it took, and which inserts were acknowledged (200). `figures`
turns that record and the outage's times into the numbers the report gives; `stored_counts` asks
the server itself (not the service) how many rows each id has.
"""

from __future__ import annotations

import base64
import io
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np


def tile(seed: int) -> bytes:
    """A small PNG of its own per seed (distinct bytes, so distinct content ids)."""
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


@dataclass
class Answer:
    at: float  # time.monotonic() when the answer came
    kind: str  # insert | search
    status: int  # 0: no answer (a connection error or the client's timeout)
    seconds: float
    retry_after: str | None = None
    code: str | None = None
    message: str | None = None


@dataclass
class Load:
    """`threads` clients, alternating insert and search, until `stop()`."""

    url: str
    headers: dict[str, str]
    collection: str
    dim: int
    threads: int = 2
    timeout: float = 60.0  # the client's own limit: an answer later than this is a hang
    prefix: str = "load"
    answers: list[Answer] = field(default_factory=list)
    acknowledged: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Load:
        for t in range(self.threads):
            worker = threading.Thread(target=self._client, args=(t,), daemon=True)
            worker.start()
            self._workers.append(worker)
        return self

    def stop(self) -> Load:
        self._stop.set()
        for worker in self._workers:
            worker.join(timeout=self.timeout + 30)
        return self

    def _client(self, t: int) -> None:
        import httpx

        rng = np.random.default_rng(t)
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=self.timeout) as http:
            r = 0
            while not self._stop.is_set():
                r += 1
                item_id = f"{self.prefix}-{t}-{r}"
                if r % 2:
                    kind, path = "insert", "/insert"
                    body = {
                        "collection_name": self.collection,
                        "items": [
                            {
                                "image_base64": base64.b64encode(tile(t * 100_000 + r)).decode(),
                                "id": item_id,
                            }
                        ],
                    }
                else:
                    kind, path = "search", "/search"
                    body = {
                        "collection_name": self.collection,
                        "vector": rng.random(self.dim).tolist(),
                        "topk": 3,
                    }
                started = time.monotonic()
                try:
                    response = http.post(path, json=body)
                    status, headers = response.status_code, response.headers
                    error = response.json().get("error", {}) if status != 200 else {}
                    code, message = error.get("code"), str(error.get("message"))[:300]
                except httpx.HTTPError as exc:
                    status, headers, code, message = 0, {}, None, type(exc).__name__
                now = time.monotonic()
                with self._lock:
                    self.answers.append(
                        Answer(
                            now,
                            kind,
                            status,
                            now - started,
                            headers.get("retry-after"),
                            code,
                            message,
                        )
                    )
                    if kind == "insert" and status == 200:
                        self.acknowledged.append(item_id)
                if status != 200:
                    time.sleep(0.2)  # a client that backs off a little, as Retry-After asks


def _tally(answers) -> dict[str, int]:
    """Answers by kind and status: {"insert 200": 12, "search 503": 4, ...}."""
    return dict(sorted(Counter(f"{a.kind} {a.status}" for a in answers).items()))


def figures(answers: list[Answer], killed: float, back: float) -> dict:
    """The outage in numbers: `killed` when the server was SIGKILLed, `back` when it answered a
    real RPC again (both time.monotonic())."""
    failed = [a for a in answers if a.status != 200]
    after = [a for a in answers if a.at >= back and a.status == 200]
    first_ok = {
        kind: min((a.at for a in after if a.kind == kind), default=None)
        for kind in ("insert", "search")
    }
    unavailable = [a for a in failed if a.status == 503]
    return {
        "requests": len(answers),
        "by_status": dict(sorted(Counter(str(a.status) for a in answers).items())),
        "errors_by_status": dict(sorted(Counter(str(a.status) for a in failed).items())),
        "error_codes": dict(sorted(Counter(str(a.code) for a in failed).items())),
        "server_down_s": round(back - killed, 2),
        "seconds_of_503": round(max(a.at for a in unavailable) - min(a.at for a in unavailable), 2)
        if unavailable
        else 0.0,
        "first_503_after_kill_s": round(min(a.at for a in unavailable) - killed, 2)
        if unavailable
        else None,
        "recovery_after_server_back_s": {
            kind: None if at is None else round(at - back, 2) for kind, at in first_ok.items()
        },
        "while_down": _tally(a for a in answers if killed <= a.at < back),
        "after_back": _tally(a for a in answers if a.at >= back),
        # answers other than 200 and 503, when they came (seconds after the kill) and how long
        "others": [
            [round(a.at - killed, 1), a.kind, a.status, a.code, round(a.seconds, 1), a.message]
            for a in failed
            if a.status != 503
        ][:50],
        "slowest_answer_s": round(max(a.seconds for a in answers), 2),
        "slowest_error_s": round(max((a.seconds for a in failed), default=0.0), 2),
        "failed_without_retry_after": sum(
            1 for a in failed if a.status == 503 and not a.retry_after
        ),
    }


def stored_counts(uri: str, db_name: str | None, collection: str, ids: list[str]) -> Counter:
    """Rows per id, read from the Milvus server itself (Strong), 500 ids a query."""
    from pymilvus import MilvusClient

    kwargs = {"db_name": db_name} if db_name else {}
    client = MilvusClient(uri=uri, timeout=60, **kwargs)
    try:
        client.load_collection(collection)
        counts: Counter = Counter()
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            rows = client.query(
                collection,
                filter=f"id in {list(part)!r}".replace("'", '"'),
                output_fields=["id"],
                consistency_level="Strong",
            )
            counts.update(row["id"] for row in rows)
        return counts
    finally:
        client.close()


def server_outage(
    server, load: Load, warm_s: float = 5.0, down_s: float = 10.0, recover_s: float = 120.0
) -> tuple[float, float]:
    """Under `load` (started here, stopped before returning): SIGKILL the Milvus server, leave it
    down `down_s` seconds, start it again on the same data and port, and wait until an insert and
    a search have succeeded after that (at most `recover_s`). Returns (killed, back)."""
    load.start()
    try:
        deadline = time.monotonic() + max(warm_s, 120.0)
        started = time.monotonic()
        while time.monotonic() < deadline and (
            not load.acknowledged or time.monotonic() - started < warm_s
        ):
            time.sleep(0.2)
        assert load.acknowledged, "no insert was acknowledged before the outage"
        killed = time.monotonic()
        server.kill()
        time.sleep(down_s)
        server.restart()
        back = time.monotonic()
        deadline = back + recover_s
        while time.monotonic() < deadline:
            kinds = {a.kind for a in list(load.answers) if a.at > back and a.status == 200}
            if kinds == {"insert", "search"}:
                break
            time.sleep(0.5)
        time.sleep(1.0)  # a few more answers after recovery
    finally:
        load.stop()
    return killed, back


def wait_for_rows(
    uri: str, db_name: str | None, collection: str, process, at_least: int = 1
) -> int:
    """Poll the server (count(*), Strong) until `collection` holds `at_least` rows or `process`
    (a Popen) has exited; returns the last count."""
    import logging

    from pymilvus import MilvusClient

    logging.getLogger("pymilvus").setLevel(logging.CRITICAL)  # each refused poll logs a traceback
    kwargs = {"db_name": db_name} if db_name else {}
    client = MilvusClient(uri=uri, timeout=30, **kwargs)
    rows = 0
    try:
        while process.poll() is None and rows < at_least:
            try:
                rows = client.query(
                    collection,
                    filter="",
                    output_fields=["count(*)"],
                    consistency_level="Strong",
                )[0]["count(*)"]
            except Exception:  # not made or not loaded yet
                rows = 0
            time.sleep(0.3)
    finally:
        client.close()
    return rows


def service_config(folder, onnx_path, store: dict, api_key: str):
    """The `images serve` config of the outage test and benchmark: the default model, `store`'s
    settings, an API key, a small room (4 running, 16 waiting)."""
    config = folder / "service.yaml"
    store_lines = "".join(f"  {key}: {value}\n" for key, value in store.items())
    config.write_text(
        f"preprocess:\n  cache_compiled: false\n  batch_size: 8\n"
        f"model:\n  onnx_path: {onnx_path}\n"
        f"store:\n{store_lines}"
        f"server:\n  api_key: {api_key}\n  max_concurrency: 4\n  max_queue: 16\n"
        f"log_level: WARNING\n"
    )
    return config


def create_collection(url: str, name: str, headers: dict):
    """POST /collections/create (exist_ok); the response."""
    import httpx

    return httpx.post(
        url + "/collections/create",
        headers=headers,
        json={"name": name, "exist_ok": True},
        timeout=120,
    )
