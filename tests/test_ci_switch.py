"""CI promises every real component (a browser, a Milvus server, Ray, moto's S3): under the switch
that .ci/run sets, a test that skips because one is missing fails instead; locally it skips."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.require import SWITCH, absent, not_applicable

ROOT = Path(__file__).resolve().parents[1]
PROBE = "ACCELKIT_TEST_SWITCH_PROBE"  # set only in the child run below


def test_probe_missing_component():
    if os.environ.get(PROBE):
        absent("a probe component", "it is never installed")


def test_probe_module_level_kind():
    if os.environ.get(PROBE):
        pytest.importorskip("accelkit_no_such_module_anywhere")


def test_probe_not_applicable():
    if os.environ.get(PROBE):
        not_applicable("this case does not exist on this backend")


def _run_probes(required: bool) -> str:
    env = {**os.environ, PROBE: "1", SWITCH: "1" if required else "0"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-k", "probe",
         str(Path(__file__).relative_to(ROOT))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return result.stdout + result.stderr


def test_a_missing_component_fails_a_required_run_and_skips_elsewhere():
    required = _run_probes(True)
    assert "FAILED tests/test_ci_switch.py::test_probe_missing_component" in required, required
    assert "FAILED tests/test_ci_switch.py::test_probe_module_level_kind" in required, required
    assert "requires every real component" in required
    assert "SKIPPED" in required and "not applicable: this case does not exist" in required
    assert "2 failed" in required and "1 skipped" in required, required

    local = _run_probes(False)
    assert "3 skipped" in local and "failed" not in local, local


def test_ci_run_sets_the_switch():
    script = (ROOT / ".ci" / "run").read_text()
    assert f"export {SWITCH}=1" in script
