"""Device choice precedence and fallback; config layering and unknown keys."""

import logging

import pytest

from accelkit.errors import ConfigError
from accelkit.runtime.config import Settings, load_settings
from accelkit.runtime.devices import choose_platform, platform_request


@pytest.mark.parametrize(
    ("explicit", "config", "env", "expected", "source"),
    [
        ("cpu", "gpu", {"JAX_PLATFORM": "gpu"}, "cpu", "argument"),
        (None, "gpu", {"JAX_PLATFORM": "cpu"}, "gpu", "config file"),
        (None, None, {"JAX_PLATFORM": "cuda"}, "gpu", "environment JAX_PLATFORM"),
        (
            None,
            None,
            {"ACCELKIT_PLATFORM": "cpu", "JAX_PLATFORM": "gpu"},
            "cpu",
            "environment ACCELKIT_PLATFORM",
        ),
        (None, None, {"JAX_USE_GPU": "true"}, "gpu", "environment JAX_USE_GPU"),
        (
            None,
            None,
            {"JAX_USE_GPU": "0", "JAX_PLATFORMS": "gpu"},
            "cpu",
            "environment JAX_USE_GPU",
        ),
        (None, None, {"JAX_PLATFORMS": "cuda,cpu"}, "gpu", "environment JAX_PLATFORMS"),
        (None, None, {}, None, "auto"),
    ],
)
def test_platform_precedence(explicit, config, env, expected, source):
    request = platform_request(explicit, config, env)
    assert (request.platform, request.source) == (expected, source)


def test_bad_platform_names_are_config_errors():
    with pytest.raises(ConfigError, match="unknown platform 'metal'"):
        platform_request("metal", env={})
    with pytest.raises(ConfigError, match="JAX_USE_GPU='maybe'"):
        platform_request(env={"JAX_USE_GPU": "maybe"})


def test_missing_gpu_falls_back_to_cpu_with_one_warning(caplog):
    with caplog.at_level(logging.WARNING):
        first = choose_platform("gpu", env={})
        second = choose_platform("gpu", env={})
    assert first.platform == second.platform == "cpu" and first.fell_back
    assert sum("falling back to CPU" in r.message for r in caplog.records) <= 1


class Job(Settings):
    name: str = "default"
    size: int = 1
    ratio: float = 0.5


def test_settings_layering(tmp_path):
    file = tmp_path / "c.yaml"
    file.write_text("a:\n  size: 3\n  ratio: 0.25\nb:\n  size: 9\n")
    env = {"ACCELKIT_JOB_SIZE": "5", "ACCELKIT_JOB_NAME": "from-env"}
    job = load_settings(
        Job, yaml_path=file, section="a", env_prefix="ACCELKIT_JOB_", env=env, ratio=0.75
    )
    assert (job.name, job.size, job.ratio) == ("from-env", 3, 0.75)


def test_unknown_keys_are_named(tmp_path):
    file = tmp_path / "c.yaml"
    file.write_text("a:\n  sise: 3\n")
    with pytest.raises(ConfigError, match=r"\[a\]: unknown key 'sise'"):
        load_settings(Job, yaml_path=file, section="a")
    with pytest.raises(ConfigError, match="no entry named 'zzz'; entries: a"):
        load_settings(Job, yaml_path=file, section="zzz")
    with pytest.raises(ConfigError, match="size"):
        load_settings(Job, size="not a number")
