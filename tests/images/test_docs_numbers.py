"""The Milvus server figures in docs/images.md and docs/performance.md are the JSON they cite: the
generated blocks equal what benchmarks/service_docs.py renders from
benchmarks/results/service_bench_server.json, and, read back from the text independently, the
targets' figures equal the JSON's values at the printed precision."""

import importlib.util
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "benchmarks" / "results" / "service_bench_server.json"


def generator():
    spec = importlib.util.spec_from_file_location(
        "service_docs", ROOT / "benchmarks" / "service_docs.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_blocks_are_what_the_json_renders():
    gen = generator()
    doc = json.loads(RESULT.read_text(encoding="utf-8"))
    images = (ROOT / "docs" / "images.md").read_text(encoding="utf-8")
    performance = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    found = {m.group("name") for m in gen._BLOCK.finditer(images)}
    assert set(gen.BLOCKS) <= found
    assert "server-targets" in {m.group("name") for m in gen._BLOCK.finditer(performance)}
    for text in (images, performance):
        assert gen.render(text, doc) == text, "run python benchmarks/service_docs.py"


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


def test_resample_speed_block_is_what_the_json_renders():
    """docs/images.md's bicubic-against-bilinear table is benchmarks/resample_bench.py's
    rendering of benchmarks/results/resample_bench.json."""
    spec = importlib.util.spec_from_file_location(
        "resample_bench", ROOT / "benchmarks" / "resample_bench.py"
    )
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    doc = json.loads(gen.RESULT.read_text(encoding="utf-8"))
    text = (ROOT / "docs" / "images.md").read_text(encoding="utf-8")
    assert "resample-speed" in {m.group("name") for m in gen._BLOCK.finditer(text)}
    assert gen.render(text, doc) == text, "run python benchmarks/resample_bench.py --docs"
