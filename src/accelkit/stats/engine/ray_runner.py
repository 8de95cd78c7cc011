"""`accelkit stats --ray`: the same passes as Ray tasks over groups of a dataset's files.

The driver (this process) lists the files from the dataset's metadata (`sources.open_source`; each
task checks its own files' footers), cuts the stream's file order into contiguous groups, and runs
every pass as one Ray task per group (`stats/engine/ray_tasks.py`). Each task runs the local pass
code (`local_runner.LocalRunner` on the
host kernel, or the XLA one for fast mode) on its files and returns its partial result; merge
tasks combine `MERGE_FANIN` adjacent results at a time, level after level, so the driver receives
**one** result per pass whatever the number of tasks (it only waits on each task's few-byte
status, for progress, the time budget and the first error). Then it runs the exact protocol of
`engine._exact_passes` unchanged (pass-2 prefixes and centers go to the tasks with the pass). So
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
from dataclasses import dataclass

import numpy as np

from accelkit.errors import ConfigError, DataError
from accelkit.runtime.progress import rows_progress
from accelkit.runtime.ray_cluster import connect, task_error
from accelkit.stats.engine.ray_tasks import (
    _pack,
    _sums,
    _unpack,
    count_group,
    merge_results,
    run_group,
)
from accelkit.stats.engine.runner import PassOutcome

log = logging.getLogger(__name__)

MAX_RETRIES = 3  # attempts after a worker or node failure
TASKS_PER_CPU = 2  # groups per CPU of the cluster (by default): some balance, few partial states
MERGE_FANIN = 8  # results per merge task: the driver receives one result, from a tree of them


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
    """The `runner.Runner` protocol's `run_pass`, each pass run as Ray tasks over groups of files."""

    replays = False  # each pass reads its files again (on the workers)
    speculates = False  # windows do not merge across tasks: the radix passes run

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


def _user_error(exc: Exception) -> Exception:
    """The error a failed task carries, in one line (`runtime.ray_cluster.task_error`): a lost worker
    or object was retried MAX_RETRIES times first; an exception a task raised was not
    (retry_exceptions is off)."""
    return task_error(exc, "stats", MAX_RETRIES)
