"""`bench train`'s data: a binary task generated offline (no download), split by class and
standardized, fed to every framework by one DataLoader."""

from __future__ import annotations

import numpy as np

from accelkit.bench.experiments.train.config import FEATURES
from accelkit.bench.experiments.train.shared import make_loader, numpy_collate, stratified_split


def make_data(samples: int, seed: int = 0):
    """(x_train, y_train, x_test, y_test): float32 features (standardized), float32 0/1 labels."""
    from sklearn.datasets import make_classification

    x, y = make_classification(
        n_samples=samples,
        n_features=FEATURES,
        n_informative=20,
        n_redundant=10,
        class_sep=1.0,
        flip_y=0.01,
        random_state=seed,
    )
    x_train, y_train, x_test, y_test = stratified_split(np.asarray(x), np.asarray(y), 0.2, seed)
    mean, std = x_train.mean(0), x_train.std(0)
    norm = lambda a: ((a - mean) / std).astype(np.float32)  # noqa: E731
    return norm(x_train), y_train.astype(np.float32), norm(x_test), y_test.astype(np.float32)


def loader(x, y, batch_size: int, seed: int):
    """The one pipeline: NumPy batches, full batches only (BatchNorm needs more than one row)."""
    return make_loader(x, y, batch_size, numpy_collate, seed, drop_last=True)


def epoch_batches(data_loader, seed: int, epoch: int):
    """Reseed the sampler per epoch: epoch e's order depends on (seed, e) only, so a resumed run
    sees the batches the uninterrupted one saw."""
    data_loader.generator.manual_seed(seed * 1000 + epoch)
    return iter(data_loader)


def accuracy(logits, y) -> float:
    return 100.0 * float(np.mean((np.asarray(logits).reshape(-1) > 0) == (y > 0.5)))
