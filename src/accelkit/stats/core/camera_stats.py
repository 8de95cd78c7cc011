"""Statistics of a LeRobot dataset's cameras: per-channel min, max, mean, std and quantiles of the
pixel values in [0, 1], globally and per episode, in LeRobot's shapes ((3, 1, 1) per statistic).

LeRobot computes these when it records an episode (`compute_episode_stats` in
`lerobot.datasets.compute_stats`): from a sample of the episode's frames (`sample_indices`: all of
them up to 100 frames, then `len ** 0.75` up to 10,000, evenly spaced and rounded), each frame
subsampled by a stride when its larger side reaches 300 px (`auto_downsample_height_width`: stride
`int(side / 150)` of the larger side), uint8 values divided by 255. `--images sample` follows that
rule, frame for frame; `--images all` counts every pixel of every frame.

The state is the per-channel histogram of the uint8 values (`PixelCounts`): merging is adding
integers, so episodes, files and runs combine exactly in any order, and every statistic follows
from it exactly — mean as numpy computes it from the exact integer sum (`sum / n`, then `/ 255`,
the operations LeRobot's `np.mean` of uint8 values performs), the population std from exact
integer sums (LeRobot 0.4.4's own std squares the uint8 values in uint8, which wraps, and writes 0
for nearly every camera; LeRobot 0.3's `np.std` is what we compute), min/max, and quantiles equal
to `numpy.quantile` (method 'linear') over the counted values, divided by 255 (LeRobot 0.4.4's are
histogram estimates).

The files (videos, image columns) are read by `accelkit.stats.formats.video`; everything here is
pure and works on uint8 frames [N, H, W, C].
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from accelkit.errors import DataError
from accelkit.stats.core.quantiles import linear_targets, numpy_lerp

IMAGE_MODES = ("none", "sample", "all")
CAMERA_DTYPES = ("video", "image")

# --- LeRobot's sampling rule, written out ---------------------------------------------------------


def sample_count(length: int, least: int = 100, most: int = 10_000, power: float = 0.75) -> int:
    """How many frames of an episode of `length` frames LeRobot reduces: every frame up to `least`,
    then `int(length ** power)` capped at `most` (`estimate_num_samples`)."""
    if length < least:
        return length
    return max(least, min(int(length**power), most))


def sample_frames(length: int) -> np.ndarray:
    """The frame indices LeRobot samples: `sample_count` of them, evenly spaced over the episode
    and rounded half to even (`np.round(np.linspace(0, length - 1, n))`)."""
    return np.round(np.linspace(0, length - 1, sample_count(length))).astype(np.int64)


def downsample(frame: np.ndarray, target: int = 150, threshold: int = 300) -> np.ndarray:
    """A [H, W, C] frame as LeRobot reduces it: unchanged while both sides are below `threshold`,
    else every k-th row and column from the first, k = int(larger side / target) (the width when
    it is strictly larger than the height, else the height)."""
    height, width = frame.shape[:2]
    if max(height, width) < threshold:
        return frame
    stride = int(width / target) if width > height else int(height / target)
    return frame[::stride, ::stride]


def downsample_batch(frames: np.ndarray) -> np.ndarray:
    """`downsample` of each frame of a batch [N, H, W, C] (one shape, one stride)."""
    return frames if not len(frames) else np.moveaxis(downsample(np.moveaxis(frames, 0, -1)), -1, 0)


# --- the mergeable state ----------------------------------------------------------------------


class PixelCounts(NamedTuple):
    """Frames counted and the histogram of their uint8 values, per channel [C, 256] (int64)."""

    frames: int
    histogram: np.ndarray


def init(channels: int = 3) -> PixelCounts:
    return PixelCounts(0, np.zeros((channels, 256), np.int64))


def histogram(frames: np.ndarray) -> np.ndarray:
    """[C, 256] counts of the values of uint8 frames [..., H, W, C]."""
    if frames.dtype != np.uint8:
        raise DataError(f"camera frames are {frames.dtype}, not 8-bit; accelkit reads 8-bit video")
    channels = frames.shape[-1]
    flat = np.ascontiguousarray(frames).reshape(-1)
    if channels == 3 and flat.size % 6 == 0 and flat.size >= 1 << 16 and np.little_endian:
        # two pixels are three uint16 words (R0 G0)(B0 R1)(G1 B1): one bincount of 2**16 joint
        # bins per word, then each byte's marginal — a third fewer elements to convert and count
        words = flat.view(np.uint16).reshape(-1, 3)
        out = np.zeros((3, 256), np.int64)
        for j in range(3):
            joint = np.bincount(words[:, j], minlength=1 << 16).reshape(256, 256)  # [high, low]
            out[(2 * j) % 3] += joint.sum(axis=0)  # the low byte comes first in memory
            out[(2 * j + 1) % 3] += joint.sum(axis=1)
        return out
    pixels = flat.reshape(-1, channels)
    return np.stack([np.bincount(pixels[:, c], minlength=256) for c in range(channels)]).astype(
        np.int64
    )


def update(state: PixelCounts, frames: np.ndarray) -> PixelCounts:
    """`state` with the frames [N, H, W, C] (uint8) added."""
    return PixelCounts(state.frames + len(frames), state.histogram + histogram(frames))


def merge(a: PixelCounts, b: PixelCounts) -> PixelCounts:
    if a.histogram.shape != b.histogram.shape:
        raise DataError(
            f"camera frames with {a.histogram.shape[0]} and {b.histogram.shape[0]} channels "
            "cannot be combined; every frame of a camera must have the same channels"
        )
    return PixelCounts(a.frames + b.frames, a.histogram + b.histogram)


@dataclass(frozen=True)
class CameraStats:
    """Per-channel statistics in [0, 1] (float64 [C]); `count` is the number of frames."""

    count: int
    min: np.ndarray
    max: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    quantiles: dict[float, np.ndarray] = field(default_factory=dict)


def finalize(state: PixelCounts, levels=()) -> CameraStats:
    """The statistics the histogram holds, exactly (see the module's docstring)."""

    hist = state.histogram
    channels = hist.shape[0]
    if state.frames == 0 or not hist.sum():
        raise DataError("a camera has no frames to compute statistics from")
    values = np.arange(256, dtype=np.int64)
    n = hist.sum(axis=1)  # values per channel
    mean = np.empty(channels)
    std = np.empty(channels)
    for c in range(channels):
        total = int(hist[c] @ values)  # exact: < 2**63 for any real dataset
        squares = int(hist[c] @ (values * values))
        count = int(n[c])
        mean[c] = float(total) / count  # numpy's mean of uint8: the float64 sum over the count
        std[c] = math.sqrt(Fraction(count * squares - total * total, count * count))
    cumulative = np.cumsum(hist, axis=1)  # [C, 256]
    present = hist > 0
    low = present.argmax(axis=1)
    high = 255 - present[:, ::-1].argmax(axis=1)
    quantiles = {}
    levels = sorted({float(q) for q in levels})
    if levels:
        targets = linear_targets(n, np.asarray(levels))  # ranks [C, Q] as numpy.quantile takes them

        def order_statistic(ranks):  # value of the rank-th smallest (0-based) per channel
            return np.stack(
                [np.searchsorted(cumulative[c], ranks[c], side="right") for c in range(channels)]
            ).astype(np.int64)

        lerped = numpy_lerp(
            order_statistic(targets.previous), order_statistic(targets.next), targets.gamma
        )
        quantiles = {q: lerped[:, i] / 255.0 for i, q in enumerate(levels)}
    return CameraStats(
        count=int(state.frames),
        min=low.astype(np.float64) / 255.0,
        max=high.astype(np.float64) / 255.0,
        mean=mean / 255.0,
        std=std / 255.0,
        quantiles=quantiles,
    )


def lerobot_entry(stats: CameraStats, quantile_names: dict[float, str] | None = None) -> dict:
    """LeRobot's shape: every statistic [[[c0]], [[c1]], [[c2]]] (a (3, 1, 1) array), count [n]."""

    def nested(values):
        return [[[float(v)]] for v in np.asarray(values, np.float64).tolist()]

    entry = {
        "min": nested(stats.min),
        "max": nested(stats.max),
        "mean": nested(stats.mean),
        "std": nested(stats.std),
        "count": [int(stats.count)],
    }
    for q, values in sorted(stats.quantiles.items()):
        if quantile_names is not None:
            entry[quantile_names[q]] = nested(values)
    return entry


def camera_keys(features: dict) -> list[str]:
    """The camera features of a LeRobot dataset's info.json (dtype "video" or "image")."""
    return [k for k, f in features.items() if str(f.get("dtype")) in CAMERA_DTYPES]
