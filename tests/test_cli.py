"""The root `accelkit` command: version, help without heavy imports, devices."""

import os
import subprocess
import sys

from tests.support.cli import result_of


def test_version_help_and_devices_in_a_fresh_process():
    env = {**os.environ, "XLA_FLAGS": ""}
    version = subprocess.run(
        [sys.executable, "-m", "accelkit", "--version"], capture_output=True, text=True, env=env
    )
    assert version.returncode == 0 and version.stdout.startswith("accelkit ")
    helped = subprocess.run(
        [sys.executable, "-m", "accelkit", "--help"], capture_output=True, text=True, env=env
    )
    assert helped.returncode == 0 and "stats" in helped.stdout and "devices" in helped.stdout
    # --help must not pay for heavy imports
    probe = "import sys; from accelkit import cli; print(sorted(m for m in ('jax', 'torch', 'pyarrow') if m in sys.modules))"
    assert (
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, env=env
        ).stdout.strip()
        == "[]"
    )
    devices = subprocess.run(
        [sys.executable, "-m", "accelkit", "devices", "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    info = result_of(devices.stdout)
    assert info["jax"]["chosen"] == "cpu" and info["jax"]["backends"]["cpu"]
    assert info["torch"]["chosen"] == "cpu" or "error" in info["torch"]
