"""The code base passes its own ruff configuration (pyproject.toml): lint and format."""

import importlib.util
import re
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


# "issue" and a number: a reference to a tracker this repository does not have, which tells a
# reader nothing (say what was wrong instead); an upstream project's bug is written owner/repo#N
TRACKER_REFERENCE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)


def test_no_code_names_a_tracker_number():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for folder in ("src", "tests", "benchmarks", "tools")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if TRACKER_REFERENCE.search(line)
    ]
    assert not found, "say what was wrong, not a tracker number:\n" + "\n".join(found)
