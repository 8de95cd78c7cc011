"""The one record of a run's circumstances: what a measured number depends on (machine, load,
versions, devices). Benchmarks and `accelkit bench` add their own fields to it."""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import subprocess
import sys
from pathlib import Path


def package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def source() -> dict:
    """Which accelkit was measured: where it was imported from, a hash of its sources, and, when
    that is a git checkout's `src/`, the commit and whether `src/` has uncommitted changes (another
    tree, e.g. `git archive <commit> src` on PYTHONPATH, is labelled by $ACCELKIT_BENCH_COMMIT)."""
    import accelkit

    package = Path(accelkit.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    checkout = package.parent.parent
    commit = dirty = None
    if package.parent.name == "src" and (checkout / ".git").exists():
        try:
            git = ["git", "-C", str(checkout)]
            commit = subprocess.run(
                [*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
            status = [*git, "status", "--porcelain", "src"]
            dirty = bool(
                subprocess.run(status, capture_output=True, text=True, timeout=10).stdout.strip()
            )
        except (OSError, subprocess.SubprocessError):
            pass
    return {
        "path": str(package),
        "commit": commit or os.environ.get("ACCELKIT_BENCH_COMMIT"),
        "src_dirty": dirty,
        "sha256": digest.hexdigest(),
    }


def record(packages: tuple[str, ...] = ("numpy", "jax", "jaxlib", "torch")) -> dict:
    """Time, Python, platform, CPU (model, count, affinity), memory, load average, the versions of
    `packages` (and accelkit), and the JAX devices / CUDA device where those libraries are loaded."""
    from accelkit import __version__

    env: dict = {
        "time_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_bytes": memory_bytes(),
        "load_average": [round(x, 2) for x in os.getloadavg()]
        if hasattr(os, "getloadavg")
        else None,
        "accelkit": __version__,
        "accelkit_source": source(),
        "versions": {p: package_version(p) for p in packages},
    }
    if "jax" in sys.modules:
        import jax

        env["jax_devices"] = [f"{d.platform}:{d.id} {d.device_kind}" for d in jax.devices()]
        env["jax_backend"] = jax.default_backend()
    if "torch" in sys.modules:
        import torch

        env["torch_cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return env
