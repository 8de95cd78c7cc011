"""`bench parallel`: vmap, grads on pytrees, and sharding over virtual CPU devices.

XLA fixes its device count when JAX starts, so this experiment always runs in a child process
started with `XLA_FLAGS=--xla_force_host_platform_device_count=N`: it sees N CPU devices however
the parent was configured, and cannot disturb the parent's JAX (or other tests).

What it shows, each with a check against NumPy float64 or an analytic formula:
- vmap vs a Python loop over examples (and jit(vmap));
- grad, value_and_grad and hessian of a loss over a pytree of parameters;
- device_put onto every device; an array sharded over a 2-D `Mesh` with `NamedSharding`, drawn by
  `jax.debug.visualize_array_sharding`; jit with in/out shardings;
- one reduction three ways: `jax.pmap` (maintenance mode), `jax.shard_map`, sharded `jax.jit`;
- a data-parallel Flax TrainState + optax step (batch sharded, parameters replicated, XLA adds
  the gradient all-reduce) against the same step in PyTorch on the whole batch — the gradient of
  a mean over shards is the mean of the shard gradients, so they must agree.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path

import numpy as np

from accelkit.bench.harness import (
    DEFAULT_PROTOCOL,
    Protocol,
    Result,
    check_below,
    check_true,
    document,
    environment,
    fix_threads,
    measure,
    run_child_process,
)
from accelkit.runtime.files import temporary_folder, write_json_atomic

DEVICE_FLAG = "--xla_force_host_platform_device_count"


def child_env(devices: int) -> dict:
    """The parent's environment with the device-count flag replaced and JAX held to CPU."""
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_FLAG)]
    env["XLA_FLAGS"] = " ".join([*flags, f"{DEVICE_FLAG}={devices}"])
    env["JAX_PLATFORMS"] = "cpu"
    return env


def run_in_subprocess(
    *, devices: int = 8, protocol: Protocol = DEFAULT_PROTOCOL, timeout: float = 600
) -> Result:
    with temporary_folder("accelkit-parallel-") as tmp:
        argv = [
            sys.executable,
            "-m",
            "accelkit.bench.experiments.parallel",
            str(devices),
            str(protocol.repeats),
            str(protocol.warmup),
            str(Path(tmp) / "parallel.json"),
        ]
        doc = run_child_process(argv, child_env(devices), "bench parallel child process", timeout)
        return Result.from_json(doc["results"][0])


def run(devices: int, protocol: Protocol) -> Result:
    import jax

    found = jax.devices("cpu")
    result = Result(
        "parallel", {"devices": devices, "repeats": protocol.repeats, "warmup": protocol.warmup}
    )
    result.checks.append(
        check_true(
            f"child process sees {devices} CPU devices",
            len(found) == devices,
            f"{len(found)} devices",
        )
    )
    _vmap(result, protocol)
    _pytree_grads(result)
    _sharding(result, found)
    _three_ways(result, found, protocol)
    _data_parallel(result, found, protocol)
    return result


def _vmap(result: Result, protocol: Protocol) -> None:
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    w = rng.normal(size=(128, 128)).astype(np.float32) / 11.3
    xs = rng.normal(size=(256, 128)).astype(np.float32)
    jw, jxs = jnp.asarray(w), jnp.asarray(xs)

    def predict(w, x):  # written for one example
        return jnp.tanh(w @ x)

    batched = jax.vmap(predict, in_axes=(None, 0))
    batched_jit = jax.jit(batched)
    t_loop, out_loop = measure(
        "python loop over 256 examples",
        "jax",
        lambda: jnp.stack([predict(jw, x) for x in jxs]),
        protocol,
        size=256,
    )
    t_vmap, out_vmap = measure("vmap", "jax", lambda: batched(jw, jxs), protocol, size=256)
    t_jit, out_jit = measure("jit(vmap)", "jax", lambda: batched_jit(jw, jxs), protocol, size=256)
    result.timings += [t_loop, t_vmap, t_jit]
    want = np.tanh(xs.astype(np.float64) @ w.astype(np.float64).T)
    for label, out in (("loop", out_loop), ("vmap", out_vmap), ("jit(vmap)", out_jit)):
        result.checks.append(
            check_below(
                f"{label} vs NumPy float64 (max abs err)",
                np.max(np.abs(np.asarray(out, np.float64) - want)),
                1e-5,
            )
        )
    result.facts["vmap speed-up over the loop"] = t_loop.median_s / t_vmap.median_s


def _pytree_grads(result: Result) -> None:
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 3))
    y = x @ np.array([1.0, -2.0, 0.5]) + 0.3 + rng.normal(0, 0.1, 64)
    params = {"w": np.array([0.1, 0.2, 0.3]), "b": np.array(0.0)}

    with jax.enable_x64(True):

        def loss(p, x, y):
            return jnp.mean((x @ p["w"] + p["b"] - y) ** 2)

        jp = jax.tree.map(jnp.asarray, params)
        value, grads = jax.value_and_grad(loss)(jp, x, y)
        plain = jax.grad(loss)(jp, x, y)
        hess = jax.hessian(loss)(jp, x, y)
    r = x @ params["w"] + params["b"] - y
    want = {"w": 2 * x.T @ r / len(y), "b": 2 * r.mean()}
    worst = max(
        jax.tree.leaves(
            jax.tree.map(lambda a, b: float(np.max(np.abs(np.asarray(a) - b))), grads, want)
        )
    )
    same = max(
        jax.tree.leaves(
            jax.tree.map(
                lambda a, b: float(np.max(np.abs(np.asarray(a) - np.asarray(b)))), grads, plain
            )
        )
    )
    result.checks.append(
        check_below("value_and_grad on a pytree vs analytic (max abs err)", worst, 1e-12)
    )
    result.checks.append(check_below("grad equals value_and_grad's gradient", same, 0.0))
    result.checks.append(
        check_below("loss value vs NumPy", abs(float(value) - float(np.mean(r**2))), 1e-12)
    )
    result.checks.append(
        check_below(
            "hessian['w']['w'] = 2·XᵀX/n (max abs err)",
            np.max(np.abs(np.asarray(hess["w"]["w"]) - 2 * x.T @ x / len(y))),
            1e-12,
        )
    )
    result.checks.append(
        check_below("hessian['b']['b'] = 2", abs(float(hess["b"]["b"]) - 2.0), 1e-12)
    )


def _sharding(result: Result, devices) -> None:
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    # device_put onto each device in turn
    placed = [jax.device_put(jnp.arange(4.0), d) for d in devices]
    result.checks.append(
        check_true(
            "device_put places one array on each device",
            [next(iter(a.devices())) for a in placed] == list(devices),
        )
    )
    # a 2-D mesh (Auto axes: a @ a.T is allowed; jax.make_mesh would default to Explicit ones)
    rows = 4 if len(devices) % 4 == 0 else len(devices)
    mesh = Mesh(np.array(devices).reshape(rows, len(devices) // rows), ("x", "y"))
    data = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 4096
    sharded = jax.device_put(data, NamedSharding(mesh, P("x", "y")))
    picture = io.StringIO()
    with contextlib.redirect_stdout(picture):
        jax.debug.visualize_array_sharding(sharded, use_color=False)
    result.facts["visualize_array_sharding, 64×64 over mesh (x, y)"] = picture.getvalue()
    shard_shapes = {s.data.shape for s in sharded.addressable_shards}
    result.checks.append(
        check_true(
            "each device holds one block of the 2-D sharding",
            shard_shapes == {(64 // rows, 64 // (len(devices) // rows))}
            and len(sharded.addressable_shards) == len(devices),
            f"shard shapes {shard_shapes}",
        )
    )
    in_sharding = NamedSharding(mesh, P("x", None))
    out_sharding = NamedSharding(mesh, P(None, "y"))
    fn = jax.jit(lambda a: jnp.sin(a) @ a.T, in_shardings=in_sharding, out_shardings=out_sharding)
    out = fn(jax.device_put(data, in_sharding))
    result.checks.append(
        check_true(
            "jit honours out_shardings",
            out.sharding.is_equivalent_to(out_sharding, 2),
            str(out.sharding.spec),
        )
    )
    want = np.sin(data.astype(np.float64)) @ data.T.astype(np.float64)
    result.checks.append(
        check_below(
            "sharded jit result vs NumPy float64 (max rel err)",
            np.max(np.abs(np.asarray(out) - want)) / np.max(np.abs(want)),
            1e-5,
        )
    )


def _three_ways(result: Result, devices, protocol: Protocol) -> None:
    """sum(tanh(x @ w)) over a batch split across devices: pmap, shard_map and sharded jit."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    n = len(devices)
    rng = np.random.default_rng(2)
    x = rng.normal(size=(n * 64, 256)).astype(np.float32)
    w = (rng.normal(size=(256, 256)) / 16).astype(np.float32)
    want = float(np.sum(np.tanh(x.astype(np.float64) @ w.astype(np.float64))))
    mesh = Mesh(np.array(devices), ("i",))
    jw = jnp.asarray(w)

    pmapped = jax.pmap(
        lambda xb: jax.lax.psum(jnp.sum(jnp.tanh(xb @ jw)), "i"), axis_name="i", devices=devices
    )
    x_pmap = (
        jax.device_put_sharded(list(x.reshape(n, 64, 256)), devices)
        if hasattr(jax, "device_put_sharded")
        else x.reshape(n, 64, 256)
    )
    shard_mapped = jax.jit(
        jax.shard_map(
            lambda xb: jax.lax.psum(jnp.sum(jnp.tanh(xb @ jw)), "i"),
            mesh=mesh,
            in_specs=P("i"),
            out_specs=P(),
        )
    )
    sharded_jit = jax.jit(lambda xs: jnp.sum(jnp.tanh(xs @ jw)))
    x_sharded = jax.device_put(x, NamedSharding(mesh, P("i")))
    for name, call in (
        ("pmap + psum", lambda: pmapped(x_pmap)[0]),
        ("shard_map + psum", lambda: shard_mapped(x_sharded)),
        ("jit on a sharded array", lambda: sharded_jit(x_sharded)),
    ):
        timing, out = measure(name, "jax", call, protocol, device=f"{n}×cpu", size=x.shape[0])
        result.timings.append(timing)
        result.checks.append(
            check_below(
                f"{name} vs NumPy float64 (rel err)", abs(float(out) - want) / abs(want), 1e-4
            )
        )


def _mlp_torch(sizes):
    from torch import nn

    return nn.Sequential(nn.Linear(sizes[0], sizes[1]), nn.ReLU(), nn.Linear(sizes[1], sizes[2]))


def _data_parallel(result: Result, devices, protocol: Protocol) -> None:
    import flax.linen as fnn
    import jax
    import jax.numpy as jnp
    import optax
    import torch
    from flax.training.train_state import TrainState
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    sizes = (32, 64, 10)
    batch = 32 * len(devices)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(batch, sizes[0])).astype(np.float32)
    y = rng.integers(0, sizes[2], batch)
    torch.manual_seed(0)
    net = _mlp_torch(sizes)
    linear = [m for m in net if isinstance(m, torch.nn.Linear)]  # its two layers with weights
    params = {
        f"Dense_{i}": {
            "kernel": jnp.asarray(layer.weight.detach().numpy().T),
            "bias": jnp.asarray(layer.bias.detach().numpy()),
        }
        for i, layer in enumerate(linear)
    }

    class MLP(fnn.Module):
        @fnn.compact
        def __call__(self, x):
            hidden = fnn.relu(fnn.Dense(sizes[1], name="Dense_0")(x))
            return fnn.Dense(sizes[2], name="Dense_1")(hidden)

    mesh = Mesh(np.array(devices), ("data",))
    replicated, by_batch = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    state = TrainState.create(apply_fn=MLP().apply, params=params, tx=optax.sgd(0.1, momentum=0.9))
    state = jax.device_put(state, replicated)
    jx, jy = jax.device_put(jnp.asarray(x), by_batch), jax.device_put(jnp.asarray(y), by_batch)

    def train_step(state, x, y):
        def loss_fn(p):
            logits = state.apply_fn({"params": p}, x)
            return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    step = jax.jit(
        train_step,
        in_shardings=(replicated, by_batch, by_batch),
        out_shardings=(replicated, replicated),
    )
    hlo = step.lower(state, jx, jy).compile().as_text() or ""  # None where XLA keeps no text
    result.facts["all-reduce ops XLA inserted in the data-parallel step"] = hlo.count("all-reduce(")
    new_state, loss = step(state, jx, jy)

    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    opt.zero_grad()
    torch_loss = torch.nn.functional.cross_entropy(net(torch.from_numpy(x)), torch.from_numpy(y))
    torch_loss.backward()
    opt.step()
    result.checks.append(
        check_below(
            "data-parallel flax loss = pytorch loss", abs(float(loss) - torch_loss.item()), 1e-5
        )
    )
    got = np.asarray(new_state.params["Dense_0"]["kernel"]).T
    result.checks.append(
        check_below(
            "updated weights: flax (8 shards) = pytorch (max abs diff)",
            np.max(np.abs(got - linear[0].weight.detach().numpy())),
            1e-5,
        )
    )
    result.checks.append(
        check_true(
            "parameters stay replicated after the step",
            new_state.params["Dense_0"]["kernel"].sharding.is_equivalent_to(replicated, 2),
        )
    )

    t_jax, _ = measure(
        "train step, flax data-parallel",
        "flax",
        lambda: step(state, jx, jy),
        protocol,
        device=f"{len(devices)}×cpu",
        size=batch,
    )
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def torch_step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(tx), ty)
        loss.backward()
        opt.step()
        return loss.item()

    t_torch, _ = measure("train step, pytorch", "pytorch", torch_step, protocol, size=batch)
    result.timings += [t_jax, t_torch]


def main(argv: list[str]) -> int:
    devices, repeats, warmup, out = int(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    fix_threads(None)
    result = run(devices, Protocol(repeats, warmup))
    write_json_atomic(out, document([result], environment("float32")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
