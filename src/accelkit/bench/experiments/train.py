"""`bench train`: the tutorial's MLP with BatchNorm and Dropout in PyTorch, Flax and Keras 3.

Data: a binary classification task generated offline (scikit-learn `make_classification`, fixed
seed, 100 features), split 80/20 by class, standardized with the training set's statistics.
Model: 100 → 300 → 200 → 100 → 1; every hidden layer is Linear → BatchNorm → ReLU → Dropout,
the output one logit (binary cross-entropy on logits), SGD with momentum at a constant rate.

What it shows, each with a check:
- **One start.** Flax's parameters *and* batch statistics, and Keras's weights, are copied from the
  freshly initialized PyTorch model; eval-mode logits agree before training.
- **BatchNorm state.** Flax keeps running statistics in a separate `batch_stats` collection:
  training applies the model with `mutable=["batch_stats"]` and stores what comes back in a
  `TrainState` subclass (fields `batch_stats`, `loss`, `metric`); evaluation uses
  `use_running_average=True`. A lockstep run (dropout off, the same batches) checks the losses and
  the running means/variances across frameworks after the same steps. PyTorch folds Bessel's
  correction n/(n−1) into its running variance and Flax/Keras do not; with both EMAs starting at 1
  the relation is exact: v_torch − m^t = n/(n−1)·(v_flax − m^t), m = 0.9, t steps.
- **Training.** One `DataLoader` (seeded sampler, reseeded each epoch) feeds every framework;
  per-epoch time with compilation reported apart (`jit(...).lower().compile()` for Flax; Keras's
  first epoch holds its own), loss and test accuracy per epoch; final accuracies agree within
  `accuracy_tolerance(n_test)` points (5, wider on small test sets: dropout masks differ between
  frameworks, so they agree only statistically).
- **FLOPs.** `nn.tabulate(..., compute_flops=True, compute_vjp_flops=True)` for the Flax model and
  `torch.utils.flop_counter.FlopCounterMode` for PyTorch, both against 2·B·in·out per dense layer
  (XLA also counts the bias add, B·out; PyTorch's counter counts matrix products only).
- **Checkpoints.** At epoch `checkpoint_epoch` PyTorch saves model, optimizer and RNG state with
  `torch.save`, Flax its whole `TrainState` with orbax-checkpoint; a fresh process restores both
  and continues; its per-step losses must equal the uninterrupted run's bit for bit (CPU).
- **Multi-device eval.** A child process with 8 virtual CPU devices restores the final Flax state
  and evaluates the test set with `pmap` + `pmean`, with `jit` on a batch-sharded array, and on one
  device: the same number of correct predictions.
- **Keras 3.** The backend is fixed when keras is imported, so keras-jax and keras-torch each run
  in their own child process (`KERAS_BACKEND`), same weights, same batches.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from accelkit.bench.harness import (
    DEFAULT_PROTOCOL,
    Protocol,
    Result,
    Timing,
    check_below,
    check_true,
)
from accelkit.runtime.files import temporary_folder

MODES = ("pytorch", "flax", "keras-jax", "keras-torch")
LAYERS = (100, 300, 200, 100, 1)
FEATURES = LAYERS[0]
BN_MOMENTUM = 0.1  # PyTorch's convention; Flax and Keras write it as 1 - 0.1 = 0.9
BN_EPSILON = 1e-5
LOCKSTEP_STEPS = 8
# final test accuracies may differ by this many percentage points across frameworks (the runs
# differ only by their dropout masks), widened on small test sets to three binomial standard
# errors at 50 % (150/√n points: 7.5 at n = 400)
ACCURACY_TOLERANCE = 5.0


def accuracy_tolerance(test_samples: int) -> float:
    return max(ACCURACY_TOLERANCE, 150.0 / np.sqrt(test_samples))


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


# ---------------------------------------------------------------------------------------------
# data: generated offline, one DataLoader


def make_data(samples: int, seed: int = 0):
    """(x_train, y_train, x_test, y_test): float32 features (standardized), float32 0/1 labels."""
    from sklearn.datasets import make_classification

    from accelkit.bench.experiments.mnist import _split

    x, y = make_classification(
        n_samples=samples,
        n_features=FEATURES,
        n_informative=20,
        n_redundant=10,
        class_sep=1.0,
        flip_y=0.01,
        random_state=seed,
    )
    x_train, y_train, x_test, y_test = _split(x, y, 0.2, seed)
    mean, std = x_train.mean(0), x_train.std(0)
    norm = lambda a: ((a - mean) / std).astype(np.float32)  # noqa: E731
    return norm(x_train), y_train.astype(np.float32), norm(x_test), y_test.astype(np.float32)


def loader(x, y, batch_size: int, seed: int):
    """The one pipeline: NumPy batches, full batches only (BatchNorm needs more than one row)."""
    from accelkit.bench.experiments.mnist import make_loader, numpy_collate

    return make_loader(x, y, batch_size, numpy_collate, seed, drop_last=True)


def epoch_batches(data_loader, seed: int, epoch: int):
    """Reseed the sampler per epoch: epoch e's order depends on (seed, e) only, so a resumed run
    sees the batches the uninterrupted one saw."""
    data_loader.generator.manual_seed(seed * 1000 + epoch)
    return iter(data_loader)


# ---------------------------------------------------------------------------------------------
# the model, three times, and its weights in each layout


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
                layer.running_mean.numpy().copy(),
                layer.running_var.numpy().copy(),
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
        np.concatenate([m.running_mean.numpy() for m in bns]),
        np.concatenate([m.running_var.numpy() for m in bns]),
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


def accuracy(logits, y) -> float:
    return 100.0 * float(np.mean((np.asarray(logits).reshape(-1) > 0) == (y > 0.5)))


# ---------------------------------------------------------------------------------------------
# PyTorch


def torch_run(net, setup: Setup, data, epochs: range, opt=None, on_epoch=None, steps=None):
    """Train `net` over `epochs`; per epoch: step losses, seconds, test accuracy. `steps` stops
    after that many steps (lockstep and dry runs); `on_epoch(epoch, net, opt)` after each epoch."""
    import torch
    import torch.nn.functional as F

    x_train, y_train, x_test, y_test = data
    opt = opt or torch.optim.SGD(net.parameters(), lr=setup.lr, momentum=setup.momentum)
    batches = loader(x_train, y_train, setup.batch_size, setup.seed)
    history, done = [], 0
    for epoch in epochs:
        net.train()
        losses = []
        start = time.perf_counter()
        for x, y in epoch_batches(batches, setup.seed, epoch):
            opt.zero_grad()
            logits = net(torch.from_numpy(x))[:, 0]
            loss = F.binary_cross_entropy_with_logits(logits, torch.from_numpy(y))
            loss.backward()
            opt.step()
            losses.append(loss.item())
            done += 1
            if steps is not None and done >= steps:
                break
        seconds = time.perf_counter() - start
        net.eval()
        with torch.no_grad():
            logits = net(torch.from_numpy(x_test)).numpy()
        history.append({"losses": losses, "seconds": seconds, "accuracy": accuracy(logits, y_test)})
        if on_epoch:
            on_epoch(epoch, net, opt)
        if steps is not None and done >= steps:
            break
    return history, opt


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


# ---------------------------------------------------------------------------------------------
# Flax


def flax_state(setup: Setup, weights, dropout: float | None = None):
    """A TrainState with custom fields: batch statistics, the last step's loss and accuracy."""
    from typing import Any

    import jax.numpy as jnp
    import optax
    from flax.training import train_state

    class TrainState(train_state.TrainState):
        batch_stats: Any
        loss: Any
        metric: Any

    model = flax_model(setup.dropout if dropout is None else dropout)
    params, stats = flax_variables(weights)
    return TrainState.create(
        apply_fn=model.apply,
        params=params,
        tx=optax.sgd(setup.lr, momentum=setup.momentum),
        batch_stats=stats,
        loss=jnp.zeros((), jnp.float32),
        metric=jnp.zeros((), jnp.float32),
    )


def flax_steps(seed: int):
    """(train_step, predict), both jitted; dropout keys come from the step count, so the state
    alone decides the rest of the run (what makes a restored checkpoint continue exactly)."""
    import jax
    import jax.numpy as jnp
    import optax

    base_key = jax.random.key(seed)

    def train_step(state, x, y):
        def loss_fn(params):
            logits, updates = state.apply_fn(
                {"params": params, "batch_stats": state.batch_stats},
                x,
                train=True,
                rngs={"dropout": jax.random.fold_in(base_key, state.step)},
                mutable=["batch_stats"],
            )
            loss = optax.sigmoid_binary_cross_entropy(logits[:, 0], y).mean()
            return loss, (logits, updates["batch_stats"])

        (loss, (logits, stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        metric = jnp.mean((logits[:, 0] > 0) == (y > 0.5))
        state = state.apply_gradients(grads=grads, batch_stats=stats)
        return state.replace(loss=loss, metric=metric)

    def predict(state, x):
        return state.apply_fn(
            {"params": state.params, "batch_stats": state.batch_stats}, x, train=False
        )

    return jax.jit(train_step), jax.jit(predict)


def flax_run(state, setup: Setup, data, epochs: range, on_epoch=None, steps=None):
    """As `torch_run`; the train step is compiled ahead of time and its compile time returned."""
    import jax
    import jax.numpy as jnp

    x_train, y_train, x_test, y_test = data
    train_step, predict = flax_steps(setup.seed)
    b = setup.batch_size
    start = time.perf_counter()
    compiled = train_step.lower(state, jnp.zeros((b, FEATURES)), jnp.zeros(b)).compile()
    compile_s = time.perf_counter() - start
    batches = loader(x_train, y_train, b, setup.seed)
    history, done = [], 0
    for epoch in epochs:
        losses = []
        start = time.perf_counter()
        for x, y in epoch_batches(batches, setup.seed, epoch):
            state = compiled(state, jnp.asarray(x), jnp.asarray(y))
            losses.append(state.loss)
            done += 1
            if steps is not None and done >= steps:
                break
        losses = [float(v) for v in jax.block_until_ready(losses)]
        seconds = time.perf_counter() - start
        logits = predict(state, jnp.asarray(x_test))
        history.append({"losses": losses, "seconds": seconds, "accuracy": accuracy(logits, y_test)})
        if on_epoch:
            on_epoch(epoch, state)
        if steps is not None and done >= steps:
            break
    return history, state, compile_s


def flax_save(path: Path, state) -> None:
    from accelkit.runtime.logs import root_logger_untouched

    with root_logger_untouched():
        import orbax.checkpoint as ocp

        checkpointer = ocp.StandardCheckpointer()
        checkpointer.save(Path(path).absolute(), state)
        checkpointer.wait_until_finished()


def flax_restore(path: Path, template):
    """The saved TrainState, restored into the structure (and shapes, dtypes) of `template`."""
    import jax

    from accelkit.runtime.logs import root_logger_untouched

    with root_logger_untouched():
        import orbax.checkpoint as ocp

        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
        return ocp.StandardCheckpointer().restore(Path(path).absolute(), abstract)


# ---------------------------------------------------------------------------------------------
# Keras 3 (runs in a child process: KERAS_BACKEND is read once, at import)


def keras_run(setup: Setup, data, weights, steps: int | None = None, dropout: float | None = None):
    import keras

    x_train, y_train, x_test, y_test = data
    keras.utils.set_random_seed(setup.seed)
    model = keras_model(setup.dropout if dropout is None else dropout, setup.seed)
    model.set_weights(weights)
    start_logits = keras.ops.convert_to_numpy(model(x_test[:64], training=False))
    model.compile(
        optimizer=keras.optimizers.SGD(setup.lr, momentum=setup.momentum),
        loss=keras.losses.BinaryCrossentropy(from_logits=True),
    )
    batches = loader(x_train, y_train, setup.batch_size, setup.seed)
    history, done = [], 0
    for epoch in range(setup.epochs):
        losses = []
        start = time.perf_counter()
        for x, y in epoch_batches(batches, setup.seed, epoch):
            losses.append(float(model.train_on_batch(x, y)))
            done += 1
            if steps is not None and done >= steps:
                break
        seconds = time.perf_counter() - start
        logits = keras.ops.convert_to_numpy(model(x_test, training=False))
        history.append({"losses": losses, "seconds": seconds, "accuracy": accuracy(logits, y_test)})
        if steps is not None and done >= steps:
            break
    means, variances = [], []
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            means.append(keras.ops.convert_to_numpy(layer.moving_mean))
            variances.append(keras.ops.convert_to_numpy(layer.moving_variance))
    return history, start_logits, np.concatenate(means), np.concatenate(variances)


# ---------------------------------------------------------------------------------------------
# FLOPs: flax tabulate and torch's flop counter against 2·B·in·out


def dense_flops(batch: int) -> list[int]:
    """Multiply-adds of each dense layer's matrix product, counted as 2 FLOPs each."""
    return [2 * batch * i * o for i, o in itertools.pairwise(LAYERS)]


def flax_tabulate(batch: int, dropout: float) -> tuple[str, dict]:
    """The rendered `tabulate` table and, per module path, (flops, vjp_flops) read from it."""
    import re

    import jax
    import jax.numpy as jnp

    text = flax_model(dropout).tabulate(
        jax.random.key(0),
        jnp.zeros((batch, FEATURES)),
        train=False,
        compute_flops=True,
        compute_vjp_flops=True,
        console_kwargs={"width": 160, "force_terminal": False, "no_color": True},
    )
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    counts = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 7 and cells[5].isdigit() and cells[6].isdigit():
            counts[cells[1] or "total"] = (int(cells[5]), int(cells[6]))
    return text.strip("\n"), counts


def torch_flops(batch: int, dropout: float) -> dict:
    """FLOPs per dense layer (in order) and in total, from `torch.utils.flop_counter`."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    net = torch_model(dropout).eval()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        net(torch.zeros(batch, FEATURES))
    per_module = counter.get_flop_counts()
    linear = [i for i, m in enumerate(net) if isinstance(m, torch.nn.Linear)]
    return {
        "dense": [int(sum(per_module.get(f"Sequential.{i}", {}).values())) for i in linear],
        "total": int(counter.get_total_flops()),
    }


def add_flops(result: Result, setup: Setup) -> None:
    batch = setup.batch_size
    text, flax_counts = flax_tabulate(batch, setup.dropout)
    torch_counts = torch_flops(batch, setup.dropout)
    want = dense_flops(batch)
    result.facts[f"flax tabulate (batch {batch}, eval mode)"] = text
    names = [f"dense{i}" for i in range(len(LAYERS) - 1)]
    flax_dense = [flax_counts.get(n, (-1, -1))[0] for n in names]
    bias = [batch * o for o in LAYERS[1:]]
    result.checks.append(
        check_true(
            "pytorch flop_counter: each dense layer = 2·B·in·out",
            torch_counts["dense"] == want and torch_counts["total"] == sum(want),
            f"{torch_counts['dense']} vs {want}",
        )
    )
    result.checks.append(
        check_true(
            "flax tabulate flops: each dense layer = 2·B·in·out + B·out (bias add)",
            [f - b for f, b in zip(flax_dense, bias, strict=True)] == want,
            f"{flax_dense}",
        )
    )
    total, vjp = flax_counts.get("total", (-1, -1))
    result.facts["flops per forward, pytorch (matmuls)"] = torch_counts["total"]
    result.facts["flops per forward, flax (XLA: all ops)"] = total
    result.facts["vjp flops (forward + backward), flax"] = vjp
    result.facts["flax / pytorch forward flops"] = total / max(1, torch_counts["total"])
    result.checks.append(
        check_true(
            "flax vjp flops exceed the forward's (backward counted)",
            vjp > total > torch_counts["total"],
            f"{vjp} > {total} > {torch_counts['total']}",
        )
    )


# ---------------------------------------------------------------------------------------------
# multi-device evaluation (child process with N virtual CPU devices)


def multi_device_eval(state, x_test, y_test, protocol) -> dict:
    """Correct predictions on one device, with pmap + pmean and with jit on a sharded batch."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from accelkit.bench.harness import measure

    devices = jax.devices()
    n = len(devices)
    pad = (-len(y_test)) % n  # equal shards: pad, and mask the padding out of the counts
    x = np.concatenate([x_test, np.zeros((pad, FEATURES), np.float32)])
    y = np.concatenate([y_test, np.zeros(pad, np.float32)])
    mask = np.concatenate([np.ones(len(y_test), np.float32), np.zeros(pad, np.float32)])
    variables = {"params": state.params, "batch_stats": state.batch_stats}
    apply = state.apply_fn

    def counts(variables, x, y, mask):
        logits = apply(variables, x, train=False)[:, 0]
        return jnp.sum(((logits > 0) == (y > 0.5)) * mask), jnp.sum(mask), logits

    def per_device(variables, x, y, mask):
        correct, count, logits = counts(variables, x, y, mask)
        # pmean of equal-size shards' counts = total / n on every device; the ratio is exact
        return jax.lax.pmean(correct, "d"), jax.lax.pmean(count, "d"), logits

    single = jax.jit(counts)
    pmapped = jax.pmap(per_device, axis_name="d", in_axes=(None, 0, 0, 0))
    mesh = Mesh(np.array(devices), ("data",))
    by_batch, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    sharded = jax.jit(counts, out_shardings=(replicated, replicated, by_batch))
    shaped = [a.reshape(n, -1, *a.shape[1:]) for a in (x, y, mask)]
    placed = [jax.device_put(a, by_batch) for a in (x, y, mask)]
    vars_replicated = jax.device_put(variables, replicated)
    runs = {
        "single device (jit)": ("1×cpu", lambda: single(variables, x, y, mask)),
        "pmap + pmean": (f"{n}×cpu", lambda: pmapped(variables, *shaped)),
        "jit on a batch-sharded array": (
            f"{n}×cpu",
            lambda: sharded(vars_replicated, *placed),
        ),
    }
    out = {"devices": n, "timings": [], "results": {}}
    for name, (device, call) in runs.items():
        timing, (correct, count, logits) = measure(
            name, "flax", call, protocol, device=device, size=len(y_test)
        )
        correct, count = np.asarray(correct).reshape(-1), np.asarray(count).reshape(-1)
        if name == "pmap + pmean":  # every device holds the same mean; the total is n × it
            correct, count = correct * n, count * n
        out["timings"].append(timing.to_json())
        out["results"][name] = {
            "correct": float(correct[0]),
            "count": float(count[0]),
            "logits": np.asarray(logits).reshape(-1)[: len(y_test)].tolist(),
            "shards": len(getattr(logits, "addressable_shards", [])) or 1,
        }
    return out


# ---------------------------------------------------------------------------------------------
# the experiment


def _epoch_timing(mode: str, device: str, history: list, size: int, compile_s=None) -> Timing:
    seconds = [h["seconds"] for h in history]
    return Timing(
        "train epoch", mode, device, seconds[0], tuple(seconds[1:] or seconds[:1]), size, compile_s
    )


def _lockstep_checks(result: Result, mode: str, got: dict, want: dict, batch: int) -> None:
    """`mode`'s lockstep run (dropout off, same batches) against PyTorch's."""
    losses, want_losses = np.asarray(got["losses"]), np.asarray(want["losses"])
    result.checks.append(
        check_below(
            f"{mode}: lockstep losses = pytorch's, {len(want_losses)} steps (max abs diff)",
            np.max(np.abs(losses - want_losses)) if len(losses) == len(want_losses) else np.inf,
            1e-4,
        )
    )
    result.checks.append(
        check_below(
            f"{mode}: BatchNorm running means = pytorch's after the same steps (max abs diff)",
            np.max(np.abs(np.asarray(got["mean"]) - np.asarray(want["mean"]))),
            1e-4,
        )
    )
    decay = (1 - BN_MOMENTUM) ** len(want_losses)
    bessel = batch / (batch - 1)
    expected = decay + bessel * (np.asarray(got["var"]) - decay)
    result.checks.append(
        check_below(
            f"{mode}: BatchNorm running variances = pytorch's with Bessel's n/(n-1) (max abs diff)",
            np.max(np.abs(np.asarray(want["var"]) - expected)),
            1e-4,
            f"n = {batch}; uncorrected max diff "
            f"{np.max(np.abs(np.asarray(want['var']) - np.asarray(got['var']))):.2e}",
        )
    )


def run(
    modes,
    setup: Setup,
    *,
    devices: int = 8,
    protocol: Protocol = DEFAULT_PROTOCOL,
    threads: int | None = None,
    progress=lambda text: None,
) -> Result:
    """Train in every mode; lockstep, FLOPs, checkpoint-resume and multi-device checks with it."""
    import jax
    import torch

    from accelkit.bench.experiments.parallel import child_env

    threads = threads or torch.get_num_threads()  # children match it: bit-equal resumes need it
    data = make_data(setup.samples, setup.seed)
    _, y_train, x_test, y_test = data
    steps_per_epoch = len(y_train) // setup.batch_size
    result = Result(
        "train",
        {
            "modes": list(modes),
            "samples": setup.samples,
            "train": len(y_train),
            "test": len(y_test),
            "features": FEATURES,
            "layers": "→".join(map(str, LAYERS)),
            "epochs": setup.epochs,
            "batch_size": setup.batch_size,
            "lr": setup.lr,
            "momentum": setup.momentum,
            "dropout": setup.dropout,
            "checkpoint_epoch": setup.resume_at,
        },
    )
    torch.manual_seed(setup.seed)
    net = torch_model(setup.dropout)
    weights = torch_weights(net)
    net.eval()
    with torch.no_grad():
        start_logits = net(torch.from_numpy(x_test)).numpy().reshape(-1)
    initial_loss = float(
        np.mean(np.logaddexp(0, start_logits) - y_test * start_logits)
    )  # binary cross-entropy on logits, float64
    result.facts["parameters"] = int(sum(p.numel() for p in net.parameters()))
    result.facts["initial test loss (eval mode)"] = initial_loss
    lockstep = {}
    histories: dict[str, list] = {}
    resume = setup.epochs >= 2 and 1 <= setup.resume_at < setup.epochs
    with temporary_folder("accelkit-train-") as tmp:
        folder = Path(tmp)
        np.savez(folder / "initial.npz", *weights)

        # lockstep: dropout off, the same first steps in PyTorch and Flax (Keras: in its child)
        progress("lockstep steps")
        twin = torch_model(0.0)
        twin.load_state_dict(net.state_dict())
        steps, _ = torch_run(twin, setup, data, range(setup.epochs), steps=LOCKSTEP_STEPS)
        mean, var = bn_stats_torch(twin)
        lockstep["pytorch"] = {
            "losses": [v for h in steps for v in h["losses"]],
            "mean": mean,
            "var": var,
        }
        if "flax" in modes:
            state = flax_state(setup, weights, dropout=0.0)
            with full_precision():
                logits = np.asarray(flax_steps(setup.seed)[1](state, x_test)).reshape(-1)
                steps, state, _ = flax_run(
                    state, setup, data, range(setup.epochs), steps=LOCKSTEP_STEPS
                )
            result.checks.append(
                check_below(
                    "flax: identical start, eval-mode logits = pytorch's (max abs diff)",
                    np.max(np.abs(logits - start_logits)),
                    1e-4,
                )
            )
            mean, var = bn_stats_flax(state.batch_stats)
            got = {"losses": [v for h in steps for v in h["losses"]], "mean": mean, "var": var}
            _lockstep_checks(result, "flax", got, lockstep["pytorch"], setup.batch_size)

        # full training, checkpoints half-way
        if "pytorch" in modes:
            progress("pytorch training")
            torch.manual_seed(setup.seed)

            def save_torch(epoch, net, opt):
                if resume and epoch == setup.resume_at - 1:
                    torch_save(folder / "torch.pt", epoch, net, opt)

            histories["pytorch"], _ = torch_run(
                net, setup, data, range(setup.epochs), on_epoch=save_torch
            )
            result.timings.append(
                _epoch_timing("pytorch", "cpu", histories["pytorch"], len(y_train))
            )
        if "flax" in modes:
            progress("flax training")

            def save_flax(epoch, state):
                if resume and epoch == setup.resume_at - 1:
                    flax_save(folder / "flax_checkpoint", state)

            histories["flax"], state, compile_s = flax_run(
                flax_state(setup, weights), setup, data, range(setup.epochs), on_epoch=save_flax
            )
            result.timings.append(
                _epoch_timing(
                    "flax", jax.devices()[0].platform, histories["flax"], len(y_train), compile_s
                )
            )
            flax_save(folder / "flax_final", state)
            result.facts["flax TrainState custom fields after training: loss / metric"] = (
                f"{float(state.loss):.4f} / {float(state.metric):.4f}"
            )
        args = _args_for_child(setup, folder, threads)
        for mode in (m for m in modes if m.startswith("keras")):
            progress(f"{mode} (child process)")
            backend = mode.split("-")[1]
            out = run_child("keras", args, {**os.environ, "KERAS_BACKEND": backend})
            result.checks.append(
                check_true(f"{mode}: child ran on the {backend} backend", out["backend"] == backend)
            )
            result.checks.append(
                check_below(
                    f"{mode}: identical start, eval-mode logits = pytorch's (max abs diff)",
                    np.max(np.abs(np.asarray(out["start_logits"]) - start_logits[:64])),
                    1e-4,
                )
            )
            _lockstep_checks(result, mode, out["lockstep"], lockstep["pytorch"], setup.batch_size)
            histories[mode] = out["history"]
            result.timings.append(
                _epoch_timing(
                    mode,
                    "cpu" if backend == "torch" else jax.devices()[0].platform,
                    out["history"],
                    len(y_train),
                )
            )
        if resume and ("pytorch" in modes or "flax" in modes):
            progress("resume from checkpoints (child process)")
            resumed = run_child("resume", args, dict(os.environ))
            for mode, history in resumed.items():
                # CPU programs are deterministic: bit-equal; GPU reductions need not be
                exact = mode == "pytorch" or jax.default_backend() == "cpu"
                tail = [v for h in histories[mode][setup.resume_at :] for v in h["losses"]]
                again = [v for h in history for v in h["losses"]]
                diff = (
                    float(np.max(np.abs(np.asarray(tail) - np.asarray(again))))
                    if len(tail) == len(again) and tail
                    else np.inf
                )
                result.checks.append(
                    check_below(
                        f"{mode}: resumed in a fresh process, losses = uninterrupted run's "
                        f"({'bit-equal' if exact else 'max abs diff'}, {len(again)} steps)",
                        diff,
                        0.0 if exact else 1e-5,
                        "torch.save" if mode == "pytorch" else "orbax-checkpoint",
                    )
                )
                result.series.append(
                    {
                        "label": f"{mode} (resumed at epoch {setup.resume_at})",
                        "x": list(range(setup.resume_at + 1, setup.epochs + 1)),
                        "y": [float(np.mean(h["losses"])) for h in history],
                        "xlabel": "epoch",
                        "ylabel": "training loss",
                        "linestyle": "dashed",
                    }
                )
        if not resume:
            result.notes.append(
                f"no checkpoint-resume check: it needs a checkpoint epoch in [1, {setup.epochs})"
            )
        if "flax" in modes:
            progress(f"evaluation on {devices} virtual devices (child process)")
            out = run_child(
                "devices",
                {**args, "protocol": {"repeats": protocol.repeats, "warmup": protocol.warmup}},
                child_env(devices),
            )
            _device_checks(result, out, devices, len(y_test))
    if "pytorch" in modes and "flax" in modes:
        progress("flops")
        add_flops(result, setup)
    _training_checks(result, histories, initial_loss, steps_per_epoch, len(y_test))
    return result


def _device_checks(result: Result, out: dict, devices: int, test: int) -> None:
    result.checks.append(
        check_true(f"child process sees {devices} CPU devices", out["devices"] == devices)
    )
    result.timings += [Timing.from_json(t) for t in out["timings"]]
    results = out["results"]
    one = results["single device (jit)"]
    for name, got in results.items():
        result.facts[f"eval accuracy %, {name}"] = 100 * got["correct"] / got["count"]
        if name == "single device (jit)":
            continue
        result.checks.append(
            check_true(
                f"{name}: same correct predictions as one device",
                got["correct"] == one["correct"] and got["count"] == one["count"] == test,
                f"{got['correct']:.0f}/{got['count']:.0f} vs {one['correct']:.0f}/{one['count']:.0f}",
            )
        )
        result.checks.append(
            check_below(
                f"{name}: logits = one device's (max abs diff)",
                np.max(np.abs(np.asarray(got["logits"]) - np.asarray(one["logits"]))),
                1e-5,
            )
        )


def _training_checks(
    result: Result, histories: dict, initial_loss: float, steps: int, test: int
) -> None:
    finals = {}
    for mode, history in histories.items():
        for i, h in enumerate(history, 1):
            result.facts[f"{mode} epoch {i}: loss / test acc %"] = (
                f"{np.mean(h['losses']):.4f} / {h['accuracy']:.2f}"
            )
        finals[mode] = history[-1]["accuracy"]
        result.facts[f"{mode}: final test accuracy %"] = finals[mode]
        last = float(np.mean(history[-1]["losses"]))
        result.checks.append(
            check_true(
                f"{mode}: {steps} steps per epoch, training loss fell below the initial loss",
                all(len(h["losses"]) == steps for h in history) and last < initial_loss,
                f"{initial_loss:.3f} → {last:.3f}",
            )
        )
        result.series.insert(
            len(finals) - 1,
            {
                "label": mode,
                "x": list(range(1, len(history) + 1)),
                "y": [float(np.mean(h["losses"])) for h in history],
                "xlabel": "epoch",
                "ylabel": "training loss",
            },
        )
    if len(finals) > 1:
        spread = max(finals.values()) - min(finals.values())
        result.checks.append(
            check_below(
                "final test accuracies agree across frameworks (max - min, points)",
                spread,
                accuracy_tolerance(test),
                ", ".join(f"{m} {a:.2f}" for m, a in finals.items()),
            )
        )


# ---------------------------------------------------------------------------------------------
# child processes


def _args_for_child(setup: Setup, folder: Path, threads: int | None, **extra) -> dict:
    return {"setup": asdict(setup), "dir": str(folder), "threads": threads, **extra}


def load_weights(folder: Path) -> list[np.ndarray]:
    with np.load(Path(folder) / "initial.npz") as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def child_main(task: str, args: dict) -> dict:
    """What a child process runs: `keras` (under KERAS_BACKEND), `resume`, `devices`."""
    from accelkit.bench.harness import Protocol, fix_threads

    fix_threads(args["threads"])
    setup = Setup(**args["setup"])
    folder = Path(args["dir"])
    data = make_data(setup.samples, setup.seed)
    weights = load_weights(folder)
    if task == "keras":
        import keras

        with full_precision():
            steps, _, means, variances = keras_run(
                setup, data, weights, LOCKSTEP_STEPS, dropout=0.0
            )
        history, start_logits, _, _ = keras_run(setup, data, weights)
        return {
            "backend": keras.backend.backend(),
            "lockstep": {
                "losses": [v for h in steps for v in h["losses"]],
                "mean": means.tolist(),
                "var": variances.tolist(),
            },
            "history": history,
            "start_logits": start_logits.reshape(-1).tolist(),
        }
    if task == "resume":
        out = {}
        if (folder / "torch.pt").exists():
            out["pytorch"] = torch_resume(folder / "torch.pt", setup, data)
        if (folder / "flax_checkpoint").exists():
            template = flax_state(setup, weights)
            state = flax_restore(folder / "flax_checkpoint", template)
            start = int(state.step) // (len(data[1]) // setup.batch_size)
            out["flax"] = flax_run(state, setup, data, range(start, setup.epochs))[0]
        return out
    if task == "devices":
        template = flax_state(setup, weights)
        state = flax_restore(folder / "flax_final", template)
        return multi_device_eval(state, data[2], data[3], Protocol(**args["protocol"]))
    raise ValueError(f"unknown task {task!r}")


def run_child(task: str, args: dict, env: dict, timeout: float = 900) -> dict:
    from accelkit.bench.harness import run_child_process

    folder = Path(args["dir"])
    (folder / f"{task}-args.json").write_text(json.dumps(args))
    return run_child_process(
        [
            sys.executable,
            "-m",
            "accelkit.bench.experiments.train",
            task,
            str(folder / f"{task}-args.json"),
            str(folder / f"{task}-{env.get('KERAS_BACKEND', '')}out.json"),
        ],
        env,
        f"bench train {task} child process",
        timeout,
    )


def main(argv: list[str]) -> int:
    from accelkit.runtime.files import write_json_atomic

    task, args_path, out = argv
    write_json_atomic(out, child_main(task, json.loads(Path(args_path).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
