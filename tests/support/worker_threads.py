"""Each xdist worker's share of the CPUs for PyTorch's and BLAS's thread pools.

Those pools follow the CPU count, so with -n 2 on 2 cores each worker ran 2 spinning OpenMP threads
against the other worker's (and against the Milvus server, the Ray cluster and the commands the
tests start): MiniLM's forward took 2.7x the CPU time of one thread under that load. A worker
sets its share in its environment before NumPy or PyTorch loads (the commands it starts inherit
it), and every test starts and ends at it."""

from __future__ import annotations

import os
import sys

VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def share() -> int | None:
    """The CPUs per worker in a parallel run (at least 1), an OMP_NUM_THREADS set for the run
    kept; None outside one."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2:
        return None
    given = os.environ.get("OMP_NUM_THREADS", "")
    return int(given) if given.isdigit() else max(1, len(os.sched_getaffinity(0)) // workers)


def thread_env() -> dict[str, str]:
    """The thread variables this worker sets (none a run set already is changed)."""
    count = share()
    if count is None:
        return {}
    return {name: str(count) for name in VARIABLES if name not in os.environ}


def keep_share() -> None:
    """PyTorch (and BLAS with it) back at the worker's share, where a test changed it (`bench`'s
    fix_threads) or PyTorch loaded before the environment was set."""
    count = share()
    if count is None or "torch" not in sys.modules:
        return
    import torch

    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=count, user_api="blas")
