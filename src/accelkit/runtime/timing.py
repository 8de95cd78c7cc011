"""Honest timing, shared by every capability and benchmark: warm-up, synchronized repeats, robust
statistics.

Every timed call ends with a synchronization (`block_until_ready` for JAX, `cuda.synchronize` for
PyTorch on a GPU) *inside* the timer: JAX and CUDA dispatch asynchronously, so an unsynchronized
timer measures how fast work is queued, not how fast it is done. The first call is timed apart
(it pays for tracing and compilation) and never enters the steady-state statistics.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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
    from accelkit.runtime.progress import Steps

    steps = Steps(1 + protocol.warmup + protocol.repeats, f"timing {backend} {name}")
    steps.show("first call")
    start = time.perf_counter()
    out = sync(fn())
    first = time.perf_counter() - start
    for _ in range(protocol.warmup):
        steps.advance("warm-up")
        out = sync(fn())
    times = []
    for _ in range(protocol.repeats):
        steps.advance("repeats")
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


@dataclass
class Rounds:
    """Seconds per round for each named run (wall clock and this process's CPU time, all threads),
    the first call's seconds when there was a warm-up, and each run's last output."""

    wall: dict[str, list[float]]
    cpu: dict[str, list[float]]
    first: dict[str, float]
    outputs: dict[str, Any]

    def medians(self) -> dict[str, float]:
        return {name: statistics.median(times) for name, times in self.wall.items()}

    def ratio(self, ours: str, baseline: str) -> dict:
        """How many times faster `ours` ran than `baseline`, taken within each round (so load that
        changes between rounds cancels): median, min, max and every round's."""
        ratios = [b / a for a, b in zip(self.wall[ours], self.wall[baseline], strict=True)]
        return {
            "median": statistics.median(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "rounds": ratios,
        }


def interleaved(
    runs: dict[str, Callable[[], Any]],
    rounds: int,
    *,
    warmup: bool | set[str] = True,
    sync: Callable[[Any], Any] = synchronize,
    before: Callable[[str, int], None] | None = None,
) -> Rounds:
    """Time several runs of the same work against each other on a noisy machine: an optional
    warm-up call each (timed apart, in `first`), then `rounds` rounds that call every run once,
    synchronized, the starting run rotating each round so no run always goes first and load from
    other processes hits all alike (`warmup` may name the runs that get one). `before(name, round)` is called before each timed call (round
    -1 for the warm-up), e.g. to log progress."""
    names = list(runs)
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    first: dict[str, float] = {}
    outputs: dict[str, Any] = {}

    def call(name: str) -> tuple[float, float]:
        c, w = time.process_time(), time.perf_counter()
        outputs[name] = sync(runs[name]())
        return time.perf_counter() - w, time.process_time() - c

    warm = set(names) if warmup is True else set(warmup or ())
    for name in names:
        if name in warm:
            if before:
                before(name, -1)
            first[name] = call(name)[0]
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            if before:
                before(name, r)
            w, c = call(name)
            wall[name].append(w)
            cpu[name].append(c)
    return Rounds(wall, cpu, first, outputs)
