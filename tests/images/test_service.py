"""The HTTP service as users run it: `accelkit images serve` in a subprocess on 127.0.0.1 (a free
port), driven with httpx; a real model, a real Milvus Lite database, restarts included."""

import base64
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.images.conftest import encode

KEY = "test-key-123"
AUTH = {"Authorization": f"Bearer {KEY}"}
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python -m accelkit images serve` on a free port; stop() sends SIGTERM (graceful)."""

    def __init__(self, config: Path, log: Path):
        self.config, self.log = config, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = None

    def start(self) -> "Server":
        handle = open(self.log, "ab")  # noqa: SIM115 - the child writes to it until it exits
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "accelkit",
                "images",
                "serve",
                "--config",
                str(self.config),
                "--port",
                str(self.port),
            ],
            cwd=ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"server did not start: {self.log.read_text()[-3000:]}")

    def stop(self) -> int:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode


@pytest.fixture(scope="module")
def setup(tmp_path_factory, onnx_path, photos):
    base = tmp_path_factory.mktemp("service")
    allowed = base / "allowed"
    allowed.mkdir()
    Image.fromarray(photos["chelsea"]).save(allowed / "cat.jpg")
    Image.fromarray(photos["coffee"]).save(base / "outside.jpg")
    os.symlink(base / "outside.jpg", allowed / "sneaky.jpg")
    config = base / "service.yaml"
    config.write_text(
        f"preprocess:\n  cache_compiled: false\n  batch_size: 8\n  max_pixels: 4000000\n"
        f"model:\n  onnx_path: {onnx_path}\n"
        f"store:\n  uri: {base / 'images.db'}\n"
        f"server:\n  api_key: {KEY}\n  allowed_roots: [{allowed}]\n  max_body_bytes: 1000000\n"
        f"  max_concurrency: 2\n  max_queue: 2\n  batch_max_wait_ms: 10\n  max_items_per_request: 16\n"
        f"log_level: WARNING\n"
    )
    return {"base": base, "allowed": allowed, "config": config}


@pytest.fixture(scope="module")
def server(setup):
    srv = Server(setup["config"], setup["base"] / "server.log").start()
    yield srv
    srv.stop()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def error_of(response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and body["error"]["status"] == response.status_code, body
    return body["error"]


def test_health_auth_docs_and_metrics(server):
    health = httpx.get(server.url + "/health").json()  # public: liveness needs no key
    assert health["status"] == "ok" and health["model"]["dim"] == 1280 and health["store"]["ok"]
    assert "uri" not in health["store"]
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        response = httpx.get(server.url + "/collections", headers=headers)
        assert response.status_code == 401 and error_of(response)["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"
    assert httpx.post(server.url + "/search", json={"vector": [0.0]}).status_code == 401
    assert httpx.get(server.url + "/collections", headers=AUTH).status_code == 200
    paths = httpx.get(server.url + "/openapi.json").json()["paths"]
    assert {
        "/health",
        "/collections",
        "/collections/create",
        "/collections/{name}",
        "/insert",
        "/search",
        "/items",
    } <= set(paths)
    assert "multipart/form-data" in paths["/insert"]["post"]["requestBody"]["content"]
    metrics = httpx.get(server.url + "/metrics", headers=AUTH).text
    assert (
        'accelkit_images_requests_total{method="GET",route="/collections",status="401"}' in metrics
    )
    assert httpx.get(server.url + "/metrics").status_code == 401


def test_collections_endpoints(server):
    created = httpx.post(
        server.url + "/collections/create",
        headers=AUTH,
        json={
            "name": "tmp_c",
            "dim": 8,
            "description": "d",
            "index_type": "FLAT",
            "metric_type": "L2",
        },
    )
    assert created.status_code == 200, created.text
    assert created.json() | {} == {
        "name": "tmp_c",
        "description": "d",
        "dim": 8,
        "count": 0,
        "index_type": "FLAT",
        "metric_type": "L2",
        "index_params": {},
    }
    again = httpx.post(
        server.url + "/collections/create", headers=AUTH, json={"name": "tmp_c", "dim": 8}
    )
    assert again.status_code == 409 and error_of(again)["code"] == "collection_exists"
    assert "tmp_c" in httpx.get(server.url + "/collections", headers=AUTH).json()["collections"]
    rows = np.eye(8, dtype=np.float32)
    hit = httpx.post(
        server.url + "/search",
        headers=AUTH,
        json={"collection_name": "tmp_c", "vector": rows[0].tolist()},
    )
    assert hit.status_code == 200 and hit.json()["results"] == []
    assert httpx.delete(server.url + "/collections/tmp_c", headers=AUTH).json() == {
        "dropped": "tmp_c"
    }
    missing = httpx.get(server.url + "/collections/tmp_c", headers=AUTH)
    assert missing.status_code == 404 and "does not exist" in error_of(missing)["message"]
    bad = httpx.post(
        server.url + "/collections/create", headers=AUTH, json={"name": "x", "index_type": "HNSW"}
    )
    assert bad.status_code == 400 and "HNSW needs a Milvus server" in error_of(bad)["message"]
    assert httpx.get(server.url + "/nowhere", headers=AUTH).status_code == 404


def test_insert_search_delete_all_input_forms(server, setup, photos):
    url = server.url
    response = httpx.post(
        url + "/collections/create", headers=AUTH, json={"name": "forms", "exist_ok": True}
    )
    assert response.status_code == 200
    names = ["astronaut", "rocket", "coins", "flower"]
    files = [
        ("files", (f"{n}.jpg", encode(photos[n], "JPEG", quality=95), "image/jpeg")) for n in names
    ] + [("files", ("bad.jpg", b"nope", "image/jpeg"))]
    form = {
        "collection_name": "forms",
        "ids": json.dumps([*names, "bad"]),
        "metadata": json.dumps([{"kind": "photo", "name": n} for n in names] + [{}]),
    }
    multipart = httpx.post(url + "/insert", headers=AUTH, files=files, data=form, timeout=120)
    assert multipart.status_code == 200, multipart.text
    report = multipart.json()
    assert report["ids"] == names and report["inserted"] == 4
    assert [f["index"] for f in report["failures"]] == [4] and "not a recognised image" in report[
        "failures"
    ][0]["error"]
    by_json = httpx.post(
        url + "/insert",
        headers=AUTH,
        timeout=120,
        json={
            "collection_name": "forms",
            "items": [
                {
                    "image_base64": b64(encode(photos["china"], "JPEG", quality=90)),
                    "id": "china",
                    "metadata": {"kind": "other"},
                },
                {"path": str(setup["allowed"] / "cat.jpg"), "metadata": {"kind": "photo"}},
            ],
        },
    )
    assert by_json.status_code == 200, by_json.text
    cat_id = by_json.json()["ids"][1]
    assert len(cat_id) == 32  # generated from the file's bytes: re-inserting it is idempotent
    original_form = httpx.post(
        url + "/insert",
        headers=AUTH,
        timeout=120,
        json={"collection_name": "forms", "inputs": [str(setup["allowed"] / "cat.jpg")]},
    )
    assert original_form.json()["ids"] == [cat_id]
    assert httpx.get(url + "/collections/forms", headers=AUTH).json()["count"] == 6
    # search: multipart, base64, the original `query` form; every result is itself at rank 1
    query = httpx.post(
        url + "/search",
        headers=AUTH,
        files={"file": ("q.png", encode(photos["rocket"], "PNG"))},
        data={"collection_name": "forms", "topk": "3"},
        timeout=60,
    ).json()
    assert query["results"][0]["id"] == "rocket" and len(query["results"]) == 3
    assert (
        query["results"][0]["metadata"] == {"kind": "photo", "name": "rocket"}
        and query["results"][0]["score"] > 0.97
    )
    filtered = httpx.post(
        url + "/search",
        headers=AUTH,
        timeout=60,
        json={
            "collection_name": "forms",
            "image_base64": b64(encode(photos["china"], "PNG")),
            "topk": 10,
            "filter_expr": 'metadata["kind"] == "photo"',
        },
    ).json()["results"]
    # the cat was upserted again without metadata: an upsert replaces the item, metadata included
    assert sorted(r["id"] for r in filtered) == ["astronaut", "coins", "flower", "rocket"]
    assert all(r["metadata"]["kind"] == "photo" for r in filtered)
    scores = [r["score"] for r in filtered]
    assert scores == sorted(scores, reverse=True)
    by_path = httpx.post(
        url + "/search",
        headers=AUTH,
        json={"collection_name": "forms", "query": str(setup["allowed"] / "cat.jpg")},
    ).json()
    assert by_path["results"][0]["id"] == cat_id
    bad_filter = httpx.post(
        url + "/search",
        headers=AUTH,
        json={"collection_name": "forms", "vector": [0.1] * 1280, "filter_expr": "metadata["},
    )
    assert bad_filter.status_code == 400 and "filter" in error_of(bad_filter)["message"]
    wrong_dim = httpx.post(
        url + "/search", headers=AUTH, json={"collection_name": "forms", "vector": [0.1] * 3}
    )
    assert wrong_dim.status_code == 422 and "1280-d" in error_of(wrong_dim)["message"]
    deleted = httpx.request(
        "DELETE",
        url + "/items",
        headers=AUTH,
        json={"collection_name": "forms", "ids": ["rocket", "nope"]},
    ).json()
    assert deleted == {"collection_name": "forms", "requested": 2, "deleted": 1}
    again = httpx.post(
        url + "/search",
        headers=AUTH,
        files={"file": ("q.png", encode(photos["rocket"], "PNG"))},
        data={"collection_name": "forms"},
        timeout=60,
    ).json()["results"]
    assert "rocket" not in [r["id"] for r in again]
    none_stored = httpx.post(
        url + "/insert",
        headers=AUTH,
        json={"collection_name": "forms", "images_base64": [b64(b"junk")]},
    )
    assert none_stored.status_code == 422 and error_of(none_stored)["code"] == "no_item_stored"
    assert error_of(none_stored)["detail"]["failures"][0]["index"] == 0
    missing = httpx.post(
        url + "/insert",
        headers=AUTH,
        json={"collection_name": "nope", "images_base64": [b64(b"junk")]},
    )
    assert missing.status_code == 404


def test_security_limits(server, setup):
    url = server.url
    httpx.post(url + "/collections/create", headers=AUTH, json={"name": "sec", "exist_ok": True})
    cases = [
        (
            {"collection_name": "sec", "query": str(setup["base"] / "outside.jpg")},
            403,
            "path_not_allowed",
        ),
        (
            {"collection_name": "sec", "path": str(setup["allowed"] / ".." / "outside.jpg")},
            403,
            "path_not_allowed",
        ),
        (
            {"collection_name": "sec", "path": str(setup["allowed"] / "sneaky.jpg")},
            403,
            "path_not_allowed",
        ),  # symlink out
        ({"collection_name": "sec", "url": "http://127.0.0.1:1/x.jpg"}, 403, "urls_disabled"),
        ({"collection_name": "sec", "query": "https://example.com/x.jpg"}, 403, "urls_disabled"),
    ]
    for body, status, code in cases:
        response = httpx.post(url + "/search", headers=AUTH, json=body)
        assert response.status_code == status and error_of(response)["code"] == code, (
            body,
            response.text,
        )
    inserted = httpx.post(
        url + "/insert", headers=AUTH, json={"collection_name": "sec", "inputs": ["/etc/passwd"]}
    )
    assert inserted.status_code == 403
    # bodies over 1 MB: declared, and streamed without a length (chunked)
    big = httpx.post(
        url + "/insert",
        headers=AUTH,
        files={"files": ("big.bin", b"\0" * 1_200_000)},
        data={"collection_name": "sec"},
    )
    assert big.status_code == 413 and error_of(big)["code"] == "body_too_large"

    def chunks():
        for _ in range(12):
            yield b"x" * 100_000

    streamed = httpx.post(
        url + "/search", headers={**AUTH, "content-type": "application/json"}, content=chunks()
    )
    assert streamed.status_code == 413
    # a decompression bomb: 10000 x 10000 pixels in a few kB, over max_pixels (4 M) -> refused from the header
    buffer = io.BytesIO()
    Image.new("L", (10000, 10000)).save(buffer, format="PNG")
    assert len(buffer.getvalue()) < 1_000_000
    bomb = httpx.post(
        url + "/search",
        headers=AUTH,
        files={"file": ("bomb.png", buffer.getvalue())},
        data={"collection_name": "sec"},
    )
    assert bomb.status_code == 422 and "decompression bomb" in error_of(bomb)["message"]
    too_many = httpx.post(
        url + "/insert",
        headers=AUTH,
        json={"collection_name": "sec", "images_base64": [b64(b"x")] * 17},
    )
    assert too_many.status_code == 413 and error_of(too_many)["code"] == "too_many_items"
    wrong_type = httpx.post(
        url + "/search", headers={**AUTH, "content-type": "text/plain"}, content=b"hi"
    )
    assert wrong_type.status_code == 415
    not_json = httpx.post(
        url + "/search", headers={**AUTH, "content-type": "application/json"}, content=b"{"
    )
    assert not_json.status_code == 400
    metrics = httpx.get(url + "/metrics", headers=AUTH).text
    assert 'accelkit_images_rejected_total{reason="body_too_large"}' in metrics


def test_concurrent_clients_lose_nothing_and_restart_keeps_everything(server, setup, photos):
    """8 clients x 50 mixed requests: only 200 or 429 (+ Retry-After); every acknowledged insert
    is stored; a graceful stop drains an in-flight insert; a restarted service has everything."""
    url = server.url
    assert (
        httpx.post(
            url + "/collections/create", headers=AUTH, json={"name": "busy", "exist_ok": True}
        ).status_code
        == 200
    )
    rng = np.random.default_rng(0)
    tiles = [rng.integers(0, 255, (48, 64, 3), dtype=np.uint8) for _ in range(16)]
    statuses: list[int] = []
    acknowledged: set[str] = set()
    lock = threading.Lock()

    def client(c: int) -> None:
        with httpx.Client(base_url=url, headers=AUTH, timeout=120) as http:
            for r in range(50):
                kind = r % 4
                item_id = f"c{c}-r{r}"
                while True:
                    if kind == 0:
                        response = http.post(
                            "/insert",
                            files={"files": ("t.png", encode(tiles[(c + r) % 16], "PNG"))},
                            data={"collection_name": "busy", "ids": json.dumps([item_id])},
                        )
                    elif kind == 1:
                        response = http.post(
                            "/insert",
                            json={
                                "collection_name": "busy",
                                "items": [
                                    {
                                        "image_base64": b64(encode(tiles[r % 16], "JPEG")),
                                        "id": item_id,
                                        "metadata": {"c": c},
                                    }
                                ],
                            },
                        )
                    elif kind == 2:
                        response = http.post(
                            "/search",
                            json={
                                "collection_name": "busy",
                                "vector": rng.random(1280).tolist(),
                                "topk": 5,
                            },
                        )
                    else:
                        response = http.post(
                            "/search",
                            json={
                                "collection_name": "busy",
                                "image_base64": b64(encode(tiles[c], "PNG")),
                            },
                        )
                    with lock:
                        statuses.append(response.status_code)
                    if response.status_code == 429:
                        assert (
                            int(response.headers["retry-after"]) >= 1
                            and error_of(response)["code"] == "overloaded"
                        )
                        time.sleep(0.05)  # a quick retry: the test wants to see every item through
                        continue
                    assert response.status_code == 200, response.text
                    if kind < 2:
                        assert response.json()["ids"] == [item_id]
                        with lock:
                            acknowledged.add(item_id)
                    break

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(client, range(8)))
    assert set(statuses) <= {200, 429}
    inserts = 8 * sum(r % 4 < 2 for r in range(50))
    assert len(acknowledged) == inserts == 208
    assert httpx.get(url + "/collections/busy", headers=AUTH).json()["count"] == inserts
    metrics = httpx.get(url + "/metrics", headers=AUTH).text
    merged = [
        line
        for line in metrics.splitlines()
        if line.startswith("accelkit_images_batch_requests_count")
    ]
    assert merged and float(merged[0].split()[-1]) > 0

    # graceful stop while an insert of 16 photos is in flight: it is answered and stored
    names = sorted(photos)[:16]
    result = {}

    def slow_insert():
        result["response"] = httpx.post(
            url + "/insert",
            headers=AUTH,
            timeout=120,
            json={
                "collection_name": "busy",
                "items": [
                    {"image_base64": b64(encode(photos[n], "JPEG", quality=80)), "id": f"late-{n}"}
                    for n in names
                ],
            },
        )

    worker = threading.Thread(target=slow_insert)
    worker.start()
    time.sleep(0.5)
    assert server.stop() in (
        0,
        -signal.SIGTERM,
    )  # uvicorn re-raises SIGTERM after its graceful shutdown
    worker.join()
    assert result["response"].status_code == 200 and result["response"].json()["inserted"] == 16

    restarted = Server(setup["config"], setup["base"] / "server2.log").start()
    try:
        info = httpx.get(restarted.url + "/collections/busy", headers=AUTH).json()
        assert info["count"] == inserts + 16 and info["index_type"] == "FLAT"
        hits = httpx.post(
            restarted.url + "/search",
            headers=AUTH,
            timeout=60,
            json={
                "collection_name": "busy",
                "image_base64": b64(encode(photos[names[3]], "PNG")),
                "topk": 1,
            },
        ).json()["results"]
        assert hits[0]["id"] == f"late-{names[3]}"
        # the CLI talks to a running service with --server (the service holds the Milvus Lite file)
        env = {**os.environ, "ACCELKIT_SERVER_API_KEY": KEY}
        listed = subprocess.run(
            [
                sys.executable,
                "-m",
                "accelkit",
                "images",
                "collection",
                "list",
                "--server",
                restarted.url,
                "--json",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert listed.returncode == 0, listed.stderr
        assert {c["name"]: c["count"] for c in json.loads(listed.stdout)["collections"]}[
            "busy"
        ] == inserts + 16
        query = setup["base"] / "q.png"
        Image.fromarray(photos[names[5]]).save(query)
        found = subprocess.run(
            [
                sys.executable,
                "-m",
                "accelkit",
                "images",
                "search",
                str(query),
                "--collection",
                "busy",
                "--topk",
                "2",
                "--server",
                restarted.url,
                "--json",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout)["results"][0]["id"] == f"late-{names[5]}"
        denied = subprocess.run(
            [
                sys.executable,
                "-m",
                "accelkit",
                "images",
                "health",
                "--server",
                restarted.url,
                "--json",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert (
            denied.returncode == 0 and json.loads(denied.stdout)["status"] == "ok"
        )  # /health is public
        unauthorized = subprocess.run(
            [
                sys.executable,
                "-m",
                "accelkit",
                "images",
                "collection",
                "list",
                "--server",
                restarted.url,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={k: v for k, v in os.environ.items() if k != "ACCELKIT_SERVER_API_KEY"},
        )
        assert unauthorized.returncode == 2 and unauthorized.stderr.startswith(
            "error: service answered 401"
        )
    finally:
        assert restarted.stop() in (0, -signal.SIGTERM)
