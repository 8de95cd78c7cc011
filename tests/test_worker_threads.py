"""Each xdist worker runs PyTorch and BLAS on its share of the CPUs, and so do the commands it
starts (tests/support/worker_threads.py): two workers on 2 cores each spinning 2 OpenMP threads
made MiniLM's quantization take 6x the CPU time of one thread per worker."""

import os
import subprocess
import sys

import pytest

from tests.support import worker_threads
from tests.support.require import not_applicable


@pytest.fixture
def two_workers(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    for name in worker_threads.VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_share_is_the_cpus_per_worker(two_workers):
    two_workers.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3, 4})
    assert worker_threads.share() == 2
    assert worker_threads.thread_env() == dict.fromkeys(worker_threads.VARIABLES, "2")
    two_workers.setattr(os, "sched_getaffinity", lambda _pid: {0})
    assert worker_threads.share() == 1  # never 0
    two_workers.setenv("OMP_NUM_THREADS", "3")  # set for the run: kept, and the share
    assert worker_threads.share() == 3
    assert "OMP_NUM_THREADS" not in worker_threads.thread_env()
    two_workers.setenv("PYTEST_XDIST_WORKER_COUNT", "1")
    assert worker_threads.share() is None and worker_threads.thread_env() == {}
    two_workers.delenv("PYTEST_XDIST_WORKER_COUNT")
    assert worker_threads.share() is None


def test_a_test_that_changed_pytorchs_threads_leaves_them_at_the_share(two_workers):
    torch = pytest.importorskip("torch")
    two_workers.setenv("OMP_NUM_THREADS", "1")
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        worker_threads.keep_share()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_this_worker_and_its_commands_run_at_its_share():
    share = worker_threads.share()
    if share is None:
        not_applicable("not a parallel run (pytest -n 2 sets the share)")
    import torch

    assert torch.get_num_threads() == share
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('OMP_NUM_THREADS'))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.stdout.strip() == str(share)
