"""`accelkit stats --ray`: the same passes as Ray tasks over groups of a dataset's files.

The driver (this process) lists the files from the dataset's metadata (`sources.open_source`), cuts
the stream's file order into contiguous groups, and runs every pass as one Ray task per group. Each
task runs the local pass code (`compute.Runner` over `passes.update`) on its files and returns its
partial state; the driver merges the states in group order and runs the exact protocol of
`compute._exact_passes` unchanged (pass-2 prefixes and centers go to the tasks with the pass). So
the results equal the local run's **bit for bit**:

* Histograms, counts, min/max and non-finite counts are integers: merged exactly in any order.
* The moments are float sums over fixed blocks of 256 consecutive rows of the stream, folded in
  row order (`moments`). The driver knows where every group starts in the stream (the rows each
  file contributes follow from the metadata and the sample; with sampling *and* action chunks a
  small counting round finds them), so each task is padded with weight-0 rows up to the block
  boundary before its first row: its whole blocks are then the stream's own blocks, summed by the
  same kernel. A block that straddles two groups is not summed by either: the tasks return its rows
  (at most 255 at each end) and the driver sums it with the same kernel (`passes.moment_blocks`),
  then folds all blocks in order.
* The shift of the moments and fast mode's center come from the stream's first chunk, read by the
  driver (as the local run takes them from the first chunk it reads).

What crosses the network per task and pass: the arguments (file group, pass specs, prefixes and
centers: a few KiB, the stream itself once per run through the object store) and the partial state
(histogram counts, sent sparse or in the narrowest integer type, whichever is smaller; block sums,
16 bytes per dimension per 256 rows; at most 510 edge rows). A task that dies (a killed worker, a
lost node) is retried by Ray (`MAX_RETRIES`); a bad file raises the same one-line `DataError` as the
local run, and the run stops with it (no retry: the file would be as bad the second time).
"""

from __future__ import annotations

import logging
import pickle
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from accelkit.errors import AccelkitError, ConfigError, DataError, DeviceError
from accelkit.runtime.cluster import connect
from accelkit.stats.moments import BLOCK_ROWS
from accelkit.stats.types import Column, Stream

log = logging.getLogger(__name__)

MAX_RETRIES = 3  # attempts after a worker or node failure
TASKS_PER_CPU = 2  # groups per CPU of the cluster (by default): some balance, few partial states


# --- what a task does -------------------------------------------------------------------------


class _Padded(Stream):
    """The task's files, after `pad[key]` weight-0 rows (the stream's block alignment)."""

    def __init__(self, stream, pad: dict):
        self.stream, self.pad = stream, pad
        self.total_rows = stream.total_rows

    def describe_row(self, key, row_id):
        return self.stream.describe_row(key, row_id)

    def column_name(self, key):
        return self.stream.column_name(key)

    def chunks(self):
        first = {}
        for key, (rows, dim, dtype, row_id) in self.pad.items():
            first[key] = Column(
                np.zeros((rows, dim), dtype), np.zeros(rows, np.int32), np.full(rows, row_id)
            )
        yield first
        yield from self.stream.chunks()


class _Edges:
    """Observer of a task's chunks: each key's first `head[key]` rows and its last 255 rows."""

    def __init__(self, head: dict):
        self.head = head
        self.first: dict = {key: [] for key in head}
        self.last: dict = {key: deque() for key in head}
        self.rows = dict.fromkeys(head, 0)
        self.padding = True

    def add(self, chunk) -> None:
        if self.padding:  # the pad chunk is no data
            self.padding = False
            return
        for key, column in chunk.items():
            if key not in self.head:
                continue
            values, weight = column.values, column.weight
            taken = sum(len(w) for _, w in self.first[key])
            if taken < self.head[key]:
                n = self.head[key] - taken
                self.first[key].append((values[:n], weight[:n]))
            self.last[key].append((values[-(BLOCK_ROWS - 1) :], weight[-(BLOCK_ROWS - 1) :]))
            while sum(len(w) for _, w in self.last[key]) - len(self.last[key][0][1]) >= BLOCK_ROWS:
                self.last[key].popleft()
            self.rows[key] += len(weight)

    def finish(self):
        return self

    @staticmethod
    def rows_of(start: int, stop: int, parts) -> tuple[np.ndarray, np.ndarray]:
        values = np.concatenate([v for v, _ in parts]) if parts else None
        weight = np.concatenate([w for _, w in parts]) if parts else None
        return values[start:stop], weight[start:stop]


def _pack(counts: np.ndarray):
    """Histogram counts in the fewest bytes: sparse (uint32 index, narrow value) or dense narrow.
    A pass's initial (all-zero) counts pack to a few bytes."""
    counts = np.asarray(counts)
    peak = int(counts.max(initial=0))
    kind = np.int32 if peak < 2**31 else np.int64
    nonzero = np.flatnonzero(counts)
    if nonzero.size * (4 + np.dtype(kind).itemsize) < counts.size * np.dtype(kind).itemsize:
        return (
            "sparse",
            counts.shape,
            counts.dtype.str,
            nonzero.astype(np.uint32),
            counts.flat[nonzero].astype(kind),
        )
    return ("dense", counts.shape, counts.dtype.str, counts.astype(kind))


def _unpack(packed, original: bool = False) -> np.ndarray:
    """The counts as int64 (for merging), or in their `original` dtype."""
    dtype = np.dtype(packed[2]) if original else np.int64
    if packed[0] == "dense":
        return packed[3].astype(dtype)
    counts = np.zeros(packed[1], dtype)
    counts.flat[packed[3]] = packed[4]
    return counts


def run_group(stream, indices, plan: dict, platform: str, batch_size, skip_nonfinite: bool):
    """One Ray task: a pass over the files `indices` of `stream`, as the local run makes it.

    `plan`: per key, the pass's spec and initial state, the global position `start` of the group's
    first row in that key's rows (passes with moments) and the key's dtype and width.
    Returns the group's partial state (packed), whole-block moment sums and edge rows.
    """
    from accelkit.runtime.devices import enable_compilation_cache
    from accelkit.stats.compute import Runner, choose_devices, x64_for

    enable_compilation_cache()
    stream.order = list(indices)
    pad = {}
    for key, p in plan.items():
        rows = p["start"] % BLOCK_ROWS if p["start"] is not None else 0
        first_row = stream.fragments[indices[0]].row_offset
        pad[key] = (rows, p["dim"], p["dtype"], first_row)
    source = _Padded(stream, pad)
    heads = {key: (-p["start"]) % BLOCK_ROWS for key, p in plan.items() if p["start"] is not None}
    # exact passes on a CPU run the host kernel, as the local run does (the same bits either way)
    devices = choose_devices(platform, host=not any(p["spec"].centered for p in plan.values()))
    with x64_for(devices):
        runner = Runner(source, devices, batch_size, False, skip_nonfinite, keep_blocks=True)
        outcome = runner.run_pass(
            "ray task",
            lambda key, dim, integer: plan[key]["spec"] if key in plan else None,
            lambda key, spec, column: plan[key]["init"]._replace(
                counts=_unpack(plan[key]["init"].counts, original=True)
            ),
            observer=(lambda: _Edges(heads)) if heads else None,
            stream=source,
        )
    result = {
        "states": {
            key: state._replace(counts=_pack(state.counts)) for key, state in outcome.states.items()
        },
        "rows": outcome.rows - max((p[0] for p in pad.values()), default=0),
        "blocks": {},
        "edges": {},
        "kept": {},
        "batch_sizes": dict(runner.batch_sizes),
        "compiled": sorted(map(repr, runner.compiled)),
        "episodes": _episodes_of(stream, indices) if stream.horizons else None,
    }
    edges = outcome.observed
    for key, head in heads.items():
        start, kept = plan[key]["start"], edges.rows[key]
        base = (start - start % BLOCK_ROWS) // BLOCK_ROWS  # the padded stream's first block
        first_full = -(-start // BLOCK_ROWS)
        last_end = (start + kept) // BLOCK_ROWS
        s1, s2 = outcome.blocks.get(key, (np.zeros((0, 0)), np.zeros((0, 0))))
        if last_end > first_full:
            result["blocks"][key] = (
                first_full,
                s1[first_full - base : last_end - base],
                s2[first_full - base : last_end - base],
            )
        head_rows = min(kept, head)
        tail_from = max(head_rows, last_end * BLOCK_ROWS - start)
        segments = []
        if head_rows:
            segments.append((start, *edges.rows_of(0, head_rows, edges.first[key])))
        if tail_from < kept:
            last = list(edges.last[key])
            held = sum(len(w) for _, w in last)
            segments.append(
                (
                    start + tail_from,
                    *edges.rows_of(held - (kept - tail_from), held, last),
                )
            )
        result["edges"][key] = segments
        result["kept"][key] = kept
    return result


def _episodes_of(stream, indices) -> list:
    """(fragment index, its episode indices) for the cross-group check of action chunks."""
    out = []
    for index in indices:
        _, episodes = stream.reader.read(stream.fragments[index].path, [])
        out.append((index, [] if episodes is None else np.unique(episodes).tolist()))
    return out


def count_group(stream, indices) -> list[dict]:
    """Rows each file contributes per key (sampling with action chunks: not known from metadata);
    a file may come in several chunks."""
    counts = []
    for index in indices:
        stream.order = [index]
        rows: dict = {}
        for chunk in stream.chunks():
            for key, column in chunk.items():
                rows[key] = rows.get(key, 0) + len(column.weight)
        counts.append(rows)
    return counts


# --- the driver -------------------------------------------------------------------------------


@dataclass
class _Group:
    indices: list[int]
    rows: int


def group_files(stream, tasks: int) -> list[_Group]:
    """The stream's file order cut into at most `tasks` contiguous groups of about equal rows."""
    order = list(stream.order)
    rows = [stream.fragments[i].num_rows for i in order]
    tasks = max(1, min(tasks, len(order)))
    total = sum(rows)
    groups, current, current_rows, done = [], [], 0, 0
    for index, n in zip(order, rows, strict=True):
        current.append(index)
        current_rows += n
        done += n
        if done >= total * (len(groups) + 1) / tasks and len(groups) < tasks - 1:
            groups.append(_Group(current, current_rows))
            current, current_rows = [], 0
    if current:
        groups.append(_Group(current, current_rows))
    return groups


class RayRunner:
    """`compute.Runner`'s `run_pass`, each pass run as Ray tasks over groups of files."""

    replays = False  # each pass reads its files again (on the workers)

    def __init__(
        self,
        stream,
        address: str,
        *,
        platform: str,
        batch_size: int | None,
        progress: bool,
        skip_nonfinite: bool,
        tasks: int | None = None,
    ):
        if not hasattr(stream, "fragments"):
            raise ConfigError(
                "--ray reads files: give a dataset folder, file or URI (not batches from Python)"
            )
        self.ray = connect(address)
        self.address = address
        self.stream = stream
        self.platform = platform
        self.batch_override = batch_size
        self.progress = progress
        self.skip_nonfinite = skip_nonfinite
        self.batch_sizes: dict[str, int] = {}
        self.compiled: set = set()
        cpus = int(self.ray.cluster_resources().get("CPU", 1))
        self.groups = group_files(stream, tasks or TASKS_PER_CPU * max(1, cpus))
        self.group_limit: int | None = None  # groups covered by a pass stopped by a time budget
        self.first = stream.chunk_at(stream.order[0])  # the shift/center chunk, as locally
        self.stream_ref = self.ray.put(stream)
        self.returned_bytes: list[int] = []  # pickled partial states, per task (the docs' sizes)
        self.sent_bytes: list[int] = []  # pickled task arguments, per task (the stream apart)
        self.stream_bytes = len(pickle.dumps(stream, protocol=5))  # put once per run
        self.merge_seconds = 0.0  # the driver's share: merging states and folding moments
        self.task_merge_seconds: list[
            float
        ] = []  # per task and pass: unpacking + merging its state
        self.fold_seconds = 0.0  # per run: straddling blocks summed, all blocks folded in order
        self._starts: dict | None = None
        self._remote_group = self.ray.remote(run_group).options(
            max_retries=MAX_RETRIES, retry_exceptions=False, num_cpus=1
        )

    def traffic(self) -> dict:
        """What crossed the network and what the driver spent merging, for the run's facts."""
        return {
            "tasks": len(self.returned_bytes),
            "groups": len(self.groups),
            "stream_bytes": self.stream_bytes,
            "sent_bytes": list(self.sent_bytes),
            "returned_bytes": list(self.returned_bytes),
            "merge_seconds": self.merge_seconds,
            "task_merge_seconds": list(self.task_merge_seconds),
            "fold_seconds": self.fold_seconds,
        }

    def describe_devices(self) -> list[str]:
        return [f"ray task {i} ({self.platform})" for i in range(len(self.groups))]

    # --- where each group starts in each key's rows ---

    def _group_starts(self) -> dict[str, list[int]]:
        if self._starts is None:
            per_file = self._kept_per_file()
            starts = {}
            for key, kept in per_file.items():
                offset, starts[key] = 0, []
                for group in self.groups:
                    starts[key].append(offset)
                    offset += sum(kept[i] for i in group.indices)
            self._starts = starts
        return self._starts

    def _kept_per_file(self) -> dict[str, dict[int, int]]:
        stream = self.stream
        counted = None
        # rows per file per key not known from the metadata: sampled action chunks, and chunks
        # built row by row (`stream.chunk_transform`: H rows per frame, per-step keys)
        if (stream.sample is not None and stream.horizons) or stream.chunk_transform is not None:
            remote = self.ray.remote(count_group).options(max_retries=MAX_RETRIES, num_cpus=1)
            refs = [remote.remote(self.stream_ref, g.indices) for g in self.groups]
            counted = {}
            for group, counts in zip(self.groups, self._get(refs), strict=True):
                for index, count in zip(group.indices, counts, strict=True):
                    counted[index] = count
        kept = {}
        keys = list(stream.keys)
        if counted is not None:  # with the keys only the chunks have ("actions@3")
            keys += sorted({k for rows in counted.values() for k in rows} - set(keys))
        for key in keys:
            kept[key] = {}
            for index, fragment in enumerate(stream.fragments):
                if counted is not None:
                    kept[key][index] = counted.get(index, {}).get(key, 0)
                elif stream.sample is None:
                    kept[key][index] = fragment.num_rows
                else:
                    lo, hi = np.searchsorted(
                        stream.sample,
                        [fragment.row_offset, fragment.row_offset + fragment.num_rows],
                    )
                    kept[key][index] = int(hi - lo)
        return kept

    # --- running tasks ---

    def _get(self, refs, progress=None, budget=None) -> list:
        """Results in order; the first failure (in group order) raised as the local run would."""
        ray = self.ray
        pending = list(refs)
        done: dict = {}
        index_of = {ref: i for i, ref in enumerate(refs)}
        while pending:
            timeout = (
                None if budget is None or budget.seconds is None else max(0.0, budget.remaining())
            )
            ready, pending = ray.wait(pending, num_returns=1, timeout=timeout)
            if not ready:  # the time budget ran out
                for ref in pending:
                    ray.cancel(ref, force=True)
                break
            for ref in ready:
                try:
                    done[index_of[ref]] = ray.get(ref)
                except Exception as exc:
                    for other in pending:
                        ray.cancel(other, force=True)
                    raise _user_error(exc) from None
                if progress is not None:
                    progress(index_of[ref], done[index_of[ref]])
        return [done.get(i) for i in range(len(refs))]

    def run_pass(
        self,
        label,
        make_spec,
        make_init,
        *,
        chunk_limit=None,
        budget=None,
        observer=None,
        stream=None,
        later_passes=None,
    ):
        from accelkit.runtime.progress import rows_progress
        from accelkit.stats import moments as mom
        from accelkit.stats import passes
        from accelkit.stats.compute import PassOutcome

        if observer is not None:
            raise ConfigError("per-episode statistics run on one machine; drop --ray")
        started = time.perf_counter()
        plan, dtypes = {}, {}
        moments_needed = False
        for key, column in self.first.items():
            dim = column.values.shape[1]
            if dim == 0:
                raise DataError(
                    f"column {self.stream.column_name(key)!r} has rows of width 0; choose a column that holds values"
                )
            spec = make_spec(key, dim, column.values.dtype == np.int64)
            if spec is None:
                continue
            moments_needed |= spec.with_moments
            dtypes[key] = column.values.dtype
            init = make_init(key, spec, column)
            plan[key] = {
                "spec": spec,
                "init": init._replace(counts=_pack(init.counts)),  # zeros: a few bytes
                "dim": dim,
                "dtype": column.values.dtype,
                "start": None,
            }
        groups = self.groups if chunk_limit is None else self.groups[: self.group_limit]
        starts = self._group_starts() if moments_needed else None
        refs = []
        for g, group in enumerate(groups):
            group_plan = {
                key: dict(p, start=starts[key][g] if starts is not None else None)
                for key, p in plan.items()
            }
            self.sent_bytes.append(
                len(pickle.dumps((group.indices, group_plan, self.platform), protocol=5))
            )
            refs.append(
                self._remote_group.remote(
                    self.stream_ref,
                    group.indices,
                    group_plan,
                    self.platform,
                    self.batch_override,
                    self.skip_nonfinite,
                )
            )
        files = sum(len(g.indices) for g in groups)
        with rows_progress(self.progress) as bar:
            task = bar.add_task(
                f"{label} on Ray: 0/{files} files", total=sum(g.rows for g in groups)
            )
            seen = [0]

            def advance(g, result):
                seen[0] += len(groups[g].indices)
                bar.update(
                    task,
                    advance=result["rows"],
                    description=f"{label} on Ray: {seen[0]}/{files} files",
                )

            results = self._get(refs, advance, budget)
        stopped_early = any(r is None for r in results)
        if stopped_early:  # the groups before the first unfinished one: a prefix of the stream
            covered = next(i for i, r in enumerate(results) if r is None)
            results, groups = results[:covered], groups[:covered]
            self.group_limit = covered
            if not results:
                raise DataError(
                    "the time budget ran out before any Ray task finished; raise --max-time-minutes"
                )
        merge_started = time.perf_counter()
        for result in results:
            self.returned_bytes.append(len(pickle.dumps(result, protocol=5)))
            for key, size in result["batch_sizes"].items():
                self.batch_sizes[key] = max(self.batch_sizes.get(key, 0), size)
            self.compiled.update(result["compiled"])
        if self.stream.horizons:
            _check_episodes(self.stream, [r["episodes"] for r in results])
        states = dict.fromkeys(plan)
        for result in results:  # in group order, as the keys' merges need
            task_started = time.perf_counter()
            for key in plan:
                if key not in result["states"]:
                    continue
                part = result["states"][key]
                part = part._replace(counts=_unpack(part.counts))
                states[key] = part if states[key] is None else passes.merge(states[key], part)
            self.task_merge_seconds.append(time.perf_counter() - task_started)
        fold_started = time.perf_counter()
        sums = {}
        if moments_needed:
            for key in plan:
                total = sum(r["kept"][key] for r in results)
                s1, s2 = _ordered_blocks(
                    results, key, total, plan[key]["init"].center, plan[key]["dim"], dtypes[key]
                )
                sums[key] = mom.fold(mom.empty_sums(plan[key]["dim"]), s1, s2)
        self.fold_seconds += time.perf_counter() - fold_started
        self.merge_seconds += time.perf_counter() - merge_started
        return PassOutcome(
            states,
            sums,
            sum(r["rows"] for r in results),
            sum(len(g.indices) for g in groups),
            stopped_early,
            time.perf_counter() - started,
        )


def _ordered_blocks(results, key, total: int, center, dim: int, dtype):
    """All block sums [ceil(total / 256), D] of a key in row order: whole blocks from the tasks,
    blocks that straddle tasks summed here from their rows by the same kernel."""
    from accelkit.stats import passes

    count = -(-total // BLOCK_ROWS)
    s1 = np.zeros((count, dim), np.float64)
    s2 = np.zeros((count, dim), np.float64)
    have = np.zeros(count, bool)
    pieces: dict[int, list] = {}
    for result in results:
        if key in result["blocks"]:
            first, b1, b2 = result["blocks"][key]
            s1[first : first + len(b1)], s2[first : first + len(b1)] = b1, b2
            have[first : first + len(b1)] = True
        for position, values, weight in result["edges"].get(key, []):
            pieces.setdefault(position // BLOCK_ROWS, []).append((position, values, weight))
    edge_blocks = sorted(pieces)
    if edge_blocks:
        x = np.zeros((len(edge_blocks) * BLOCK_ROWS, dim), dtype)
        w = np.zeros(len(edge_blocks) * BLOCK_ROWS, np.int32)
        for slot, block in enumerate(edge_blocks):
            filled = 0
            for position, values, weight in pieces[block]:
                at = slot * BLOCK_ROWS + position - block * BLOCK_ROWS
                x[at : at + len(weight)], w[at : at + len(weight)] = values, weight
                filled += len(weight)
            expected = min(BLOCK_ROWS, total - block * BLOCK_ROWS)
            if filled != expected or have[block]:
                raise RuntimeError(f"block {block} of {key!r}: {filled} rows, expected {expected}")
        e1, e2 = passes.moment_blocks(x, w, np.asarray(center, np.float32))
        s1[edge_blocks], s2[edge_blocks] = np.asarray(e1), np.asarray(e2)
        have[edge_blocks] = True
    if not have.all():
        raise RuntimeError(f"moments of {key!r}: blocks {np.flatnonzero(~have)[:5]} missing")
    return s1, s2


def _check_episodes(stream, per_group) -> None:
    """An episode in two files (of different groups) is the local run's error, word for word."""
    seen: dict[int, object] = {}
    for group in per_group:
        for index, episodes in group or []:
            path = stream.fragments[index].path
            for episode in episodes:
                if episode in seen and seen[episode] != path:
                    raise DataError(
                        f"episode {episode} spans {seen[episode]} and {path}; "
                        "action chunks need each episode inside one file"
                    )
                seen[episode] = path


def _user_error(exc: Exception) -> Exception:
    """The error a failed task carries: ours as it was raised (one line), others named."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, AccelkitError):
        return cause
    name = type(exc).__name__
    first = str(exc).strip().splitlines()[-1] if str(exc).strip() else ""
    return DeviceError(
        f"a Ray task failed after {MAX_RETRIES} retries ({name}: {first}); check the cluster's "
        "workers (ray status) and that accelkit and its stats extra are installed on every node"
    )
