"""The service's pure parts: batching, admission, request shapes, path and base64 checks."""

import asyncio
import base64
import os
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest

from accelkit.errors import InputError
from accelkit.images.batching import AdmissionLimiter, DynamicBatcher, Overloaded, split_result
from accelkit.images.service import (
    ServiceError,
    decode_base64,
    normalize_insert,
    normalize_search,
    resolve_allowed_path,
)


def test_split_result_routes_rows_and_failures():
    embeddings = np.arange(8, dtype=np.float32).reshape(4, 2)
    parts = split_result(embeddings, [0, 2, 3, 5], {1: "bad one", 4: "bad two"}, [2, 1, 3])
    assert [len(p) for p in parts] == [2, 1, 3]
    assert np.array_equal(parts[0][0].vector, [0, 1]) and parts[0][1].error == "bad one"
    assert np.array_equal(parts[1][0].vector, [2, 3])
    assert np.array_equal(parts[2][0].vector, [4, 5]) and parts[2][1].error == "bad two"
    assert np.array_equal(parts[2][2].vector, [6, 7])


def _embed(items):
    """A real, checkable 'model': each item (an int) maps to [item, 2 * item]; negatives fail."""
    good = [i for i, x in enumerate(items) if x >= 0]
    rows = np.array([[items[i], 2 * items[i]] for i in good], np.float32).reshape(-1, 2)
    calls.append(len(items))
    return SimpleNamespace(
        embeddings=rows,
        indices=good,
        failures={i: f"negative {items[i]}" for i, x in enumerate(items) if x < 0},
    )


calls: list[int] = []


def test_dynamic_batcher_merges_concurrent_requests_and_keeps_order():
    calls.clear()

    async def scenario():
        with ThreadPoolExecutor(1) as pool:
            batcher = DynamicBatcher(_embed, pool, max_batch=8, max_wait_s=0.2)
            jobs = [[i] for i in range(6)] + [[10, -1, 11], list(range(20, 30))]
            results = await asyncio.gather(*(batcher.embed(j) for j in jobs))
            await batcher.close()
            return jobs, results

    jobs, results = asyncio.run(scenario())
    for job, result in zip(jobs, results, strict=True):
        assert len(result) == len(job)
        for x, r in zip(job, result, strict=True):
            if x < 0:
                assert r.vector is None and r.error == f"negative {x}"
            else:
                assert r.error is None and np.array_equal(r.vector, [x, 2 * x])
    assert sum(calls) == 19
    assert len(calls) < len(jobs)  # merged: fewer model calls than requests
    assert max(calls[:-1]) <= 8  # only a single oversized request exceeds max_batch


def test_batcher_drains_on_close_and_then_refuses():
    calls.clear()

    async def scenario():
        with ThreadPoolExecutor(1) as pool:
            batcher = DynamicBatcher(_embed, pool, max_batch=4, max_wait_s=0.01)
            pending = [asyncio.ensure_future(batcher.embed([i, i + 1])) for i in range(10)]
            await asyncio.sleep(0)
            await batcher.close()  # every queued job is finished first
            done = [p.result() for p in pending]
            with pytest.raises(RuntimeError, match="shutting down"):
                await batcher.embed([1])
            return done

    done = asyncio.run(scenario())
    assert all(len(d) == 2 and d[0].error is None for d in done)


def test_admission_limiter_refuses_beyond_queue():
    async def scenario():
        limiter = AdmissionLimiter(max_active=2, max_queue=1)
        release = asyncio.Event()
        entered = []

        async def hold(i):
            async with limiter.slot():
                entered.append(i)
                await release.wait()

        tasks = [asyncio.ensure_future(hold(i)) for i in range(3)]
        await asyncio.sleep(0.01)
        assert limiter.admitted == 3 and len(entered) == 2  # two run, one waits
        with pytest.raises(Overloaded):
            async with limiter.slot():
                pass
        release.set()
        await asyncio.gather(*tasks)
        assert limiter.admitted == 0 and sorted(entered) == [0, 1, 2]
        async with limiter.slot():  # room again
            pass

    asyncio.run(scenario())


def test_request_shapes():
    b64 = base64.b64encode(b"img").decode()
    original = normalize_insert(
        {
            "inputs": ["/data/a.jpg", "http://h/b.jpg"],
            "ids": ["a", "b"],
            "metadata": [{"x": 1}, None],
            "collection_name": "c",
        }
    )
    assert original["items"] == [
        {"input": "/data/a.jpg", "id": "a", "metadata": {"x": 1}},
        {"input": "http://h/b.jpg", "id": "b", "metadata": None},
    ]
    multipart = normalize_insert(
        {"ids": '["u1"]', "metadata": '[{"k": 2}]', "create_collection": "true"}, [b"bytes"]
    )
    assert (
        multipart["items"] == [{"bytes": b"bytes", "id": "u1", "metadata": {"k": 2}}]
        and multipart["create_collection"]
    )
    items = normalize_insert({"items": [{"image_base64": b64, "id": "z"}]})
    assert items["items"] == [{"image_base64": b64, "id": "z"}]
    for bad, text in [
        ({"items": [{"image_base64": b64, "color": 1}]}, "color"),
        ({"inputs": ["a"], "ids": ["1", "2"]}, "2 ids"),
        ({"bogus": 1}, "bogus"),
        ({"items": [{"image_base64": b64, "metadata": [1]}]}, "metadata"),
        ({"items": [{"image_base64": b64}], "ids": ["x"]}, "either items"),
    ]:
        with pytest.raises(InputError, match=text):
            normalize_insert(bad)
    assert normalize_search({"query": "/x.jpg", "topk": 3})["items"] == [{"input": "/x.jpg"}]
    assert normalize_search({"vector": [1, 2]})["vector"] == [1, 2]
    with pytest.raises(InputError, match="exactly one"):
        normalize_search({"vector": [1.0], "image_base64": b64})
    with pytest.raises(InputError, match="exactly one"):
        normalize_search({"topk": 3})


def test_base64_and_allowed_paths(tmp_path):
    assert decode_base64(base64.b64encode(b"abc").decode(), "x") == b"abc"
    assert (
        decode_base64("data:image/png;base64," + base64.b64encode(b"abc").decode(), "x") == b"abc"
    )
    for bad in ("not base64!", ""):
        with pytest.raises(InputError):
            decode_base64(bad, "x")
    root = tmp_path / "allowed"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.jpg").write_bytes(b"x")
    secret = tmp_path / "secret.jpg"
    secret.write_bytes(b"s")
    os.symlink(secret, root / "link.jpg")
    assert (
        resolve_allowed_path(str(root / "sub" / "a.jpg"), [str(root)], "x")
        == (root / "sub" / "a.jpg").resolve()
    )
    for outside in (
        str(secret),
        str(root / "sub" / ".." / ".." / "secret.jpg"),
        str(root / "link.jpg"),
        str(tmp_path / "allowed2" / "a.jpg"),
    ):
        with pytest.raises(ServiceError) as refused:
            resolve_allowed_path(outside, [str(root)], "x")
        assert refused.value.status == 403 and refused.value.code == "path_not_allowed"
    with pytest.raises(ServiceError) as disabled:
        resolve_allowed_path(str(root / "sub" / "a.jpg"), [], "x")
    assert disabled.value.code == "paths_disabled"


def test_fetch_url_limits_against_a_local_http_server(tmp_path):
    """allow_urls on: a real HTTP server on 127.0.0.1 serves the files; size limit and errors."""
    import functools
    import http.server
    import threading

    from accelkit.errors import DataError
    from accelkit.images.config import ServerConfig
    from accelkit.images.service import fetch_url

    (tmp_path / "small.jpg").write_bytes(b"x" * 1000)
    (tmp_path / "big.jpg").write_bytes(b"x" * 5000)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    config = ServerConfig(allow_urls=True, fetch_max_bytes=2000, fetch_timeout_s=5)
    try:
        assert asyncio.run(fetch_url(f"{base}/small.jpg", config, "q")) == b"x" * 1000
        with pytest.raises(DataError, match="larger than the limit of 2,000"):
            asyncio.run(fetch_url(f"{base}/big.jpg", config, "q"))
        with pytest.raises(DataError, match="HTTP 404"):
            asyncio.run(fetch_url(f"{base}/missing.jpg", config, "q"))
        with pytest.raises(InputError, match="only http"):
            asyncio.run(fetch_url("file:///etc/passwd", config, "q"))
        with pytest.raises(ServiceError) as refused:
            asyncio.run(fetch_url(f"{base}/small.jpg", ServerConfig(), "q"))
        assert refused.value.status == 403
    finally:
        server.shutdown()
