"""Honest timing: warm-up, synchronized repeats, robust statistics, recorded circumstances.

Every timed call ends with a synchronization (`block_until_ready` for JAX, `cuda.synchronize` for
PyTorch on a GPU) *inside* the timer: JAX and CUDA dispatch asynchronously, so an unsynchronized
timer measures how fast work is queued, not how fast it is done. The first call is timed apart
(it pays for tracing and compilation) and never enters the steady-state statistics.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SCHEMA = "accelkit.bench/1"


# ---------------------------------------------------------------------------------------------
# synchronization and timing


def synchronize(out: Any) -> Any:
    """Wait until `out` (any pytree of arrays) is computed; a no-op for NumPy values."""
    if "jax" in sys.modules:
        import jax

        if any(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(out)):
            jax.block_until_ready(out)
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    return out


@dataclass(frozen=True)
class Timing:
    """One measured operation: the first call apart, then `times_s` of the synchronized repeats."""

    name: str
    backend: str
    device: str
    first_s: float
    times_s: tuple[float, ...]
    size: int | None = None
    compile_s: float | None = None
    synchronized: bool = True

    @property
    def median_s(self) -> float:
        return statistics.median(self.times_s)

    @property
    def min_s(self) -> float:
        return min(self.times_s)

    @property
    def iqr_s(self) -> float:
        return iqr(self.times_s)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "backend": self.backend,
            "device": self.device,
            "size": self.size,
            "synchronized": self.synchronized,
            "compile_s": self.compile_s,
            "first_s": self.first_s if math.isfinite(self.first_s) else None,
            "median_s": self.median_s,
            "min_s": self.min_s,
            "iqr_s": self.iqr_s,
            "repeats": len(self.times_s),
            "times_s": list(self.times_s),
        }

    @classmethod
    def from_json(cls, data: dict) -> Timing:
        first = float("nan") if data["first_s"] is None else data["first_s"]
        return cls(
            data["name"],
            data["backend"],
            data["device"],
            first,
            tuple(data["times_s"]),
            data["size"],
            data["compile_s"],
            data["synchronized"],
        )


def iqr(values) -> float:
    """Interquartile range (linear interpolation, as numpy's default); 0 for fewer than 2 values."""
    ordered = sorted(values)
    if len(ordered) < 2:
        return 0.0

    def quantile(q: float) -> float:
        pos = q * (len(ordered) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(ordered) - 1)
        return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

    return quantile(0.75) - quantile(0.25)


@dataclass(frozen=True)
class Protocol:
    """How many calls to make: `warmup` untimed after the first, then `repeats` timed."""

    repeats: int = 5
    warmup: int = 1


# the experiments' default: three timed calls after one untimed warm-up (each experiment runs in seconds)
DEFAULT_PROTOCOL = Protocol(3, 1)


def measure(
    name: str,
    backend: str,
    fn: Callable[[], Any],
    protocol: Protocol,
    *,
    device: str = "cpu",
    size: int | None = None,
    compile_s: float | None = None,
    sync: Callable[[Any], Any] = synchronize,
) -> tuple[Timing, Any]:
    """Time `fn()`: first call alone, `warmup` untimed calls, `repeats` timed calls, each synced.

    Returns the timing and the last output, so the caller can check the numbers it timed.
    """
    start = time.perf_counter()
    out = sync(fn())
    first = time.perf_counter() - start
    for _ in range(protocol.warmup):
        out = sync(fn())
    times = []
    for _ in range(protocol.repeats):
        start = time.perf_counter()
        out = sync(fn())
        times.append(time.perf_counter() - start)
    return Timing(name, backend, device, first, tuple(times), size, compile_s), out


def measure_unsynchronized(
    name: str,
    backend: str,
    fn: Callable[[], Any],
    protocol: Protocol,
    *,
    device: str = "cpu",
    size: int | None = None,
) -> Timing:
    """What the capability analysis measured: the clock stops before the work is done.

    The result is drained after the clock stops so one repeat's work does not spill into the next.
    """
    synchronize(fn())
    times = []
    for _ in range(protocol.repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
        synchronize(out)
    return Timing(name, backend, device, float("nan"), tuple(times), size, None, synchronized=False)


# ---------------------------------------------------------------------------------------------
# threads and environment

_blas_limits: list = []  # keeps threadpoolctl's limiter alive for the life of the process


def fix_threads(threads: int | None) -> int:
    """Fix the intra-op thread count of PyTorch and of NumPy's BLAS; return the count used.

    XLA's CPU thread pool is sized when JAX starts and cannot be changed afterwards; its size is
    recorded in the environment instead (it follows the CPU count unless XLA_FLAGS say otherwise).
    """
    count = threads or os.cpu_count() or 1
    try:
        from threadpoolctl import threadpool_limits

        _blas_limits[:] = [threadpool_limits(limits=count, user_api="blas")]
    except ImportError:  # threadpoolctl comes with scikit-learn; without it BLAS keeps its default
        pass
    if "torch" in sys.modules or _torch_installed():
        import torch

        torch.set_num_threads(count)
    return count


def _torch_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def thread_info() -> dict:
    info: dict = {
        "env": {
            k: os.environ[k]
            for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "XLA_FLAGS")
            if k in os.environ
        }
    }
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = sorted(
            {
                f"{p.get('internal_api')}={p.get('num_threads')}"
                for p in threadpool_info()
                if p.get("user_api") == "blas"
            }
        )
    except ImportError:
        info["blas"] = []
    if "torch" in sys.modules:
        import torch

        info["torch_intra_op"] = torch.get_num_threads()
        info["torch_inter_op"] = torch.get_num_interop_threads()
    return info


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def environment(dtype: str | None = None) -> dict:
    """Versions, devices, dtype, CPU count, load average and threads: what a number depends on."""
    import datetime

    env: dict = {
        "time_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()]
        if hasattr(os, "getloadavg")
        else None,
        "dtype": dtype,
        "versions": {
            p: _version(p) for p in ("numpy", "scipy", "jax", "jaxlib", "flax", "optax", "torch")
        },
        "threads": thread_info(),
    }
    if "jax" in sys.modules:
        import jax

        env["jax_devices"] = [f"{d.platform}:{d.id} {d.device_kind}" for d in jax.devices()]
        env["jax_backend"] = jax.default_backend()
    if "torch" in sys.modules:
        import torch

        env["torch_cuda"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return env


def torch_device(requested: str | None = None):
    """The torch device to use: the requested one, else CUDA when present, else CPU."""
    import torch

    from accelkit.errors import DeviceError

    if requested in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise DeviceError(
            f"--device {requested}: PyTorch sees no CUDA device; use --device cpu or auto"
        )
    return torch.device(requested)


# ---------------------------------------------------------------------------------------------
# results


@dataclass(frozen=True)
class Check:
    """A correctness check: |value - expected| <= tolerance (or a plain truth when expected is None)."""

    name: str
    value: float | None
    expected: float | None
    tolerance: float | None
    passed: bool
    detail: str = ""

    def to_json(self) -> dict:
        def num(x):
            return None if x is None or not math.isfinite(x) else float(x)

        return {
            "name": self.name,
            "value": num(self.value),
            "expected": num(self.expected),
            "tolerance": num(self.tolerance),
            "passed": bool(self.passed),
            "detail": self.detail,
        }


def check_close(name: str, value, expected, tolerance: float, detail: str = "") -> Check:
    value, expected = float(value), float(expected)
    ok = math.isfinite(value) and abs(value - expected) <= tolerance
    return Check(name, value, expected, tolerance, ok, detail)


def check_below(name: str, value, limit: float, detail: str = "") -> Check:
    """value <= limit, recorded as |value - 0| <= limit."""
    value = float(value)
    return Check(name, value, 0.0, limit, math.isfinite(value) and abs(value) <= limit, detail)


def check_true(name: str, passed: bool, detail: str = "") -> Check:
    return Check(name, None, None, None, bool(passed), detail)


@dataclass
class Result:
    """Everything one experiment run measured, checked and learned."""

    experiment: str
    params: dict
    timings: list[Timing] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    facts: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    series: list[dict] = field(default_factory=list)  # {label, x, y, xlabel, ylabel}: figures

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def to_json(self) -> dict:
        return {
            "experiment": self.experiment,
            "params": self.params,
            "passed": self.passed,
            "timings": [t.to_json() for t in self.timings],
            "checks": [c.to_json() for c in self.checks],
            "facts": _finite(self.facts),
            "notes": list(self.notes),
            "series": _finite(self.series),
        }

    @classmethod
    def from_json(cls, data: dict) -> Result:
        checks = [
            Check(c["name"], c["value"], c["expected"], c["tolerance"], c["passed"], c["detail"])
            for c in data["checks"]
        ]
        return cls(
            data["experiment"],
            data["params"],
            [Timing.from_json(t) for t in data["timings"]],
            checks,
            data["facts"],
            data["notes"],
            data["series"],
        )


def _finite(value):
    """JSON has no NaN or Infinity: non-finite floats become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def document(results: list[Result], env: dict) -> dict:
    return {
        "schema": SCHEMA,
        "environment": _finite(env),
        "results": [r.to_json() for r in results],
    }


def merge_results(parts: list[Result]) -> Result:
    """Join the runs of one experiment (one per backend and round) into one result.

    Timings of the same operation, backend, device and size pool their repeats; the first call of
    each is the first seen (later processes pay their own compilation, reported in the rounds).
    """
    merged = Result(parts[0].experiment, dict(parts[0].params))
    pooled: dict[tuple, Timing] = {}
    for part in parts:
        for t in part.timings:
            key = (t.name, t.backend, t.device, t.size, t.synchronized)
            if key in pooled:
                old = pooled[key]
                pooled[key] = Timing(
                    old.name,
                    old.backend,
                    old.device,
                    old.first_s,
                    old.times_s + t.times_s,
                    old.size,
                    old.compile_s,
                    old.synchronized,
                )
            else:
                pooled[key] = t
        for c in part.checks:  # one entry per check; a failure in any round wins
            index = next((i for i, old in enumerate(merged.checks) if old.name == c.name), None)
            if index is None:
                merged.checks.append(c)
            elif not c.passed:
                merged.checks[index] = c
        for k, v in part.facts.items():
            merged.facts.setdefault(k, v)
        merged.notes.extend(n for n in part.notes if n not in merged.notes)
        merged.series.extend(part.series)
    merged.timings = list(pooled.values())
    return merged
