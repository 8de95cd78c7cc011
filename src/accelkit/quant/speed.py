"""How fast a quantized model runs against its FP32 model: eager and compiled, at the evaluation's
timing batch and at one text (the latency case).

Each setting is timed in rounds interleaved with the FP32 model (A, B, A, B…: `runtime.timing`),
so load from other processes hits both alike; the ratio is taken within each round and its median
reported beside each model's median time. Compiled means `torch.compile(fullgraph=True,
dynamic=False)` (inductor): one compile per shape, the FP32 model compiled once per run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

ROUNDS = 10  # interleaved rounds per compiled measurement (the warm-up call apart)
EAGER_ROUNDS = 5  # eager: a few (it is reported, but the recommendation reads compiled times)


@dataclass
class Phases:
    """Seconds spent per phase of a run (calibration, fidelity passes, compiles, timing…). A
    phase opened inside another (the kernels' measurement during calibration) counts as its own,
    not as the outer one's: the phases add up to the run."""

    seconds: dict[str, float] = field(default_factory=dict)
    _open: list[str] = field(default_factory=list, repr=False)
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False)  # tests: a fake

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = self.clock()
        self._open.append(name)
        try:
            yield
        finally:
            self._open.pop()
            took = self.clock() - start
            self.seconds[name] = self.seconds.get(name, 0.0) + took
            if self._open:
                outer = self._open[-1]
                self.seconds[outer] = self.seconds.get(outer, 0.0) - took

    def rounded(self) -> dict[str, float]:
        return {name: round(s, 2) for name, s in self.seconds.items()}


def compile_model(model: nn.Module) -> nn.Module:
    return torch.compile(model, fullgraph=True, dynamic=False)


def one_text(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The latency case: the batch's first text alone."""
    return {key: value[:1] for key, value in batch.items()}


@dataclass
class Speed:
    """One model's times (ms, medians) and its time over FP32's in the same rounds (medians of the
    per-round ratios: below 1 is faster)."""

    eager_ms: float | None = None
    eager_ratio: float | None = None
    compiled_ms: float | None = None
    compiled_ratio: float | None = None
    compiled_one_ms: float | None = None
    compiled_one_ratio: float | None = None
    compile_s: float | None = None


class SpeedBench:
    """Times models against one FP32 model on one batch (and its first text)."""

    def __init__(self, fp32: nn.Module, batch: dict, phases: Phases, rounds: int = ROUNDS):
        self.fp32, self.batch, self.one = fp32, batch, one_text(batch)
        self.phases, self.rounds = phases, rounds
        self._fp32_compiled: nn.Module | None = None
        self._fp32_compile_s: float | None = None

    def _pair(self, ours, theirs, batch, rounds: int) -> tuple[float, float]:
        from accelkit.runtime.timing import interleaved

        if ours is theirs:  # FP32 against itself: timed once, the ratio is 1 by definition
            timed = interleaved({"ours": lambda: ours(**batch)}, rounds)
            return 1e3 * statistics.median(timed.wall["ours"]), 1.0
        timed = interleaved(
            {"fp32": lambda: theirs(**batch), "ours": lambda: ours(**batch)}, rounds
        )
        ratios = [a / b for a, b in zip(timed.wall["ours"], timed.wall["fp32"], strict=True)]
        return 1e3 * statistics.median(timed.wall["ours"]), statistics.median(ratios)

    def _compile(self, model: nn.Module) -> tuple[nn.Module, float]:
        start = time.perf_counter()
        compiled = compile_model(model)
        compiled(**self.batch)  # the compiles: one graph per shape
        compiled(**self.one)
        return compiled, time.perf_counter() - start

    @torch.no_grad()
    def measure(self, model: nn.Module, compiled: bool) -> Speed:
        speed = Speed()
        with self.phases("eager timing"):
            speed.eager_ms, speed.eager_ratio = self._pair(
                model, self.fp32, self.batch, min(EAGER_ROUNDS, self.rounds)
            )
        if not compiled:
            return speed
        # every model compiles the same forward code: let dynamo keep one entry per model
        with torch._dynamo.config.patch(recompile_limit=64):
            with self.phases("compile"):
                if self._fp32_compiled is None:
                    self._fp32_compiled, self._fp32_compile_s = self._compile(self.fp32)
                if model is self.fp32:
                    ours, speed.compile_s = self._fp32_compiled, self._fp32_compile_s
                else:
                    ours, speed.compile_s = self._compile(model)
            with self.phases("compiled timing"):
                base = self._fp32_compiled
                speed.compiled_ms, speed.compiled_ratio = self._pair(
                    ours, base, self.batch, self.rounds
                )
                speed.compiled_one_ms, speed.compiled_one_ratio = self._pair(
                    ours, base, self.one, self.rounds
                )
        return speed
