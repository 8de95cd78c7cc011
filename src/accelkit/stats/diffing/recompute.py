"""What each side of `stats diff` may be, recomputed from the dataset (`diff_causes.Hypothesis`).

In the order they are tried, simplest first (a file's number takes the first that gives it back):

1. the exact statistics of every frame (the engine, `compute_stats`);
2. a LeRobot file: LeRobot's own per-episode arithmetic on every episode's rows (0.4's float32
   E[x²] − E[x]² and 5000-bin quantiles, 0.3's numpy moments; each also on the values widened to
   float64), aggregated as its `aggregate_stats` does (`stats/upstream/lerobot.py`); and the exact
   per-episode statistics aggregated that way (quantiles averaged);
3. the actions: exact statistics of action chunks for every horizon and end-of-episode rule the
   files' run facts, `--action-horizon` / `--chunk-end` or the file's count imply (a count of
   N·H is H-step chunks with clamp, Σ min(H, L − t) truncated), plain and with every action
   dimension the state covers made relative to the state (openpi's DeltaActions, dimension by
   dimension: each dimension's statistics depend on it alone);
4. the exact statistics of the dataset's first episodes, when a file's count is that of fewer
   episodes (frames or chunks): a dataset that has grown since the file was written;
5. an openpi file: openpi's RunningStats over the batches its compute_norm_stats.py reads
   (`stats/upstream/openpi.py`), both re-binning variants, with the exact statistics of the same
   rows.

Each is computed once, when a side still has a differing number that nothing before it gave
back, and only for the columns that need it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import closing
from pathlib import Path

import numpy as np

from accelkit.runtime.progress import Steps, phase
from accelkit.stats.core import action_chunks as transforms
from accelkit.stats.core.quantiles import quantile_name
from accelkit.stats.core.tolerance import exact_values
from accelkit.stats.diffing.causes import Hypothesis
from accelkit.stats.engine.driver import compute_stats
from accelkit.stats.formats import readers
from accelkit.stats.formats.sources import open_source
from accelkit.stats.types import Column, Stream
from accelkit.stats.upstream import lerobot as lerobot_rules
from accelkit.stats.upstream import openpi as openpi_rules

GROUP_FRAMES = 1 << 12  # openpi's batches regrouped for the engine (rows and order unchanged)


class FirstRows(Stream):
    """The rows of `stream` before global row `rows` (an episode boundary: action chunks never
    cross one, so the first episodes' chunks are whole)."""

    def __init__(self, stream, rows: int):
        self.stream, self.rows, self.total_rows = stream, rows, rows

    def chunks(self) -> Iterator[dict[str, Column]]:
        with closing(self.stream.chunks()) as chunks:
            for chunk in chunks:
                if all(len(c.row_id) and c.row_id.min() >= self.rows for c in chunk.values()):
                    return
                out = {}
                for key, c in chunk.items():
                    keep = c.row_id < self.rows
                    out[key] = Column(
                        c.values[keep],
                        c.weight[keep],
                        c.row_id[keep],
                        None if c.episode is None else c.episode[keep],
                    )
                yield out

    def column_name(self, key: str) -> str:
        return self.stream.column_name(key)

    def describe_row(self, key: str, row_id: int) -> str:
        return self.stream.describe_row(key, row_id)

    def freeze(self) -> None:
        self.stream.freeze()


def chunk_count(lengths: np.ndarray, horizon: int, end: str) -> np.ndarray:
    """Action-chunk elements per episode of `lengths` frames."""
    lengths = np.asarray(lengths, np.int64)
    if end == "clamp":
        return lengths * horizon
    inside = np.minimum(lengths, horizon)
    return lengths * inside - inside * (inside - 1) // 2  # Σ_t min(H, L − t)


def horizons_of(count: float, lengths: np.ndarray) -> list[tuple[int, str]]:
    """The (horizon, end) whose chunks hold `count` elements over episodes of `lengths`."""
    frames = int(lengths.sum())
    out = []
    if count > frames and count % frames == 0:
        out.append((int(count // frames), "clamp"))
    for horizon in range(2, int(lengths.max(initial=1)) + 1):
        if int(chunk_count(lengths, horizon, "truncate").sum()) == count:
            out.append((horizon, "truncate"))
            break
    return out


def parse_mask(facts: Mapping) -> tuple[bool, ...] | None:
    """The DeltaActions mask a sidecar records (`actions_transform.transforms`), or None."""
    transforms = (facts.get("actions_transform") or {}).get("transforms") or []
    for name in transforms:
        found = re.fullmatch(r"DeltaActions\(([01]+)\)", str(name))
        if found:
            return tuple(c == "1" for c in found.group(1))
    return None


def _sampled(sample: tuple[int, int] | None) -> dict:
    return {} if sample is None else {"max_frames": sample[0], "seed": sample[1]}


def _chunks_name(horizon: int, end: str) -> str:
    return f"{horizon}-step action chunks ({end})"


class Recomputer:
    """The hypotheses of one dataset, each computed on first use and kept."""

    def __init__(
        self,
        root: Path,
        levels: list[float],
        *,
        state: str,
        actions: str,
        numeric: set[str],
        columns: set[str],
        progress: bool = False,
    ):

        self.root, self.levels, self.progress = root, levels, progress
        self.state, self.actions, self.numeric = state, actions, numeric
        self.columns = {c for c in columns | {state, actions} if c in numeric}
        self.names = {float(q): quantile_name(q) for q in levels}
        source = open_source(root, keys={c: c for c in sorted(numeric)[:1]}).lerobot
        assert source is not None  # `root` is a LeRobot dataset
        self.source = source
        self.lengths = np.asarray([e.length for e in self.source.episodes], np.int64)
        self.frames = int(self.lengths.sum())
        self._cache: dict = {}

    # --- the engine ------------------------------------------------------------------------

    def _exact(self, stream, per_episode: bool = False):

        result = compute_stats(
            stream, quantiles=self.levels, progress=self.progress, per_episode=per_episode
        )
        values = {k: exact_values(s, self.names) for k, s in result.stats.items()}
        episodes = {
            e.index: {k: exact_values(s, self.names) for k, s in e.stats.items()}
            for e in result.episodes or []
        }
        return values, episodes

    def _cached(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def frames_exact(self):
        """(column -> exact statistics of every frame, episode -> column -> exact statistics), of
        every column either file describes (and the state and actions)."""

        def make():
            phase(f"recomputing: the exact statistics of every frame of {self.root}")
            keys = {c: c for c in sorted(self.columns)}
            return self._exact(open_source(self.root, keys=keys), per_episode=True)

        return self._cached("frames", make)

    def dims(self, column: str) -> int:
        values, _ = self.frames_exact()
        return values[column]["mean"].size if column in values else 0

    def chunks(
        self,
        horizon: int,
        end: str,
        delta: bool,
        rows: int | None = None,
        sample: tuple[int, int] | None = None,
    ):
        """Exact statistics of the actions' chunks (delta: every dimension the state covers
        made relative to it), of the first `rows` frames' episodes, of a `sample` (frames,
        seed: accelkit's `--max-frames`), or of all."""

        def make():
            phase(f"recomputing: {_chunks_name(horizon, end)}{' relative to the state' * delta}")
            if delta:
                width = min(self.dims(self.state), self.dims(self.actions))
                spec = transforms.ChunkTransform(
                    horizon=horizon,
                    end=end,
                    transforms=(transforms.DeltaActions((True,) * width),),
                    names=("DeltaActions",),
                )
                stream = open_source(
                    self.root,
                    keys={"state": self.state, "actions": self.actions},
                    chunk_transform=spec,
                    **_sampled(sample),
                )
            else:
                stream = open_source(
                    self.root,
                    keys={"actions": self.actions},
                    action_horizon=horizon,
                    chunk_end=end,
                    **_sampled(sample),
                )
            values, _ = self._exact(stream if rows is None else FirstRows(stream, rows))
            return values["actions"]

        return self._cached(("chunks", horizon, end, delta, rows, sample), make)

    def some_frames(self, column: str, rows: int | None, sample: tuple[int, int] | None = None):
        """Exact statistics of the first `rows` frames, or of a `sample` (frames, seed)."""

        def make():
            stream = open_source(self.root, keys={column: column}, **_sampled(sample))
            values, _ = self._exact(stream if rows is None else FirstRows(stream, rows))
            return values[column]

        return self._cached(("some", column, rows, sample), make)

    # --- LeRobot's and openpi's own arithmetic --------------------------------------------

    def lerobot(self, columns: set[str], levels: list[float]):
        """column -> [(rule, precision, LeRobot's aggregate of its per-episode statistics)]."""

        def make():
            wanted_columns = sorted(columns & self.numeric)
            per: dict[str, list] = {c: [] for c in wanted_columns}
            wanted = {e.index: set(wanted_columns) for e in self.source.episodes if e.length}
            steps = Steps(1, "recomputing LeRobot's per-episode arithmetic: files")

            def show(done, total, what):
                steps.total, steps.done = max(total, 1), done
                if self.progress:
                    steps.show(what)

            for _, column, rows in readers.episode_rows(self.source, wanted, progress=show):
                found = lerobot_rules.candidates(rows, levels, native=True)
                if not per[column]:
                    per[column] = [(precision, []) for precision, _ in found]
                for (_, slot), (_, stats) in zip(per[column], found, strict=True):
                    slot.append(stats)
            out: dict[str, list] = {}
            for column, slots in per.items():
                out[column] = []
                for i, (precision, slot) in enumerate(slots):
                    rule = "lerobot-0.4" if i % 2 == 0 else "lerobot-0.3"
                    wide = [{k: np.asarray(v, np.float64) for k, v in e.items()} for e in slot]
                    out[column].append((rule, precision, lerobot_rules.fold(slot)))
                    out[column].append((rule, precision, lerobot_rules.aggregate(wide)))
            return out

        return self._cached(("lerobot", tuple(sorted(columns)), tuple(levels)), make)

    def averaged(self, column: str):
        _, episodes = self.frames_exact()
        return lerobot_rules.aggregate(
            [e[column] for _, e in sorted(episodes.items()) if column in e]
        )

    def openpi(self, horizon: int, batch_size: int, mask: tuple[bool, ...], pad: bool = False):
        """openpi's RunningStats of state and actions (`pad`: the re-binning variant), and the
        exact statistics of the same rows: ({"state": stats, "actions": stats}, exact, frames)."""
        from accelkit.runtime.progress import Steps, phase

        def episodes():
            wanted = {e.index: {self.state, self.actions} for e in self.source.episodes}
            held: dict[int, dict] = {}
            for episode, column, rows in readers.episode_rows(self.source, wanted):
                held.setdefault(episode, {})[column] = rows
                if len(held[episode]) == len({self.state, self.actions}):
                    both = held.pop(episode)
                    yield both[self.state], both[self.actions]

        def batches():
            return openpi_rules.batches(
                episodes(), horizon=horizon, batch_size=batch_size, frames=self.frames, mask=mask
            )

        def grouped():  # the same rows in the same order, fewer batches for the engine
            held: list[dict] = []
            for batch in batches():
                held.append(batch)
                if len(held) * batch_size >= GROUP_FRAMES:
                    yield {k: np.concatenate([b[k] for b in held]) for k in held[0]}
                    held = []
            if held:
                yield {k: np.concatenate([b[k] for b in held]) for k in held[0]}

        def exact():
            phase("recomputing: the exact statistics of the rows openpi counts")
            found = compute_stats(grouped, quantiles=self.levels, progress=self.progress)
            return {k: exact_values(s, self.names) for k, s in found.stats.items()}

        def make():
            counted = self.frames // batch_size * batch_size
            if counted == 0:
                return None
            steps = Steps(counted // batch_size, "recomputing openpi's RunningStats: batches")
            running = {k: openpi_rules.RunningStats(pad) for k in ("state", "actions")}
            for number, batch in enumerate(batches(), 1):
                for key, stats in running.items():
                    stats.update(batch[key])
                if self.progress and number % 64 == 0:
                    steps.done = number
                    steps.show()
            return (
                {k: s.statistics() for k, s in running.items()},
                self._cached(("openpi-exact", horizon, batch_size, mask), exact),
                counted,
            )

        return self._cached(("openpi", horizon, batch_size, mask, pad), make)


def hypotheses_for(
    recompute: Recomputer,
    side,
    key: str,
    *,
    other,
    action_horizon: int | None,
    chunk_end: str | None,
    delta_mask: tuple[bool, ...] | None,
    batch_size: int,
) -> Iterator[Hypothesis]:
    """Every hypothesis for `side`'s `key`, simplest first, each computed when reached."""
    column = side.columns[key]
    if column not in recompute.numeric:
        return
    levels_here = sorted(
        {float(s[1:]) / 100 for s in side.entries[key] if re.fullmatch(r"q\d\d(\.\d+)?", s)}
    )
    frames, _ = recompute.frames_exact()
    yield Hypothesis("exact", "exact statistics of every frame", frames[column])
    if side.format == "lerobot":
        for rule, precision, values in recompute.lerobot({column}, levels_here).get(column, []):
            if values:
                version = rule.split("-")[1]
                yield Hypothesis(
                    rule,
                    f"LeRobot {version}'s per-episode statistics ({precision}), aggregated",
                    values,
                    precision=precision,
                    exact=frames[column],
                )
        yield Hypothesis(
            "averaged",
            "the exact per-episode statistics, aggregated as LeRobot does",
            recompute.averaged(column),
            exact=frames[column],
        )
    count = side.entries[key].get("count")
    count = float(np.max(count)) if count is not None and count.size else None
    rules = chunk_rules(recompute, side, other, count, action_horizon, chunk_end)
    is_actions = column == recompute.actions
    delta = recompute.state in recompute.numeric and recompute.dims(recompute.state) > 0
    width = min(recompute.dims(recompute.state), recompute.dims(recompute.actions)) if delta else 0
    if is_actions:
        for horizon, end in rules:
            name = _chunks_name(horizon, end)
            yield Hypothesis(
                "exact",
                f"exact statistics of {name}",
                recompute.chunks(horizon, end, False),
                data=name,
            )
            if delta:
                yield Hypothesis(
                    "exact",
                    f"exact statistics of {name} relative to the state (DeltaActions)",
                    recompute.chunks(horizon, end, True),
                    data=name,
                    delta=frozenset(range(width)),
                )
    if count is not None and count < _full_count(recompute, is_actions, rules):
        yield from _first_episodes(recompute, column, count, is_actions, rules, delta, width)
    yield from _sample(recompute, side, column, is_actions, delta, width)
    both = {recompute.state, recompute.actions} <= recompute.numeric
    if side.format == "openpi" and both and column in (recompute.state, recompute.actions):
        yield from _openpi(recompute, side, key, rules, delta_mask, batch_size, delta, width)


def chunk_rules(recompute, side, other, count, action_horizon, chunk_end) -> list[tuple[int, str]]:
    """The (horizon, end) candidates: both files' run facts, the options, the side's count."""
    out = []
    for facts in (side.facts, other.facts):
        transform = facts.get("actions_transform") or {}
        horizon = facts.get("action_horizon") or transform.get("horizon")
        end = facts.get("chunk_end") or transform.get("chunk_end") or "truncate"
        if horizon and int(horizon) > 1:
            out.append((int(horizon), str(end)))
    if action_horizon and action_horizon > 1:
        for end in [chunk_end] if chunk_end else ["clamp", "truncate"]:
            out.append((int(action_horizon), end))
    if count is not None and count != recompute.frames:
        out.extend(horizons_of(count, recompute.lengths))
    return list(dict.fromkeys(out))


def _full_count(recompute, is_actions, rules) -> float:
    counts = [recompute.frames]
    if is_actions:
        counts += [int(chunk_count(recompute.lengths, h, e).sum()) for h, e in rules]
    return max(counts)


def _first_episodes(recompute, column, count, is_actions, rules, delta, width):
    """The exact statistics of the first k episodes whose frames (or chunks) `count` is."""
    frames = np.cumsum(recompute.lengths)
    options = [("frames", recompute.lengths, None)]
    if is_actions:
        options += [
            (_chunks_name(h, e), chunk_count(recompute.lengths, h, e), (h, e)) for h, e in rules
        ]
    for data, per_episode, rule in options:
        cumulative = np.cumsum(per_episode)
        hits = np.flatnonzero(cumulative[:-1] == count)
        if not len(hits):
            continue
        k = int(hits[0]) + 1
        rows = int(frames[k - 1])
        what = f"the first {k} of {len(frames)} episodes ({rows:,} of {recompute.frames:,} frames)"
        if rule is None:
            yield Hypothesis(
                "exact",
                f"exact statistics of {what}",
                recompute.some_frames(column, rows),
                frames=what,
            )
            continue
        for with_delta in (False, True) if delta else (False,):
            yield Hypothesis(
                "exact",
                f"exact statistics of {data}{' relative to the state' * with_delta} of {what}",
                recompute.chunks(rule[0], rule[1], with_delta, rows),
                data=data,
                delta=frozenset(range(width)) if with_delta else frozenset(),
                frames=what,
            )


def _sample(recompute, side, column, is_actions, delta, width):
    """The exact statistics of the seeded sample of frames a file's run facts record
    (accelkit's `--max-frames N --seed S`), of frames or of the chunks its facts name."""
    frames, seed = side.facts.get("max_frames"), side.facts.get("seed") or 0
    if not frames or int(frames) >= recompute.frames:
        return
    sample = (int(frames), int(seed))
    what = f"a sample of {sample[0]:,} of {recompute.frames:,} frames (seed {sample[1]})"
    yield Hypothesis(
        "exact",
        f"exact statistics of {what}",
        recompute.some_frames(column, None, sample),
        frames=what,
    )
    horizon = side.facts.get("action_horizon")
    if not is_actions or not horizon or int(horizon) < 2:
        return
    end = side.facts.get("chunk_end") or "truncate"
    data = _chunks_name(int(horizon), end)
    for with_delta in (False, True) if delta else (False,):
        yield Hypothesis(
            "exact",
            f"exact statistics of {data}{' relative to the state' * with_delta} of {what}",
            recompute.chunks(int(horizon), end, with_delta, sample=sample),
            data=data,
            delta=frozenset(range(width)) if with_delta else frozenset(),
            frames=what,
        )


def _openpi(recompute, side, key, rules, delta_mask, batch_size, delta, width):
    """openpi's RunningStats over the rows its loader gives (clamped chunks), both variants."""
    horizons = list(dict.fromkeys(h for h, _ in rules)) or [1]
    is_actions = side.columns[key] == recompute.actions
    for horizon in horizons:
        mask = delta_mask if delta_mask is not None else parse_mask(side.facts)
        if mask is None:
            mask = _inferred_mask(recompute, side, horizon, width) if delta else ()
        for pad in (False, True):
            found = recompute.openpi(horizon, batch_size, tuple(mask), pad)
            if found is None:
                return
            values, exact, counted = found
            name = "actions" if is_actions else "state"
            data = _chunks_name(horizon, "clamp") if is_actions and horizon > 1 else "frames"
            dims = frozenset(d for d, m in enumerate(mask) if m) if is_actions else frozenset()
            what = (
                ""
                if counted == recompute.frames
                else (f"the first {counted:,} of {recompute.frames:,} frames")
            )
            yield Hypothesis(
                "openpi",
                f"openpi's RunningStats of {data}{' with DeltaActions' * bool(dims)}, batches of"
                f" {batch_size}{(': ' + what) if what else ''}"
                f"{' (re-binned edges padded)' if pad else ''}",
                values[name],
                data=data,
                delta=dims,
                frames=what,
                precision="float32",
                exact=exact[name],
            )


def _inferred_mask(recompute, side, horizon, width) -> tuple[bool, ...]:
    """Which action dimensions a file holds relative to the state, by which exact mean its own
    is closer to (the recomputation then confirms it or not)."""
    keys = [k for k, c in side.columns.items() if c == recompute.actions]
    mean = side.entries[keys[0]].get("mean") if keys else None
    if mean is None or width == 0:
        return ()
    end = "clamp"
    plain = recompute.chunks(horizon, end, False)["mean"] if horizon > 1 else None
    relative = recompute.chunks(horizon, end, True)["mean"] if horizon > 1 else None
    if plain is None or relative is None:  # both, with a horizon of 1
        return ()
    mask = [
        bool(d < mean.size and abs(mean[d] - relative[d]) < abs(mean[d] - plain[d]))
        for d in range(width)
    ]
    while mask and not mask[-1]:
        mask.pop()
    return tuple(mask)
