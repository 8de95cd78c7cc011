"""Row bookkeeping of the file stream (`stats/formats/sources.py`): how often each row counts in action
chunks, where a frame's episode ends, how many rows a chunk holds, and a reader task's queue."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from accelkit.errors import DataError


def chunk_weights(episode: np.ndarray, sampled: np.ndarray, horizon: int, end: str) -> np.ndarray:
    """How many times each row appears in the flattened action chunks of the sampled frames.

    episode: int64 [R] episode index per row (contiguous runs); sampled: bool [R].
    """
    weights = np.zeros(len(episode), np.int64)
    if len(episode) == 0:
        return weights.astype(np.int32)
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    stops = np.r_[starts[1:], len(episode)]
    for a, b in zip(starts, stops, strict=True):
        s = sampled[a:b].astype(np.int64)
        cumulative = np.cumsum(s)
        lagged = np.r_[
            np.zeros(min(horizon, b - a), np.int64), cumulative[: max(0, b - a - horizon)]
        ]
        w = cumulative - lagged  # sampled frames t with j - H < t <= j
        if end == "clamp":
            length = b - a
            t = np.arange(length)
            w[-1] += int((s * np.maximum(0, t + horizon - length)).sum())
        weights[a:b] = w
    if weights.max(initial=0) > np.iinfo(np.int32).max:
        raise DataError("action horizon too large: a row's multiplicity overflows int32")
    return weights.astype(np.int32)


def last_rows(episode: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """The last row of each frame's episode (episodes contiguous in `episode`)."""
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    ends = np.r_[starts[1:], len(episode)]
    return ends[np.searchsorted(starts, frames, side="right") - 1] - 1


def rows_of(columns: dict, episodes: np.ndarray | None) -> int:
    if columns:
        return len(next(iter(columns.values())))
    return 0 if episodes is None else len(episodes)


def chunk_rows(chunk: dict) -> int:
    return max((len(column.weight) for column in chunk.values()), default=0)


def drain(pieces) -> Iterator:
    """A task's pieces (or chunks) from its reader thread's queue, in order; its error raised
    here."""
    while True:
        kind, item = pieces.get()
        if kind == "end":
            return
        if kind == "error":
            raise item
        if kind == "items":
            yield from item
        else:
            yield item
