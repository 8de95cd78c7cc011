"""`bench train`: the model's shape, the constants the frameworks must share, and a run's `Setup`."""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("pytorch", "flax", "keras-jax", "keras-torch")
LAYERS = (100, 300, 200, 100, 1)
FEATURES = LAYERS[0]
BN_MOMENTUM = 0.1  # PyTorch's convention; Flax and Keras write it as 1 - 0.1 = 0.9
BN_EPSILON = 1e-5
LOCKSTEP_STEPS = 8


@dataclass(frozen=True)
class Setup:
    samples: int = 10_000
    epochs: int = 10
    batch_size: int = 64
    lr: float = 0.01
    momentum: float = 0.9
    dropout: float = 0.2
    seed: int = 0
    checkpoint_epoch: int | None = None  # default: half-way

    @property
    def resume_at(self) -> int:
        return self.checkpoint_epoch if self.checkpoint_epoch is not None else self.epochs // 2
