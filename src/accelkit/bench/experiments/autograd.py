"""`bench autograd`: derivatives of f(x) = 0.2x + sin x + cos 2x in JAX and PyTorch.

The analytic derivative f'(x) = 0.2 + cos x − 2 sin 2x is the independent reference:
f'(3) = −0.23116…. Timing follows the capability analysis: `points` values × `loops` loops, JAX grad
vectorized with vmap, with and without jit; PyTorch one backward per element (the published
method, one autograd graph per scalar) and the vectorized way (one backward of the sum).
"""

from __future__ import annotations

import math

import numpy as np

from accelkit.bench.harness import (
    DEFAULT_PROTOCOL,
    Protocol,
    Result,
    check_below,
    check_close,
    measure,
)

MODES = ("pytorch", "jax")
GRAD_AT_3 = 0.2 + math.cos(3.0) - 2 * math.sin(6.0)  # −0.23116…


def f(x, xp=np):
    return 0.2 * x + xp.sin(x) + xp.cos(2 * x)


def df(x):
    return 0.2 + np.cos(x) - 2 * np.sin(2 * x)


def run(
    modes, *, points: int = 1000, loops: int = 10, protocol: Protocol = DEFAULT_PROTOCOL
) -> Result:
    result = Result(
        "autograd",
        {
            "modes": list(modes),
            "points": points,
            "loops": loops,
            "dtype": "float32",
            "repeats": protocol.repeats,
            "warmup": protocol.warmup,
        },
    )
    grid20 = np.linspace(0, 4 * np.pi, 20, dtype=np.float32)
    want20 = df(grid20.astype(np.float64))
    xs = np.linspace(0, 4 * np.pi, points, dtype=np.float32)
    want = df(xs.astype(np.float64))
    grads20 = {}
    if "jax" in modes:
        grads20["jax"] = _run_jax(result, xs, want, grid20, protocol, loops)
    if "pytorch" in modes:
        grads20["pytorch"] = _run_torch(result, xs, want, grid20, protocol, loops)
    for mode, g in grads20.items():
        result.checks.append(
            check_below(
                f"{mode}: grad over 20 points vs analytic (max abs err)",
                np.max(np.abs(g - want20)),
                1e-5,
            )
        )
    if len(grads20) == 2:
        result.checks.append(
            check_below(
                "jax and pytorch grads over 20 points agree (max abs diff)",
                np.max(np.abs(grads20["jax"] - grads20["pytorch"])),
                1e-5,
            )
        )
    result.notes.append(
        "published (GPU / CPU): jax no-jit 0.874 / 0.0987 s, jit 0.188 / 0.0077 s; "
        "torch per-element 3.96 / 1.69 s."
    )
    return result


def _timed_grads(result: Result, backend: str, device: str, variants, x, want, protocol, loops):
    """Time each (label, timing name, gradient function) `loops` times over `x`, then check
    each one's last gradients against the analytic derivative `want`."""

    def loop(fn):
        out = None
        for _ in range(loops):
            out = fn(x)
        return out

    outputs = []
    for label, name, fn in variants:
        timing, out = measure(
            name, backend, lambda fn=fn: loop(fn), protocol, device=device, size=len(want)
        )
        result.timings.append(timing)
        outputs.append((label, out))
    for label, out in outputs:
        result.checks.append(
            check_below(
                f"{backend} {label}: grads over {len(want)} points vs analytic (max abs err)",
                np.max(np.abs(np.asarray(out, np.float64) - want)),
                1e-5,
            )
        )


def _run_jax(result: Result, xs, want, grid20, protocol: Protocol, loops: int) -> np.ndarray:
    import jax
    import jax.numpy as jnp

    grad_f = jax.grad(lambda x: f(x, jnp))
    result.checks.append(
        check_close("jax: grad f(3.0) = −0.23116", float(grad_f(jnp.float32(3.0))), GRAD_AT_3, 1e-5)
    )
    vgrad = jax.vmap(grad_f)
    vgrad_jit = jax.jit(vgrad)
    variants = [
        ("no jit", f"vmap(grad) ×{loops}", vgrad),
        ("jit", f"jit(vmap(grad)) ×{loops}", vgrad_jit),
    ]
    _timed_grads(
        result, "jax", jax.devices()[0].platform, variants, jnp.asarray(xs), want, protocol, loops
    )
    return np.asarray(vgrad_jit(jnp.asarray(grid20)), dtype=np.float64)


def _run_torch(result: Result, xs, want, grid20, protocol: Protocol, loops: int) -> np.ndarray:
    import torch

    x3 = torch.tensor(3.0, requires_grad=True)
    f(x3, torch).backward()
    assert x3.grad is not None  # backward filled it
    result.checks.append(
        check_close("pytorch: grad f(3.0) = −0.23116", float(x3.grad), GRAD_AT_3, 1e-5)
    )

    def per_element(values):
        """The published method: one graph and one backward per scalar."""
        grads = []
        for v in values:
            x = torch.tensor(v, requires_grad=True)
            f(x, torch).backward()
            assert x.grad is not None  # backward filled it
            grads.append(x.grad.item())
        return np.array(grads)

    def vectorized(values):
        """One graph for the whole vector; the elements are independent, so grad of the sum is
        the vector of element derivatives."""
        x = torch.tensor(values, requires_grad=True)
        f(x, torch).sum().backward()
        return x.grad

    variants = [
        ("per-element", f"per-element backward ×{loops}", per_element),
        ("vectorized", f"vectorized backward ×{loops}", vectorized),
    ]
    _timed_grads(result, "pytorch", "cpu", variants, xs, want, protocol, loops)
    return np.asarray(vectorized(grid20), dtype=np.float64)
