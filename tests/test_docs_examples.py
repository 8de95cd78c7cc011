"""Each capability's library API is documented with an example that runs: the ```python block under
`## Python API` in docs/<capability>.md, executed as-is in a fresh interpreter from an empty
working directory (it makes its own data; nothing is downloaded)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CAPABILITIES = ("stats", "images", "quant", "bench")


def api_example(page: Path) -> str | None:
    """The first ```python block of the page's `## Python API` section, or None."""
    section = re.search(r"^## Python API\n(.*?)(?=^## |\Z)", page.read_text(), re.M | re.S)
    if section is None:
        return None
    block = re.search(r"^```python\n(.*?)^```", section.group(1), re.M | re.S)
    return block.group(1) if block else None


def test_the_example_finder_reads_the_section_only(tmp_path):
    page = tmp_path / "x.md"
    page.write_text(
        "# X\n```python\nwrong()\n```\n## Python API\ntext\n```python\nright()\n```\n"
        "## Next\n```python\nlater()\n```\n"
    )
    assert api_example(page) == "right()\n"
    page.write_text("# X\n```python\nwrong()\n```\n")
    assert api_example(page) is None


@pytest.mark.parametrize("name", CAPABILITIES)
def test_the_documented_python_api_runs(name, tmp_path):
    page = ROOT / "docs" / f"{name}.md"
    code = api_example(page)
    assert code, f"{page.relative_to(ROOT)} has no ```python block under '## Python API'"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, f"docs/{name}.md's example failed:\n{run.stdout}\n{run.stderr}"
