"""The HTTP service as users run it: `accelkit images serve` in a subprocess on 127.0.0.1 (a free
port), driven with httpx; a real model, on Milvus Lite and on a real Milvus server, restarts
included. The attacks that once lost data are regression tests here, on both stores."""

import io
import json
import os
import signal
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

from accelkit.images.store.lite import lite_generation
from tests.support.cli import result_of
from tests.support.photos import encode
from tests.support.service import AUTH, KEY, ROOT, Server, b64, error_of, store_yaml

# one xdist worker runs this module (pyproject: --dist loadgroup), so
# its service on Milvus Lite starts once (the server's are the servers group's)
pytestmark = pytest.mark.xdist_group("service")


@pytest.fixture(scope="module")
def setup(tmp_path_factory, onnx_path, photos, store_settings):
    base = tmp_path_factory.mktemp("service")
    allowed = base / "allowed"
    allowed.mkdir()
    Image.fromarray(photos["chelsea"]).save(allowed / "cat.jpg")
    Image.fromarray(photos["coffee"]).save(base / "outside.jpg")
    os.symlink(base / "outside.jpg", allowed / "sneaky.jpg")
    config = base / "service.yaml"
    config.write_text(
        f"preprocess:\n  cache_compiled: false\n  batch_size: 8\n"
        f"model:\n  onnx_path: {onnx_path}\n"
        f"store:\n{store_yaml(store_settings, base)}"
        f"server:\n  api_key: {KEY}\n  allowed_roots: [{allowed}]\n  max_body_bytes: 2000000\n"
        f"  max_concurrency: 2\n  max_queue: 2\n  batch_max_wait_ms: 10\n  max_items_per_request: 16\n"
        f"  body_timeout_s: 5\n  header_timeout_s: 5\n"
        f"log_level: WARNING\n"
    )
    os.mkfifo(allowed / "pipe.jpg")  # a FIFO that never gets a writer
    return {
        "base": base,
        "allowed": allowed,
        "config": config,
        "server_store": "db_name" in store_settings,
    }


@pytest.fixture(scope="module")
def server(setup):
    srv = Server(setup["config"], setup["base"] / "server.log").start()
    yield srv
    srv.stop()


def test_health_auth_docs_and_metrics(server, setup):
    public = httpx.get(server.url + "/health")  # liveness needs no key, and says no more than that
    assert public.status_code == 200 and public.json() == {"status": "ok"}
    health = httpx.get(server.url + "/health", headers=AUTH).json()
    assert health["status"] == "ok" and health["model"]["dim"] == 1280 and health["store"]["ok"]
    assert health["store"]["kind"] == ("milvus-server" if setup["server_store"] else "milvus-lite")
    assert "uri" not in health["store"] and "127.0.0.1" not in json.dumps(health)
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
        "/collections/{name}/stats",
        "/collections/{name}/flush",
        "/collections/{name}/index",
        "/insert",
        "/search",
        "/items",
        "/delete",
        "/embed",
    } <= set(paths)
    schema = httpx.get(server.url + "/openapi.json").json()
    insert_body = paths["/insert"]["post"]["requestBody"]["content"]
    assert "multipart/form-data" in insert_body
    assert insert_body["application/json"]["schema"]["$ref"].endswith("/InsertRequest")
    fields = schema["components"]["schemas"]["InsertRequest"]["properties"]
    assert {"collection", "items", "create_collection", "ids", "metadata"} <= set(fields)
    metrics = httpx.get(server.url + "/metrics", headers=AUTH).text
    assert 'accelkit_images_rejected_total{reason="unauthorized"}' in metrics
    assert 'status="401"' not in metrics  # refused requests add no request series
    assert httpx.get(server.url + "/metrics").status_code == 401


def test_metrics_stay_bounded_under_invented_methods_and_paths(server):
    def series() -> set[str]:
        text = httpx.get(server.url + "/metrics", headers=AUTH).text
        return {
            line.rsplit(" ", 1)[0]
            for line in text.splitlines()
            if line and not line.startswith("#")
        }

    before = series()
    with httpx.Client(base_url=server.url) as http:
        for i in range(60):  # unauthenticated: refused, and counted only as such
            http.request(f"BREW{i}", f"/x{i}")
        for i in range(60):  # authenticated: unknown methods and paths collapse to one label each
            http.request(f"BREW{i}", f"/y{i}", headers=AUTH)
            http.get(f"/nowhere/{i}", headers=AUTH)
    added = {s for s in series() - before if s.startswith("accelkit_images_requests_total")}
    assert added <= {
        'accelkit_images_requests_total{method="OTHER",route="unmatched",status="404"}',
        'accelkit_images_requests_total{method="OTHER",route="unmatched",status="405"}',
        'accelkit_images_requests_total{method="GET",route="unmatched",status="404"}',
        'accelkit_images_requests_total{method="GET",route="/metrics",status="200"}',
    }, added


def test_collections_endpoints(server, setup):
    created = httpx.post(
        server.url + "/collections/create",
        headers=AUTH,
        json={
            "name": "tmp_c",
            "dim": 1280,  # the model's: any other is refused (test_service_boundaries)
            "description": "d",
            "index_type": "FLAT",
            "metric_type": "L2",
        },
    )
    assert created.status_code == 200, created.text
    model = created.json().pop("model")
    assert {**created.json(), "model": None} == {
        "name": "tmp_c",
        "description": "d",
        "dim": 1280,
        "count": 0,
        "index_type": "FLAT",
        "metric_type": "L2",
        "index_params": {},
        "ignored": [],
        "model": None,
        "fields": {},
        "message": "Collection 'tmp_c' created successfully",
    }
    assert model["name"] == "efficientnet-lite0" and model["dim"] == 1280 and not model["text"]
    again = httpx.post(
        server.url + "/collections/create", headers=AUTH, json={"name": "tmp_c"}, timeout=120
    )
    assert again.status_code == 409 and error_of(again)["code"] == "collection_exists"
    listed = httpx.get(server.url + "/collections", headers=AUTH).json()
    assert "tmp_c" in listed["collections"] and listed["count"] == len(listed["collections"])
    stats = httpx.get(server.url + "/collections/tmp_c/stats", headers=AUTH).json()
    assert (stats["name"], stats["num_entities"], stats["description"]) == ("tmp_c", 0, "d")
    rows = np.eye(1280, dtype=np.float32)[:1]
    hit = httpx.post(
        server.url + "/search",
        headers=AUTH,
        json={"collection": "tmp_c", "vector": rows[0].tolist()},
    )
    assert hit.status_code == 200 and hit.json()["results"] == []
    flushed = httpx.post(server.url + "/collections/tmp_c/flush", headers=AUTH)
    assert flushed.status_code == 200 and flushed.json()["index_type"] == "FLAT"
    progress = httpx.get(
        server.url + "/collections/tmp_c/index?wait=true", headers=AUTH, timeout=120
    )
    assert progress.status_code == 200 and progress.json()["pending_rows"] == 0
    dropped = httpx.delete(server.url + "/collections/tmp_c", headers=AUTH).json()
    assert dropped["dropped"] == "tmp_c"
    missing = httpx.get(server.url + "/collections/tmp_c", headers=AUTH)
    assert missing.status_code == 404 and "does not exist" in error_of(missing)["message"]
    hnsw = httpx.post(
        server.url + "/collections/create",
        headers=AUTH,
        json={"name": "x", "index_type": "HNSW"},
        timeout=120,
    )
    if setup["server_store"] or lite_generation() == 3:
        assert hnsw.status_code == 200 and hnsw.json()["index_type"] == "HNSW"
        assert httpx.delete(server.url + "/collections/x", headers=AUTH).status_code == 200
    else:
        assert hnsw.status_code == 400 and "HNSW needs Milvus Lite 3" in error_of(hnsw)["message"]
    assert httpx.get(server.url + "/nowhere", headers=AUTH).status_code == 404


def test_malformed_fields_are_4xx_naming_the_field(server, setup):
    """Client mistakes never answer 500, and a refused create leaves nothing behind."""
    url = server.url
    before = httpx.get(url + "/collections", headers=AUTH).json()["collections"]
    cases = [
        ("/collections/create", {"name": "m1", "dim": "abc"}, 422, "dim"),
        ("/collections/create", {"name": "m1", "dim": 1.5}, 422, "dim"),
        ("/collections/create", {"name": "m1", "dim": 0}, 422, "dim"),
        ("/collections/create", {"name": "m1", "index_type": 5}, 422, "index_type"),
        ("/collections/create", {"name": "m1", "exist_ok": "false"}, 422, "exist_ok"),
        ("/collections/create", {"name": "m1\n"}, 422, "name"),
        (
            "/collections/create",
            {"name": "m1", "index_params": {"nlist": "x"}},
            422,
            "index_params",
        ),
        ("/collections/create", {"name": "m1", "description": "x" * 5000}, 422, "description"),
        ("/collections/create", {"name": "m1", "metric_type": "HAMMING"}, 422, "metric_type"),
        ("/search", {"vector": "abc"}, 422, "vector"),
        ("/search", {"vector": [0.1] * 1280, "topk": "5"}, 422, "topk"),
        ("/search", {"vector": [0.1] * 1280, "topk": 100000}, 422, "topk"),
        ("/search", {"vector": [0.1] * 1280, "filter": ["x"]}, 422, "filter"),
        ("/search", {"path": "/a\u0000b"}, 422, "NUL"),
        ("/search", {"vector": [0.1] * 1280, "collection": "bad-name"}, 422, "collection"),
        ("/insert", {"items": [{"image_base64": 5}]}, 422, "image_base64"),
        ("/insert", {"items": "x"}, 422, "items"),
        (
            "/insert",
            {"create_collection": "false", "images_base64": ["x"]},
            422,
            "create_collection",
        ),
        ("/delete", {"ids": "abc"}, 422, "ids"),
        ("/embed", {"inputs": [1, 2]}, 422, "inputs"),
    ]
    for path, body, status, field in cases:
        response = httpx.post(url + path, headers=AUTH, json=body, timeout=60)
        assert response.status_code == status, (path, body, response.text)
        assert field in error_of(response)["message"], (path, body, response.text)
    for path, body, field in (
        ("/collections/create", {"name": "m1", "dim": 1}, "dim"),  # Milvus' vectors have 2+ dims
        ("/collections/create", {"name": "m1", "description": "a\u0000b"}, "description"),
        (
            "/collections/create",
            {"name": "m1", "index_type": "IVF_FLAT", "index_params": {"nlist": 10**9}},
            "index_params",
        ),
    ):
        response = httpx.post(url + path, headers=AUTH, json=body)
        assert response.status_code == 422 and field in error_of(response)["message"], response.text
    twice = httpx.post(
        url + "/delete",
        headers={**AUTH, "content-type": "application/json"},
        content=b'{"collection": "nope", "collection": "forms", "ids": ["a"]}',
    )
    assert twice.status_code == 422 and "given twice" in error_of(twice)["message"]
    digits = "9" * 5000
    huge = httpx.post(
        url + "/search",
        headers={**AUTH, "content-type": "application/json"},
        content=f'{{"topk": {digits}}}'.encode(),
    )
    assert huge.status_code == 400 and "set_int_max_str_digits" not in huge.text
    for odd in ("\u00b2", "\u0663", digits, "1e3", " "):  # superscript two, Arabic-Indic three
        form = httpx.post(
            url + "/search", headers=AUTH, files={"file": ("q.png", b"x")}, data={"topk": odd}
        )
        assert form.status_code == 422 and "topk" in error_of(form)["message"], (odd, form.text)
    for raw in (  # an unpaired surrogate cannot even be written back as UTF-8: refused
        b'{"name": "d1", "description": "a\\ud800b"}',
        b'{"collection": "forms", "items": [{"image_base64": "eA==", "id": "\\ud800"}]}',
    ):
        path = "/collections/create" if b'"name"' in raw else "/insert"
        surrogate = httpx.post(
            url + path, headers={**AUTH, "content-type": "application/json"}, content=raw
        )
        assert surrogate.status_code == 400 and "surrogate" in error_of(surrogate)["message"], (
            surrogate.text
        )
    both = httpx.post(
        url + "/search",
        headers=AUTH,
        json={"vector": [0.1] * 1280, "filter": 'id == "a"', "filter_expr": 'id == "b"'},
    )
    assert (
        both.status_code == 422
        and "given twice (as filter and filter_expr)" in error_of(both)["message"]
    )
    twice = httpx.get(
        url + "/items",
        headers=AUTH,
        params=[("ids", "a"), ("collection", "a"), ("collection", "b")],
    )
    assert twice.status_code == 422 and "collection: given 2 times" in error_of(twice)["message"]
    for deadly in (
        "id like 1",
        'id like "i\\_%"',
        'id != "zzz" (metadata["k"] == 1)',
        'metadata["k"] >= 0 AND id == "a"',
        'id == "\\z\'d0\' or id != " or id == "nothing"',
        'id != "nothing" and["k"] == ["j"]',
        'metadata["n"] == 1 / 0',
    ):
        refused_filter = httpx.post(
            url + "/delete", headers=AUTH, json={"collection": "forms", "filter": deadly}
        )
        assert (
            refused_filter.status_code == 422
            and "not one expression" in error_of(refused_filter)["message"]
        )
    assert httpx.get(url + "/health").json() == {"status": "ok"}  # the engine is alive
    deep = "[" * 100_000 + "]" * 100_000
    nested = httpx.post(
        url + "/search", headers={**AUTH, "content-type": "application/json"}, content=deep
    )
    assert nested.status_code == 400 and "nested too deeply" in error_of(nested)["message"]
    deep_meta = {
        "items": [
            {"image_base64": b64(b"x"), "metadata": json.loads('{"a":' * 50 + "1" + "}" * 50)}
        ]
    }
    httpx.post(
        url + "/collections/create",
        headers=AUTH,
        json={"name": "malformed", "exist_ok": True},
        timeout=120,
    )
    refused = httpx.post(
        url + "/insert", headers=AUTH, json={**deep_meta, "collection": "malformed"}
    )
    assert (
        refused.status_code == 422
        and "nested deeper" in error_of(refused)["detail"]["failures"][0]["error"]
    )
    bad_form = httpx.post(
        url + "/search", headers=AUTH, files={"file": ("q.png", b"x")}, data={"topk": "many"}
    )
    assert bad_form.status_code == 422 and "topk" in error_of(bad_form)["message"]
    after = httpx.get(url + "/collections", headers=AUTH).json()["collections"]
    assert sorted(after) == sorted({*before, "malformed"})  # no half-created collection


def test_insert_search_delete_all_input_forms(server, setup, photos):
    url = server.url
    response = httpx.post(
        url + "/collections/create",
        headers=AUTH,
        json={"name": "forms", "exist_ok": True},
        timeout=120,
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
    assert report["inserted_ids"] == names and report["count"] == 4  # EmbeddingTrident's fields
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
    # search: multipart, base64, EmbeddingTrident's `query` form; every result is itself at rank 1
    query = httpx.post(
        url + "/search",
        headers=AUTH,
        files={"file": ("q.png", encode(photos["rocket"], "PNG"))},
        data={"collection_name": "forms", "topk": "3"},
        timeout=60,
    ).json()
    assert query["results"][0]["id"] == "rocket" and len(query["results"]) == 3
    assert (  # an upload's file name is recorded under "source"
        query["results"][0]["metadata"]
        == {"kind": "photo", "name": "rocket", "source": "rocket.jpg"}
        and query["results"][0]["score"] > 0.97
    )
    assert query["results"][0]["distance"] == query["results"][0]["score"]
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
    assert by_path["results"][0]["metadata"] == {"source": "cat.jpg"}  # a server path: its name
    bad_filter = httpx.post(
        url + "/search",
        headers=AUTH,
        json={"collection_name": "forms", "vector": [0.1] * 1280, "filter_expr": "id == 1"},
    )
    assert bad_filter.status_code == 400 and error_of(bad_filter)["code"] == "invalid_filter"
    assert "was refused" in error_of(bad_filter)["message"]
    unbalanced = httpx.post(
        url + "/search",
        headers=AUTH,
        json={"collection": "forms", "vector": [0.1] * 1280, "filter": "metadata["},
    )
    assert unbalanced.status_code == 422 and "filter" in error_of(unbalanced)["message"]
    assert (
        "\n" not in error_of(bad_filter)["message"]
        and ".cpp" not in error_of(bad_filter)["message"]
    )
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
    assert deleted["requested"] == 2 and deleted["deleted"] == 1
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
    httpx.post(
        url + "/collections/create",
        headers=AUTH,
        json={"name": "sec", "exist_ok": True},
        timeout=120,
    )
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
    # bodies over 2 MB: declared, and streamed without a length (chunked)
    big = httpx.post(
        url + "/insert",
        headers=AUTH,
        files={"files": ("big.bin", b"\0" * 2_200_000)},
        data={"collection_name": "sec"},
    )
    assert big.status_code == 413 and error_of(big)["code"] == "body_too_large"

    def chunks():
        for _ in range(22):
            yield b"x" * 100_000

    streamed = httpx.post(
        url + "/search", headers={**AUTH, "content-type": "application/json"}, content=chunks()
    )
    assert streamed.status_code == 413
    # a decompression bomb: 10000 x 10000 pixels in a few kB, over max_pixels (64 M) -> refused from the header
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


def tile_b64(seed: int) -> str:
    rng = np.random.default_rng(seed)
    return b64(encode(rng.integers(0, 255, (40, 56, 3), dtype=np.uint8), "PNG"))


def create_with_tiles(url: str, name: str, prefix: str) -> httpx.Response:
    """Create collection `name` and store four tiles as `<prefix>0` … `<prefix>3` ({"i": i})."""
    # a collection made on a server (made, indexed, loaded) took over httpx's default 5 s on a
    # 2-core machine busy with four workers
    created = httpx.post(
        url + "/collections/create", headers=AUTH, json={"name": name}, timeout=120
    )
    assert created.status_code == 200, created.text
    stored = httpx.post(
        url + "/insert",
        headers=AUTH,
        timeout=120,
        json={
            "collection": name,
            "items": [
                {"image_base64": tile_b64(i), "id": f"{prefix}{i}", "metadata": {"i": i}}
                for i in range(4)
            ],
        },
    )
    assert stored.status_code == 200, stored.text
    return stored


def collection_contents(url: str, name: str, ids: list[str]) -> tuple[int, list]:
    info = httpx.get(url + f"/collections/{name}", headers=AUTH, timeout=60)
    assert info.status_code == 200, info.text
    params = [("collection", name)] + [("ids", i) for i in ids]
    items = httpx.get(url + "/items", headers=AUTH, params=params, timeout=60)
    assert items.status_code == 200, items.text
    return info.json()["count"], items.json()["items"]


def victims_contents(url: str) -> tuple[int, list]:
    return collection_contents(url, "victims", [f"v{i}" for i in range(4)])


def test_attack_payloads_change_nothing(server, setup):
    """The ids that once emptied a collection or became unreadable: each fails its own item (or
    the request, for a delete) with a clear error; counts and contents stay as they were."""
    url = server.url
    stored = create_with_tiles(url, "victims", "v")
    assert stored.json()["ids"] == ["v0", "v1", "v2", "v3"]
    before = victims_contents(url)
    assert before[0] == 4 and [item["id"] for item in before[1]] == ["v0", "v1", "v2", "v3"]

    # the upsert that emptied a Milvus Lite collection: the bad id fails alone, before embedding
    upsert = httpx.post(
        url + "/insert",
        headers=AUTH,
        timeout=120,
        json={
            "collection": "victims",
            "items": [
                {"image_base64": tile_b64(10), "id": "x') OR ('1'='1"},
                {"image_base64": tile_b64(11), "id": "fine"},
                {"image_base64": tile_b64(12), "id": "Bob's photo"},
                {"image_base64": tile_b64(13), "id": "x" * 300},
                {"image_base64": tile_b64(14), "id": "dup", "metadata": {"n": 1}},
                {"image_base64": tile_b64(15), "id": "dup", "metadata": {"n": 2}},
                {"image_base64": tile_b64(16), "id": "big", "metadata": {"n": 10**30}},
            ],
        },
    )
    assert upsert.status_code == 200, upsert.text
    report = upsert.json()
    assert (
        report["ids"] == ["fine", "dup"] and report["inserted"] == 2 and report["indices"] == [1, 5]
    )
    failures = {f["index"]: f["error"] for f in report["failures"]}
    assert set(failures) == {0, 2, 3, 4, 6}
    assert "outside the 64-bit range" in failures[6]  # fails alone, not the whole batch
    for i in (0, 2, 3):
        assert "ids are 1-256 characters" in failures[i], failures[i]
    assert "items[4]: replaced by items[5]" in failures[4]
    dup = httpx.get(
        url + "/items", headers=AUTH, params={"collection": "victims", "ids": "dup"}
    ).json()
    assert dup["items"][0]["metadata"] == {"n": 2}

    # the deletes that emptied a collection on Lite and on a server: refused as a whole
    for method, path in (("DELETE", "/items"), ("POST", "/delete")):
        for ids in (["zz'] or id not in ['"], ["v0", "zz'] or id not in ['"], ["Bob's photo"]):
            response = httpx.request(
                method, url + path, headers=AUTH, json={"collection": "victims", "ids": ids}
            )
            assert response.status_code == 422 and "ids." in error_of(response)["message"], (
                response.text
            )
    read = httpx.get(
        url + "/items", headers=AUTH, params={"collection": "victims", "ids": "Bob's photo"}
    )
    assert read.status_code == 422
    count, contents = victims_contents(url)
    assert count == 6 and contents == before[1]


def test_sources_under_their_limits(server, setup):
    """A FIFO under an allowed root fails at once (and frees its slot); 16-bit images that would
    need gigabytes to decode are refused from their headers, and the process stays small."""
    url = server.url
    httpx.post(
        url + "/collections/create",
        headers=AUTH,
        json={"name": "limits", "exist_ok": True},
        timeout=120,
    )
    fifo = str(setup["allowed"] / "pipe.jpg")
    for _ in range(6):  # more than max_concurrency + max_queue: a held slot would show as 429s
        found = httpx.post(
            url + "/search", headers=AUTH, json={"collection": "limits", "path": fifo}, timeout=30
        )
        assert found.status_code == 422 and "is a FIFO" in error_of(found)["message"]
    mixed = httpx.post(
        url + "/insert",
        headers=AUTH,
        timeout=120,
        json={
            "collection": "limits",
            "items": [{"path": fifo}, {"image_base64": tile_b64(1), "id": "ok"}],
        },
    )
    assert mixed.status_code == 200 and mixed.json()["ids"] == ["ok"]
    assert "is a FIFO" in mixed.json()["failures"][0]["error"]

    status = Path(f"/proc/{server.process.pid}/status")

    def memory(key: str) -> int:
        line = next(x for x in status.read_text().splitlines() if x.startswith(key))
        return int(line.split()[1]) * 1024

    buffer = io.BytesIO()
    Image.fromarray(np.zeros((7999, 7999), np.uint16)).save(buffer, format="PNG")
    png16 = buffer.getvalue()
    assert Image.open(io.BytesIO(png16)).mode == "I;16"
    files = [("files", (f"big{i}.png", png16, "image/png")) for i in range(8)]
    assert sum(len(f[1][1]) for f in files) < 2_000_000  # fits the body limit: the budget decides
    rss_before = memory("VmRSS")
    refused = httpx.post(
        url + "/insert", headers=AUTH, files=files, data={"collection": "limits"}, timeout=120
    )
    assert refused.status_code == 413 and error_of(refused)["code"] == "decode_budget", refused.text
    assert memory("VmRSS") < rss_before + 100 * 2**20  # refused from the headers: nothing decoded
    # one such image fits the budgets and is decoded for real, with the process under 2 GiB
    one = httpx.post(
        url + "/search",
        headers=AUTH,
        files={"file": ("big.png", png16)},
        data={"collection": "limits"},
        timeout=120,
    )
    assert one.status_code == 200 and one.json()["results"][0]["id"] == "ok"
    print(
        f"service memory: before {rss_before / 2**20:.0f} MiB, peak {memory('VmHWM') / 2**20:.0f} MiB"
    )
    assert memory("VmHWM") < 2 * 2**30
    metrics = httpx.get(url + "/metrics", headers=AUTH).text
    assert 'accelkit_images_rejected_total{reason="decode_budget"}' in metrics


def test_slow_bodies_and_headers_are_cut_off(server):
    """A body that does not arrive in body_timeout_s (5 s here) is answered 408 and frees its
    admission slot; a connection that never finishes its headers is closed after header_timeout_s.
    The sockets' own 60 s timeouts only guard the test: without the limits they would fire."""
    import socket as sockets

    host, port = "127.0.0.1", server.port
    slow = []
    for _ in range(4):  # more than max_concurrency (2): held slots would starve everyone
        conn = sockets.create_connection((host, port), timeout=60)
        conn.sendall(
            b"POST /search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + KEY.encode()
            + b'\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"coll'
        )
        slow.append(conn)
    for conn in slow:
        answer = b""
        while chunk := conn.recv(4096):  # the server closes after its answer
            answer += chunk
        answer = answer.decode()
        assert answer.startswith("HTTP/1.1 408") and "body_too_slow" in answer, answer
        conn.close()
    after = httpx.post(
        server.url + "/collections/create",
        headers=AUTH,
        json={"name": "slow", "exist_ok": True},
        timeout=120,
    )
    assert after.status_code == 200  # the admission slots are free again
    half = sockets.create_connection((host, port), timeout=60)
    half.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
    assert half.recv(4096) == b""  # closed by the server
    half.close()
    metrics = httpx.get(server.url + "/metrics", headers=AUTH).text
    assert 'accelkit_images_rejected_total{reason="body_too_slow"} 4.0' in metrics
    cut = sockets.create_connection((host, port), timeout=60)  # a client that leaves mid-body
    cut.sendall(
        b"POST /insert HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + KEY.encode()
        + b'\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"items'
    )
    cut.close()
    assert httpx.get(server.url + "/health").status_code == 200
    log = server.log.read_text(errors="replace")
    assert "Traceback" not in log and "internal error" not in log, log[-3000:]


def test_remote_index_is_the_same_interface(server, setup, photos, tmp_path):
    """RemoteIndex (the CLI's --server) does through HTTP what LocalIndex does in process."""
    from accelkit.images.index.base import ImageIndex, ImageInput
    from accelkit.images.index.remote import RemoteIndex
    from accelkit.images.store import CollectionExistsError, CollectionNotFoundError

    cat = tmp_path / "cat.png"
    Image.fromarray(photos["chelsea"]).save(cat)
    index = RemoteIndex(server.url, KEY)
    try:
        assert isinstance(index, ImageIndex)
        info = index.create_collection("remote", description="over http")
        assert (info["name"], info["dim"], info["count"]) == ("remote", 1280, 0)
        with pytest.raises(CollectionExistsError):
            index.create_collection("remote")
        result = index.insert(
            [
                ImageInput(str(cat), "cat", {"kind": "pet"}, "cat.png"),
                ImageInput(photos["rocket"], "rocket"),
                ImageInput(b"not an image", "junk"),
                ImageInput(str(tmp_path / "missing.png"), "gone"),
                ImageInput(photos["coffee"], "Bob's photo"),
            ],
            "remote",
        )
        assert result.ids == ["cat", "rocket"] and result.indices == [0, 1]
        assert set(result.failures) == {2, 3, 4} and "cannot read" in result.failures[3]
        assert "ids are 1-256 characters" in result.failures[4]
        hits = index.search(ImageInput(str(cat)), 2, collection="remote")
        assert hits[0].id == "cat" and hits[0].metadata == {"kind": "pet", "source": "cat.png"}
        vector_hits = index.search(np.ones(1280, np.float32), 2, 'id == "rocket"', "remote")
        assert [h.id for h in vector_hits] == ["rocket"]
        assert [g["id"] for g in index.get(["cat", "nope"], "remote")] == ["cat"]
        assert index.describe("remote")["count"] == 2
        assert index.flush("remote")["collection"] == "remote"
        assert index.index_progress("remote", wait=True)["pending_rows"] == 0
        assert index.delete(filter='metadata["kind"] == "pet"', collection="remote") == 1
        assert index.delete(["rocket", "nope"], collection="remote") == 1
        assert index.describe("remote")["count"] == 0
        assert "remote" in index.list_collections()
        assert index.health()["status"] == "ok"
        index.drop_collection("remote")
        with pytest.raises(CollectionNotFoundError):
            index.describe("remote")
        with pytest.raises(CollectionNotFoundError):
            index.insert([ImageInput(str(cat))], "remote")
    finally:
        index.close()


def own_config(setup, folder: Path) -> Path:
    """The module's service settings with a store of this test's own where it is a Milvus Lite
    file (one process opens it): a test that stops and restarts its service leaves the module's
    service running, and depends on no other test's data."""
    config = folder / "service.yaml"
    text = setup["config"].read_text()
    if not setup["server_store"]:
        text = text.replace(str(setup["base"] / "images.db"), str(folder / "images.db"))
    config.write_text(text)
    return config


def test_concurrent_clients_lose_nothing_and_restart_keeps_everything(
    setup, photos, tmp_path, request
):
    """8 clients x 50 mixed requests: only 200 or 429 (+ Retry-After); every acknowledged insert
    is stored; a graceful stop drains an in-flight insert; a restarted service has everything.
    The test's own service and store: it stops its service, and needs no other test's data."""
    config = own_config(setup, tmp_path)
    server = Server(config, tmp_path / "server.log").start()
    request.addfinalizer(server.stop)  # stopped below; on a failure before that, here
    url = server.url
    create_with_tiles(url, "kept", "k")
    kept_before = collection_contents(url, "kept", ["k0", "k1", "k2", "k3"])
    assert kept_before[0] == 4
    assert (
        httpx.post(
            url + "/collections/create",
            headers=AUTH,
            json={"name": "busy", "exist_ok": True},
            timeout=120,
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
    payload = {  # encoded before the clock matters: a loaded machine takes seconds for it
        "collection_name": "busy",
        "items": [
            {"image_base64": b64(encode(photos[n], "JPEG", quality=80)), "id": f"late-{n}"}
            for n in names
        ],
    }
    result = {}

    def slow_insert():
        try:
            result["response"] = httpx.post(
                url + "/insert", headers=AUTH, timeout=120, json=payload
            )
        except httpx.HTTPError as exc:  # reported by the assertion below
            result["error"] = exc

    worker = threading.Thread(target=slow_insert)
    worker.start()
    # the stop comes once the service has admitted the insert (its in-flight gauge), not after
    # a guessed sleep; should the insert be answered first, the stop still follows
    deadline = time.monotonic() + 120
    while worker.is_alive() and time.monotonic() < deadline:
        gauge = [
            line
            for line in httpx.get(url + "/metrics", headers=AUTH, timeout=30).text.splitlines()
            if line.startswith("accelkit_images_in_flight ")
        ]
        if gauge and float(gauge[0].split()[-1]) >= 1:
            break
        time.sleep(0.02)
    assert server.stop() == 128 + signal.SIGTERM  # after uvicorn's graceful shutdown
    worker.join()
    assert "error" not in result, result.get("error")
    assert result["response"].status_code == 200 and result["response"].json()["inserted"] == 16

    restarted = Server(config, tmp_path / "server2.log").start()
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
        # unchanged after a restart
        assert collection_contents(restarted.url, "kept", ["k0", "k1", "k2", "k3"]) == kept_before
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
        assert {c["name"]: c["count"] for c in result_of(listed.stdout)["collections"]}[
            "busy"
        ] == inserts + 16
        query = tmp_path / "q.png"
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
        assert result_of(found.stdout)["results"][0]["id"] == f"late-{names[5]}"
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
            denied.returncode == 0 and result_of(denied.stdout)["status"] == "ok"
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
        assert restarted.stop() == 128 + signal.SIGTERM
