"""Test session setup: 8 virtual CPU devices, configured before JAX starts.

Tests that want one device pass `devices=jax.devices()[:1]`; everything else sees all eight, so
multi-device sharding runs in every test that does not opt out.
"""

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture(scope="session")
def one_device():
    import jax

    return jax.devices("cpu")[:1]


@pytest.fixture(scope="session")
def eight_devices():
    import jax

    devices = jax.devices("cpu")
    assert len(devices) == 8, "conftest must configure 8 virtual CPU devices before JAX starts"
    return devices
