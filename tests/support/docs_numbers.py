"""The docs' generated numbers from the tests: the docs engine run as the user runs it
(`python -m benchmarks.docs --check`, a subprocess: the tests never import benchmarks), and the
blocks read back from a page on their own (the marker syntax of benchmarks/docs/blocks.py) for the
tests that check a printed figure against the JSON independently of the renderer."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"<!-- generated: ([a-z0-9-]+) -->\n(.*?)\n<!-- end generated: \1 -->", re.S)


def generated(text: str) -> dict[str, str]:
    """Every generated block of a page: name -> body."""
    return dict(BLOCK.findall(text))


def engine_check(*args: str) -> subprocess.CompletedProcess:
    """`python -m benchmarks.docs --check ARGS` in the repository (exit 0: the pages hold what the
    JSON renders)."""
    return subprocess.run(
        [sys.executable, "-m", "benchmarks.docs", "--check", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
