"""openpi's own statistics arithmetic, written out in numpy, so `stats diff` can recompute what an
openpi-written `norm_stats.json` holds before it names a cause.

Read from openpi's source (`src/openpi/shared/normalize.py`, `scripts/compute_norm_stats.py`,
`src/openpi/training/data_loader.py`), not imported (openpi is not a dependency):

* **The rows.** `compute_norm_stats.py` reads the LeRobot dataset through `LeRobotDataset` with
  `delta_timestamps` of `action_horizon` steps (each frame's action chunk; LeRobot pads a chunk
  past its episode's end with the episode's last action), then the config's repack and data
  transforms (`DeltaActions(mask)` among them: the masked action dimensions minus the frame's
  state), in dataset order (`shuffle=False` without `--max-frames`) and in batches of the
  config's `batch_size` (32 unless the config says otherwise) with `drop_last=True`, for
  `len(dataset) // batch_size` batches: the last partial batch is never counted.
* **`RunningStats.update(batch)`** per key, the batch reshaped to rows `[-1, D]` in float32: the
  first batch sets mean = `np.mean(x, 0)`, mean of squares = `np.mean(x**2, 0)`, min, max and a
  5000-bin histogram per dimension with edges `linspace(min − 1e-10, max + 1e-10, 5001)`; each
  later batch moves both means by `(batch mean − mean) · n / count` (in float32) and, when any
  dimension's min or max grew, re-bins every dimension's histogram onto new edges
  `linspace(min, max, 5001)` (openpi's main branch; some forks keep the 1e-10 padding: `pad`),
  each old bin's count moving to the new bin holding its left edge.
* **`get_statistics`**: std = `sqrt(max(0, E[x²] − E[x]²))`; q01 and q99 are the left edge of the
  first bin whose cumulative count reaches `q · count` (no interpolation).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

import numpy as np

BINS = 5000  # RunningStats' _num_quantile_bins
PAD = 1e-10
LEVELS = (0.01, 0.99)  # the quantiles openpi's get_statistics returns


class RunningStats:
    """openpi's `RunningStats` of one key; `pad`: re-binned edges keep the 1e-10 padding."""

    def __init__(self, pad: bool = False):
        self.pad = pad
        self.count = 0
        # per dimension, set by the first batch
        self.mean, self.squares = np.zeros(0), np.zeros(0)
        self.lo, self.hi = np.zeros(0), np.zeros(0)
        self.counts: list[np.ndarray] = []
        self.edges: list[np.ndarray] = []

    def update(self, batch: np.ndarray) -> None:
        x = batch.reshape(-1, batch.shape[-1])
        n, width = x.shape
        if self.count == 0:
            self.mean = np.mean(x, axis=0)
            self.squares = np.mean(x**2, axis=0)
            self.lo, self.hi = np.min(x, axis=0), np.max(x, axis=0)
            self.counts = [np.zeros(BINS) for _ in range(width)]
            self.edges = [
                np.linspace(self.lo[i] - PAD, self.hi[i] + PAD, BINS + 1) for i in range(width)
            ]
        else:
            hi, lo = np.max(x, axis=0), np.min(x, axis=0)
            grown = np.any(hi > self.hi) or np.any(lo < self.lo)
            self.hi, self.lo = np.maximum(self.hi, hi), np.minimum(self.lo, lo)
            if grown:
                self._rebin()
        self.count += n
        self.mean += (np.mean(x, axis=0) - self.mean) * (n / self.count)
        self.squares += (np.mean(x**2, axis=0) - self.squares) * (n / self.count)
        for i in range(width):
            self.counts[i] += np.histogram(x[:, i], bins=self.edges[i])[0]

    def _rebin(self) -> None:
        for i, (counts, old) in enumerate(zip(self.counts, self.edges, strict=True)):
            if self.pad:
                new = np.linspace(self.lo[i] - PAD, self.hi[i] + PAD, BINS + 1)
            else:
                new = np.linspace(self.lo[i], self.hi[i], BINS + 1)
            self.counts[i] = np.histogram(old[:-1], bins=new, weights=counts)[0]
            self.edges[i] = new

    def statistics(self) -> dict[str, np.ndarray]:
        """mean, std, q01, q99 as openpi writes them (float64 arrays here), and the count."""
        variance = self.squares - self.mean**2
        out = {
            "mean": self.mean,
            "std": np.sqrt(np.maximum(0, variance)),
            "count": np.asarray([self.count]),
        }
        for q in LEVELS:
            target = q * self.count
            out[f"q{int(q * 100):02d}"] = np.asarray(
                [
                    edges[np.searchsorted(np.cumsum(counts), target)]
                    for counts, edges in zip(self.counts, self.edges, strict=True)
                ]
            )
        return {k: np.asarray(v, np.float64).reshape(-1) for k, v in out.items()}


def chunks(state: np.ndarray, actions: np.ndarray, horizon: int, mask) -> np.ndarray:
    """One episode's action chunks [L, H, Da] as openpi's loader gives them: step k of frame t
    is action min(t + k, L − 1); then DeltaActions(mask) against each frame's state."""
    n = len(actions)
    rows = np.minimum(np.arange(n)[:, None] + np.arange(horizon)[None, :], n - 1)
    out = np.array(actions[rows], np.float32)
    if mask:
        dims = len(mask)
        out[..., :dims] -= np.expand_dims(
            np.where(np.asarray(mask), state[..., :dims], 0), axis=-2
        ).astype(np.float32)
    return out


def batches(
    episodes: Iterable[tuple[np.ndarray, np.ndarray]],
    *,
    horizon: int,
    batch_size: int,
    frames: int,
    mask=(),
) -> Iterator[dict[str, np.ndarray]]:
    """`{"state": [B, Ds], "actions": [B, H, Da]}` batches, as compute_norm_stats.py reads a
    dataset of `frames` frames given episode by episode (state rows, action rows) in dataset
    order: `frames // batch_size` whole batches, the rest dropped."""
    wanted = frames // batch_size
    done = 0
    pending: deque = deque()  # (state, chunks) of the frames read and not yet batched
    held = 0
    for state, actions in episodes:
        if done >= wanted:
            return
        state = np.asarray(state, np.float32)
        pending.append((state, chunks(state, np.asarray(actions, np.float32), horizon, mask)))
        held += len(state)
        while held >= batch_size and done < wanted:
            parts, need = [], batch_size
            while need:
                first_state, first_chunks = pending[0]
                take = min(need, len(first_state))
                parts.append((first_state[:take], first_chunks[:take]))
                if take == len(first_state):
                    pending.popleft()
                else:
                    pending[0] = (first_state[take:], first_chunks[take:])
                need -= take
            held -= batch_size
            done += 1
            yield {
                "state": np.concatenate([p[0] for p in parts]),
                "actions": np.concatenate([p[1] for p in parts]),
            }
