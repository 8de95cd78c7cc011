"""On a real `accelkit images serve` (Milvus Lite and the Milvus server): a path race
never reads outside `allowed_roots`, every list in a request has a cap, URLs reach only the
addresses they may, one `source` rule for local and `--server` inserts, collections only of the
model's dimension."""

import os
import subprocess
import sys
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.support.photos import encode
from tests.support.service import AUTH, KEY, ROOT, Server, b64, error_of, store_yaml
from tests.support.url_server import Helper

# one xdist worker runs this module (pyproject: --dist loadgroup), so
# its service on Milvus Lite starts once
pytestmark = pytest.mark.xdist_group("service-boundaries")

MAX_IDS = 2500  # below the default 10,000, so that GET /items can carry one id too many


@pytest.fixture(scope="module")
def setup(tmp_path_factory, onnx_path, store_settings):
    base = tmp_path_factory.mktemp("boundaries")
    allowed = base / "allowed"
    allowed.mkdir()
    config = base / "service.yaml"
    config.write_text(
        f"preprocess:\n  cache_compiled: false\n  batch_size: 8\n"
        f"model:\n  onnx_path: {onnx_path}\n"
        f"store:\n{store_yaml(store_settings, base)}"
        f"server:\n  api_key: {KEY}\n  allowed_roots: [{allowed}]\n"
        f"  allow_urls: true\n  url_allow: [127.0.0.1]\n  fetch_timeout_s: 10\n"
        f"  max_concurrency: 4\n  max_queue: 8\n  max_items_per_request: 8\n"
        f"  max_ids_per_request: {MAX_IDS}\n"
        f"log_level: WARNING\n"
    )
    return {"base": base, "allowed": allowed, "config": config}


@pytest.fixture(scope="module")
def server(setup):
    srv = Server(setup["config"], setup["base"] / "server.log").start()
    yield srv
    srv.stop()


def post(server, path, **kwargs):
    return httpx.post(server.url + path, headers=AUTH, timeout=120, **kwargs)


def test_swapping_a_folder_for_a_link_never_reads_outside_the_root(server, setup, photos):
    """While a thread swapped allowed/race between a real folder and a link to a
    folder outside the root, 208 of 56,368 answers carried the embedding of the file outside, and
    hundreds were 500s or resets. The path is now opened from the root one component at a time
    without following links: every read is the file inside, a 403 (the link), or a vanished
    component failing its item — and never the file outside."""
    allowed, outside = setup["allowed"], setup["base"] / "private"
    outside.mkdir()
    secret = encode(np.asarray(Image.fromarray(photos["coffee"]).resize((64, 48))), "PNG")
    (outside / "secret.jpg").write_bytes(secret)
    race, stash = allowed / "race", allowed / "race.real"
    race.mkdir()
    # the file inside is not an image: reading it costs no model time, and only a read of the
    # file outside can come back as an embedding
    (race / "secret.jpg").write_bytes(b"inside the root: not an image")
    reference = post(server, "/embed", json={"images_base64": [b64(secret)]}).json()
    reference = np.asarray(reference["embeddings"][0])
    stop, swaps = threading.Event(), Counter()

    def swap():
        while not stop.is_set():
            os.rename(race, stash)
            os.symlink(outside, race)
            os.unlink(race)
            os.rename(stash, race)
            swaps["done"] += 1

    def client(_):
        seen = Counter()
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as http:
            for _ in range(250):
                try:
                    answer = http.post("/embed", json={"inputs": [str(race / "secret.jpg")] * 8})
                except httpx.TransportError:
                    seen["reset"] += 1
                    continue
                seen[answer.status_code] += 1
                if answer.status_code == 200:
                    body = answer.json()
                    seen["outside"] += len(body["embeddings"])
                    seen["secret"] += sum(
                        np.allclose(row, reference, atol=1e-4) for row in body["embeddings"]
                    )
                    reasons = " ".join(f["error"] for f in body["failures"])
                    seen["inside"] += reasons.count("not a recognised image")
                    seen["vanished"] += reasons.count("no such file")
        return seen

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        with ThreadPoolExecutor(3) as pool:
            counts = sum(pool.map(client, range(3)), Counter())
    finally:
        stop.set()
        swapper.join()
    print(f"path race: {dict(counts)}, {swaps['done']} swaps")
    assert counts["outside"] == counts["secret"] == 0, counts
    assert set(counts) - {"outside", "secret", "inside", "vanished"} <= {200, 403}, counts
    assert counts[200] + counts[403] == 750 and counts["inside"] > 0 and swaps["done"] > 0
    log = server.log.read_text(errors="replace")
    assert "Traceback" not in log and "internal error" not in log, log[-3000:]


def test_huge_id_lists_are_refused_and_deletes_are_batched(server):
    """A delete of 1,000,000 ids (~11 MB) was accepted and took 7-12 s. Every list has
    a cap, checked before its entries: 413 naming the field, the cap and the setting. A delete at
    the cap runs in batches and deletes exactly the ids that exist."""
    assert post(server, "/collections/create", json={"name": "many"}).status_code == 200
    stored = post(
        server,
        "/insert",
        json={
            "collection": "many",
            "items": [
                {
                    "image_base64": b64(encode(np.full((8, 8, 3), 40 * i, np.uint8), "PNG")),
                    "id": f"k{i}",
                }
                for i in range(5)
            ],
        },
    )
    assert stored.status_code == 200 and stored.json()["inserted"] == 5
    huge = [f"i{i}" for i in range(1_000_000)]
    for method, path in (("DELETE", "/items"), ("POST", "/delete")):
        refused = httpx.request(
            method,
            server.url + path,
            headers=AUTH,
            json={"collection": "many", "ids": huge},
            timeout=120,
        )
        assert refused.status_code == 413, refused.text
        error = error_of(refused)
        assert error["code"] == "too_many_items"
        assert error["message"] == (
            f"ids: 1,000,000 entries, over the limit of {MAX_IDS:,} (server.max_ids_per_request)"
        )
    over = httpx.get(
        server.url + "/items",
        headers=AUTH,
        params=[("collection", "many")] + [("ids", "a")] * (MAX_IDS + 1),
    )
    assert over.status_code == 413 and "ids: 2,501 entries" in error_of(over)["message"]
    for path, body, text in (
        ("/insert", {"inputs": ["/x"] * 9}, "inputs: 9 entries, over the limit of 8"),
        (
            "/insert",
            {"items": [{"image_base64": "eA==", "metadata": {f"k{i}": i for i in range(300)}}]},
            "items.0.metadata: 300 keys, over the limit of 256 (server.max_metadata_keys)",
        ),
        ("/embed", {"images_base64": ["eA=="] * 9}, "images_base64: 9 entries"),
    ):
        response = post(server, path, json=body)
        assert response.status_code == 413 and text in error_of(response)["message"], response.text
    files = [("files", (f"{i}.png", b"x")) for i in range(9)]
    response = post(server, "/insert", files=files, data={"collection": "many"})
    assert (
        response.status_code == 413 and "files: more than 8 files" in error_of(response)["message"]
    )
    values = ", ".join(f'"k{i}"' for i in range(257))
    response = post(server, "/delete", json={"collection": "many", "filter": f"id in [{values}]"})
    assert (
        response.status_code == 422 and "server.max_filter_values" in error_of(response)["message"]
    )
    # a delete at the cap: three batches, and exactly the 3 stored ids among them are deleted
    ids = [f"k{i}" for i in range(3)] + [f"absent{i}" for i in range(MAX_IDS - 3)]
    deleted = httpx.request(
        "DELETE", server.url + "/items", headers=AUTH, json={"collection": "many", "ids": ids}
    )
    assert deleted.status_code == 200 and deleted.json()["deleted"] == 3, deleted.text
    left = httpx.get(
        server.url + "/items",
        headers=AUTH,
        params=[("collection", "many")] + [("ids", f"k{i}") for i in range(5)],
    ).json()["items"]
    assert [item["id"] for item in left] == ["k3", "k4"]


def test_urls_reach_only_allowed_addresses(server, photos):
    """With allow_urls on, loopback in every spelling and redirects to the service's
    own /metrics were fetched. Here url_allow names 127.0.0.1 (the helper): it is fetched, and
    every other spelling, redirect or internal address is refused with 0 hits on the helper."""
    helper = Helper()
    try:
        helper.body = encode(photos["rocket"][:64, :64], "PNG")
        base = f"http://127.0.0.1:{helper.port}"
        fetched = post(server, "/embed", json={"inputs": [f"{base}/img"]})
        assert fetched.status_code == 200 and fetched.json()["count"] == 1, fetched.text
        before = dict(helper.hits)
        for url in (
            f"http://127.1:{helper.port}/img",
            f"http://2130706433:{helper.port}/img",
            f"http://0.0.0.0:{helper.port}/img",
            f"http://[::1]:{helper.port}/img",
            f"http://localhost:{helper.port}/img",
            "http://169.254.169.254/latest/meta-data/",
            f"{base}/to?u=http://localhost:{server.port}/metrics",
            f"{base}/to?u=http://127.1:{helper.port}/img",
        ):
            response = post(server, "/embed", json={"inputs": [url]})
            assert response.status_code == 403, (url, response.text)
            assert error_of(response)["code"] == "url_not_allowed"
        assert helper.hits["/img"] == before["/img"] == 1 and helper.hits["/to"] == 2
    finally:
        helper.close()
    metrics = httpx.get(server.url + "/metrics", headers=AUTH).text
    assert 'reason="unauthorized"' not in metrics  # the redirect never reached /metrics


def test_source_is_the_same_rule_through_the_service(server, setup, photos):
    """`insert FOLDER --server` stored the bare file name while the local CLI stored the
    path inside the folder (a `like "holiday%"` filter found 3 locally, 0 through the service).
    Both now record the path inside the folder given."""
    folder = setup["base"] / "album"
    (folder / "holiday").mkdir(parents=True)
    for name in ("chelsea", "coffee"):
        Image.fromarray(photos[name]).save(folder / "holiday" / f"{name}.jpg")
    Image.fromarray(photos["rocket"]).save(folder / "rocket.jpg")
    done = subprocess.run(
        [
            *(sys.executable, "-m", "accelkit", "images", "insert", str(folder)),
            *("--collection", "album", "--create-collection", "--server", server.url, "--json"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ACCELKIT_SERVER_API_KEY": KEY},
    )
    assert done.returncode == 0, done.stderr
    found = post(
        server,
        "/search",
        json={
            "collection": "album",
            "vector": [0.03] * 1280,
            "filter": 'metadata["source"] like "holiday%"',
        },
    ).json()["results"]
    sources = sorted(hit["metadata"]["source"] for hit in found)
    assert sources == ["holiday/chelsea.jpg", "holiday/coffee.jpg"]
    # a server-side path is named by its path below the allowed root, the same way
    (setup["allowed"] / "holiday").mkdir()
    Image.fromarray(photos["chelsea"]).save(setup["allowed"] / "holiday" / "cat.jpg")
    path = str(setup["allowed"] / "holiday" / "cat.jpg")
    inserted = post(server, "/insert", json={"collection": "album", "items": [{"path": path}]})
    item = inserted.json()["ids"][0]
    got = httpx.get(
        server.url + "/items", headers=AUTH, params={"collection": "album", "ids": item}
    ).json()
    assert got["items"][0]["metadata"] == {"source": "holiday/cat.jpg"}


def test_collections_take_the_model_dimension_and_missing_ones_say_how_to_create(server):
    """A collection created with dim 512 accepted the create and then refused every
    insert; the missing-collection error did not name --create-collection."""
    wrong = post(server, "/collections/create", json={"name": "d512", "dim": 512})
    assert wrong.status_code == 422 and "1280-d embeddings" in error_of(wrong)["message"]
    collections = httpx.get(server.url + "/collections", headers=AUTH).json()["collections"]
    assert "d512" not in collections
    right = post(server, "/collections/create", json={"name": "d1280", "dim": 1280})
    assert right.status_code == 200 and right.json()["dim"] == 1280
    missing = post(server, "/insert", json={"collection": "nowhere", "images_base64": ["eA=="]})
    assert missing.status_code == 404
    assert "--create-collection" in error_of(missing)["message"]
    assert '"create_collection": true' in error_of(missing)["message"]
