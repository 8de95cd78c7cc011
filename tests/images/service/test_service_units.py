"""The service's parts on their own: batching, admission, request shapes, sources (base64,
paths, FIFOs), the decode budget, bounded metrics (URLs: test_service_urls.py)."""

import asyncio
import base64
import os
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest

from accelkit.errors import DataError, InputError
from accelkit.images.embedding.batching import (
    AdmissionLimiter,
    DynamicBatcher,
    Overloaded,
    split_result,
)
from accelkit.images.service import ServiceError
from accelkit.images.service.forms import insert_sources, search_source, validate
from accelkit.images.service.guards import DecodeBudget, Metrics
from accelkit.images.service.sources import (
    Source,
    clean_name,
    decode_base64,
    read_allowed_file,
)
from accelkit.images.settings.schema import InsertRequest, SearchRequest


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


def shapes(body, uploads=()):
    request = validate(InsertRequest, body)
    return request, insert_sources(request, list(uploads))


def test_request_shapes():
    b64 = base64.b64encode(b"img").decode()
    request, original = shapes(
        {
            "inputs": ["/data/a.jpg", "http://h/b.jpg"],
            "ids": ["a", "b"],
            "metadata": [{"x": 1}, None],
            "collection_name": "c",
            "batch_size": 8,
        }
    )
    assert request.collection == "c"
    assert original == [
        (Source("input", "/data/a.jpg"), "a", {"x": 1}),
        (Source("input", "http://h/b.jpg"), "b", None),
    ]
    request, multipart = shapes(
        {"ids": ["u1"], "metadata": [{"k": 2}], "create_collection": True, "collection": "c"},
        [("up.png", b"bytes")],
    )
    assert multipart == [(Source("bytes", b"bytes", "up.png"), "u1", {"k": 2})]
    assert request.create_collection and request.collection == "c"
    _, items = shapes({"items": [{"image_base64": b64, "id": "z"}]})
    assert items == [(Source("image_base64", b64), "z", None)]
    for bad, text in [
        ({"items": [{"image_base64": b64, "color": 1}]}, "items.0.color: unknown field"),
        ({"bogus": 1}, "bogus: unknown field"),
        ({"items": [{"image_base64": b64, "metadata": [1]}]}, "items.0.metadata"),
        ({"create_collection": "false"}, "create_collection: Input should be a valid boolean"),
        ({"collection": "name\n"}, "collection: collection name"),
        ({"collection": 5}, "collection"),
        ({"ids": [5]}, "ids.0"),
    ]:
        with pytest.raises(ServiceError) as refused:
            shapes(bad)
        assert refused.value.status == 422 and text in refused.value.message, refused.value.message
    for bad, text in [
        ({"inputs": ["a"], "ids": ["1", "2"]}, "2 ids"),
        ({"items": [{"image_base64": b64}], "ids": ["x"]}, "either items"),
        ({"items": [{"image_base64": b64, "path": "/x"}]}, "exactly one"),
    ]:
        with pytest.raises(InputError, match=text):
            shapes(bad)
    query = validate(SearchRequest, {"query": "/x.jpg", "topk": 3, "filter_expr": 'id == "a"'})
    assert search_source(query, []) == Source("input", "/x.jpg") and query.filter == 'id == "a"'
    vector = validate(SearchRequest, {"vector": [1, 2.5]})
    assert search_source(vector, []) is None and vector.vector == [1.0, 2.5]
    with pytest.raises(InputError, match="exactly one"):
        search_source(validate(SearchRequest, {"vector": [1.0], "image_base64": b64}), [])
    with pytest.raises(InputError, match="exactly one"):
        search_source(validate(SearchRequest, {"topk": 3}), [])
    for bad in (
        {"topk": "3"},
        {"topk": 0},
        {"topk": True},
        {"vector": ["a"]},
        {"filter": "x" * 5000},
    ):
        with pytest.raises(ServiceError):
            validate(SearchRequest, bad)
    assert clean_name("../../etc/passwd") == "passwd" and clean_name("a\x00b.jpg") == "ab.jpg"
    assert clean_name("C:\\x\\photo.png") == "photo.png" and clean_name("") is None


def test_regular_files_only_and_a_deadline(tmp_path):
    """A FIFO, device or folder is refused before any read could block; a symlink at the last
    component is not followed; the size limit holds even if the file grows."""
    import time

    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)
    far = time.monotonic() + 30
    roots = [str(tmp_path), "/dev"]
    for path, text in (
        (fifo, "is a FIFO"),
        (tmp_path, "is a folder"),
        (tmp_path / "nope.jpg", "no such file"),
        ("/dev/zero", "a device"),
    ):
        with pytest.raises(DataError, match=text):
            read_allowed_file(str(path), roots, 1000, far, "x")
    good = tmp_path / "good.jpg"
    good.write_bytes(b"12345")
    assert read_allowed_file(str(good), roots, 5, far, "x") == (b"12345", "good.jpg")
    with pytest.raises(DataError, match="over the limit of 4"):
        read_allowed_file(str(good), roots, 4, far, "x")
    with pytest.raises(DataError, match="took longer"):
        read_allowed_file(str(good), roots, 5, time.monotonic() - 1, "x")
    os.symlink(good, tmp_path / "link.jpg")
    with pytest.raises(ServiceError) as link:
        read_allowed_file(str(tmp_path / "link.jpg"), roots, 5, far, "x")
    assert link.value.status == 403 and "symbolic link 'link.jpg'" in link.value.message


def test_decode_budget_refuses_queues_and_releases():
    async def scenario():
        budget = DecodeBudget(total=100, per_request=80, wait_s=0.2)
        with pytest.raises(ServiceError) as too_big:
            async with budget.reserve(81):
                pass
        assert too_big.value.status == 413 and too_big.value.code == "decode_budget"
        order = []

        async def hold(name, nbytes, seconds):
            async with budget.reserve(nbytes):
                order.append(("in", name, budget.in_use))
                await asyncio.sleep(seconds)
            order.append(("out", name))

        # 60 + 50 > 100: the second waits for the first, then runs
        await asyncio.gather(hold("a", 60, 0.05), hold("b", 50, 0.01))
        assert order[0] == ("in", "a", 60) and order[2] == ("in", "b", 50) and budget.in_use == 0
        # a request that cannot get room in time is refused with Retry-After
        blocker = asyncio.ensure_future(hold("c", 80, 0.5))
        await asyncio.sleep(0.01)
        with pytest.raises(ServiceError) as busy:
            async with budget.reserve(30):
                pass
        assert busy.value.status == 503 and busy.value.headers["Retry-After"] == "1"
        await blocker
        assert budget.in_use == 0

    asyncio.run(scenario())


def test_metrics_labels_stay_bounded():
    metrics = Metrics()
    for i in range(200):
        metrics.observe(f"BREW{i}", "unmatched", 404, 0.001)
        metrics.reject(f"reason{i}")
    metrics.observe("GET", "/collections", 200, 0.001)
    text = metrics.render()[0].decode()
    series = [
        line for line in text.splitlines() if line.startswith("accelkit_images_requests_total")
    ]
    assert len(series) == 2 and 'method="OTHER"' in series[0] + series[1]
    rejected = [
        line for line in text.splitlines() if line.startswith("accelkit_images_rejected_total")
    ]
    assert len(rejected) == 1 and 'reason="other"' in rejected[0]


def test_base64_and_allowed_paths(tmp_path, monkeypatch):
    """Paths are opened one component at a time below the root: no symbolic link and no '..' is
    followed, a file in the middle of a path or a vanished component fails the item alone."""
    import time

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
    os.symlink(tmp_path, root / "out")  # a folder link pointing outside
    os.symlink(root / "sub", root / "in")  # and one pointing inside: not followed either
    far = time.monotonic() + 30

    def read(path, roots=(str(root),)):
        return read_allowed_file(str(path), list(roots), 100, far, "x")

    assert read(root / "sub" / "a.jpg") == (b"x", "sub/a.jpg")  # named below its root
    assert read(root / "sub" / "." / "a.jpg") == (b"x", "sub/a.jpg")
    assert read(root / "sub" / "a.jpg", [str(tmp_path), str(root)]) == (b"x", "sub/a.jpg")
    monkeypatch.chdir(root)
    assert read("sub/a.jpg") == (b"x", "sub/a.jpg")  # relative to the service's folder
    for outside, text in (
        (secret, "outside the allowed roots"),
        (root / "sub" / ".." / ".." / "secret.jpg", "'..'"),
        (root / "sub" / ".." / "sub" / "a.jpg", "'..'"),
        (root / "link.jpg", "symbolic link 'link.jpg'"),
        (root / "out" / "secret.jpg", "symbolic link 'out'"),
        (root / "in" / "a.jpg", "symbolic link 'in'"),
        (tmp_path / "allowed2" / "a.jpg", "outside the allowed roots"),
    ):
        with pytest.raises(ServiceError) as refused:
            read(outside)
        assert refused.value.status == 403 and refused.value.code == "path_not_allowed"
        assert text in refused.value.message, refused.value.message
    for missing, text in (
        (root / "gone" / "a.jpg", "no such file"),
        (root / "sub" / "a.jpg" / "b.jpg", "'a.jpg' is not a folder"),
    ):
        with pytest.raises(DataError, match=text):
            read(missing)
    with pytest.raises(ServiceError) as disabled:
        read(root / "sub" / "a.jpg", [])
    assert disabled.value.code == "paths_disabled"


def test_every_list_in_a_request_has_a_cap():
    """A delete of 1,000,000 ids was accepted. Every list a body holds is counted before
    its entries are validated; over its cap it is a 413 naming the field, the cap and the
    setting (a filter's list: a 422 naming the filter)."""
    from accelkit.images.settings.schema import (
        CreateCollectionRequest,
        DeleteRequest,
        EmbedRequest,
        RequestLimits,
    )

    small = RequestLimits(items=2, ids=3, metadata_keys=4, filter_values=2)
    b64 = base64.b64encode(b"img").decode()
    nested = {"a": {"b": 1, "c": [{"d": 1}, {"e": 2}]}}  # five keys, every level together
    for model, body, limits, text in [
        (DeleteRequest, {"ids": ["a"] * 10_001}, None, "ids: 10,001 entries, over the limit of"),
        (DeleteRequest, {"ids": ["a"] * 4}, small, "ids: 4 entries, over the limit of 3"),
        (DeleteRequest, {"ids": [5] * 4}, small, "(server.max_ids_per_request)"),
        (InsertRequest, {"inputs": ["/x"] * 3}, small, "inputs: 3 entries"),
        (InsertRequest, {"images_base64": [b64] * 3}, small, "images_base64: 3 entries"),
        (InsertRequest, {"items": [{"image_base64": b64}] * 3}, small, "items: 3 entries"),
        (InsertRequest, {"ids": ["a"] * 3}, small, "ids: 3 entries"),
        (InsertRequest, {"metadata": [{}] * 3}, small, "(server.max_items_per_request)"),
        (InsertRequest, {"items": [{"path": "/x", "metadata": nested}]}, small, "items.0.metadata"),
        (InsertRequest, {"metadata": [None, nested]}, small, "metadata.1: 5 keys, over the"),
        (InsertRequest, {"metadata": [nested]}, small, "(server.max_metadata_keys)"),
        (
            EmbedRequest,
            {"inputs": ["/x"] * 257},
            None,
            "inputs: 257 entries, over the limit of 256",
        ),
        (SearchRequest, {"vector": [0.0] * 32_769}, None, "vector: 32,769 entries"),
        (CreateCollectionRequest, {"index_params": {f"k{i}": 1 for i in range(9)}}, None, "8"),
    ]:
        with pytest.raises(ServiceError) as refused:
            validate(model, body, limits)
        assert (refused.value.status, refused.value.code) == (413, "too_many_items"), body
        assert text in refused.value.message, refused.value.message
    assert len(validate(DeleteRequest, {"ids": ["a"] * 10_000}).ids) == 10_000
    assert validate(InsertRequest, {"metadata": [{"a": {"b": 1, "c": [{"d": 1}]}}]}, small)
    values = ", ".join(f'"i{i}"' for i in range(3))
    with pytest.raises(ServiceError) as refused:
        validate(DeleteRequest, {"filter": f"id in [{values}]"}, small)
    assert refused.value.status == 422 and "filter: the list at character 7 holds more than 2" in (
        refused.value.message
    )
    assert "(server.max_filter_values)" in refused.value.message
    assert validate(DeleteRequest, {"filter": f"id in [{values}]"}).filter  # 256 by default


def test_review_findings_of_issue_27():
    """A review of the issue-27 change found these; each is pinned here."""
    import ipaddress
    from urllib.parse import quote

    from accelkit.images.index.remote import QUERY_CHARS, _id_groups
    from accelkit.images.service.urls import is_public
    from accelkit.images.settings.schema import GRAMMAR_ONLY, RequestLimits, check_filter

    # 6to4 addresses carrying an internal IPv4 address are not public
    for text in ("2002:7f00:1::", "2002:a9fe:a9fe::1", "2002:0a00:0001::1"):
        assert not is_public(ipaddress.ip_address(text)), text
    assert is_public(ipaddress.ip_address("2002:0808:0808::1"))  # 8.8.8.8 inside: public
    # a raised server.max_filter_values holds inside the application layer too
    many = "id in [" + ", ".join(f'"i{i}"' for i in range(300)) + "]"
    limits = RequestLimits(filter_values=1000)
    SearchRequest.model_validate(
        {"vector": [0.0] * 4, "filter": many}, context={"limits": limits}
    )  # the boundary accepts it ...
    assert check_filter(many, max_values=GRAMMAR_ONLY) == many  # ... and the index's check too
    # GET /items groups count the ids as sent: percent-encoded
    ids = ["/" * 200 + str(i) for i in range(100)]
    for group in _id_groups(ids, QUERY_CHARS):
        assert sum(len(quote(i, safe="")) + len("&ids=") for i in group) <= QUERY_CHARS


def test_glibc_takes_the_mmap_threshold():
    """The service lowers glibc's mmap threshold by `mallopt` (docs/architecture.md, "Other
    projects' internals"); on glibc the call must succeed, or freed image buffers stay with the
    process."""
    import platform

    from accelkit.images.service.server import return_freed_memory

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc: nothing to tune")
    assert return_freed_memory() is True
