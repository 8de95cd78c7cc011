"""What a Ray task of `accelkit stats --ray` runs on a worker (`stats/engine/ray_runner.py` is the driver):
a pass over a group of files with the local runner, padded to the stream's 256-row moment blocks,
and the merges that join adjacent groups' results exactly (see `stats/engine/ray_runner.py`)."""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from accelkit.errors import DataError
from accelkit.runtime.devices import enable_compilation_cache
from accelkit.stats.core import fold_tree
from accelkit.stats.core.moments import BLOCK_ROWS, Sums
from accelkit.stats.engine.local_runner import LocalRunner
from accelkit.stats.engine.runner import HOST, choose_devices, x64_for
from accelkit.stats.kernel import host as host_passes
from accelkit.stats.kernel import state as pass_state
from accelkit.stats.types import Column, Stream

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
        values = np.concatenate([v for v, _ in parts])
        weight = np.concatenate([w for _, w in parts])
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
        runner = LocalRunner(source, devices, batch_size, False, skip_nonfinite, keep_blocks=True)
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
    assert outcome.blocks is not None  # the runner keeps them (keep_blocks)
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


def _episode_files(stream, indices) -> dict | None:
    """Episode -> the file that holds it, for the group's files (in order); an episode in two
    files is the local run's error."""
    owners: dict | None = {}
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


def _block_sums(x: np.ndarray, w: np.ndarray, center: np.ndarray, kernel: str):
    if kernel == "host":
        return host_passes.block_sums(x, w, center)
    import jax

    from accelkit.stats.kernel import device as passes

    with jax.enable_x64(True):
        s1, s2 = passes.moment_blocks(x, w, center)
        return np.asarray(s1), np.asarray(s2)


def _sums(merged: dict, key: str, info: dict):
    """A key's moment sums from the whole stream's merged result: its last block (cut short by
    the end of the stream) summed from its rows, then the tree's root."""

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
