"""Per-episode statistics, exact, computed from the chunks the global pass already reads.

LeRobot keeps statistics per episode (v2.1 `meta/episodes_stats.jsonl`, v3.0 the `stats/...`
columns of `meta/episodes/`) and aggregates them on load. An episode is small (tens to thousands of
frames), so its statistics are computed directly with numpy in float64: mean, population std
(two-pass), min, max and `numpy.quantile` over the float64 values (integers: over the integers)
— each equal to numpy over the episode's rows widened to float64, by construction. `EpisodeCollector` sees every chunk of the first pass once, keeps only the rows of the
episode that may continue into the next chunk, and finishes every other episode right away, so its
memory is one episode per key plus the finished results (a few numbers per dimension).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from accelkit.errors import DataError
from accelkit.stats.types import Column, KeyStats


def episode_stats(values: np.ndarray, levels, skip_nonfinite: bool = False) -> KeyStats:
    """Statistics of one episode's rows `values` [N, D] (any numeric dtype), like numpy's."""
    values = np.asarray(values)
    if values.ndim == 1:
        values = values[:, None]
    levels = np.asarray(sorted({float(q) for q in levels}), np.float64)
    rows, dim = values.shape
    finite = np.isfinite(values) if values.dtype.kind == "f" else np.ones(values.shape, bool)
    nonfinite = (~finite).sum(axis=0).astype(np.int64)
    if nonfinite.any() and not skip_nonfinite:
        raise DataError("an episode holds NaN or Inf; pass --skip-nonfinite to exclude them")
    if not nonfinite.any():
        return _stats_of(values, levels, np.full(dim, rows, np.int64), nonfinite)
    # per dimension, over its finite values only (rare: only with --skip-nonfinite)
    parts = [_stats_of(values[finite[:, d], d : d + 1], levels, None, None) for d in range(dim)]
    return KeyStats(
        count=np.array([int(p.count[0]) for p in parts], np.int64),
        mean=np.concatenate([p.mean for p in parts]),
        std=np.concatenate([p.std for p in parts]),
        min=np.concatenate([p.min for p in parts]),
        max=np.concatenate([p.max for p in parts]),
        quantiles={q: np.concatenate([p.quantiles[q] for p in parts]) for q in parts[0].quantiles},
        nonfinite=nonfinite,
    )


def _stats_of(values: np.ndarray, levels: np.ndarray, count, nonfinite) -> KeyStats:
    rows, dim = values.shape
    if count is None:
        count = np.full(dim, rows, np.int64)
    if nonfinite is None:
        nonfinite = np.zeros(dim, np.int64)
    if rows == 0:
        nan = np.full(dim, np.nan)
        return KeyStats(
            count, nan, nan, nan.astype(np.float32), nan.astype(np.float32),
            {float(q): nan for q in levels}, nonfinite,
        )  # fmt: skip
    x64 = values.astype(np.float64)
    mean, std = x64.mean(axis=0), x64.std(axis=0)
    # float values: numpy.quantile over their float64 widening (numpy's own over float32 values
    # interpolates in float32); integers: over the integers, whose differences stay exact
    quantiles = np.quantile(x64 if values.dtype.kind == "f" else values, levels, axis=0)
    return KeyStats(
        count=count,
        mean=mean,
        std=std,
        min=values.min(axis=0),
        max=values.max(axis=0),
        quantiles={float(q): quantiles[i] for i, q in enumerate(levels)},
        nonfinite=nonfinite,
    )


@dataclass
class EpisodeResult:
    index: int
    stats: dict[str, KeyStats]  # per output key


class EpisodeCollector:
    """Consumes the chunks of one pass (in order) and finishes each episode as soon as it ends.

    An episode's rows must be contiguous in the stream (LeRobot files hold whole episodes in order);
    an episode that reappears after another one started is an error naming it.
    """

    def __init__(self, levels, skip_nonfinite: bool = False):
        self.levels = list(levels)
        self.skip_nonfinite = skip_nonfinite
        self.pending: dict[str, tuple[int, list[np.ndarray]]] = {}  # key -> (episode, row pieces)
        self.done: dict[int, dict[str, KeyStats]] = {}
        self.finished: dict[str, set[int]] = {}

    def add(self, chunk: Mapping[str, Column]) -> None:
        for key, column in chunk.items():
            if column.episode is None:
                raise DataError(
                    "per-episode statistics need an episode_index per row; this source has none"
                )
            episode = column.episode
            if not len(episode):
                continue
            starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
            stops = np.r_[starts[1:], len(episode)]
            for a, b in zip(starts, stops, strict=True):
                self._extend(key, int(episode[a]), column.values[a:b])

    def _extend(self, key: str, episode: int, rows: np.ndarray) -> None:
        current = self.pending.get(key)
        if current is not None and current[0] == episode:
            current[1].append(rows)
            return
        if current is not None:
            self._finish(key, *current)
        if episode in self.finished.get(key, ()):
            raise DataError(
                f"episode {episode} appears again after other episodes; per-episode statistics need "
                "each episode's rows together, in one place of the dataset"
            )
        self.pending[key] = (episode, [rows])

    def _finish(self, key: str, episode: int, pieces: list[np.ndarray]) -> None:
        values = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        try:
            stats = episode_stats(values, self.levels, self.skip_nonfinite)
        except DataError as exc:
            raise DataError(f"episode {episode}, key {key!r}: {exc}") from exc
        self.done.setdefault(episode, {})[key] = stats
        self.finished.setdefault(key, set()).add(episode)

    def finish(self) -> list[EpisodeResult]:
        for key, (episode, pieces) in list(self.pending.items()):
            self._finish(key, episode, pieces)
        self.pending.clear()
        return [EpisodeResult(e, self.done[e]) for e in sorted(self.done)]
