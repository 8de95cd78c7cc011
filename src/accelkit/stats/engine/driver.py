"""The statistics engine: which passes, in what order, over a `Stream` of chunks.

`compute_stats` drives the pass kernels (`kernel/device.py`, `kernel/host.py`) through a runner
(`stats/engine/runner.py`'s protocol; the local one or, with `ray`, the Ray one it chooses here):

* exact mode: pass 1 (moments + top key digit), then one pass per remaining digit (usually one)
  until every target order statistic is known exactly;
* fast mode: one pass (moments + 20-bit histogram of keys of `x - center`).

The runner packs rows into fixed-size batches (one compilation per pass), shards them over every
device of the chosen platform and merges each device's partial state at the end of the pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import closing

import numpy as np

from accelkit.errors import DataError
from accelkit.runtime.devices import peak_device_memory_bytes, peak_rss_bytes
from accelkit.runtime.progress import TimeBudget
from accelkit.stats.core import histograms
from accelkit.stats.core import moments as mom
from accelkit.stats.core import quantiles as qt
from accelkit.stats.core.episodes import EpisodeCollector
from accelkit.stats.engine.local_runner import LocalRunner
from accelkit.stats.engine.ray_runner import RayRunner
from accelkit.stats.engine.replay import Recording
from accelkit.stats.engine.runner import Runner, choose_devices, x64_for
from accelkit.stats.kernel import windows
from accelkit.stats.kernel.state import PassSpec, init
from accelkit.stats.types import (
    BatchStream,
    Column,
    KeyStats,
    RunSummary,
    StatsResult,
    Stream,
)

log = logging.getLogger(__name__)

DEFAULT_QUANTILES = (0.01, 0.99)
EXACT_FIRST_DIGIT = 16
# Tables above this size per device switch the remaining exact digits from one 16-bit pass to two
# 8-bit passes, and cap the fast mode's digit width.
TABLE_BUDGET_BYTES = 256 << 20


# --- the driver -------------------------------------------------------------------------------


def _check_nonfinite(stream: Stream, states: dict, skip: bool) -> None:
    """Fail on NaN/Inf unless skipped. The kernel only counts them; this rare path re-reads the
    stream on the host to name the first one's column, dimension and row."""
    if skip or not any(int(state.nonfinite.sum()) for state in states.values()):
        return
    with closing(stream.chunks()) as chunks:
        for chunk in chunks:
            for key, column in chunk.items():
                if int(states[key].nonfinite.sum()) == 0:
                    continue
                bad = ~np.isfinite(column.values) & (column.weight[:, None] > 0)
                if not bad.any():
                    continue
                row, dim = np.unravel_index(int(np.argmax(bad)), bad.shape)
                raise DataError(
                    f"column {stream.column_name(key)!r} dimension {dim} holds NaN or Inf at "
                    f"{stream.describe_row(key, int(column.row_id[row]))} ({int(states[key].nonfinite.sum())} non-finite "
                    "values in all); fix the data or pass --skip-nonfinite to exclude them"
                )
    raise DataError(
        "the data held NaN or Inf on the first pass but not when re-read; is it changing while being read?"
    )


def _center_of(column: Column) -> np.ndarray:
    """A per-dimension value near the data: the median of the first chunk's finite values.

    It shifts the moments' sums (so |mean| >> std costs no precision) and centers fast mode's keys.
    numpy's median of each dimension's counted values, one contiguous copy at a time: the same
    numbers as `np.nanmedian` over the chunk with the others set to NaN (a test compares them bit
    for bit), without its per-column `apply_along_axis` over a strided float64 copy, which cost
    seconds of a large first chunk on the run's critical path."""
    values = column.values
    if values.dtype.kind in "iu":  # as np.where made them: float64, then the median
        values = values.astype(np.float64)
    counted = np.isfinite(values) & (column.weight[:, None] > 0)
    center = np.zeros(values.shape[1], np.float32)
    for d in range(values.shape[1]):
        kept = values[:, d][counted[:, d]]
        if len(kept):
            center[d] = np.nan_to_num(np.median(kept, overwrite_input=True), nan=0.0)
    return center


def compute_stats(
    data: Stream | Iterable[Mapping[str, object]] | Callable[[], Iterable],
    *,
    keys: Mapping[str, str] | None = None,
    quantiles: Iterable[float] = DEFAULT_QUANTILES,
    fast: bool = False,
    skip_nonfinite: bool = False,
    batch_size: int | None = None,
    platform: str | None = None,
    devices=None,
    max_time_minutes: float | None = None,
    budget_from_process_start: bool = False,
    progress: bool = False,
    per_episode: bool = False,
    cache_bytes: int | None = None,
    ray: str | None = None,
    ray_tasks: int | None = None,
) -> StatsResult:
    """Per-dimension count, mean, std, min, max and quantiles of every key of `data`.

    `data` is a `Stream` (see `accelkit.stats.formats.sources.open_source`) or a re-iterable of dict batches.
    Exact mode returns exactly `numpy.quantile(all_rows, q, axis=0)`; `fast=True` makes one pass and
    reports each estimate's rank-error bound. `devices` (a list of JAX devices) overrides `platform`.
    `per_episode=True` also returns every episode's exact statistics (`StatsResult.episodes`),
    computed from the same reads; the source must give each row's episode (LeRobot datasets do).
    On the host kernel, tail levels (all within 2 % of 0 or 1) are usually found in pass 1 alone
    (`accelkit.stats.kernel.windows`); a run over local files then reads them again only where that
    missed. Other exact runs decode the data once: later passes replay pass 1's chunks, kept in
    memory up to `cache_bytes` (default: a quarter of available memory, at most 32 MiB) and
    beyond it in a temporary file (see `accelkit.stats.engine.replay`).
    `max_time_minutes` stops early, with a partial result over the rows read so far, so that the
    whole run (every pass) ends within the budget, counted from this call or, with
    `budget_from_process_start`, from the start of the process.
    `ray` (an address, "auto" or "local") runs the passes as Ray tasks over groups of the stream's
    files (`accelkit.stats.engine.ray_runner`; a `FileStream` only), with results equal to the local run's
    bit for bit; `ray_tasks` sets how many groups (default: from the cluster's CPUs).
    On the CPU, exact mode runs on the compiled host kernel (`kernel/host.py`, the same bits as the
    XLA kernel) and does not start JAX; `devices` (JAX devices) always run the XLA kernel.
    """
    requested = list(quantiles)
    levels = np.asarray(sorted({float(q) for q in requested}), np.float64)
    if len(levels) == 0 or not np.all((levels >= 0) & (levels <= 1)):  # also rejects NaN
        raise DataError(f"quantile levels must be given and lie in [0, 1]; got {requested}")
    stream = data if isinstance(data, Stream) else BatchStream(data, keys)
    if ray is not None and per_episode:
        raise DataError("per-episode statistics run on one machine; drop --ray or --per-episode")
    if devices is None:
        devices = choose_devices(platform, host=ray is None and not fast)
    budget = (
        TimeBudget.since_process_start(max_time_minutes)
        if budget_from_process_start
        else TimeBudget.minutes(max_time_minutes)
    )
    if per_episode and max_time_minutes is not None:
        raise DataError(
            "per-episode statistics need every frame; drop --max-time-minutes (a partial run "
            "would leave episodes out)"
        )

    def collector() -> EpisodeCollector:
        return EpisodeCollector(levels, skip_nonfinite)

    observer = collector if per_episode else None

    started = time.perf_counter()

    with x64_for(devices):
        runner = open_runner(stream, devices, batch_size, progress, skip_nonfinite, ray, ray_tasks)
        if fast:
            stats, rows, pass_times, partial, episodes = _fast(
                runner, stream, levels, budget, observer
            )
        else:
            stats, rows, pass_times, partial, episodes = _exact(
                runner, stream, levels, budget, observer, cache_bytes
            )
    if partial:
        log.warning(
            "time budget of %s minutes ran out: results cover %d rows and are marked partial",
            max_time_minutes,
            rows,
        )
    seconds = time.perf_counter() - started
    summary = RunSummary(
        mode="fast" if fast else "exact",
        platform=devices[0].platform,
        devices=runner.describe_devices()
        if isinstance(runner, RayRunner)  # `ray` given
        else [str(d) for d in devices],
        batch_size=max(runner.batch_sizes.values(), default=0),
        passes=len(pass_times),
        rows=rows,
        seconds=seconds,
        peak_rss_bytes=peak_rss_bytes(),
        peak_device_bytes=peak_device_memory_bytes(devices),
        partial=partial,
        compiles=len(runner.compiled),
        pass_seconds=pass_times,
        cluster=runner.traffic() if isinstance(runner, RayRunner) else None,
    )
    return StatsResult(stats, summary, episodes)


def _require_rows(stream: Stream, states: dict) -> None:
    if not states:
        raise DataError("the dataset holds no rows; check the path and --max-frames")
    for key, state in states.items():
        count = np.asarray(state.extremes.count)
        if int(np.max(count, initial=0)) == 0:
            raise DataError(
                f"column {stream.column_name(key)!r} has no finite values to compute statistics from"
            )
        if np.any(count == 0):
            log.warning(
                "column %r dimensions %s hold no finite values: their statistics are NaN",
                stream.column_name(key),
                np.flatnonzero(count == 0).tolist(),
            )


def _key_stats(state, sums, levels, values: np.ndarray, bound: np.ndarray | None) -> KeyStats:

    base = mom.finalize(state.extremes, sums, state.center)
    if bound is None:  # exact mode: pass 1's histogram of the top 16 key bits
        buckets = histograms.from_exact_pass(state.counts, base["min"], base["max"])
    else:
        buckets = histograms.from_fast_pass(state.counts, state.center, base["min"], base["max"])
    histogram = histograms.summarize(buckets)  # a few numbers per dimension; the counts go
    return KeyStats(
        count=base["count"],
        mean=base["mean"],
        std=base["std"],
        min=base["min"],
        max=base["max"],
        quantiles={float(q): values[:, i] for i, q in enumerate(levels)},
        nonfinite=np.asarray(state.nonfinite, np.int64),
        rank_error_bound=None
        if bound is None
        else {float(q): bound[:, i] for i, q in enumerate(levels)},
        histogram=histogram,
    )


def _exact(
    runner: Runner, stream: Stream, levels, budget: TimeBudget, observer=None, cache_bytes=None
):

    # pass 1 keeps the values near each quantile, where those are likely to stay put (`windows`)
    speculate = runner.speculates and windows.worth_trying(levels)
    if not runner.replays or (speculate and stream.rereadable):
        # Ray tasks read their files again for each pass; a local run of files reads them again
        # only for a key whose windows missed, instead of keeping every decoded chunk
        return _exact_passes(runner, stream, levels, budget, observer, speculate)
    recording = Recording(stream, cache_bytes)
    try:
        return _exact_passes(runner, recording, levels, budget, observer, speculate)
    finally:
        if recording.spilled_bytes:
            log.info(
                "kept %.0f MiB of decoded data in memory and %.0f MiB in a temporary file",
                recording.memory_bytes / 2**20,
                recording.spilled_bytes / 2**20,
            )
        recording.close()


def _exact_passes(runner: Runner, stream, levels, budget: TimeBudget, observer, speculate=False):

    def first_init(key, spec, column):
        near = (
            windows.start(levels, spec.dim, spec.integer, stream.total_rows) if speculate else None
        )
        return init(spec, np.zeros((spec.dim, 1), np.uint64), _center_of(column), near)

    first = runner.run_pass(
        "pass 1 (moments, top digit)",
        lambda key, dim, integer: PassSpec(dim, 1, 0, EXACT_FIRST_DIGIT, True, integer=integer),
        first_init,
        budget=budget if budget.seconds is not None else None,
        observer=observer,
        stream=stream,
        # replays of what pass 1 read: one more 16-bit digit of 32-bit keys, three of 64-bit ones
        later_passes=lambda wide: (64 if wide else 32) // EXACT_FIRST_DIGIT - 1,
    )
    stream.freeze()  # later passes (and the search for a NaN) replay what pass 1 decoded
    _check_nonfinite(stream, first.states, runner.skip_nonfinite)
    _require_rows(stream, first.states)
    chunk_limit = first.chunks_seen if first.stopped_early else None
    plans, targets = {}, {}
    guessed: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for key, state in first.states.items():
        key_bits = 64 if state.extremes.min_key.dtype == np.uint64 else 32
        plans[key], targets[key] = qt.start_plan(state.extremes.count, levels, key_bits)
        plans[key] = qt.advance_plan(
            plans[key], state.counts, np.zeros_like(plans[key].ranks), EXACT_FIRST_DIGIT
        )
        plans[key] = qt.skip_common_prefix(
            plans[key], state.extremes.min_key, state.extremes.max_key
        )
        if state.windows is not None:
            guessed[key] = windows.resolve(
                state.windows, state.counts, plans[key].ranks, state.extremes.count
            )
            first.states[key] = state._replace(windows=None)  # their buffers go
            plans[key] = _known(plans[key], *guessed[key], state.extremes.count)
    if guessed:
        missed = [key for key, plan in plans.items() if plan.prefix_bits < plan.key_bits]
        log.info(
            "quantiles found in pass 1 for %d of %d keys", len(plans) - len(missed), len(plans)
        )
    pass_times = [first.seconds]
    while any(plan.prefix_bits < plan.key_bits for plan in plans.values()):
        groups, digits, spec_for, init_for = select_pass(plans)
        outcome = runner.run_pass(
            f"pass {len(pass_times) + 1} (exact select)",
            spec_for,
            init_for,
            chunk_limit=chunk_limit,
            stream=stream,
        )
        pass_times.append(outcome.seconds)
        for key, state in outcome.states.items():
            plans[key] = qt.advance_plan(plans[key], state.counts, groups[key][1], digits[key])
    for key, (found, covered) in guessed.items():  # what a window found, the passes found too
        if np.any(covered & (plans[key].prefixes != found) & (plans[key].inside > 0)):
            raise DataError(
                "the data changed between passes (a value kept in pass 1 is not the one read "
                "again); exact quantiles need data that stays the same while they are computed"
            )
    stats = {
        key: _key_stats(
            state, first.sums[key], levels, qt.finish_plan(plans[key], targets[key]), None
        )
        for key, state in first.states.items()
    }
    return stats, first.rows, pass_times, first.stopped_early, first.observed


def open_runner(stream, devices, batch_size, progress, skip_nonfinite, ray, ray_tasks):
    """The runner of a stream's passes: here (`local_runner`), or on the Ray cluster `ray`."""
    if ray is None:
        return LocalRunner(stream, devices, batch_size, progress, skip_nonfinite)

    return RayRunner(
        stream,
        ray,
        platform=devices[0].platform,
        batch_size=batch_size,
        progress=progress,
        skip_nonfinite=skip_nonfinite,
        tasks=ray_tasks,
    )


def select_pass(plans: Mapping[str, qt.RadixPlan]) -> tuple[dict, dict, Callable, Callable]:
    """The next exact-select pass: each unfinished key's prefix groups and the digit it fixes
    (16 bits, or 8 where its tables would be too big), and the runner's `spec_for`/`init_for`.
    Shared by one stream's passes and a mixture's (which pass `mixture.view`s of its plans)."""

    groups, digits = {}, {}
    for key, plan in plans.items():
        if plan.prefix_bits < plan.key_bits:
            groups[key] = qt.group_prefixes(plan)
            width = groups[key][0].shape[0] * groups[key][0].shape[1]
            digit = min(plan.key_bits - plan.prefix_bits, EXACT_FIRST_DIGIT)
            digits[key] = digit if width * (4 << digit) <= TABLE_BUDGET_BYTES else min(8, digit)

    def spec_for(key, dim, integer):
        if key not in groups:
            return None
        prefix_bits = plans[key].prefix_bits
        return PassSpec(
            dim, groups[key][0].shape[1], prefix_bits, digits[key], False, integer=integer
        )

    def init_for(key, spec, column):
        return init(spec, groups[key][0], np.zeros(spec.dim, np.float32))

    return groups, digits, spec_for, init_for


def _known(plan: qt.RadixPlan, found: np.ndarray, covered: np.ndarray, count) -> qt.RadixPlan:
    """The plan with every key its windows found (`windows.resolve`) when they found them all;
    else the plan as it was (the radix passes find them). The found keys must share the digits
    pass 1's histogram fixed: they come from the same values."""
    if not covered.all():
        return plan
    present = (np.asarray(count) > 0)[:, None] & (plan.inside > 0)
    top = found >> np.uint64(plan.key_bits - plan.prefix_bits)
    if np.any(present & (top != plan.prefixes)):
        raise RuntimeError("a window's value lies outside the bucket pass 1 counted it in")
    return plan._replace(prefixes=found, prefix_bits=plan.key_bits)


def _fast(runner: Runner, stream: Stream, levels, budget: TimeBudget, observer=None):

    def spec_for(key, dim, integer):
        bits = qt.FAST_DIGIT_BITS
        while bits > 12 and dim * (4 << bits) > TABLE_BUDGET_BYTES:
            bits -= 1
        return PassSpec(dim, 1, 0, bits, True, centered=True, integer=integer)

    outcome = runner.run_pass(
        "fast pass",
        spec_for,
        lambda key, spec, column: init(
            spec, np.zeros((spec.dim, 1), np.uint32), _center_of(column)
        ),
        budget=budget,
        observer=observer,
    )
    _check_nonfinite(stream, outcome.states, runner.skip_nonfinite)
    _require_rows(stream, outcome.states)
    stats = {}
    for key, state in outcome.states.items():
        m = state.extremes
        est, bound = qt.sketch_quantiles(
            state.counts,
            np.asarray(state.center, np.float64),
            np.asarray(m.count),
            qt.keys_to_values(m.min_key).astype(np.float64),
            qt.keys_to_values(m.max_key).astype(np.float64),
            levels,
        )
        stats[key] = _key_stats(state, outcome.sums[key], levels, est, bound)
    return stats, outcome.rows, [outcome.seconds], outcome.stopped_early, outcome.observed
