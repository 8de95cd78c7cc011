"""The Milvus server figures in docs/images.md and docs/performance.md are the JSON they cite: the
generated blocks equal what the docs engine (`python -m benchmarks.docs`; tables in
benchmarks/docs/service.py) renders from benchmarks/results/service_bench_server.json, and, read
back from the text independently, the targets' figures equal the JSON's values at the printed
precision. The same for the Milvus Lite 2.5-or-3 table (benchmarks/docs/lite.py,
benchmarks/results/lite_engines.json) and every other block of both pages."""

import json
import re
from pathlib import Path

from tests.support.docs_numbers import engine_check, generated

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "benchmarks" / "results" / "service_bench_server.json"
LITE = ROOT / "benchmarks" / "results" / "lite_engines.json"


def test_generated_blocks_are_what_the_json_renders():
    """Every block of both pages (the server's, Milvus Lite's, the resample, search-cut, limits
    and int8 ones) is what its JSON renders."""
    images = (ROOT / "docs" / "images.md").read_text(encoding="utf-8")
    performance = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert {"server-targets", "server-search", "lite-engines", "resample-speed"} <= set(
        generated(images)
    )
    assert {"server-targets", "limits"} <= set(generated(performance))
    done = engine_check("--page", "docs/images.md", "--page", "docs/performance.md")
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_table_has_its_block_on_a_page_even_before_its_first_run():
    """The whole check, as `python -m benchmarks.docs --check` runs it: every page, and every
    table on some page — an empty block (a benchmark not yet run, e.g. the filtered-fields one)
    counts as its place."""
    done = engine_check()
    assert done.returncode == 0, done.stdout + done.stderr


def test_target_figures_read_back_equal_the_json():
    doc = json.loads(RESULT.read_text(encoding="utf-8"))
    text = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    block = text.split("<!-- generated: server-targets -->")[1].split("<!-- end generated")[0]
    search = doc["server"]["clustered"]["indexes"]["HNSW"]["search"]
    p99 = re.search(r"HNSW top-10 p99 \(recall@10\) \| ([\d.]+) ms \(([\d.]+)\)", block)
    assert (float(p99.group(1)), float(p99.group(2))) == (
        round(search["no_filter"]["p99_ms"], 1),
        round(search["no_filter"]["recall_at_10"], 3),
    )
    filtered = re.search(r"filtered top-10 p99 \(recall@10\) \| ([\d.]+) ms", block)
    assert float(filtered.group(1)) == round(search["filter"]["p99_ms"], 1)
    minutes = re.search(r"whole run \| ([\d.]+) min", block)
    assert float(minutes.group(1)) == round(doc["minutes"], 1)
    met = re.findall(r"\*\*(met|missed)\*\*", block)
    assert met[1] == ("met" if search["no_filter"]["p99_ms"] < 20 else "missed")


def test_lite_engine_figures_read_back_equal_the_json():
    """Every measured row of the table, read back from the page: insert rate, p50/p99 and their
    query counts, recall@10 and the filtered ones equal the JSON's at the printed precision."""
    doc = json.loads(LITE.read_text(encoding="utf-8"))
    text = (ROOT / "docs" / "images.md").read_text(encoding="utf-8")
    block = text.split("<!-- generated: lite-engines -->")[1].split("<!-- end generated")[0]
    names = {"Lite 2.5": "lite2", "Lite 3": "lite3"}
    row = re.compile(
        r"^\| ([\d,]+) \| (Lite 2\.5|Lite 3) \| (FLAT|HNSW) \| ([\d,]+) \| [\d.]+ \|"
        r" ([\d.,]+) / ([\d.,]+) \((\d+)\) \| [\d.,]+ \| ([\d.]+) \|"
        r" ([\d.,]+) / ([\d.,]+) \((\d+)\) \| ([\d.]+) \|",
        re.M,
    )

    def near(printed: str, value: float) -> bool:  # within the printed precision
        places = len(printed.split(".")[1]) if "." in printed else 0
        return abs(float(printed.replace(",", "")) - value) <= 0.5 * 10**-places + 1e-9

    seen = 0
    for m in row.finditer(block):
        size, engine, index, rate, p50, p99, n, rec, fp50, fp99, fn, frec = m.groups()
        r = doc["sizes"][size.replace(",", "")][names[engine]]["indexes"][index]
        single, filtered = r["search"]["single"], r["search"]["filtered"]
        assert near(rate, r["insert"]["rows_per_s"])
        assert near(p50, single["p50_ms"]) and near(p99, single["p99_ms"])
        assert int(n) == single["queries"] and near(rec, single["recall_at_10"])
        assert near(fp50, filtered["p50_ms"]) and near(fp99, filtered["p99_ms"])
        assert int(fn) == filtered["queries"] and near(frec, filtered["recall_at_10"])
        seen += 1
    measured = sum(
        "search" in r
        for engines in doc["sizes"].values()
        for result in engines.values()
        for r in result.get("indexes", {}).values()
    )
    assert seen == measured > 0
    refused = "Lite 2.5 HNSW: accelkit refuses it"
    assert (refused in block) == any(
        "refused" in e.get("lite2", {}).get("indexes", {}).get("HNSW", {})
        for e in doc["sizes"].values()
    )
