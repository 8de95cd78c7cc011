"""The package passes its type checker: pyright in basic mode over src/ ([tool.pyright] in
pyproject.toml), with the packages of this interpreter. Each error is listed on failure."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.require import absent

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_pyright_finds_no_errors():
    if importlib.util.find_spec("pyright") is None:
        absent("pyright", "installed by the test extra")
    # the PyPI wheel carries pyright itself and, with [nodejs], node: nothing is fetched; its
    # check for a newer release (a request) is off
    env = {**os.environ, "PYRIGHT_PYTHON_IGNORE_WARNINGS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pyright", "--outputjson", "--pythonpath", sys.executable],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"pyright did not report (exit {result.returncode}): {result.stderr}")
    errors = [d for d in report["generalDiagnostics"] if d["severity"] == "error"]
    lines = [
        f"{Path(d['file']).relative_to(ROOT)}:{d['range']['start']['line'] + 1}:"
        f" {d['message'].splitlines()[0]} ({d.get('rule', '')})"
        for d in errors
    ]
    assert report["summary"]["filesAnalyzed"] > 0
    assert not errors, f"{len(errors)} type errors:\n" + "\n".join(lines)
