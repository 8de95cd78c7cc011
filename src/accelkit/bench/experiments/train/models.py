"""The MLP three times (PyTorch, Flax, Keras 3), its weights in each layout and its BatchNorm
statistics read back from each."""

from __future__ import annotations

import itertools
import sys

import numpy as np

from accelkit.bench.experiments.train.config import BN_EPSILON, BN_MOMENTUM, FEATURES, LAYERS


def torch_model(dropout: float):
    from torch import nn

    layers: list = []
    for fan_in, fan_out in itertools.pairwise(LAYERS[:-1]):
        layers += [
            nn.Linear(fan_in, fan_out),
            nn.BatchNorm1d(fan_out, momentum=BN_MOMENTUM, eps=BN_EPSILON),
            nn.ReLU(),
            nn.Dropout(dropout),
        ]
    layers.append(nn.Linear(LAYERS[-2], LAYERS[-1]))
    return nn.Sequential(*layers)


def flax_model(dropout: float):
    import flax.linen as nn

    class MLP(nn.Module):
        rate: float

        @nn.compact
        def __call__(self, x, train: bool):
            for i, width in enumerate(LAYERS[1:-1]):
                x = nn.Dense(width, name=f"dense{i}")(x)
                x = nn.BatchNorm(
                    use_running_average=not train,
                    momentum=1 - BN_MOMENTUM,
                    epsilon=BN_EPSILON,
                    name=f"bn{i}",
                )(x)
                x = nn.Dropout(self.rate, deterministic=not train)(nn.relu(x))
            return nn.Dense(LAYERS[-1], name=f"dense{len(LAYERS) - 2}")(x)

    return MLP(dropout)


def torch_weights(net) -> list[np.ndarray]:
    """Every weight in Keras's order and Flax's layout: per hidden layer kernel (in, out), bias,
    BN scale, BN bias, running mean, running variance; then the output kernel and bias."""
    from torch import nn

    out = []
    for layer in net:
        if isinstance(layer, nn.Linear):
            out += [layer.weight.detach().numpy().T.copy(), layer.bias.detach().numpy().copy()]
        elif isinstance(layer, nn.BatchNorm1d):
            out += [
                layer.weight.detach().numpy().copy(),
                layer.bias.detach().numpy().copy(),
                np.array(layer.running_mean),  # a copy (tracked: BatchNorm1d's default)
                np.array(layer.running_var),
            ]
    return out


def flax_variables(weights: list[np.ndarray]) -> tuple[dict, dict]:
    """(params, batch_stats) from `torch_weights`' flat list."""
    import jax.numpy as jnp

    params, stats = {}, {}
    it = iter(weights)
    for i in range(len(LAYERS) - 2):
        params[f"dense{i}"] = {"kernel": jnp.asarray(next(it)), "bias": jnp.asarray(next(it))}
        params[f"bn{i}"] = {"scale": jnp.asarray(next(it)), "bias": jnp.asarray(next(it))}
        stats[f"bn{i}"] = {"mean": jnp.asarray(next(it)), "var": jnp.asarray(next(it))}
    params[f"dense{len(LAYERS) - 2}"] = {
        "kernel": jnp.asarray(next(it)),
        "bias": jnp.asarray(next(it)),
    }
    return params, stats


def keras_model(dropout: float, seed: int):
    import keras

    layers = [keras.Input((FEATURES,))]
    for i, width in enumerate(LAYERS[1:-1]):
        layers += [
            keras.layers.Dense(width),
            keras.layers.BatchNormalization(momentum=1 - BN_MOMENTUM, epsilon=BN_EPSILON),
            keras.layers.ReLU(),
            keras.layers.Dropout(dropout, seed=seed + i),
        ]
    layers.append(keras.layers.Dense(LAYERS[-1]))
    return keras.Sequential(layers)


def bn_stats_torch(net) -> tuple[np.ndarray, np.ndarray]:
    from torch import nn

    bns = [m for m in net if isinstance(m, nn.BatchNorm1d)]
    return (
        np.concatenate([np.asarray(m.running_mean) for m in bns]),
        np.concatenate([np.asarray(m.running_var) for m in bns]),
    )


def bn_stats_flax(batch_stats) -> tuple[np.ndarray, np.ndarray]:
    names = [f"bn{i}" for i in range(len(LAYERS) - 2)]
    return (
        np.concatenate([np.asarray(batch_stats[n]["mean"]) for n in names]),
        np.concatenate([np.asarray(batch_stats[n]["var"]) for n in names]),
    )


def full_precision():
    """float32 matrix products at full precision in JAX for the lockstep comparison (on GPUs
    XLA's default may use TF32); a no-op where JAX is not loaded (the Keras-PyTorch child)."""
    import contextlib

    if "jax" not in sys.modules:
        return contextlib.nullcontext()
    import jax

    return jax.default_matmul_precision("highest")
