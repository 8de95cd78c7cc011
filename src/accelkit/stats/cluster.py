"""`accelkit stats --ray`: the same passes as Ray tasks over groups of a dataset's files.

The driver (this process) lists the files from the dataset's metadata (`sources.open_source`; each
task checks its own files' footers), cuts the stream's file order into contiguous groups, and runs
every pass as one Ray task per group. Each task runs the local pass code (`compute.Runner` on the
host kernel, or the XLA one for fast mode) on its files and returns its partial result; merge
tasks combine `MERGE_FANIN` adjacent results at a time, level after level, so the driver receives
**one** result per pass whatever the number of tasks (it only waits on each task's few-byte
status, for progress, the time budget and the first error). Then it runs the exact protocol of
`compute._exact_passes` unchanged (pass-2 prefixes and centers go to the tasks with the pass). So
the results equal the local run's **bit for bit**:

* Histograms, counts, min/max and non-finite counts are integers: merged exactly in any order.
* The moments are float sums over fixed blocks of 256 consecutive rows of the stream, added up by
  a fixed tree over the blocks' positions (`fold_tree`), whatever computes them. The driver knows
  where every group starts in the stream (the rows each file contributes follow from the metadata
  and the sample; with sampling *and* action chunks a small counting round finds them), so each
  task is padded with weight-0 rows up to the block boundary before its first row: its whole
  blocks are then the stream's own blocks, summed by the same kernel and reduced into the tree's
  whole nodes (a `Span`). A block that straddles two groups is summed by neither: the tasks return
  its rows (at most 255 at each end) and the merge task that holds both neighbours sums it with
  the same kernel; the driver sums the stream's last block and adds the root.
* The shift of the moments and fast mode's center come from the stream's first chunk, read by the
  driver (as the local run takes them from the first chunk it reads).

What crosses the network per task and pass: the arguments (file group, pass specs, prefixes and
centers: a few KiB, the stream itself once per run through the object store) and the partial
result (histogram counts, sent sparse or in the narrowest integer type, whichever is smaller; the
moments' span, at most 2 x 15 nodes of 16 bytes per dimension per tree level; at most 510 edge
rows), to a merge task on the cluster. A task that dies (a killed worker, a lost node) is retried
by Ray (`MAX_RETRIES`); a bad file raises the same one-line `DataError` as the local run, and the
run stops with it (no retry: the file would be as bad the second time). A pass stopped by its time
budget merges the finished prefix of groups on the driver, with the same merge code.
"""

from __future__ import annotations

import logging
import pickle
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from accelkit.errors import ConfigError, DataError
from accelkit.runtime.cluster import connect, task_error
from accelkit.stats import fold_tree, pass_state
from accelkit.stats.moments import BLOCK_ROWS
from accelkit.stats.types import Column, Stream

log = logging.getLogger(__name__)

MAX_RETRIES = 3  # attempts after a worker or node failure
TASKS_PER_CPU = 2  # groups per CPU of the cluster (by default): some balance, few partial states
MERGE_FANIN = 8  # results per merge task: the driver receives one result, from a tree of them


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


def run_group(
    stream, indices, plan: dict, starts: dict | None, platform: str, batch_size, skip_nonfinite
):
    """One Ray task: a pass over the files `indices` of `stream`, as the local run makes it.

    `plan`: per key, the pass's spec and initial state and the key's dtype and width (the same
    for every task of the pass: put in the object store once); `starts`: per key, the global
    position of the group's first row in that key's rows (passes with moments).
    Returns a few-byte status for the driver and the group's result for the merge tasks: its
    partial state (packed), the span of its whole blocks' moment sums and its edge rows.
    """
    from accelkit.runtime.devices import enable_compilation_cache
    from accelkit.stats.compute import HOST, Runner, choose_devices, x64_for

    plan = {key: dict(p, start=(starts or {}).get(key)) for key, p in plan.items()}
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
    kernel = "host" if devices == [HOST] else "xla"
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
        "spans": {},
        "edges": {},
        "kept": {},
        "batch_sizes": dict(runner.batch_sizes),
        "compiled": sorted(map(repr, runner.compiled)),
        "episodes": _episode_files(stream, indices) if stream.horizons else None,
        "merge_seconds": [],
        "tasks": 1,
        "kernel": kernel,  # the straddling blocks are summed by the same kind of kernel
    }
    edges = outcome.observed
    for key, head in heads.items():
        start, kept = plan[key]["start"], edges.rows[key]
        base = (start - start % BLOCK_ROWS) // BLOCK_ROWS  # the padded stream's first block
        first_full = -(-start // BLOCK_ROWS)
        last_end = (start + kept) // BLOCK_ROWS
        s1, s2 = outcome.blocks.get(key, (np.zeros((0, 0)), np.zeros((0, 0))))
        if last_end > first_full:
            blocks = np.stack(
                [s1[first_full - base : last_end - base], s2[first_full - base : last_end - base]],
                axis=1,
            )
            result["spans"][key] = [fold_tree.from_blocks(first_full, blocks)]
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
    return {"rows": result["rows"]}, result


def _episode_files(stream, indices) -> dict:
    """Episode -> the file that holds it, for the group's files (in order); an episode in two
    files is the local run's error."""
    owners: dict = {}
    for index in indices:
        path = stream.fragments[index].path
        _, episodes = stream.reader.read(path, [])
        if episodes is not None:
            owners = _join_owners(owners, dict.fromkeys(np.unique(episodes).tolist(), path))
    return owners


def _join_owners(first: dict | None, then: dict | None) -> dict | None:
    """Two adjacent ranges' episode owners as one (the local run's error, word for word, for an
    episode in two files: action chunks need each episode inside one file)."""
    if first is None or then is None:
        return first if then is None else then
    joined = dict(first)
    for episode, path in then.items():
        if joined.setdefault(episode, path) != path:
            raise DataError(
                f"episode {episode} spans {joined[episode]} and {path}; "
                "action chunks need each episode inside one file"
            )
    return joined


def merge_results(context: dict, *results) -> dict:
    """Results of adjacent groups, in order, as one result of the same form: a Ray merge task
    (a tree of them, so the driver receives one result whatever the number of tasks) or, for a
    pass stopped by its time budget, the driver itself.

    States are merged in order (integers: exact anyway); the moments' spans of block sums are
    joined (`fold_tree`: the same bits however they are grouped), and a block that straddles two
    of the results, whose rows came as edges, is summed here once all its rows are present.
    `context`: per key with moments, its `center` (the shift), `dim` and `dtype`."""
    started = time.perf_counter()
    out = {
        "states": {},
        "rows": 0,
        "spans": {},
        "edges": {},
        "kept": {},
        "batch_sizes": {},
        "compiled": set(),
        "episodes": None,
        "merge_seconds": [],
        "tasks": 0,
        "kernel": results[0]["kernel"],
    }
    for result in results:
        out["rows"] += result["rows"]
        out["tasks"] += result["tasks"]
        out["compiled"].update(result["compiled"])
        out["merge_seconds"] += result["merge_seconds"]
        out["episodes"] = _join_owners(out["episodes"], result["episodes"])
        for key, size in result["batch_sizes"].items():
            out["batch_sizes"][key] = max(out["batch_sizes"].get(key, 0), size)
        for key, kept in result["kept"].items():
            out["kept"][key] = out["kept"].get(key, 0) + kept
        for key, part in result["states"].items():
            part = part._replace(counts=_unpack(part.counts))
            have = out["states"].get(key)
            out["states"][key] = part if have is None else pass_state.merge(have, part)
    out["states"] = {k: v._replace(counts=_pack(v.counts)) for k, v in out["states"].items()}
    out["compiled"] = sorted(out["compiled"])
    for key, info in context.items():
        spans = [span for result in results for span in result["spans"].get(key, [])]
        edges = [edge for result in results for edge in result["edges"].get(key, [])]
        out["spans"][key], out["edges"][key] = _settle(spans, edges, info, out["kernel"])
    out["merge_seconds"].append(time.perf_counter() - started)
    return out


def _settle(spans: list, edges: list, info: dict, kernel: str, total: int | None = None):
    """Blocks whose rows are all among `edges` summed and joined with the spans they touch.
    `kernel`: the kind the tasks summed their whole blocks with ("host": the compiled loop;
    "xla": fast mode, or the tasks ran on JAX devices) — XLA's CPU reads float32 denormals as 0
    and the host loop does not, so a straddling block is summed by the same kind. `total`: the
    key's rows in the whole stream, once known (the driver): its last block is then complete
    with fewer rows. Returns the joined spans and the edges of blocks still incomplete."""

    pieces: dict[int, list] = {}
    for position, values, weight in edges:
        pieces.setdefault(position // BLOCK_ROWS, []).append((position, values, weight))
    complete, waiting = [], []
    for block in sorted(pieces):
        filled = sum(len(weight) for _, _, weight in pieces[block])
        needed = BLOCK_ROWS if total is None else min(BLOCK_ROWS, total - block * BLOCK_ROWS)
        (complete if filled == needed else waiting).append(block)
    if complete:
        x = np.zeros((len(complete) * BLOCK_ROWS, info["dim"]), info["dtype"])
        w = np.zeros(len(complete) * BLOCK_ROWS, np.int32)
        for slot, block in enumerate(complete):
            for position, values, weight in pieces[block]:
                at = slot * BLOCK_ROWS + position - block * BLOCK_ROWS
                x[at : at + len(weight)], w[at : at + len(weight)] = values, weight
        s1, s2 = _block_sums(x, w, np.asarray(info["center"], np.float32), kernel)
        blocks = np.stack([s1, s2], axis=1)
        spans = spans + [
            fold_tree.from_blocks(b, blocks[i : i + 1]) for i, b in enumerate(complete)
        ]
    joined: list = []
    for span in sorted(spans, key=lambda span: span.start):
        if joined and joined[-1].stop == span.start:
            joined[-1] = fold_tree.join(joined[-1], span)
        elif joined and joined[-1].stop > span.start:
            raise RuntimeError(f"blocks summed twice near block {span.start}")
        else:
            joined.append(span)
    return joined, [piece for block in waiting for piece in pieces[block]]


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
        self.sent_bytes: list[int] = []  # the pickled pass plan, put once per pass
        self.stream_bytes = len(pickle.dumps(stream, protocol=5))  # put once per run
        self.returned_bytes: list[int] = []  # the merged result the driver receives, per pass
        self.tasks = 0  # group tasks run, all passes
        self.merge_tasks = 0  # merge tasks run, all passes
        self.task_merge_seconds: list[float] = []  # each merge task's (and a budget stop's) time
        self.submit_seconds = 0.0  # the driver submitting tasks and their merge tree
        self.merge_seconds = 0.0  # the driver's own share of the merge: the last block, the root
        self.fold_seconds = 0.0  # of which the moments' last block and the tree's root
        self._starts: dict | None = None
        self._remote_group = self.ray.remote(run_group).options(
            max_retries=MAX_RETRIES, retry_exceptions=False, num_cpus=1, num_returns=2
        )
        self._remote_merge = self.ray.remote(merge_results).options(
            max_retries=MAX_RETRIES, retry_exceptions=False, num_cpus=1
        )

    def traffic(self) -> dict:
        """What crossed the network and what the driver spent merging, for the run's facts."""
        return {
            "tasks": self.tasks,
            "merge_tasks": self.merge_tasks,
            "groups": len(self.groups),
            "stream_bytes": self.stream_bytes,
            "sent_bytes": list(self.sent_bytes),
            "returned_bytes": list(self.returned_bytes),
            "submit_seconds": self.submit_seconds,
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
                    log.debug("a Ray task failed", exc_info=exc)  # its traceback: --debug
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
        from accelkit.stats.compute import PassOutcome

        if observer is not None:
            raise ConfigError("per-episode statistics run on one machine; drop --ray")
        started = time.perf_counter()
        plan = {}
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
        context = (
            {
                key: {"center": p["init"].center, "dim": p["dim"], "dtype": p["dtype"]}
                for key, p in plan.items()
            }
            if moments_needed
            else {}
        )
        submit_started = time.perf_counter()
        plan_ref = self.ray.put(plan)  # once per pass, not once per task
        self.sent_bytes.append(len(pickle.dumps(plan, protocol=5)))
        statuses, results = [], []
        for g, group in enumerate(groups):
            group_starts = {key: starts[key][g] for key in plan} if starts is not None else None
            status, result = self._remote_group.remote(
                self.stream_ref,
                group.indices,
                plan_ref,
                group_starts,
                self.platform,
                self.batch_override,
                self.skip_nonfinite,
            )
            statuses.append(status)
            results.append(result)
        root, merges = self._merge_tree(results, context)
        self.submit_seconds += time.perf_counter() - submit_started
        self.tasks += len(groups)
        self.merge_tasks += len(merges)
        files = sum(len(g.indices) for g in groups)
        with rows_progress(self.progress) as bar:
            task = bar.add_task(
                f"{label} on Ray: 0/{files} files", total=sum(g.rows for g in groups)
            )
            seen = [0]

            def advance(g, status):
                seen[0] += len(groups[g].indices)
                bar.update(
                    task,
                    advance=status["rows"],
                    description=f"{label} on Ray: {seen[0]}/{files} files",
                )

            try:
                done = self._get(statuses, advance, budget)
            except BaseException:
                self._cancel(merges)
                raise
        stopped_early = any(status is None for status in done)
        merge_started = time.perf_counter()
        if stopped_early:  # the groups before the first unfinished one: a prefix of the stream
            self._cancel(merges)
            covered = next(i for i, status in enumerate(done) if status is None)
            groups = groups[:covered]
            self.group_limit = covered
            if not covered:
                raise DataError(
                    "the time budget ran out before any Ray task finished; raise --max-time-minutes"
                )
            merged = merge_results(context, *self._get(results[:covered]))
        else:
            merged = self._get([root])[0]
        self.returned_bytes.append(len(pickle.dumps(merged, protocol=5)))
        self.batch_sizes.update(
            {k: max(v, self.batch_sizes.get(k, 0)) for k, v in merged["batch_sizes"].items()}
        )
        self.compiled.update(merged["compiled"])
        self.task_merge_seconds += merged["merge_seconds"]
        states = dict.fromkeys(plan)
        for key, part in merged["states"].items():
            states[key] = part._replace(counts=_unpack(part.counts))
        fold_started = time.perf_counter()
        sums = {key: _sums(merged, key, info) for key, info in context.items()}
        self.fold_seconds += time.perf_counter() - fold_started
        self.merge_seconds += time.perf_counter() - merge_started
        return PassOutcome(
            states,
            sums,
            merged["rows"],
            files if not stopped_early else sum(len(g.indices) for g in groups),
            stopped_early,
            time.perf_counter() - started,
        )

    def _merge_tree(self, results: list, context: dict):
        """Merge tasks over the groups' results, MERGE_FANIN adjacent ones each, level after
        level, until one result is left: its reference and the merge tasks'."""
        level, merges = list(results), []
        while len(level) > 1:
            parents = []
            for i in range(0, len(level), MERGE_FANIN):
                members = level[i : i + MERGE_FANIN]
                if len(members) == 1:
                    parents.append(members[0])
                    continue
                parents.append(self._remote_merge.remote(context, *members))
                merges.append(parents[-1])
            level = parents
        return level[0], merges

    def _cancel(self, refs) -> None:
        for ref in refs:
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # already finished, or its worker gone
                log.debug("could not cancel a merge task", exc_info=True)


def _block_sums(x: np.ndarray, w: np.ndarray, center: np.ndarray, kernel: str):
    if kernel == "host":
        from accelkit.stats import host_passes

        return host_passes.block_sums(x, w, center)
    import jax

    from accelkit.stats import passes

    with jax.enable_x64(True):
        s1, s2 = passes.moment_blocks(x, w, center)
        return np.asarray(s1), np.asarray(s2)


def _sums(merged: dict, key: str, info: dict):
    """A key's moment sums from the whole stream's merged result: its last block (cut short by
    the end of the stream) summed from its rows, then the tree's root."""
    from accelkit.stats.moments import Sums

    total = merged["kept"].get(key, 0)
    spans, waiting = _settle(
        merged["spans"].get(key, []),
        merged["edges"].get(key, []),
        info,
        merged["kernel"],
        total=total,
    )
    blocks = -(-total // BLOCK_ROWS)
    if waiting or (blocks and (len(spans) != 1 or (spans[0].start, spans[0].stop) != (0, blocks))):
        covered = [(span.start, span.stop) for span in spans]
        raise RuntimeError(f"moments of {key!r}: blocks {covered} of {blocks}, rows left over")
    s1, s2 = fold_tree.total(spans[0] if spans else fold_tree.empty(), info["dim"])
    return Sums(s1, s2)


def _user_error(exc: Exception) -> Exception:
    """The error a failed task carries, in one line (`runtime.cluster.task_error`): a lost worker
    or object was retried MAX_RETRIES times first; an exception a task raised was not
    (retry_exceptions is off)."""
    return task_error(exc, "stats", MAX_RETRIES)
