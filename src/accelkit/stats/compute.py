"""The imperative shell of `accelkit stats`: batches, devices, passes, budgets, progress.

`compute_stats` drives the pure pass kernels (`passes`) over a `Stream` of chunks:

* exact mode: pass 1 (moments + top key digit), then one pass per remaining digit (usually one)
  until every target order statistic is known exactly;
* fast mode: one pass (moments + 20-bit histogram of keys of `x - center`).

Rows are packed into fixed-size batches (one compilation per pass), sharded over every device of the
chosen platform, and each device's partial state is merged at the end of the pass.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass

import numpy as np

from accelkit.errors import DataError, DeviceError
from accelkit.runtime.devices import (
    choose_platform,
    cpu_without_jax,
    devices_for,
    free_memory_bytes,
    peak_device_memory_bytes,
    peak_rss_bytes,
)
from accelkit.runtime.progress import TimeBudget, rows_progress
from accelkit.stats import fold_tree
from accelkit.stats import quantiles as qt
from accelkit.stats.moments import BLOCK_ROWS
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
INT32_SAFE = (1 << 31) - 1
MAX_IN_FLIGHT = 2


# --- the driver -------------------------------------------------------------------------------


class Batcher:
    """Packs rows of one key into fixed-size batches; the last one is padded with weight 0.

    Whole batches inside a chunk are yielded as views (no copy); only rows that straddle chunks
    are copied into a staging buffer. A staging buffer is never reused after it is yielded: on CPU,
    `device_put` may alias host memory and the computation runs asynchronously.
    """

    def __init__(self, batch_size: int, dim: int, key: str, dtype=np.float32):
        self.batch_size, self.dim, self.key, self.dtype = batch_size, dim, key, np.dtype(dtype)
        self._new_buffers()

    def _new_buffers(self) -> None:
        self.values = np.empty((self.batch_size, self.dim), self.dtype)
        self.weight = np.empty(self.batch_size, np.int32)
        self.filled = 0

    def push(self, column: Column, where: str) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if column.values.shape[1] != self.dim:
            raise DataError(
                f"{where}: key {self.key!r} has {column.values.shape[1]} values per row, but earlier rows had {self.dim}; "
                "every row of a column must have the same width"
            )
        if column.values.dtype != self.dtype:
            raise DataError(
                f"{where}: key {self.key!r} holds {column.values.dtype} values, but earlier rows were "
                f"{self.dtype}; every file must store the column with one type"
            )
        size, start, total = self.batch_size, 0, len(column.weight)
        while start < total:
            if self.filled == 0 and total - start >= size:
                stop = start + size
                yield column.values[start:stop], column.weight[start:stop]
                start = stop
                continue
            take = min(size - self.filled, total - start)
            end = self.filled + take
            self.values[self.filled : end] = column.values[start : start + take]
            self.weight[self.filled : end] = column.weight[start : start + take]
            self.filled, start = end, start + take
            if self.filled == size:
                yield self.values, self.weight
                self._new_buffers()

    def flush(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        if self.filled:
            self.values[self.filled :] = 0
            self.weight[self.filled :] = 0
            yield self.values, self.weight
            self._new_buffers()


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


class HostDevice:
    """The host CPU as the one "device" of a run on the compiled host kernel (`host_passes`):
    what batch sizing and the run summary ask of a device."""

    platform = "cpu"

    def memory_stats(self):
        return None  # free memory: the host's, as for JAX's CPU devices

    def __str__(self) -> str:
        return "host CPU (compiled loop)"


HOST = HostDevice()


class HostKernel:
    """Passes on the host: numpy arrays in and out, one compiled loop per batch, int64 counts (no
    device histograms to flush), block sums ready at once."""

    needs_flush = False

    def __init__(self):
        from accelkit.stats import host_passes

        self.host_passes = host_passes
        host_passes.warm_up()  # numba's start-up overlaps the first reads

    def place(self, state):
        return self.host_passes.own(state)

    def update(self, state, values, weight, spec):
        new, blocks = self.host_passes.update(state, values, weight, spec)
        return new, blocks, None

    def wait(self, token) -> None:
        pass

    def fetch(self, blocks):
        return blocks

    def gather(self, state):
        return state


class DeviceKernel:
    """Passes under XLA on a 1-D mesh of JAX devices (`passes.sharded_update`)."""

    needs_flush = True  # int32 histograms on the devices

    def __init__(self, devices):
        import jax
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        from accelkit.stats import passes

        self.jax, self.passes = jax, passes
        self.mesh = passes.make_mesh(devices)
        self.sharding = NamedSharding(self.mesh, P("data"))

    def place(self, state):
        return self.passes.replicate_per_device(state, self.mesh)

    def update(self, state, values, weight, spec):
        put = self.jax.device_put
        return self.passes.sharded_update(
            state, put(values, self.sharding), put(weight, self.sharding), spec=spec, mesh=self.mesh
        )

    def wait(self, token) -> None:
        token.block_until_ready()

    def fetch(self, blocks):
        s1, s2 = self.jax.device_get(blocks)
        return np.asarray(s1), np.asarray(s2)

    def gather(self, state):
        return self.passes.gather_and_merge(state)

    def fresh(self, state, spec):
        """A zeroed state with `state`'s prefixes and center, placed on the devices."""
        first = self.jax.tree.map(lambda leaf: leaf[0], self.jax.device_get(state))
        fresh = self.passes.init(spec, np.asarray(first.prefixes), np.asarray(first.center))
        return self.place(fresh)


@dataclass
class PassOutcome:
    states: dict  # key -> merged host PassState
    sums: dict  # key -> moments.Sums folded in row order (passes with moments)
    rows: int
    chunks_seen: int
    stopped_early: bool
    seconds: float
    observed: object = None  # what the pass's observer collected (per-episode statistics)
    blocks: dict | None = None  # key -> (s1, s2) [blocks, D] unfolded, when the runner keeps them


class Runner:
    """Runs passes of the kernel over a stream on a mesh; owns batch size and compile counting."""

    replays = True  # exact mode may replay pass 1's decoded chunks (see `_exact`)

    def __init__(
        self,
        stream: Stream,
        devices,
        batch_size: int | None,
        progress: bool,
        skip_nonfinite: bool,
        keep_blocks: bool = False,
    ):
        self.stream = stream
        self.devices = list(devices)
        self.kernel = HostKernel() if self.devices == [HOST] else DeviceKernel(self.devices)
        self.batch_override = batch_size
        self.batch_sizes: dict[str, int] = {}
        self.progress = progress
        self.skip_nonfinite = skip_nonfinite
        self.keep_blocks = keep_blocks  # return the moments' block sums instead of folding them
        self.compiled: set = set()

    def batch_size(self, key: str, dim: int) -> int:
        if key not in self.batch_sizes:
            self.batch_sizes[key] = default_batch_size(
                dim, self.devices, self.batch_override, self.stream.total_rows
            )
        return self.batch_sizes[key]

    def run_pass(
        self,
        label: str,
        make_spec: Callable[[str, int, bool], object],
        make_init: Callable[[str, object, Column], object],
        *,
        chunk_limit: int | None = None,
        budget: TimeBudget | None = None,
        observer: Callable[[], object] | None = None,
        stream: Stream | None = None,
        later_passes: Callable[[bool], int] | None = None,
    ) -> PassOutcome:
        """One pass over the stream, retried from the start with half the batch on out-of-memory.

        `observer` makes a fresh object (per attempt) whose `add(chunk)` sees every chunk and whose
        `finish()` result comes back as `PassOutcome.observed`. `stream` replaces the runner's
        stream for this pass (exact mode's recording of pass 1). `later_passes(has_64_bit_keys)`:
        how many passes will replay what this one reads; the pass stops while the budget still
        holds them (each as long as this one so far).
        """
        while True:
            try:
                return self._run_pass_once(
                    label,
                    make_spec,
                    make_init,
                    chunk_limit,
                    budget,
                    observer,
                    stream or self.stream,
                    later_passes,
                )
            except Exception as exc:
                if not is_out_of_memory(exc):
                    raise

                shrunk, unit = False, len(self.devices) * BLOCK_ROWS
                for key, size in self.batch_sizes.items():
                    half = max(unit, (size // 2 // unit) * unit)
                    if half < size:
                        self.batch_sizes[key], shrunk = half, True
                if not shrunk or min(self.batch_sizes.values()) < 256:
                    raise DeviceError(
                        f"out of device memory even at batch size {min(self.batch_sizes.values())}; "
                        "use --platform cpu or free device memory"
                    ) from exc
                log.warning(
                    "out of device memory during %s; retrying the pass with batch sizes %s",
                    label,
                    self.batch_sizes,
                )

    def _run_pass_once(
        self, label, make_spec, make_init, chunk_limit, budget, observer, stream, later_passes=None
    ) -> PassOutcome:
        from accelkit.stats import pass_state

        kernel = self.kernel
        specs, states, batchers, host_acc, weight_since_flush = {}, {}, {}, {}, {}
        folders: dict[str, fold_tree.Folder] = {}  # moments: block sums in the fixed tree order
        key_rows: dict[str, int] = {}  # rows of each key in the stream so far
        rows = chunks_seen = 0
        stopped_early = False
        started = time.perf_counter()

        in_flight: deque = deque()
        kept_blocks: dict = {}
        watcher = observer() if observer is not None else None
        skipped: set = set()

        def run_batch(key, values, weight):
            spec = specs[key]
            if kernel.needs_flush:
                self.compiled.add((spec, len(weight)))  # one compiled kernel per (spec, shape)
                batch_weight = int(weight.sum())
                if weight_since_flush[key] + batch_weight > INT32_SAFE:
                    flush(key)
                weight_since_flush[key] += batch_weight
            states[key], blocks, token = kernel.update(states[key], values, weight, spec)
            # Dispatch to a device is asynchronous: without a bound the loop runs ahead of the
            # device and every queued batch keeps its host buffer alive. Waiting on the batch
            # before last keeps two in flight: the device stays busy and memory stays flat.
            in_flight.append((key, token, blocks))
            if len(in_flight) > MAX_IN_FLIGHT:
                settle(*in_flight.popleft())

        def settle(key, token, blocks):
            kernel.wait(token)
            if blocks is not None:  # batches of a key settle in dispatch order: the fold is ordered
                s1, s2 = kernel.fetch(blocks)
                if self.keep_blocks:
                    kept_blocks.setdefault(key, []).append((s1, s2))
                else:
                    folders[key].add(s1, s2)

        def flush(key):
            # int32 device histograms could overflow: fold them into an int64 host accumulator
            merged = kernel.gather(states[key])
            host_acc[key] = (
                merged if key not in host_acc else pass_state.merge(host_acc[key], merged)
            )
            states[key] = kernel.fresh(states[key], specs[key])
            weight_since_flush[key] = 0

        with rows_progress(self.progress) as bar, closing(stream.chunks()) as chunks:
            task = bar.add_task(label, total=stream.total_rows)
            for chunk in chunks:
                chunk_rows = 0
                if watcher is not None:
                    watcher.add(chunk)
                for key, column in chunk.items():
                    if key in skipped:
                        continue
                    if key not in states:
                        dim = column.values.shape[1]
                        if dim == 0:
                            raise DataError(
                                f"column {stream.column_name(key)!r} has rows of width 0; choose a column that holds values"
                            )
                        integer = column.values.dtype == np.int64
                        specs[key] = make_spec(key, dim, integer)
                        if specs[key] is None:  # this pass has nothing to do for the key
                            skipped.add(key)
                            continue
                        if specs[key].with_moments and not self.keep_blocks:
                            folders[key] = fold_tree.Folder()
                        init_state = make_init(key, specs[key], column)
                        states[key] = kernel.place(init_state)
                        batchers[key] = Batcher(
                            self.batch_size(key, dim), dim, key, column.values.dtype
                        )
                        weight_since_flush[key] = 0
                    where = (
                        stream.describe_row(key, int(column.row_id[0]))
                        if len(column.row_id)
                        else key
                    )
                    key_rows[key] = key_rows.get(key, 0) + len(column.weight)
                    for batch in batchers[key].push(column, where):
                        run_batch(key, *batch)
                    chunk_rows = max(chunk_rows, len(column.weight))
                rows += chunk_rows
                chunks_seen += 1
                bar.update(task, advance=chunk_rows)
                if budget is not None:
                    wide = any(getattr(spec, "integer", False) for spec in specs.values())
                    later = later_passes(wide) if later_passes is not None else 0
                    if budget.will_expire(time.perf_counter() - started, later):
                        stopped_early = True
                        break
                if chunk_limit is not None and chunks_seen >= chunk_limit:
                    break  # a later pass of a run stopped early reads exactly what pass 1 read
            for key, batcher in batchers.items():
                if key in folders:  # the stream's blocks only, not the last batch's padding
                    folders[key].limit = -(-key_rows[key] // BLOCK_ROWS)
                for batch in batcher.flush():
                    run_batch(key, *batch)
            while in_flight:
                settle(*in_flight.popleft())
        sums = {key: folder.sums(batchers[key].dim) for key, folder in folders.items()}
        merged = {}
        for key in states:
            part = kernel.gather(states[key])
            merged[key] = part if key not in host_acc else pass_state.merge(host_acc[key], part)
        return PassOutcome(
            merged,
            sums,
            rows,
            chunks_seen,
            stopped_early,
            time.perf_counter() - started,
            watcher.finish() if watcher is not None else None,
            {
                key: tuple(np.concatenate([part[i] for part in parts]) for i in (0, 1))
                for key, parts in kept_blocks.items()
            }
            if self.keep_blocks
            else None,
        )


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
    """
    values = np.where(
        np.isfinite(column.values) & (column.weight[:, None] > 0), column.values, np.nan
    )
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            center = np.nanmedian(values, axis=0)
    return np.nan_to_num(center, nan=0.0).astype(np.float32)


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

    `data` is a `Stream` (see `accelkit.stats.sources.open_source`) or a re-iterable of dict batches.
    Exact mode returns exactly `numpy.quantile(all_rows, q, axis=0)`; `fast=True` makes one pass and
    reports each estimate's rank-error bound. `devices` (a list of JAX devices) overrides `platform`.
    `per_episode=True` also returns every episode's exact statistics (`StatsResult.episodes`),
    computed from the same reads; the source must give each row's episode (LeRobot datasets do).
    Exact mode decodes the data once: later passes replay pass 1's chunks, kept in memory up to
    `cache_bytes` (default: a quarter of available memory, at most 32 MiB) and beyond it in a
    temporary file (see `accelkit.stats.replay`).
    `max_time_minutes` stops early, with a partial result over the rows read so far, so that the
    whole run (every pass) ends within the budget, counted from this call or, with
    `budget_from_process_start`, from the start of the process.
    `ray` (an address, "auto" or "local") runs the passes as Ray tasks over groups of the stream's
    files (`accelkit.stats.cluster`; a `FileStream` only), with results equal to the local run's
    bit for bit; `ray_tasks` sets how many groups (default: from the cluster's CPUs).
    On the CPU, exact mode runs on the compiled host kernel (`host_passes`, the same bits as the
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
    observer = None
    if per_episode:
        from accelkit.stats.episodes import EpisodeCollector

        def observer():
            return EpisodeCollector(levels, skip_nonfinite)

    started = time.perf_counter()

    with x64_for(devices):
        if ray is None:
            runner = Runner(stream, devices, batch_size, progress, skip_nonfinite)
        else:
            from accelkit.stats.cluster import RayRunner

            runner = RayRunner(
                stream,
                ray,
                platform=devices[0].platform,
                batch_size=batch_size,
                progress=progress,
                skip_nonfinite=skip_nonfinite,
                tasks=ray_tasks,
            )
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
        devices=[str(d) for d in devices] if ray is None else runner.describe_devices(),
        batch_size=max(runner.batch_sizes.values(), default=0),
        passes=len(pass_times),
        rows=rows,
        seconds=seconds,
        peak_rss_bytes=peak_rss_bytes(),
        peak_device_bytes=peak_device_memory_bytes(devices),
        partial=partial,
        compiles=len(runner.compiled),
        pass_seconds=pass_times,
        cluster=None if ray is None else runner.traffic(),
    )
    return StatsResult(stats, summary, episodes)


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
    from accelkit.stats import histograms
    from accelkit.stats import moments as mom

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
    from accelkit.stats.replay import Recording

    if not runner.replays:  # Ray tasks read their files again for each pass
        return _exact_passes(runner, stream, levels, budget, observer)
    recording = Recording(stream, cache_bytes)
    try:
        return _exact_passes(runner, recording, levels, budget, observer)
    finally:
        if recording.spilled_bytes:
            log.info(
                "kept %.0f MiB of decoded data in memory and %.0f MiB in a temporary file",
                recording.memory_bytes / 2**20,
                recording.spilled_bytes / 2**20,
            )
        recording.close()


def _exact_passes(runner: Runner, stream, levels, budget: TimeBudget, observer):
    from accelkit.stats.pass_state import PassSpec, init

    first = runner.run_pass(
        "pass 1 (moments, top digit)",
        lambda key, dim, integer: PassSpec(dim, 1, 0, EXACT_FIRST_DIGIT, True, integer=integer),
        lambda key, spec, column: init(
            spec, np.zeros((spec.dim, 1), np.uint64), _center_of(column)
        ),
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
    for key, state in first.states.items():
        key_bits = 64 if state.extremes.min_key.dtype == np.uint64 else 32
        plans[key], targets[key] = qt.start_plan(state.extremes.count, levels, key_bits)
        plans[key] = qt.advance_plan(
            plans[key], state.counts, np.zeros_like(plans[key].ranks), EXACT_FIRST_DIGIT
        )
        plans[key] = qt.skip_common_prefix(
            plans[key], state.extremes.min_key, state.extremes.max_key
        )
    pass_times = [first.seconds]
    while any(plan.prefix_bits < plan.key_bits for plan in plans.values()):
        # each unfinished key fixes its next digit (16 bits, or 8 where tables would be too big)
        groups, digits = {}, {}
        for key, plan in plans.items():
            if plan.prefix_bits < plan.key_bits:
                groups[key] = qt.group_prefixes(plan)
                remaining = plan.key_bits - plan.prefix_bits
                width = groups[key][0].shape[0] * groups[key][0].shape[1]
                digit = min(remaining, EXACT_FIRST_DIGIT)
                digits[key] = digit if width * (4 << digit) <= TABLE_BUDGET_BYTES else min(8, digit)

        def spec_for(key, dim, integer, groups=groups, digits=digits):
            if key not in groups:
                return None
            return PassSpec(
                dim,
                groups[key][0].shape[1],
                plans[key].prefix_bits,
                digits[key],
                False,
                integer=integer,
            )

        def init_for(key, spec, column, groups=groups):
            return init(spec, groups[key][0], np.zeros(spec.dim, np.float32))

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
    stats = {
        key: _key_stats(
            state, first.sums[key], levels, qt.finish_plan(plans[key], targets[key]), None
        )
        for key, state in first.states.items()
    }
    return stats, first.rows, pass_times, first.stopped_early, first.observed


def _fast(runner: Runner, stream: Stream, levels, budget: TimeBudget, observer=None):
    from accelkit.stats.pass_state import PassSpec, init

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
