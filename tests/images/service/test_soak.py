"""The busy-hour soak (benchmarks/reliability/soak.py, run as a user runs it), shortened for the
suite: 8 clients for 20 s against a real `accelkit images serve` on Milvus Lite, mixing inserts, image/text/filtered searches,
deletes, gets and collection admin. No 5xx, no transport error, every acknowledged insert found
once with its metadata and every acknowledged delete gone, no file descriptor leaked. (RSS is
judged in the benchmark's 10-minute run, not in 20 s that are mostly warm-up.)"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_a_short_busy_spell_loses_nothing_and_answers_no_5xx(tmp_path):
    output = tmp_path / "soak.json"
    ran = subprocess.run(
        [sys.executable, "-m", "benchmarks.reliability.soak", "--minutes", "0.34",
         "--clients", "8", "--warmup-s", "8", "--seed", "7", "--output", str(output)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert output.exists(), ran.stdout[-3000:] + ran.stderr[-3000:]
    result = json.loads(output.read_text())
    assert result["responses_5xx"] == 0 and result["transport_errors"] == [], result["routes"]
    assert result["durability"]["ok"], result["durability"]
    assert result["durability"]["acknowledged_inserts"] > 0
    assert result["durability"]["acknowledged_deletes"] > 0
    assert result["verdict"]["no_fd_leak"], result["memory"]
    assert {
        "POST /insert",
        "POST /search (text)",
        "POST /search (filtered)",
        "DELETE /items",
    } <= set(result["routes"])
