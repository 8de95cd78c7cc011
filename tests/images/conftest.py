"""Shared fixtures: real photos, one ONNX export per test session (in a tmp dir, not the user cache)."""

import os
import signal

import numpy as np
import pytest

from tests.support.require import absent


@pytest.fixture(scope="session")
def photos() -> dict[str, np.ndarray]:
    from accelkit.images.testing import photos

    return photos()


@pytest.fixture(scope="session")
def onnx_path(tmp_path_factory):
    from accelkit.images.embedding.models import cached_onnx_path

    return cached_onnx_path(tmp_path_factory.mktemp("onnx-cache"))


@pytest.fixture(scope="session")
def torch_model():
    from accelkit.images.embedding.models import load_torch_model

    return load_torch_model()


@pytest.fixture(scope="session")
def pipeline(onnx_path):
    from accelkit.images import ImageEmbeddingPipeline, ServiceConfig

    config = ServiceConfig.from_env(
        env={},
        preprocess={"cache_compiled": False, "batch_size": 8},
        model={"onnx_path": str(onnx_path)},
    )
    with ImageEmbeddingPipeline(config) as p:
        yield p


CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    """Headless Chromium through the system chromedriver (Selenium Manager is never asked to
    download anything), on 127.0.0.1; chromedriver is stopped by its PID at the end."""
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(path)]
    if missing:
        absent(
            "headless Chromium",
            f"no headless Chromium here ({', '.join(missing)} missing); "
            "install Debian's chromium and chromium-driver (.ci/run does, as root)",
        )
    pytest.importorskip("selenium", reason="selenium is in the test extra")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # belt and braces: the driver's path is given below
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # as root in a container
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1000",
        "--no-first-run",
        "--disable-extensions",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(CHROMEDRIVER, log_output=str(tmp_path_factory.mktemp("chromedriver") / "log"))
    driver = webdriver.Chrome(service=service, options=options)
    process = service.process  # chromedriver, by its PID; Chromium is its child
    try:
        yield driver
    finally:
        try:
            driver.quit()  # closes Chromium
        finally:
            service.stop()  # SIGTERM to the PID, then a wait
            if process.poll() is None:  # still running: stop it for good
                process.send_signal(signal.SIGKILL)
                process.wait()
