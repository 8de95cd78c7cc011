"""One place decides the device.

Precedence: explicit argument > config file > environment (`JAX_PLATFORMS`, EmbeddingTrident's
`JAX_PLATFORM` / `JAX_USE_GPU`, `ACCELKIT_PLATFORM`) > auto (GPU if JAX can start one, else CPU).
A requested platform that JAX cannot start falls back to CPU with one warning line: JAX raises
`RuntimeError` for a missing backend, and we never export a platform JAX cannot start, so the rest
of the process keeps a working JAX.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

from accelkit.errors import ConfigError

log = logging.getLogger(__name__)

PLATFORM_ALIASES = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu", "rocm": "gpu", "tpu": "tpu"}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
_warned: set[str] = set()


@dataclass(frozen=True)
class PlatformRequest:
    """What was asked for and by whom; `platform` is None when nothing asked (auto)."""

    platform: str | None
    source: str


@dataclass(frozen=True)
class PlatformChoice:
    """The platform that will be used and a sentence a person can read about why."""

    platform: str
    requested: str | None
    source: str
    fell_back: bool
    reason: str


def normalize_platform(name: str, source: str) -> str:
    key = name.strip().lower()
    if key not in PLATFORM_ALIASES:
        raise ConfigError(f"{source}: unknown platform {name!r}; use one of cpu, gpu (cuda), tpu")
    return PLATFORM_ALIASES[key]


def platform_request(
    explicit: str | None = None,
    config_value: str | None = None,
    env: Mapping[str, str] | None = None,
) -> PlatformRequest:
    """Resolve who asks for which platform, by the precedence in the module docstring."""
    env = os.environ if env is None else env
    if explicit:
        return PlatformRequest(normalize_platform(explicit, "argument"), "argument")
    if config_value:
        return PlatformRequest(normalize_platform(config_value, "config file"), "config file")
    for var in ("ACCELKIT_PLATFORM", "JAX_PLATFORM"):
        if env.get(var, "").strip():
            return PlatformRequest(normalize_platform(env[var], var), f"environment {var}")
    use_gpu = env.get("JAX_USE_GPU", "").strip().lower()
    if use_gpu in _TRUE:
        return PlatformRequest("gpu", "environment JAX_USE_GPU")
    if use_gpu and use_gpu not in _FALSE:
        raise ConfigError(
            f"JAX_USE_GPU={env['JAX_USE_GPU']!r} is not a boolean; use 1/0 or true/false"
        )
    if use_gpu in _FALSE and "JAX_USE_GPU" in env and env["JAX_USE_GPU"].strip():
        return PlatformRequest("cpu", "environment JAX_USE_GPU")
    platforms = env.get("JAX_PLATFORMS", "").strip()
    if platforms:
        first = platforms.split(",")[0]
        return PlatformRequest(
            normalize_platform(first, "JAX_PLATFORMS"), "environment JAX_PLATFORMS"
        )
    return PlatformRequest(None, "auto")


# top-level modules of JAX's accelerator plugins (CUDA, ROCm, TPU, Metal, old-style namespace ones)
ACCELERATOR_PLUGINS = ("jax_cuda", "jax_rocm", "libtpu", "jax_plugins", "jax_metal")


def accelerator_plugin_installed() -> bool:
    """Whether any JAX accelerator plugin is installed, found without importing JAX (a module
    listing of sys.path, a few ms): with none, JAX can only ever run on the CPU."""
    import pkgutil

    return any(m.name.startswith(ACCELERATOR_PLUGINS) for m in pkgutil.iter_modules())


def cpu_without_jax(
    explicit: str | None = None,
    config_value: str | None = None,
    env: Mapping[str, str] | None = None,
) -> PlatformChoice | None:
    """The CPU, when that choice needs no JAX start-up: the CPU was asked for, or nothing was asked
    and no accelerator plugin is installed. None: ask `choose_platform` (which starts JAX)."""
    request = platform_request(explicit, config_value, env)
    if request.platform == "cpu":
        return PlatformChoice("cpu", "cpu", request.source, False, f"{request.source} asks for cpu")
    if request.platform is None and not accelerator_plugin_installed():
        return PlatformChoice(
            "cpu", None, "auto", False, "auto: no JAX accelerator plugin is installed, using CPU"
        )
    return None


def _available_devices(platform: str):
    import jax

    try:
        return jax.devices(platform)
    except RuntimeError:
        return []


def choose_platform(
    explicit: str | None = None,
    config_value: str | None = None,
    env: Mapping[str, str] | None = None,
) -> PlatformChoice:
    """Pick the JAX platform to run on; a missing requested platform falls back to CPU."""
    request = platform_request(explicit, config_value, env)
    if request.platform is None:
        if _available_devices("gpu"):
            return PlatformChoice("gpu", None, "auto", False, "auto: JAX can start a GPU")
        return PlatformChoice("cpu", None, "auto", False, "auto: JAX sees no GPU, using CPU")
    if request.platform == "cpu" or _available_devices(request.platform):
        return PlatformChoice(
            request.platform,
            request.platform,
            request.source,
            False,
            f"{request.source} asks for {request.platform}",
        )
    message = (
        f"{request.source} asks for {request.platform} but JAX cannot start it; falling back to CPU"
    )
    if message not in _warned:  # one warning line per process, not one per call
        _warned.add(message)
        log.warning(message)
    return PlatformChoice("cpu", request.platform, request.source, True, message)


def devices_for(choice: PlatformChoice, max_devices: int | None = None):
    """The JAX devices of the chosen platform (all of them unless `max_devices` limits it)."""
    import jax

    found = jax.devices(choice.platform)
    return found[:max_devices] if max_devices else found


def free_memory_bytes(device) -> int:
    """Free memory of a JAX device; for CPU devices the host's available memory."""
    import psutil

    stats = None
    try:
        stats = device.memory_stats()
    except Exception:  # CPU devices and some plugins do not report memory
        stats = None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return int(psutil.virtual_memory().available)


def peak_device_memory_bytes(devices) -> int | None:
    """Peak bytes in use summed over devices, where the backend reports it (GPU), else None."""
    total = 0
    for device in devices:
        try:
            stats = device.memory_stats()
        except Exception:
            return None
        if not stats or "peak_bytes_in_use" not in stats:
            return None
        total += int(stats["peak_bytes_in_use"])
    return total


def peak_rss_bytes() -> int:
    """Peak resident memory of this process.

    Linux's VmHWM first: ru_maxrss survives execve, so a process started by a large parent would
    report the parent's peak.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def describe_devices(explicit: str | None = None) -> dict:
    """Everything `accelkit devices` prints: what JAX and torch see and what would be chosen."""
    info: dict = {"jax": None, "torch": None}
    try:
        import jax

        backends = {}
        for platform in ("cpu", "gpu", "tpu"):
            found = _available_devices(platform)
            backends[platform] = [str(d) for d in found]
        choice = choose_platform(explicit)
        info["jax"] = {
            "version": jax.__version__,
            "backends": backends,
            "chosen": choice.platform,
            "reason": choice.reason,
            "fell_back": choice.fell_back,
        }
    except ImportError:
        info["jax"] = {"error": "jax is not installed: pip install 'accelkit[jax]'"}
    try:
        import torch

        cuda = torch.cuda.is_available()
        info["torch"] = {
            "version": torch.__version__,
            "cuda_available": cuda,
            "cuda_devices": [
                torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())
            ]
            if cuda
            else [],
            "chosen": "cuda" if cuda else "cpu",
        }
    except ImportError:
        info["torch"] = {"error": "torch is not installed: pip install 'accelkit[torch]'"}
    return info


def enable_compilation_cache(path: str | os.PathLike | None = None) -> str | None:
    """Turn on JAX's persistent compilation cache so a second process skips compiling.

    The folder is `path`, else `$ACCELKIT_CACHE_DIR/jax`, else the user cache dir. Unwritable
    folders just leave the cache off: it is a speed-up, never a requirement. Before JAX is imported
    the settings go into the environment, which JAX reads when it starts (a run that never starts
    JAX pays nothing); afterwards into its config.
    """
    import sys
    from pathlib import Path

    import platformdirs

    base = path or os.environ.get("ACCELKIT_CACHE_DIR") or platformdirs.user_cache_dir("accelkit")
    folder = Path(base) / "jax" if path is None else Path(base)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.info("compilation cache disabled: cannot create %s (%s)", folder, exc.strerror)
        return None
    settings = {
        "jax_compilation_cache_dir": str(folder),
        # cache every program: the image preprocessor warms up a few dozen programs of tens of ms
        # each, which add up to seconds at start-up yet each falls under JAX's default 1 s threshold
        "jax_persistent_cache_min_compile_time_secs": 0,
        "jax_persistent_cache_min_entry_size_bytes": 0,
    }
    if "jax" in sys.modules:
        import jax

        for name, value in settings.items():
            jax.config.update(name, value)
    else:
        os.environ.update({name.upper(): str(value) for name, value in settings.items()})
    return str(folder)


def torch_device(requested: str | None = None):
    """The torch device to use: the requested one, else CUDA when present, else CPU (the one torch
    device chooser; `--device` flags pass through it)."""
    import torch

    from accelkit.errors import DeviceError

    if requested in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise DeviceError(
            f"--device {requested}: PyTorch sees no CUDA device; use --device cpu or auto"
        )
    return torch.device(requested)
