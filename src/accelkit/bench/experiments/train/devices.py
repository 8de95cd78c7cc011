"""Multi-device evaluation, in a child process with N virtual CPU devices: one device, `pmap`
with `pmean`, and `jit` on a batch-sharded array."""

from __future__ import annotations

import numpy as np

from accelkit.bench.experiments.train.config import FEATURES


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
