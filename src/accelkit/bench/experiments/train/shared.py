"""What the two training experiments (`mnist`, `train`) share: the stratified split, the one
DataLoader pipeline that feeds every framework the same batches, and how an epoch is recorded."""

from __future__ import annotations

import numpy as np

from accelkit.bench.harness import Result, Timing


def stratified_split(x: np.ndarray, y: np.ndarray, test_fraction: float, seed: int = 0):
    """Stratified split: the same fraction of every class goes to the test set."""
    rng = np.random.default_rng(seed)
    test = np.zeros(len(y), dtype=bool)
    for label in np.unique(y):
        idx = np.flatnonzero(y == label)
        test[rng.permutation(idx)[: round(len(idx) * test_fraction)]] = True
    return x[~test], y[~test], x[test], y[test]


class ArrayDataset:
    """Index → (example, label) over NumPy arrays; what a torch DataLoader needs."""

    def __init__(self, x: np.ndarray, y: np.ndarray):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def numpy_collate(batch):
    xs, ys = zip(*batch, strict=True)
    return np.stack(xs), np.asarray(ys)


def make_loader(
    x, y, batch_size: int, collate, seed: int, shuffle: bool = True, drop_last: bool = False
):
    """The one pipeline: a seeded sampler gives every framework the same batches in the same
    order; `collate` hands each its own arrays."""
    import torch
    from torch.utils.data import DataLoader

    generator = torch.Generator().manual_seed(seed)
    return DataLoader(
        # any map-style dataset serves (__len__, __getitem__); torch types it as its Dataset class
        ArrayDataset(x, y),  # pyright: ignore[reportArgumentType]
        batch_size=batch_size,
        shuffle=shuffle,
        generator=generator,
        collate_fn=collate,
        drop_last=drop_last,
    )


def epoch_timing(mode: str, device: str, seconds: list[float], size: int, compile_s=None) -> Timing:
    """Seconds per epoch as a timing: the first epoch is the first call (it holds whatever
    compiles inside it), the others the repeats."""
    return Timing(
        "train epoch", mode, device, seconds[0], tuple(seconds[1:] or seconds[:1]), size, compile_s
    )


def record_epochs(result: Result, mode: str, losses: list[float], accuracies: list[float]) -> float:
    """Each epoch's mean training loss and test accuracy as facts; returns the final accuracy."""
    for i, (loss, accuracy) in enumerate(zip(losses, accuracies, strict=True), 1):
        result.facts[f"{mode} epoch {i}: loss / test acc %"] = f"{loss:.4f} / {accuracy:.2f}"
    result.facts[f"{mode}: final test accuracy %"] = accuracies[-1]
    return accuracies[-1]
