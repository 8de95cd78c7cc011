"""docs/quant.md's benchmark numbers are the JSON they cite: the generated blocks equal what
the docs engine (`python -m benchmarks.docs`, tables in benchmarks/docs/quant.py) renders from
benchmarks/results/*.json, and, read back independently
from the text, the numbers equal the JSON's values at the printed precision."""

import json
import re
from pathlib import Path

from tests.support.docs_numbers import engine_check, generated

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "quant.md").read_text(encoding="utf-8")
BENCH = json.loads((ROOT / "benchmarks" / "results" / "quant_bench.json").read_text())


def test_generated_blocks_are_what_the_json_renders():
    assert {"bench-groups", "bench-per-channel", "bench-torchao"} <= set(generated(DOC))
    done = engine_check("--page", "docs/quant.md")
    assert done.returncode == 0, done.stdout + done.stderr


def test_torchao_times_read_back_equal_the_json():
    block = generated(DOC)["bench-torchao"]
    ours, theirs = map(float, re.search(r"took (\d+) ms and torchao's (\d+) ms", block).groups())
    c = BENCH["torchao_crosscheck"]
    assert (ours, theirs) == (round(c["eager_ms_ours"]), round(c["eager_ms_torchao"]))


def test_method_tables_read_back_equal_the_json():
    blocks = generated(DOC)
    for name, rows in (
        ("bench-groups", BENCH["rows"]),
        ("bench-per-channel", BENCH["rows_per_channel"]),
    ):
        by = {(r["method"], r["bits"]): r for r in rows}
        seen = 0
        for line in blocks[name].splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            method = {"RTN": "rtn", "SmoothQuant": "smoothquant", "DuQuant": "duquant"}.get(
                cells[0]
            )
            if method is None:
                continue
            seen += 1
            a8, a4 = by[(method, "w4a8")], by[(method, "w4a4")]
            assert float(cells[1]) == round(a8["mean_cosine"], 4)
            assert float(cells[2]) == round(a8["top1_agreement"], 3)
            assert float(cells[3]) == round(a4["mean_cosine"], 4)
            assert float(cells[4]) == round(a4["top1_agreement"], 3)
            assert float(cells[5].rstrip("×")) == round(
                a8["quant_layers_mb"] / a8["fp32_layers_mb"], 3
            )
        assert seen == len({m for m, _ in by if m != "fp32"})


def test_matrix_table_reads_back_equal_the_json():
    matrix = json.loads((ROOT / "benchmarks" / "results" / "quant_matrix.json").read_text())
    block = generated(DOC)["matrix"]
    minilm = next(m for m in matrix["models"] if m["model"] == "minilm")
    row = next(
        r for r in minilm["rows"]
        if (r["method"], r["permutation"], r["weights"], r.get("block"), r["bits"])
        == ("duquant", False, "progressive-64", 128, "w4a8")
    )  # fmt: skip
    line = next(
        x
        for x in block.splitlines()
        if x.startswith("| DuQuant, perm off, block 128, progressive-64")
    )
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert float(cells[1]) == round(row["top1_agreement"], 3)
    assert float(cells[2]) == round(row["mean_cosine"], 4)
    assert float(cells[3].rstrip("×")) == round(row["eager_ratio"], 2)
    if row.get("compiled_ratio") is not None:  # both shapes, compiled
        assert float(cells[4].rstrip("×")) == round(row["compiled_ratio"], 2)
        assert float(cells[5].rstrip("×")) == round(row["compiled_one_ratio"], 2)
