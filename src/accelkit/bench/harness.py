"""What an experiment records: results, correctness checks, threads and the run's circumstances.

Timing itself (warm-up, synchronized repeats, robust statistics) is `accelkit.runtime.timing`, shared
with the other capabilities; it is re-exported here for the experiments.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from accelkit.errors import AccelkitError
from accelkit.runtime.devices import torch_device  # noqa: F401  (re-exported: one device chooser)
from accelkit.runtime.environment import record

# timing lives in runtime (one helper for every capability); re-exported for the experiments
from accelkit.runtime.timing import (  # noqa: F401
    DEFAULT_PROTOCOL,
    Protocol,
    Timing,
    iqr,
    measure,
    measure_unsynchronized,
    synchronize,
)

SCHEMA = "accelkit.bench/1"


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


def environment(dtype: str | None = None) -> dict:
    """The run's record (`accelkit.runtime.environment`) plus dtype and threads."""
    env = record(
        ("numpy", "scipy", "jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "keras", "torch")
    )
    env["dtype"] = dtype
    env["threads"] = thread_info()
    return env


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


# ---------------------------------------------------------------------------------------------
# child processes (XLA's device count and Keras's backend are fixed when they are imported)


def run_child_process(argv: list[str], env: dict, what: str, timeout: float | None = 600) -> dict:
    """Run `argv`, whose last argument is the JSON file it writes; return that file's content.

    A failing child raises one line: its exit code and the last meaningful line of its stderr.
    """

    out = Path(argv[-1])
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not out.exists():
        lines = [
            ln
            for ln in done.stderr.strip().splitlines()
            if ln.strip() and not ln.startswith(("For simplicity", "---"))
        ]
        tail = (lines or ["no output"])[-1]
        raise AccelkitError(f"{what} failed (exit {done.returncode}): {tail}")
    return json.loads(out.read_text())
