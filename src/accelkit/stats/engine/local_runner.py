"""The local runner: passes of the kernel over a stream on this machine — batches packed to a
fixed size, sharded over the chosen JAX devices (`DeviceKernel`) or run by the compiled host loop
(`HostKernel`), each device's partial state merged at the end of the pass."""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import closing

import numpy as np

from accelkit.errors import DataError, DeviceError
from accelkit.runtime.progress import TimeBudget, rows_progress
from accelkit.stats.core import fold_tree
from accelkit.stats.core.moments import BLOCK_ROWS
from accelkit.stats.engine.runner import HOST, PassOutcome, default_batch_size, is_out_of_memory
from accelkit.stats.kernel import host as host_passes
from accelkit.stats.kernel import state as pass_state
from accelkit.stats.types import Column, Stream

log = logging.getLogger(__name__)

INT32_SAFE = (1 << 31) - 1
MAX_IN_FLIGHT = 2


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

    def push(self, column: Column, where) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """`where()`: the rows' place, for an error's message."""
        if column.values.shape[1] != self.dim:
            raise DataError(
                f"{where()}: key {self.key!r} has {column.values.shape[1]} values per row, but earlier rows had {self.dim}; "
                "every row of a column must have the same width"
            )
        if column.values.dtype != self.dtype:
            raise DataError(
                f"{where()}: key {self.key!r} holds {column.values.dtype} values, but earlier rows were "
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


class HostKernel:
    """Passes on the host: numpy arrays in and out, one compiled loop per batch, int64 counts (no
    device histograms to flush), block sums ready at once."""

    needs_flush = False

    def __init__(self):

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
        if state.windows is not None:  # the histogram without the windows' flags
            self.host_passes.windows.settled(state.counts)
        return state


class DeviceKernel:
    """Passes under XLA on a 1-D mesh of JAX devices (`passes.sharded_update`)."""

    needs_flush = True  # int32 histograms on the devices

    def __init__(self, devices):
        import jax
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        from accelkit.stats.kernel import device as passes

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


class LocalRunner:
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
        self.speculates = isinstance(self.kernel, HostKernel)  # its pass 1 fills windows
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
            assert isinstance(kernel, DeviceKernel)  # the host kernel counts in int64
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

                    def where(key=key, column=column):  # for an error's message only
                        if not len(column.row_id):
                            return key
                        return stream.describe_row(key, int(column.row_id[0]))

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
