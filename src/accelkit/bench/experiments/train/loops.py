"""One training loop per framework, on the same batches: per epoch the step losses, the seconds
and the test accuracy. Keras's runs in a child process (its backend is fixed at import)."""

from __future__ import annotations

import time

import numpy as np

from accelkit.bench.experiments.train.config import FEATURES, Setup
from accelkit.bench.experiments.train.data import accuracy, epoch_batches, loader
from accelkit.bench.experiments.train.models import flax_model, flax_variables, keras_model


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


def keras_run(setup: Setup, data, weights, steps: int | None = None, dropout: float | None = None):
    import keras

    x_train, y_train, x_test, y_test = data
    keras.utils.set_random_seed(setup.seed)
    model = keras_model(setup.dropout if dropout is None else dropout, setup.seed)
    model.set_weights(weights)
    start_logits = np.asarray(keras.ops.convert_to_numpy(model(x_test[:64], training=False)))
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
