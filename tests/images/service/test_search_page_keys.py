"""The search page from the keyboard and from a link, in headless Chromium, against the service
running a two-tower model (so words are a query): `/`, arrows, Enter, Escape; the search in the
address (reload, back/forward, a pasted link); CSV and JSON export; and an address full of
markup that runs nothing and is shown as text."""

import csv
import io
import json
import time
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.support import two_tower
from tests.support.search_page import Page
from tests.support.service import AUTH, KEY, Server

NAMES = ["chelsea", "coffee", "rocket", "astronaut", "moon", "coins", "camera", "china"]
FORMULA = "=1+2"  # a file name a spreadsheet would run as a formula
TEXT = "a photo of a cat at night"


@pytest.fixture(scope="module")
def service(tmp_path_factory, photos):
    base = tmp_path_factory.mktemp("page-keys")
    model, files = two_tower.build(base / "model")
    paths = []
    for name in NAMES:
        path = base / f"{name}.png"
        Image.fromarray(photos[name]).save(path)
        paths.append(path)
    Image.fromarray(photos["motorcycle"]).save(base / f"{FORMULA}.png")
    paths.append(base / f"{FORMULA}.png")
    config = base / "service.yaml"
    config.write_text(
        two_tower.config_yaml(files, str(base / "page.db"))
        + f"server:\n  api_key: {KEY}\n  batch_max_wait_ms: 10\n"
    )
    server = Server(config, base / "server.log").start()
    try:
        stored = httpx.post(
            server.url + "/insert",
            headers=AUTH,
            data={"collection": "pics", "create_collection": "true"},
            files=[("files", (p.name, p.read_bytes(), "image/png")) for p in paths],
            timeout=120,
        ).json()
        assert stored["inserted"] == len(paths), stored
        httpx.post(
            server.url + "/collections/create", headers=AUTH, json={"name": "other"}, timeout=60
        )
        vectors = two_tower.image_vectors(model, paths)
        yield {
            "server": server,
            "model": model,
            "vectors": dict(zip([p.name for p in paths], vectors, strict=True)),
            "ids": dict(zip([p.name for p in paths], stored["ids"], strict=True)),
            "paths": paths,
            "base": base,
        }
    finally:
        server.stop()


def ranked(service, query: np.ndarray, k: int) -> list[str]:
    scores = {name: float(v @ query) for name, v in service["vectors"].items()}
    return sorted(scores, key=scores.get, reverse=True)[:k]


def params(browser) -> dict[str, list[str]]:
    return parse_qs(urlsplit(browser.current_url).query)


def active(browser) -> str:
    return browser.execute_script(
        "const a = document.activeElement;"
        "return a.id || (a.classList.contains('result') ?"
        " 'result:' + Array.from(a.parentNode.children).indexOf(a) : a.tagName)"
    )


def press(browser, *keys) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(browser).send_keys(*keys).perform()


def enter_key(page, browser, url: str) -> None:
    """Open the page in a tab that holds no key yet, and give it the key."""
    browser.get(url)
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    page.wait.until(lambda d: page.find("#key-form").is_displayed())
    page.find("#api-key").send_keys(KEY)
    page.find("#key-form button").click()
    page.wait.until(
        lambda d: "collection" in page.text("#status") or "results" in page.text("#status")
    )


def test_the_page_from_the_keyboard_and_from_links(service, browser, tmp_path):
    from selenium.webdriver.common.keys import Keys

    server = service["server"]
    page = Page(browser, server.url)
    enter_key(page, browser, server.url + "/")
    from selenium.webdriver.support.ui import Select

    Select(page.find("#collection")).select_by_value("pics")

    # "/" focuses the words; Enter searches; the grid is the model's own ranking
    browser.execute_script("document.activeElement.blur()")  # nothing being typed in
    press(browser, "/")
    assert active(browser) == "text"
    page.clear_status()
    press(browser, TEXT, Keys.ENTER)
    page.search_done()
    want = ranked(service, two_tower.text_vector(service["model"], TEXT), 12)
    assert page.names() == want
    assert params(browser) == {"q": [TEXT], "k": ["12"], "c": ["pics"]}
    text_url = browser.current_url

    # arrows move through the grid (a row is as many items as share the first one's line)
    press(browser, Keys.ARROW_DOWN)  # from the words into the grid
    assert active(browser) == "result:0"
    press(browser, Keys.ARROW_RIGHT)
    assert active(browser) == "result:1"
    columns = browser.execute_script(
        "const items = Array.from(document.querySelectorAll('#results .result'));"
        "return items.filter(i => i.offsetTop === items[0].offsetTop).length"
    )
    assert 1 < columns < len(service["paths"])
    press(browser, Keys.ARROW_DOWN)
    assert active(browser) == f"result:{1 + columns}"
    press(browser, Keys.ARROW_UP, Keys.ARROW_LEFT)
    assert active(browser) == "result:0"
    press(browser, Keys.END)
    assert active(browser) == f"result:{len(service['paths']) - 1}"
    press(browser, Keys.HOME, Keys.ARROW_RIGHT)

    # Enter: more like this (the stored vector, so it comes first with score 1)
    second = page.names()[1]
    page.clear_status()
    press(browser, Keys.ENTER)
    page.search_done()
    assert page.names()[0] == second and page.scores()[0] == pytest.approx(1.0, abs=1e-4)
    assert page.names() == ranked(service, service["vectors"][second], 12)
    assert params(browser) == {"id": [service["ids"][second]], "k": ["12"], "c": ["pics"]}
    id_url = browser.current_url

    # back, forward and reload run the search in the address again
    page.clear_status()
    browser.back()
    page.search_done()
    assert browser.current_url == text_url and page.names() == want
    assert page.find("#text").get_attribute("value") == TEXT
    page.clear_status()
    browser.forward()
    page.search_done()
    assert browser.current_url == id_url and page.names()[0] == second
    page.clear_status()
    browser.refresh()
    page.search_done()
    assert page.names()[0] == second and browser.current_url == id_url

    # a pasted link: words, a filter and a top k
    link = (
        server.url
        + "/?"
        + urlencode(
            {
                "q": "coffee cup",
                "filter": 'metadata["source"] != "coffee.png"',
                "k": "20",
                "c": "pics",
            }
        )
    )
    page.clear_status()
    browser.get(link)
    page.search_done()
    expected = [n for n in ranked(service, two_tower.text_vector(service["model"], "coffee cup"), 12) if n != "coffee.png"]  # fmt: skip
    assert page.names() == expected and len(expected) == len(service["paths"]) - 1
    assert page.text("#topk-value") == "20"
    assert page.find("#filter").get_attribute("value") == 'metadata["source"] != "coffee.png"'
    assert browser.current_url == link  # the link is the search: nothing added, nothing moved

    # export the grid as CSV and JSON
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    browser.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
    )
    page.find("#export-csv").click()
    page.find("#export-json").click()
    deadline = time.monotonic() + 30
    while len(list(downloads.glob("*.csv")) + list(downloads.glob("*.json"))) < 2:
        assert time.monotonic() < deadline, list(downloads.iterdir())
        time.sleep(0.1)
    time.sleep(0.5)  # let Chromium finish writing
    rows = list(csv.DictReader(io.StringIO((downloads / "accelkit-search-pics.csv").read_text())))
    # a name a spreadsheet would run as a formula stays text there: ' before it
    shown = [("'" + n) if n.startswith("=") else n for n in page.names()]
    assert [r["source"] for r in rows] == shown and f"'{FORMULA}.png" in shown
    assert [r["rank"] for r in rows] == [str(i) for i in range(1, len(rows) + 1)]
    assert [float(r["score"]) for r in rows] == pytest.approx(page.scores(), abs=1e-4)
    exported = json.loads((downloads / "accelkit-search-pics.json").read_text())
    assert exported["collection"] == "pics" and exported["topk"] == 20
    assert exported["query"] == {"text": "coffee cup"}
    assert [r["source"] for r in exported["results"]] == page.names()
    assert exported["results"][0]["id"] == service["ids"][page.names()[0]]

    # Escape clears the search (and the address keeps only the collection and top k)
    page.find("#results .result").click()
    page.search_done()
    press(browser, Keys.ESCAPE)
    page.wait.until(lambda d: not page.names())
    assert params(browser) == {"k": ["20"], "c": ["pics"]} and active(browser) == "text"
    assert page.find("#text").get_attribute("value") == ""

    # an uploaded image cannot travel in a link: the page says so; the address keeps the rest
    assert not page.find("#link-note").is_displayed()
    page.query(service["paths"][2])
    assert page.names()[0] == service["paths"][2].name
    assert page.find("#link-note").is_displayed() and "cannot travel in a link" in page.text(
        "#link-note"
    )
    assert "q" not in params(browser) and "id" not in params(browser)

    log = [entry["message"] for entry in browser.get_log("browser")]
    assert not [m for m in log if "Content Security Policy" in m or "Refused" in m], log


MARKUP = {
    "q": "<img src=x onerror=window.pwned=1>",
    "filter": '"><svg onload=window.pwned=2>',
    "k": "<b>7</b>",
    "c": "<script>window.pwned=3</script>",
}


def test_the_address_cannot_inject_markup_or_script(service, browser):
    server = service["server"]
    page = Page(browser, server.url)
    enter_key(page, browser, server.url + "/")  # the key, kept in this tab
    page.clear_status()
    browser.get(server.url + "/?" + urlencode(MARKUP))
    page.wait.until(
        lambda d: page.text("#status") or page.text("#error") or page.text("#filter-error")
    )
    assert browser.execute_script("return typeof window.pwned") == "undefined"
    assert browser.execute_script("return document.querySelectorAll('script').length") == 1
    assert (
        browser.execute_script("return document.querySelectorAll('svg, img[src=x], b').length") == 0
    )
    assert page.find("#text").get_attribute("value") == MARKUP["q"]  # shown as the text it is
    assert page.find("#filter").get_attribute("value") == MARKUP["filter"]
    assert page.text("#topk-value") == "12"  # not a number: the default
    assert page.find("#collection").get_attribute("value") in {"pics", "other"}
    for id_ in ("<script>window.pwned=4</script>", "javascript:alert(1)"):
        page.clear_status()
        browser.get(server.url + "/?" + urlencode({"id": id_, "c": "pics"}))
        page.wait.until(lambda d: page.text("#error") or page.text("#status"))
        assert browser.execute_script("return typeof window.pwned") == "undefined"
        assert page.text("#query-name") == id_  # text, not markup
        assert page.text("#error")  # the service refused the id; nothing ran
    log = [entry["message"] for entry in browser.get_log("browser")]
    assert not [m for m in log if "Content Security Policy" in m or "Refused" in m], log


def test_a_long_text_in_the_address_is_cut_between_characters(service, browser):
    """A link whose words run past the limit is cut to 1,000 characters as the service counts
    them: never inside an emoji (half of one is refused by the service), and the search runs."""
    server = service["server"]
    page = Page(browser, server.url)
    enter_key(page, browser, server.url + "/")
    page.clear_status()
    words = "a" + "\U0001f600" * 1200  # past the limit; cut in UTF-16 units, it split an emoji
    browser.get(server.url + "/?" + urlencode({"q": words, "c": "pics"}))
    page.wait.until(lambda d: page.text("#status") or page.text("#error"))
    page.wait.until(lambda d: "results" in page.text("#status") or page.text("#error"))
    assert page.text("#error") == "" and "results" in page.text("#status")
    assert page.find("#text").get_attribute("value") == words[:1000]
    page.clear_status()  # a filter of 2,126 characters (4,226 UTF-16 units): whole, and run
    emoji = 'metadata["source"] == "ab' + "\U0001f600" * 2100 + '"'
    browser.get(server.url + "/?" + urlencode({"q": "cat", "filter": emoji, "c": "pics"}))
    page.wait.until(lambda d: "results" in page.text("#status") or page.text("#error"))
    assert page.text("#error") == "" and page.text("#filter-error") == ""
    assert page.text("#status").startswith("0 results")
    assert page.find("#filter").get_attribute("value") == emoji


# -- answers that arrive late, and Escape in a box ------------------------------------------------

# Holds the answer to the page's next POST /search: the request goes out at once and the service
# answers it, but the page gets the answer only when the test calls window.__held.release().
# held.done turns true when the page has read the body; what the page does with it then runs in
# the same chain of microtasks, so once the test sees held.done (from a later script), the page
# has rendered it or dropped it. No sleep: the order is forced, and the test waits on the DOM.
HOLD_NEXT_SEARCH = """
if (!window.__realFetch) {
  window.__realFetch = window.fetch.bind(window);
  window.fetch = (resource, init) => {
    const answer = window.__realFetch(resource, init);
    if (!(window.__holdNext && String(resource).endsWith("search"))) return answer;
    window.__holdNext = false;
    const held = { done: false, status: null };
    window.__held = held;
    return new Promise((resolve, reject) => {
      held.release = () =>
        answer.then(
          (response) => {
            held.status = response.status;
            const json = response.json.bind(response);
            response.json = () => json().then((value) => { held.done = true; return value; });
            resolve(response);
          },
          (error) => { held.done = true; reject(error); }
        );
    });
  };
}
window.__held = null;
window.__holdNext = true;
"""


def hold_next_search(browser) -> None:
    browser.execute_script(HOLD_NEXT_SEARCH)


def wait_held(page) -> None:
    """Until the held search has been sent."""
    page.wait.until(lambda d: d.execute_script("return window.__held !== null"))


def release_held(page) -> int:
    """Hands the held answer to the page and waits until the page has read it; its status."""
    page.driver.execute_script("window.__held.release()")
    page.wait.until(lambda d: d.execute_script("return window.__held.done"))
    return page.driver.execute_script("return window.__held.status")


def type_into(element, text: str, *keys) -> None:
    from selenium.webdriver.common.keys import Keys

    element.send_keys(Keys.CONTROL, "a")
    element.send_keys(Keys.DELETE)
    if text or keys:
        element.send_keys(text, *keys)


def words_page(service, browser) -> Page:
    """The page with the key, on the collection "pics", no search yet."""
    server = service["server"]
    page = Page(browser, server.url)
    enter_key(page, browser, server.url + "/?c=pics")
    assert page.find("#collection").get_attribute("value") == "pics" and not page.names()
    return page


def words_search(page, text: str) -> None:
    from selenium.webdriver.common.keys import Keys

    page.clear_status()
    type_into(page.find("#text"), text, Keys.ENTER)
    page.search_done()


FIRST, SECOND, THIRD = "a cup of coffee", "a red bicycle at night", "astronaut on the moon"


def rankings(service) -> dict[str, list[str]]:
    """The model's own top 12 for each of the three texts; they differ, so a grid shows which."""
    want = {t: ranked(service, two_tower.text_vector(service["model"], t), 12) for t in (FIRST, SECOND, THIRD)}  # fmt: skip
    assert len({tuple(v) for v in want.values()}) == 3, want
    return want


def test_typing_quickly_shows_the_latest_search_only(service, browser):
    """Enter, then other words and Enter before the first answer came: the first answer, when it
    lands last, is dropped; the grid, the words and the address all hold the second search."""
    from selenium.webdriver.common.keys import Keys

    want = rankings(service)
    page = words_page(service, browser)
    hold_next_search(browser)
    type_into(page.find("#text"), FIRST, Keys.ENTER)
    wait_held(page)
    words_search(page, SECOND)
    assert page.names() == want[SECOND]
    assert release_held(page) == 200  # the first search's answer, results and all, lands now
    assert page.names() == want[SECOND]
    assert params(browser) == {"q": [SECOND], "k": ["12"], "c": ["pics"]}
    assert page.find("#text").get_attribute("value") == SECOND
    assert "results" in page.text("#status") and page.text("#error") == ""


def test_back_and_forward_quickly_shows_the_address_search(service, browser):
    """Back, then forward before back's search answered: the grid is forward's search, the one
    the address names."""
    want = rankings(service)
    page = words_page(service, browser)
    words_search(page, SECOND)
    words_search(page, THIRD)
    third_url = browser.current_url
    hold_next_search(browser)
    browser.back()  # runs SECOND again: held
    wait_held(page)
    page.clear_status()
    browser.forward()  # runs THIRD
    page.search_done()
    assert page.names() == want[THIRD]
    assert release_held(page) == 200
    assert browser.current_url == third_url and params(browser)["q"] == [THIRD]
    assert page.names() == want[THIRD]
    assert page.find("#text").get_attribute("value") == THIRD


def test_the_error_of_an_earlier_search_is_ignored(service, browser):
    """A search with a filter the grammar refuses, then (before its answer) the filter mended
    and another search: the refusal, when it lands last, shows nothing; the grid stays."""
    from selenium.webdriver.common.keys import Keys

    want = rankings(service)
    page = words_page(service, browser)
    page.find("#filter").send_keys('metadata["source"] ==')
    hold_next_search(browser)
    type_into(page.find("#text"), FIRST, Keys.ENTER)
    wait_held(page)
    type_into(page.find("#filter"), "")
    words_search(page, SECOND)
    assert page.names() == want[SECOND]
    assert release_held(page) == 422  # the refused filter's answer
    assert page.text("#filter-error") == "" and page.text("#error") == ""
    assert "results" in page.text("#status")
    assert page.names() == want[SECOND]
    assert params(browser) == {"q": [SECOND], "k": ["12"], "c": ["pics"]}


def test_the_address_is_the_search_sent_not_the_boxes_changed_since(service, browser):
    """Top k and the filter changed while a search is on its way (no new search): the address
    written with its answer is the search that was sent, like the grid."""
    from selenium.webdriver.common.keys import Keys

    want = rankings(service)
    page = words_page(service, browser)
    hold_next_search(browser)
    type_into(page.find("#text"), FIRST, Keys.ENTER)
    wait_held(page)
    page.find("#topk").send_keys(Keys.HOME)  # 1
    page.find("#filter").send_keys('metadata["source"] == "coffee.png"')
    assert page.text("#topk-value") == "1"
    page.clear_status()
    assert release_held(page) == 200
    page.search_done()
    assert page.names() == want[FIRST]  # 12 of them, unfiltered: the search sent
    assert params(browser) == {"q": [FIRST], "k": ["12"], "c": ["pics"]}


def test_escape_in_the_key_box_clears_the_key_only(service, browser):
    from selenium.webdriver.common.keys import Keys

    want = rankings(service)
    page = words_page(service, browser)
    words_search(page, FIRST)
    url = browser.current_url
    # the key is forgotten: the next search is refused and the page asks for it again
    browser.execute_script("sessionStorage.clear()")
    page.find("#search").click()
    page.wait.until(lambda d: page.find("#key-form").is_displayed() and page.text("#error"))
    key_box = page.find("#api-key")
    key_box.send_keys("not the key")
    key_box.send_keys(Keys.ESCAPE)
    assert page.names() == want[FIRST] and browser.current_url == url
    assert page.find("#text").get_attribute("value") == FIRST
    assert key_box.get_attribute("value") == "" and active(browser) == "api-key"
    assert page.find("#key-form").is_displayed()
    # the right key then runs the search in the address again
    page.clear_status()
    key_box.send_keys(KEY)
    page.find("#key-form button").click()
    page.search_done()
    assert page.names() == want[FIRST] and browser.current_url == url


def test_escape_in_the_filter_box_clears_the_filter_only(service, browser):
    from selenium.webdriver.common.keys import Keys

    want = rankings(service)
    page = words_page(service, browser)
    page.find("#filter").send_keys('metadata["source"] != "coffee.png"')
    words_search(page, FIRST)
    shown = [n for n in want[FIRST] if n != "coffee.png"]
    assert page.names() == shown
    url = browser.current_url
    assert params(browser)["filter"] == ['metadata["source"] != "coffee.png"']
    # a filter refused beside the box, then Escape in the box: the box and its message go
    filter_box = page.find("#filter")
    type_into(filter_box, 'metadata["source"] ==', Keys.ENTER)
    page.wait.until(lambda d: page.text("#filter-error"))
    filter_box.send_keys(Keys.ESCAPE)
    assert page.names() == shown and browser.current_url == url
    assert page.find("#text").get_attribute("value") == FIRST
    assert filter_box.get_attribute("value") == "" and page.text("#filter-error") == ""
    assert active(browser) == "filter"
    # Escape in the words box clears the search, as before
    page.find("#text").send_keys(Keys.ESCAPE)
    page.wait.until(lambda d: not page.names())
    assert page.find("#text").get_attribute("value") == ""
    assert params(browser) == {"k": ["12"], "c": ["pics"]} and active(browser) == "text"


# -- min score, the score strip, negatives and folding -------------------------------------------


def test_min_score_on_the_page_is_kept_in_the_address(service, browser):
    """The min-score box cuts the grid, the strip draws every score with the cut, the address
    keeps it (a reload searches the same), and a cut above every score says so in words."""
    query = two_tower.text_vector(service["model"], FIRST)
    scores = sorted((float(v @ query) for v in service["vectors"].values()), reverse=True)
    cut_at = round((scores[2] + scores[3]) / 2, 6)
    page = words_page(service, browser)
    type_into(page.find("#min-score"), str(cut_at))
    words_search(page, FIRST)
    want = rankings(service)[FIRST]
    assert page.names() == want[:3]
    assert params(browser)["min"] == [str(cut_at)]
    bars = browser.execute_script(
        "return ['kept', 'dropped', 'cut'].map("
        "c => document.querySelectorAll('#score-strip .' + c).length)"
    )
    assert bars == [3, len(scores) - 3, 1]
    assert "3 kept, 6 below" in page.text("#score-caption")
    page.clear_status()
    browser.refresh()
    page.search_done()
    assert page.find("#min-score").get_attribute("value") == str(cut_at)
    assert page.names() == want[:3]
    above = round(scores[0] + 0.01, 3)
    type_into(page.find("#min-score"), str(above))
    words_search(page, FIRST)
    assert page.names() == [] and params(browser)["min"] == [str(above)]
    assert page.text("#cut-message").startswith(f"no photo scores above {above:g}")
    # an address with a min score that is not one runs without it
    page.clear_status()
    browser.get(service["server"].url + "/?" + urlencode({"q": FIRST, "c": "pics", "min": "NaN"}))
    page.search_done()
    assert page.find("#min-score").get_attribute("value") == "" and page.names() == want[:9]
    # "less like this" on the best result: the words pushed away from what sets it apart from
    # the centre μ of their candidates (all 9 here), q' = q - 2w·(q·d)d/|d|², d = n - μ, w = 1/2
    # (numpy over the model's own vectors): it is first no more, and the address keeps it
    first = want[0]
    page.clear_status()
    page.find("#results .result .less").click()
    page.search_done()
    unit = {k: v / np.linalg.norm(v) for k, v in service["vectors"].items()}
    away = unit[first] - np.mean(list(unit.values()), axis=0)
    q = query / np.linalg.norm(query)
    steered = q - (away @ q) * away / (away @ away)
    assert page.names() == ranked(service, steered, 9) != want[:9]
    assert page.names()[0] != first
    assert params(browser)["not"] == [service["ids"][first]]
    assert "pushed away from 1 result" in page.text("#negatives")
    page.clear_status()
    browser.refresh()
    page.search_done()
    assert page.names() == ranked(service, steered, 9)


def test_words_of_only_empty_quotes_are_refused_on_the_page(service, browser):
    """'""' is no words: the service's 422 naming the field, shown under the form."""
    from selenium.webdriver.common.keys import Keys

    page = words_page(service, browser)
    words_search(page, FIRST)
    type_into(page.find("#text"), '""', Keys.ENTER)
    page.wait.until(lambda d: page.text("#error"))
    assert page.text("#error").startswith("text: only empty quotes"), page.text("#error")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"min_score": float("nan")}, "min_score"),
        ({"min_score": 1.5}, "min_score"),
        ({"min_score": "0.3"}, "min_score"),
        ({"fold_duplicates": 0}, "fold_duplicates"),
        ({"negative_weight": 0}, "negative_weight"),
        ({"negative_texts": ["dog"] * 17}, "negative_texts"),
        ({"auto_cut": "yes"}, "auto_cut"),
        ({"text": "-cat -dog"}, "text"),
        ({"text": 'cat "dog'}, "text"),
        ({"text": '""'}, "text"),  # only empty quotes: refused as negative_texts [""] is
        ({"text": " \t "}, "text"),
        ({"negative_texts": [""]}, "negative_texts"),
    ],
)
def test_bad_cut_and_steering_fields_are_4xx_naming_the_field(service, body, field):
    import json

    request = {"text": "a cat", "collection": "pics", **body}
    answer = httpx.post(
        service["server"].url + "/search",
        headers={**AUTH, "content-type": "application/json"},
        content=json.dumps(request),  # NaN as JavaScript writes it
        timeout=60,
    )
    assert 400 <= answer.status_code < 500, answer.text
    assert answer.json()["error"]["message"].startswith(field), answer.json()


@pytest.mark.parametrize("value", ["abc", "nan", "inf", "-2"])
def test_a_bad_min_score_in_a_form_is_422(service, value):
    answer = httpx.post(
        service["server"].url + "/search",
        headers=AUTH,
        data={"collection": "pics", "min_score": value},
        files={"file": ("q.png", service["paths"][0].read_bytes(), "image/png")},
        timeout=60,
    )
    assert answer.status_code == 422 and answer.json()["error"]["message"].startswith("min_score")


def test_through_the_service_equals_brute_force(service):
    """`--server`'s RemoteIndex: words with a filter, a min score, a negative term and folding,
    against numpy over the model's own vectors (PyTorch towers, so scores within 2e-3)."""
    from accelkit.images.index.base import Steering, TextQuery
    from accelkit.images.index.remote import RemoteIndex

    names = list(service["vectors"])
    vectors = np.stack([service["vectors"][n] for n in names]).astype(np.float64)
    p, n = (two_tower.text_vector(service["model"], t) for t in ("cat", "moon"))
    steered = (vectors @ p - 0.5 * (vectors @ n)) / np.linalg.norm(p - 0.5 * n)
    keep = [i for i, name in enumerate(names) if name != "coffee.png"]
    order = sorted(keep, key=lambda i: -steered[i])
    cut_at = float((steered[order[3]] + steered[order[4]]) / 2)
    with RemoteIndex(service["server"].url, KEY) as remote:
        hits = remote.search(
            TextQuery("cat -moon"),
            6,
            'metadata["source"] != "coffee.png"',
            "pics",
            steering=Steering.checked(min_score=cut_at),
        )
        folded = remote.search(
            TextQuery("cat"), 3, None, "pics", steering=Steering.checked(fold=0.5)
        )
    assert [h.metadata["source"] for h in hits] == [names[i] for i in order[:4]]
    np.testing.assert_allclose([h.score for h in hits], steered[order[:4]], atol=2e-3)
    assert hits.cut.kept == 4 and hits.cut.dropped == 2 and hits.cut.min_score == cut_at
    assert len(folded) <= 3 and sum(1 + len(h.similar) for h in folded) >= len(folded)
