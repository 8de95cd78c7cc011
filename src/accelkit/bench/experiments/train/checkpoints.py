"""Checkpoints: PyTorch's `torch.save` of model, optimizer and RNG state, Flax's whole
`TrainState` with orbax-checkpoint, and the initial weights every framework starts from."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from accelkit.bench.experiments.train.config import Setup
from accelkit.bench.experiments.train.loops import torch_run
from accelkit.bench.experiments.train.models import torch_model
from accelkit.runtime.logs import root_logger_untouched


def torch_save(path: Path, epoch: int, net, opt) -> None:
    import torch

    torch.save(
        {
            "epoch": epoch,
            "model": net.state_dict(),
            "optimizer": opt.state_dict(),
            "rng": torch.get_rng_state(),
        },
        path,
    )


def torch_resume(path: Path, setup: Setup, data):
    import torch

    saved = torch.load(path, weights_only=True)
    net = torch_model(setup.dropout)
    net.load_state_dict(saved["model"])
    opt = torch.optim.SGD(net.parameters(), lr=setup.lr, momentum=setup.momentum)
    opt.load_state_dict(saved["optimizer"])
    torch.set_rng_state(saved["rng"])
    history, _ = torch_run(net, setup, data, range(saved["epoch"] + 1, setup.epochs), opt)
    return history


def flax_save(path: Path, state) -> None:
    with root_logger_untouched():
        import orbax.checkpoint as ocp

        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(Path(path).absolute(), state)
        checkpointer.wait_until_finished()


def flax_restore(path: Path, template):
    """The saved TrainState, restored into the structure (and shapes, dtypes) of `template`."""
    import jax

    with root_logger_untouched():
        import orbax.checkpoint as ocp

        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
        return ocp.StandardCheckpointer().restore(Path(path).absolute(), abstract)


def load_weights(folder: Path) -> list[np.ndarray]:
    with np.load(Path(folder) / "initial.npz") as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]
