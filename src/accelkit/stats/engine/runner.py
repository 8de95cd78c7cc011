"""How a pass runs, below every runner: the protocol the application layer (`stats/engine/driver.py`)
drives and both runners implement — the local one (`stats/engine/local_runner.py`: batches on this
machine's devices or the compiled host loop) and the Ray one (`stats/engine/ray_runner.py`: Ray tasks over
groups of files, each running the local runner) — and the device choice they share.

Arrows point down: engine -> cluster -> local_runner -> runner; nothing here imports a runner.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from accelkit.runtime.devices import (
    choose_platform,
    cpu_without_jax,
    devices_for,
    free_memory_bytes,
)
from accelkit.runtime.progress import TimeBudget
from accelkit.stats.core.moments import BLOCK_ROWS
from accelkit.stats.types import Stream


@dataclass
class PassOutcome:
    states: dict  # key -> merged host PassState
    sums: dict  # key -> moments.Sums folded in row order (passes with moments)
    rows: int
    chunks_seen: int
    stopped_early: bool
    seconds: float
    observed: Any = None  # what the pass's observer collected (per-episode statistics)
    blocks: dict | None = None  # key -> (s1, s2) [blocks, D] unfolded, when the runner keeps them


class Runner(Protocol):
    """What the engine asks of a runner: one pass of a kernel over the stream at a time."""

    replays: bool  # exact mode may replay pass 1's decoded chunks (False: tasks re-read files)
    speculates: bool  # pass 1 can keep the values near each quantile (`stats.windows`)
    skip_nonfinite: bool
    batch_sizes: dict[str, int]
    compiled: set

    def run_pass(
        self,
        label: str,
        make_spec: Callable[[str, int, bool], Any],  # a PassSpec, or None: the key sits out
        make_init: Callable[[str, Any, Any], Any],  # (key, PassSpec, Column) -> PassState
        *,
        chunk_limit: int | None = None,
        budget: TimeBudget | None = None,
        observer: Callable[[], Any] | None = None,
        stream: Stream | None = None,
        later_passes: Callable[[bool], int] | None = None,
    ) -> PassOutcome: ...


class HostDevice:
    """The host CPU as the one "device" of a run on the compiled host kernel (`kernel/host.py`):
    what batch sizing and the run summary ask of a device."""

    platform = "cpu"

    def memory_stats(self):
        return None  # free memory: the host's, as for JAX's CPU devices

    def __str__(self) -> str:
        return "host CPU (compiled loop)"


HOST = HostDevice()


def default_batch_size(
    dim: int, devices, override: int | None = None, total_rows: int | None = None
) -> int:
    """Rows per batch: from the device's free memory and the row width; whole moment blocks per device.

    A batch is a multiple of `device count x moments.BLOCK_ROWS` (an override is rounded up to one),
    so every device holds whole blocks and results do not depend on either. About 64 bytes of working memory per value (keys, weights, float64 moments, matches) within a
    quarter of free memory, capped at 2**17 rows per device on CPU (cache-sized batches run fastest
    there) and 2**21 on accelerators.
    """

    n = len(devices)
    if override:
        unit = n * BLOCK_ROWS
        return max(unit, math.ceil(override / unit) * unit)
    free = min(free_memory_bytes(d) for d in devices)
    cap = (1 << 17) if devices[0].platform == "cpu" else (1 << 21)
    rows = int(free * 0.25 / (64 * max(dim, 1)))
    rows = 1 << max(10, min(int(math.log2(max(rows, 1))), int(math.log2(cap))))
    if total_rows:  # a small dataset needs no batch larger than itself (padding costs compute)
        rows = min(rows, 1 << max(10, math.ceil(math.log2(max(1, math.ceil(total_rows / n))))))
    return rows * n


def is_out_of_memory(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return "RESOURCE_EXHAUSTED" in text or "Out of memory" in text or "out of memory" in text


def x64_for(devices):
    """JAX's 64-bit mode for a run on JAX devices (the XLA kernel's int64/float64); nothing, and no
    JAX import, for the host kernel."""
    if devices == [HOST]:
        return contextlib.nullcontext()
    import jax

    return jax.enable_x64(True)


def _host_allowed(host: bool) -> bool:
    """The host kernel may run: the run allows it and numba is installed."""
    import importlib.util

    return host and importlib.util.find_spec("numba") is not None


def host_kernel_chosen(platform: str | None, host: bool) -> bool:
    """Whether `choose_devices` picks the host kernel, where that is known without starting JAX
    (False where only JAX can tell)."""
    return _host_allowed(host) and cpu_without_jax(platform) is not None


def choose_devices(platform: str | None, host: bool) -> list:
    """Where the passes run: `[HOST]` (the compiled host kernel, no JAX start-up) when the run
    is on the CPU and `host` allows it, else the JAX devices of the chosen platform."""
    if host_kernel_chosen(platform, host):
        return [HOST]
    choice = choose_platform(platform)
    if _host_allowed(host) and choice.platform == "cpu":
        return [HOST]
    return devices_for(choice)
