"""OpenMP/BLAS threads for an xdist worker (tests/conftest.py sets them before numpy or torch
loads; the commands a test starts inherit them).

Two workers on two cores with two OpenMP threads each left each torch operation waiting for a
thread the other worker had descheduled, spinning meanwhile: the MiniLM quantization test took
25 s alone and 247 s in a quiet full run (338 s in CI), and the weight-clip search 14.4 s beside
one busy core against 1.7 s alone (2.2 s there with one thread). docs/testing.md has the runs.
Nothing here imports numpy or torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

NAMES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def worker_threads(environ: Mapping[str, str]) -> dict[str, str]:
    """The thread settings an xdist worker should add: each its share of the cores (at least
    one), where `environ` does not set them already; nothing outside xdist or with one worker."""
    workers = int(environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers <= 1:
        return {}
    share = str(max(1, (os.cpu_count() or 1) // workers))
    return {name: share for name in NAMES if name not in environ}
