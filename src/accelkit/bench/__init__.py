"""`accelkit bench`: NumPy vs JAX vs PyTorch on the same workloads, timed honestly (warm-up,
synchronized repeats, compilation apart) and checked against each other.

The public API, loaded on first use (importing this package stays cheap):

    import accelkit.bench as bench
    done = bench.run("xla", "numpy,jax", matrix_size=64, repeats=2)   # or "all", quick=True
    done.passed, done.results[0].timings
    done.write_json("xla.json")
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.runtime.exports import lazy_exports

_EXPORTS = {
    "run": "accelkit.bench.api",
    "defaults": "accelkit.bench.api",
    "BenchRun": "accelkit.bench.api",
    "Result": "accelkit.bench.harness",
    "Check": "accelkit.bench.harness",
    "Timing": "accelkit.bench.harness",
    "EXPERIMENTS": "accelkit.bench.suite",
    "validate": "accelkit.bench.schema",
}

if TYPE_CHECKING:  # the same names, for help(), dir(), pyright and editors
    from accelkit.bench.api import BenchRun, defaults, run
    from accelkit.bench.harness import Check, Result, Timing
    from accelkit.bench.schema import validate
    from accelkit.bench.suite import EXPERIMENTS

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
