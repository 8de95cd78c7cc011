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

if TYPE_CHECKING:  # the public names, listed once (runtime/exports.py reads them)
    from accelkit.bench.api import BenchRun as BenchRun
    from accelkit.bench.api import defaults as defaults
    from accelkit.bench.api import run as run
    from accelkit.bench.harness import Check as Check
    from accelkit.bench.harness import Result as Result
    from accelkit.bench.harness import Timing as Timing
    from accelkit.bench.schema import validate as validate
    from accelkit.bench.suite import EXPERIMENTS as EXPERIMENTS

__getattr__, __dir__, __all__ = lazy_exports(__name__)
