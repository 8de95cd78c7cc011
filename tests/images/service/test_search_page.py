"""The search page of `accelkit images serve`, in a real browser: headless Chromium (Debian's
`chromium` + `chromium-driver`) driven by Selenium through the system chromedriver, against the
service started as users start it (a subprocess on 127.0.0.1 with an API key), on Milvus Lite
and on a real Milvus server. The ranking the grid shows is checked against cosine similarities
computed here in numpy from the service's /embed vectors; a file name and a metadata value that
hold markup stay text; the headers and the thumbnail endpoint are checked with plain HTTP."""

import base64
import io
import os
import re
import shutil

import httpx
import numpy as np
import pytest
from PIL import Image

from accelkit.images.store.thumbnails import MAX_BYTES, MAX_SIDE, make_thumbnail
from tests.support.photos import encode
from tests.support.search_page import Page
from tests.support.service import AUTH, KEY, ROOT, Server, store_yaml

COLLECTION = "page_photos"
XSS_NAME = "<script>window.pwned=1</script><img src=x onerror=window.pwned=2>.png"
XSS_VALUE = "<b>bold</b><script>window.pwned=3</script>"
# (photo, file name, kind) of what the fixture stores; the query photos are not among them
STORED = [
    ("chelsea", "chelsea.jpg", "animal"),
    ("coffee", "coffee.jpg", "food"),
    ("astronaut", "astronaut.jpg", "person"),
    ("rocket", "rocket.jpg", "thing"),
    ("motorcycle", "motorcycle.jpg", "thing"),
    ("china", "china.jpg", "place"),
    ("flower", "flower.jpg", "plant"),
    ("camera", XSS_NAME, XSS_VALUE),
]


@pytest.fixture(scope="module")
def service(tmp_path_factory, onnx_path, photos, store_settings):
    """The service with a collection of real photos, inserted through the API (JPEG bytes,
    file names in metadata["source"]); and each photo's embedding from /embed."""
    base = tmp_path_factory.mktemp("page")
    server_store = "db_name" in store_settings
    # a server's thumbnails need a file named (auto keeps them beside a Lite database only)
    thumbnails = f"  thumbnails: {base / 'thumbnails.sqlite'}\n" if server_store else ""
    config = base / "service.yaml"
    config.write_text(
        f"preprocess:\n  cache_compiled: false\n  batch_size: 8\n"
        f"model:\n  onnx_path: {onnx_path}\n"
        f"store:\n{store_yaml(store_settings, base)}{thumbnails}"
        f"server:\n  api_key: {KEY}\n  batch_max_wait_ms: 10\n"
        f"log_level: WARNING\n"
    )
    server = Server(config, base / "server.log").start()
    try:
        httpx.delete(f"{server.url}/collections/{COLLECTION}", headers=AUTH, timeout=60)
        data = {name: encode(photos[photo], "JPEG", quality=92) for photo, name, _ in STORED}
        items = [
            {"image_base64": base64.b64encode(data[name]).decode(), "metadata": meta}
            for _, name, kind in STORED
            for meta in [{"source": name, "kind": kind}]
        ]
        inserted = httpx.post(
            f"{server.url}/insert",
            headers=AUTH,
            json={"collection": COLLECTION, "items": items, "create_collection": True},
            timeout=120,
        ).json()
        assert inserted["inserted"] == len(STORED), inserted
        names = [name for _, name, _ in STORED]
        vectors = embed(server, [data[name] for name in names])
        yield {
            "server": server,
            "base": base,
            "ids": dict(zip(names, inserted["ids"], strict=True)),
            "data": data,
            "vectors": dict(zip(names, vectors, strict=True)),
            "server_store": server_store,
        }
    finally:
        server.stop()


def embed(server, images: list[bytes]) -> np.ndarray:
    body = {"images_base64": [base64.b64encode(b).decode() for b in images]}
    answer = httpx.post(f"{server.url}/embed", headers=AUTH, json=body, timeout=120).json()
    assert answer["count"] == len(images), answer
    return np.asarray(answer["embeddings"], np.float64)


def ranking(service, query: bytes, kinds: set[str] | None = None) -> list[tuple[str, float]]:
    """(file name, cosine) of the stored photos, best first: numpy float64, not Milvus."""
    (q,) = embed(service["server"], [query])
    scores = []
    for _, name, kind in STORED:
        if kinds is None or kind in kinds:
            v = service["vectors"][name]
            scores.append((name, float(q @ v / np.linalg.norm(q) / np.linalg.norm(v))))
    return sorted(scores, key=lambda s: -s[1])


# -- plain HTTP: headers, auth, thumbnails --------------------------------------------------------


def test_page_files_headers_and_auth(service):
    url = service["server"].url
    page = httpx.get(url + "/", headers={"Accept": "text/html"})  # public: no data in it
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    html = page.text
    assert re.findall(r"<script[^>]*>", html) == ['<script src="static/page.js" defer>']
    assert not re.search(r"<[^>]*\s(on\w+|style)\s*=", html) and "<style" not in html
    for name, kind in (("page.js", "text/javascript"), ("page.css", "text/css")):
        asset = httpx.get(f"{url}/static/{name}")
        assert asset.status_code == 200 and asset.headers["content-type"].startswith(kind)
        assert asset.headers["content-security-policy"] == csp
        assert "http://" not in asset.text and "https://" not in asset.text  # no CDN
    script = httpx.get(url + "/static/page.js").text
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script
    assert "http://" not in html and "https://" not in html
    # the page's files are all there is: nothing else under /static, with or without the key
    assert httpx.get(url + "/static/app.py", headers=AUTH).status_code == 404
    assert httpx.get(url + "/static/..%2Fapp.py", headers=AUTH).status_code == 404
    assert httpx.get(url + "/static/app.py").status_code == 401
    # API clients keep their JSON at / (behind the key, as before); errors carry the CSP too
    assert httpx.get(url + "/").status_code == 401
    root = httpx.get(url + "/", headers=AUTH)
    assert root.json()["service"] == "accelkit images"
    assert root.headers["content-security-policy"] == csp
    again = httpx.get(url + "/static/page.js", headers={"If-None-Match": page.headers["etag"]})
    assert again.status_code == 200  # another file's etag
    cached = httpx.get(
        url + "/", headers={"Accept": "text/html", "If-None-Match": page.headers["etag"]}
    )
    assert cached.status_code == 304
    metrics = httpx.get(url + "/metrics", headers=AUTH).text  # the page's requests are counted
    assert 'method="GET",route="/",status="200"' in metrics
    assert 'method="GET",route="/static/{asset}",status="200"' in metrics


def test_thumbnails_by_id_only_behind_the_key(service):
    url, ids = service["server"].url, service["ids"]
    path = f"{url}/collections/{COLLECTION}/items/{ids['chelsea.jpg']}/thumbnail"
    refused = httpx.get(path)
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
    thumb = httpx.get(path, headers=AUTH)
    assert thumb.status_code == 200 and thumb.headers["content-type"] == "image/jpeg"
    assert thumb.headers["content-security-policy"].startswith("default-src 'self'")
    assert len(thumb.content) <= MAX_BYTES
    assert max(Image.open(io.BytesIO(thumb.content)).size) == MAX_SIDE
    assert thumb.content == make_thumbnail(service["data"]["chelsea.jpg"])  # made at insert
    for missing in ("no-such-id", "a/b/c", "x" * 256):
        answer = httpx.get(
            f"{url}/collections/{COLLECTION}/items/{missing}/thumbnail", headers=AUTH
        )
        assert answer.status_code == 404 and answer.json()["error"]["code"] == "not_found"
    other = httpx.get(
        f"{url}/collections/nowhere/items/{ids['chelsea.jpg']}/thumbnail", headers=AUTH
    )
    assert other.status_code == 404 and other.json()["error"]["code"] == "collection_not_found"
    bad = httpx.get(f"{url}/collections/{COLLECTION}/items/a%22b/thumbnail", headers=AUTH)
    assert bad.status_code == 400  # not an id at all
    # metrics: thumbnails and page files are requests like any other, under their templates
    metrics = httpx.get(url + "/metrics", headers=AUTH).text
    template = "/collections/{name}/items/{item_id:path}/thumbnail"
    assert f'route="{template}",status="200"' in metrics
    assert f'route="{template}",status="404"' in metrics
    assert re.search(r'accelkit_images_rejected_total\{reason="unauthorized"\} [1-9]', metrics)


def test_search_by_a_stored_id_and_deleted_items_lose_their_thumbnail(service, photos):
    url, ids = service["server"].url, service["ids"]
    body = {"collection": COLLECTION, "id": ids["coffee.jpg"], "topk": 3}
    hits = httpx.post(url + "/search", headers=AUTH, json=body).json()["results"]
    expected = ranking(service, service["data"]["coffee.jpg"])
    assert [h["metadata"]["source"] for h in hits] == [n for n, _ in expected[:3]]
    assert hits[0]["score"] == pytest.approx(1.0, abs=1e-5)
    missing = httpx.post(url + "/search", headers=AUTH, json={**body, "id": "nope"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "item_not_found"
    two = httpx.post(url + "/search", headers=AUTH, json={**body, "vector": [0.0] * 1280})
    assert two.status_code == 400 and "exactly one query" in two.json()["error"]["message"]
    # an item of its own, deleted: its thumbnail goes with it
    extra = encode(photos["coins"], "PNG")
    stored = httpx.post(
        url + "/insert",
        headers=AUTH,
        data={"collection": COLLECTION},
        files=[("files", ("coins.png", extra, "image/png"))],
    ).json()
    (extra_id,) = stored["ids"]
    path = f"{url}/collections/{COLLECTION}/items/{extra_id}/thumbnail"
    assert httpx.get(path, headers=AUTH).status_code == 200
    deleted = httpx.request(
        "DELETE", url + "/items", headers=AUTH, json={"collection": COLLECTION, "ids": [extra_id]}
    ).json()
    assert deleted["deleted"] == 1
    assert httpx.get(path, headers=AUTH).status_code == 404


# -- the browser ---------------------------------------------------------------------------------


def test_search_page_in_chromium(service, browser, tmp_path):
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    server = service["server"]
    page = Page(browser, server.url)
    browser.get(server.url + "/")
    # the key is asked for (the service answered 401), kept in the tab, and used from then on
    page.wait.until(lambda d: page.find("#key-form").is_displayed())
    assert "API key" in page.text("#error")
    page.find("#api-key").send_keys(KEY)
    page.find("#key-form button").click()
    page.wait.until(lambda d: "collection" in page.text("#status"))
    assert not page.find("#key-form").is_displayed() and page.text("#error") == ""
    Select(page.find("#collection")).select_by_value(COLLECTION)
    slider = page.find("#topk")  # top k by keyboard, as a person would: Home is 1, then 4 up
    slider.send_keys(Keys.HOME, *[Keys.ARROW_RIGHT] * 4)
    assert page.text("#topk-value") == "5"

    # a query image from disk: the grid shows numpy's top 5 in order, with their thumbnails
    query = tmp_path / "query.jpg"
    query.write_bytes(encode(np.ascontiguousarray(service_photo(service, "coffee_cup")), "JPEG"))
    page.query(query)
    expected = ranking(service, query.read_bytes())
    assert page.names() == [name for name, _ in expected[:5]]
    np.testing.assert_allclose(page.scores(), [s for _, s in expected[:5]], atol=2e-4)
    page.wait.until(
        lambda d: d.execute_script(
            "return Array.from(document.querySelectorAll('#results img'))"
            ".every(i => i.complete && i.naturalWidth > 0)"
        )
    )
    sizes = browser.execute_script(
        "return Array.from(document.querySelectorAll('#results img'))"
        ".map(i => [i.naturalWidth, i.naturalHeight])"
    )
    assert len(sizes) == 5 and all(max(size) == MAX_SIDE for size in sizes)
    assert page.find("#results .result dd").text in {kind for _, _, kind in STORED}
    shot = tmp_path / f"search_page_{'server' if service['server_store'] else 'lite'}.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    if os.environ.get("ACCELKIT_DOCS_SCREENSHOT") and not service["server_store"]:
        shutil.copyfile(shot, ROOT / "docs" / "images_search_page.png")

    # a filter the grammar refuses: the service's message, beside the filter box
    page.clear_status()
    page.find("#filter").send_keys('metadata["kind"] ==')
    page.find("#search").click()
    page.wait.until(lambda d: page.text("#filter-error"))
    assert "is not one expression" in page.text("#filter-error")
    assert page.text("#error") == "" and page.text("#status") == ""
    assert page.names() == [name for name, _ in expected[:5]]  # the last results stay
    page.find("#filter").send_keys(Keys.CONTROL, "a")
    page.find("#filter").send_keys('metadata["kind"] in ["thing", "food", "plant"]')
    page.find("#search").click()
    page.search_done()
    assert page.text("#filter-error") == ""
    filtered = ranking(service, query.read_bytes(), {"thing", "food", "plant"})
    assert page.names() == [name for name, _ in filtered]
    page.find("#filter").send_keys(Keys.CONTROL, "a", Keys.DELETE)

    # a click on a result searches by it: the stored vector, so it comes first with score 1
    second = page.names()[1]
    page.clear_status()
    browser.find_elements(page.By.CSS_SELECTOR, "#results .result")[1].click()
    page.search_done()
    assert page.names()[0] == second and page.scores()[0] == pytest.approx(1.0, abs=1e-4)
    reference = ranking(service, service["data"][second])
    assert page.names() == [name for name, _ in reference[:5]]

    # markup in a file name and a metadata value is shown as text and runs nothing
    camera = tmp_path / "camera.png"
    camera.write_bytes(service["data"][XSS_NAME])
    page.query(camera)
    assert page.names()[0] == XSS_NAME
    first = page.find("#results .result")
    assert first.find_element(page.By.CSS_SELECTOR, "dd").text == XSS_VALUE
    assert browser.execute_script("return typeof window.pwned") == "undefined"
    assert browser.execute_script("return document.querySelectorAll('script').length") == 1
    assert (
        browser.execute_script("return document.querySelectorAll('#results b, img[src=x]').length")
        == 0
    )

    # images dropped on the page are inserted (a real drop event, with a File in its DataTransfer)
    brick = encode(service_photo(service, "brick"), "PNG")
    browser.execute_script(
        """
        const bytes = Uint8Array.from(atob(arguments[0]), c => c.charCodeAt(0));
        const transfer = new DataTransfer();
        transfer.items.add(new File([bytes], "brick.png", {type: "image/png"}));
        document.getElementById("insert-drop").dispatchEvent(
          new DragEvent("drop", {dataTransfer: transfer, bubbles: true, cancelable: true}));
        """,
        base64.b64encode(brick).decode(),
    )
    page.wait.until(lambda d: page.text("#insert-status").startswith("added"))
    assert page.text("#insert-status") == "added 1"
    brick_path = tmp_path / "brick.png"
    brick_path.write_bytes(brick)
    page.query(brick_path)
    assert page.names()[0] == "brick.png" and page.scores()[0] == pytest.approx(1.0, abs=1e-4)

    # the page kept to its own policy: nothing refused, and no request failed but the two
    # answers above (401 before the key, 422 for the filter)
    log = [entry["message"] for entry in browser.get_log("browser")]
    assert not [m for m in log if "Content Security Policy" in m or "Refused" in m], log
    failed = [re.sub(r"^http://[^/]+", "", m.split(" - ")[0]) for m in log if "Failed" in m]
    assert failed == ["/collections", "/search"], log


def service_photo(service, name: str) -> np.ndarray:
    from accelkit.images.testing import photos

    return photos()[name]
