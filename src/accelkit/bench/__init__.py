"""`accelkit bench`: NumPy vs JAX vs PyTorch on the same workloads, timed honestly (warm-up,
synchronized repeats, compilation apart) and checked against each other.

The public API, loaded on first use (importing this package stays cheap):

    import accelkit.bench as bench
    done = bench.run("xla", "numpy,jax", matrix_size=64, repeats=2)   # or "all", quick=True
    done.passed, done.results[0].timings
    done.write_json("xla.json")
"""

from __future__ import annotations

from accelkit.runtime.output import lazy_exports

_EXPORTS = {
    **dict.fromkeys(("run", "defaults", "BenchRun"), "accelkit.bench.api"),
    **dict.fromkeys(("Result", "Check", "Timing"), "accelkit.bench.harness"),
    "EXPERIMENTS": "accelkit.bench.suite",
    "validate": "accelkit.bench.schema",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
