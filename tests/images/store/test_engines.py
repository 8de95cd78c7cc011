"""The images tests on the other Milvus Lite generation.

Milvus Lite 2.x and 3.x are one module (`milvus_lite`), so an environment holds one of them;
this run's `accelkit[images]` has 2.x (the default: docs/images.md, "Milvus Lite 2.5 or 3").
Here the images tests that open a Milvus Lite store run again on 3.x, in a virtual environment
made once in `.venv-lite3/` beside the checkout: milvus-lite 3 (the `images-lite3` extra's range,
read from pyproject.toml) and faiss-cpu installed into it without dependencies, everything else
this run's own packages (a `.pth` file adds this environment's site folders after its own, so
its `milvus_lite` is 3.x and all else is shared). The Milvus server's and the Ray cluster's tests
are this run's alone (tests/conftest.py, `ACCELKIT_TEST_LITE_PASS`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from accelkit.images.store.lite import lite_generation
from tests.support.lite3_env import lite3_python
from tests.support.require import not_applicable

ROOT = Path(__file__).resolve().parents[3]
# the images tests that open a Milvus Lite store (preprocessing, the models, the filters' grammar
# and the docs' numbers do not, and run once)
PATHS = [
    "tests/images/store",
    "tests/images/index",
    "tests/images/service",
    "tests/images/cli",
    "tests/images/test_api.py",
    "tests/images/test_faults.py",
    "tests/images/test_filter_properties.py",
    "tests/images/test_filter_engines.py",
    "tests/images/test_ignored_settings.py",
    "tests/images/test_interrupts.py",
    "tests/images/test_outage.py",
]
# the modules there that test what lies above the store, the same on any engine: the service's
# parts on their own, images from URLs, and the page driven from the keyboard
SAME_ON_ANY_ENGINE = [
    "tests/images/service/test_service_units.py",
    "tests/images/service/test_service_urls.py",
    "tests/images/service/test_search_page_keys.py",
]


# one process at a time makes `.venv-lite3/` (tests/images/store/test_another_process.py too)
@pytest.mark.xdist_group("lite3-venv")
def test_the_images_tests_pass_on_milvus_lite_3():
    if lite_generation() == 3:
        not_applicable("this run is on Milvus Lite 3 already")
    python = lite3_python()
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "from accelkit.images.store.lite import lite_generation as g; print(g())",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    assert probe.stdout.strip() == "3", probe.stderr[-2000:]
    run = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:warnings", *PATHS]
        + [f"--ignore={path}" for path in SAME_ON_ANY_ENGINE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
            "ACCELKIT_TEST_LITE_PASS": "1",
        },
    )
    failures = run.stdout.split("= FAILURES =", 1)[-1] if "= FAILURES =" in run.stdout else ""
    assert run.returncode == 0, failures[:12000] + run.stdout[-3000:] + run.stderr[-2000:]
    summary = run.stdout.strip().splitlines()[-1]
    passed = int(summary.split(" passed")[0].split()[-1])
    assert passed >= 150, summary  # the store's, the service's and the page's tests, not a few
