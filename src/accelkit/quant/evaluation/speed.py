"""How fast a quantized model runs against its FP32 model: eager and compiled, at the evaluation's
timing batch and at one text (the latency case).

Each setting is timed in rounds interleaved with the FP32 model (A, B, A, B…: `runtime.timing`),
so load from other processes hits both alike. Reported per setting, all from those same rounds:
its median time, FP32's median time (`*_fp32_ms`) and their quotient (`*_ratio`), so the ratio
always agrees with the two times shown beside it (a median of per-round ratios could call a
setting faster while its median time was the larger). FP32 is never timed alone: a window of its
own, under other load than a setting's rounds, gave times 5–6× those inside the rounds and a table
that contradicted its own ratios; FP32's times are the `*_fp32_ms` beside each setting. Compiled means
`torch.compile(fullgraph=True, dynamic=False)` (inductor) of each block of the model's stack of
repeated blocks (`compile_model`: regional compilation — the blocks share one graph, so a model
compiles one block per shape, not the whole model; the rest runs eager), one compile per shape,
the FP32 model compiled once per run.
"""

from __future__ import annotations

import copy
import itertools
import logging
import statistics
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import cast

import torch
from torch import nn

from accelkit.runtime import timing

ROUNDS = 10  # interleaved rounds per compiled measurement at most (the warm-up call apart)
EAGER_ROUNDS = 5  # eager: a few at most (the recommendation reads compiled times where timed)
MIN_ROUNDS = 3  # rounds always run; more only while the ratio is still unsettled
SETTLED = 1.10  # settled: the largest per-round ratio at most 1.10× the smallest


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


def repeated_blocks(model: nn.Module) -> nn.ModuleList | None:
    """The model's stack of repeated blocks (a transformer's layers): the longest `nn.ModuleList`
    of two or more modules of one type; None when it has none."""
    stacks = [
        m
        for m in model.modules()
        if isinstance(m, nn.ModuleList) and len(m) >= 2 and len({type(b) for b in m}) == 1
    ]
    return max(stacks, key=len, default=None)


def compile_model(model: nn.Module) -> nn.Module:
    """`model` compiled for timing, `model` itself left eager. With a stack of repeated blocks,
    a copy of the module tree sharing every tensor with `model` whose blocks are compiled
    (`nn.Module.compile`): the blocks run one code object on tensors of the same shapes, so dynamo
    traces and inductor builds one graph per input shape for all of them — on MiniLM one layer's
    graph instead of six layers' and the embeddings — and every later block reuses it. Without
    such a stack, the whole model."""
    if repeated_blocks(model) is None:
        # a Module compiled is an OptimizedModule (a Module); torch's stub says only a callable
        return cast(nn.Module, torch.compile(model, fullgraph=True, dynamic=False))
    shared = {id(t): t for t in itertools.chain(model.parameters(), model.buffers())}
    view = copy.deepcopy(model, memo=shared)  # the module tree again; the tensors are model's
    blocks = repeated_blocks(view)
    assert blocks is not None  # model's stack, copied
    for block in blocks:
        block.compile(fullgraph=True, dynamic=False)
    return view


def one_text(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The latency case: the batch's first text alone."""
    return {key: value[:1] for key, value in batch.items()}


# what --json's `timing` says of the times and ratios (`api.EvalResult.document`)
TIMING = {
    "ms": "the setting's median time over its rounds interleaved with the FP32 model",
    "fp32_ms": "the FP32 model's median time in those same rounds (*_fp32_ms)",
    "ratio": "ms / fp32_ms: the quotient of the two medians shown, from the same rounds"
    " (below 1 is faster); the FP32 row itself is not timed (its times are each row's fp32_ms)",
}


@dataclass
class Speed:
    """One model's times (ms, medians), FP32's in the same rounds and the quotient of the two
    (below 1 is faster): eager and compiled at the timing batch, compiled at one text."""

    eager_ms: float | None = None
    eager_fp32_ms: float | None = None
    eager_ratio: float | None = None
    compiled_ms: float | None = None
    compiled_fp32_ms: float | None = None
    compiled_ratio: float | None = None
    compiled_one_ms: float | None = None
    compiled_one_fp32_ms: float | None = None
    compiled_one_ratio: float | None = None
    compile_s: float | None = None


def settled(ours: list[float], fp32: list[float]) -> bool:
    """Whether the per-round ratios of two interleaved timings agree to within `SETTLED` (their
    largest at most that many times their smallest): more rounds would not move the ratio of the
    medians much."""
    per_round = [a / b for a, b in zip(ours, fp32, strict=True) if b > 0]
    return len(per_round) >= MIN_ROUNDS and max(per_round) <= SETTLED * min(per_round)


class SpeedBench:
    """Times models against one FP32 model on one batch (and its first text)."""

    def __init__(self, fp32: nn.Module, batch: dict, phases: Phases, rounds: int = ROUNDS):
        self.fp32, self.batch, self.one = fp32, batch, one_text(batch)
        self.phases, self.rounds = phases, rounds
        self._fp32_compiled: nn.Module | None = None
        self._fp32_compile_s: float | None = None
        self.compile_failed: str | None = None  # why torch.compile failed, once it has
        # per batch (the timing batch, one text): the models already called on it here
        self._warm: dict[int, weakref.WeakSet] = {
            id(self.batch): weakref.WeakSet(),
            id(self.one): weakref.WeakSet(),
        }

    def _pair(self, ours, theirs, batch, rounds: int) -> tuple[float, float, float]:
        """(ours ms, FP32 ms, ours / FP32): both medians over the same interleaved rounds —
        `MIN_ROUNDS`, then one more at a time (the starting model alternating) until the
        per-round ratios are `settled` or `rounds` ran: a steady machine spends 3 rounds, a
        noisy one up to `rounds`. A warm-up call (untimed) only for a model's first call on
        `batch` here: FP32 warms up once per run, not once per setting, and a compiled model
        not at all (its compile ran it on both shapes)."""
        runs = {"fp32": lambda: theirs(**batch), "ours": lambda: ours(**batch)}
        warm = self._warm[id(batch)]
        cold = {name for name, m in (("fp32", theirs), ("ours", ours)) if m not in warm}
        warm.update((theirs, ours))
        wall = timing.interleaved(runs, min(MIN_ROUNDS, rounds), warmup=cold).wall
        while len(wall["ours"]) < rounds and not settled(wall["ours"], wall["fp32"]):
            order = list(runs) if len(wall["ours"]) % 2 == 0 else list(reversed(runs))
            more = timing.interleaved({k: runs[k] for k in order}, 1, warmup=False).wall
            for k in runs:
                wall[k] = [*wall[k], *more[k]]
        ms, base = (1e3 * statistics.median(wall[k]) for k in ("ours", "fp32"))
        return ms, base, ms / base

    def _compile(self, model: nn.Module) -> tuple[nn.Module, float]:
        start = time.perf_counter()
        compiled = compile_model(model)
        compiled(**self.batch)  # the compiles: one graph per shape
        compiled(**self.one)
        for warm in self._warm.values():
            warm.add(compiled)
        return compiled, time.perf_counter() - start

    @property
    def fp32_compile_s(self) -> float | None:
        """Seconds FP32's compile took (made with the first compiled setting), None before."""
        return self._fp32_compile_s

    @torch.no_grad()
    def measure(self, model: nn.Module, compiled: bool) -> Speed:
        """`model`'s times against FP32 in the same rounds; FP32 itself: nothing (its times are
        every setting's `*_fp32_ms`)."""
        speed = Speed()
        if model is self.fp32:
            return speed
        with self.phases("eager timing"):
            speed.eager_ms, speed.eager_fp32_ms, speed.eager_ratio = self._pair(
                model, self.fp32, self.batch, min(EAGER_ROUNDS, self.rounds)
            )
        if not compiled or self.compile_failed:
            return speed
        try:
            self._measure_compiled(model, speed)
        except Exception as exc:
            self.compile_failed = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
            logging.getLogger(__name__).warning(
                "quant: torch.compile failed on this model (%s); every figure measured so far is"
                " kept and the rest of the run is timed eager only (--no-compile skips the try)",
                self.compile_failed,
            )
            speed.compiled_ms = speed.compiled_fp32_ms = speed.compiled_ratio = None
            speed.compiled_one_ms = speed.compiled_one_fp32_ms = speed.compiled_one_ratio = None
            speed.compile_s = None
        return speed

    def _measure_compiled(self, model: nn.Module, speed: Speed) -> None:
        # every model compiles the same forward code: let dynamo keep one entry per model
        with torch._dynamo.config.patch(recompile_limit=64):
            with self.phases("compile"):
                if self._fp32_compiled is None:
                    self._fp32_compiled, self._fp32_compile_s = self._compile(self.fp32)
                ours, speed.compile_s = self._compile(model)
            with self.phases("compiled timing"):
                base = self._fp32_compiled
                speed.compiled_ms, speed.compiled_fp32_ms, speed.compiled_ratio = self._pair(
                    ours, base, self.batch, self.rounds
                )
                one = self._pair(ours, base, self.one, self.rounds)
                speed.compiled_one_ms, speed.compiled_one_fp32_ms, speed.compiled_one_ratio = one
