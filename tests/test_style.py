"""The code base passes its own ruff configuration (pyproject.toml): lint and format."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the ruff of this interpreter (the test extra pins its version: another release formats
# differently, docs' code blocks included), found whether or not the venv is on PATH
RUFF = [sys.executable, "-m", "ruff"]
needs_ruff = pytest.mark.skipif(
    importlib.util.find_spec("ruff") is None, reason="ruff is installed by the test extra"
)


@needs_ruff
def test_ruff_check_passes():
    result = subprocess.run(
        [*RUFF, "check", "src", "tests", "benchmarks"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@needs_ruff
def test_ruff_format_is_applied_everywhere():
    result = subprocess.run(
        [*RUFF, "format", "--check", "."], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
