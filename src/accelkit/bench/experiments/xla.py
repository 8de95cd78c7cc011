"""`bench xla`: generate two uniform N×N matrices, mean and sum, product, inverse.

Each backend generates with its own random generator, as the capability analysis did, so the checks are
statistical (mean ≈ 0.5, sum ≈ N²/2, mean(C) ≈ N/4) plus exact ones against NumPy float64:
sampled entries of C = A@B recomputed from the rows and columns of A and B, and the inverse's
normalized residual ‖C·C⁻¹ − I‖_F / (‖C‖_F ‖C⁻¹‖_F), which a backward-stable inverse keeps near
n·eps whatever the condition number of C (the raw max deviation is reported too).
"""

from __future__ import annotations

import numpy as np

from accelkit.bench.harness import (
    DEFAULT_PROTOCOL,
    Protocol,
    Result,
    check_below,
    check_close,
    measure,
    torch_device,
)

MODES = ("numpy", "jax", "pytorch")


def _checks(result: Result, mode: str, n: int, a, b, c, c_inv, mean_a, sum_a, dtype: str) -> None:
    a, b, c, c_inv = (np.asarray(x, dtype=np.float64) for x in (a, b, c, c_inv))
    eps = np.finfo(np.float32 if dtype == "float32" else np.float64).eps
    # a uniform [0,1) mean has standard deviation 1/sqrt(12 n²); 6 sigma is a loose, honest bound
    result.checks.append(
        check_close(f"{mode}: mean(A) ≈ 1/2", mean_a, 0.5, 6 / np.sqrt(12 * n * n) + 10 * eps)
    )
    result.checks.append(
        check_close(
            f"{mode}: sum(A) / (N²/2) ≈ 1",
            float(sum_a) / (n * n / 2),
            1.0,
            12 / np.sqrt(12 * n * n) + n * n * eps,
        )
    )
    # mean(C) = sum_k mean_i a_ik mean_j b_kj; relative spread shrinks like 1/n
    result.checks.append(
        check_close(f"{mode}: mean(C) / (N/4) ≈ 1", c.mean() / (n / 4), 1.0, 10 / n + 1e-3)
    )
    rng = np.random.default_rng(0)
    rows, cols = rng.integers(0, n, 16), rng.integers(0, n, 16)
    exact = np.einsum("ik,ki->i", a[rows], b[:, cols])
    rel = np.max(np.abs(c[rows, cols] - exact) / np.abs(exact))
    result.checks.append(
        check_below(f"{mode}: C entries vs NumPy float64 (max rel err)", rel, 20 * np.sqrt(n) * eps)
    )
    residual = c @ c_inv - np.eye(n)
    normalized = np.linalg.norm(residual) / (np.linalg.norm(c) * np.linalg.norm(c_inv))
    result.checks.append(
        check_below(
            f"{mode}: ‖C·C⁻¹ − I‖_F / (‖C‖‖C⁻¹‖)",
            normalized,
            float(50 * n * eps),
            f"max |C·C⁻¹ − I| = {np.max(np.abs(residual)):.3e}",
        )
    )


def _four_ops(result: Result, backend: str, device: str, n: int, protocol: Protocol, ops):
    """Time the four operations in order, each on the previous ones' outputs; `ops` gives
    (generate, mean_sum(a), inverse(c)) in the backend's own calls (the product is `a @ b`)."""
    generate, mean_sum, inverse = ops
    t, (a, b) = measure("generate", backend, generate, protocol, size=n, device=device)
    result.timings.append(t)
    t, (mean_a, sum_a) = measure(
        "mean+sum", backend, lambda: mean_sum(a), protocol, size=n, device=device
    )
    result.timings.append(t)
    t, c = measure("product", backend, lambda: a @ b, protocol, size=n, device=device)
    result.timings.append(t)
    t, c_inv = measure("inverse", backend, lambda: inverse(c), protocol, size=n, device=device)
    result.timings.append(t)
    return a, b, c, c_inv, mean_a, sum_a


def run_numpy(result: Result, n: int, dtype: str, protocol: Protocol) -> None:
    rng = np.random.default_rng(42)
    dt = np.dtype(dtype)
    ops = (
        lambda: (rng.random((n, n), dtype=dt), rng.random((n, n), dtype=dt)),
        lambda a: (a.mean(), a.sum()),
        np.linalg.inv,
    )
    _checks(result, "numpy", n, *_four_ops(result, "numpy", "cpu", n, protocol, ops), dtype)


def run_jax(result: Result, n: int, dtype: str, protocol: Protocol) -> None:
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(dtype == "float64"):
        dt = jnp.dtype(dtype)
        keys = iter(
            jax.random.split(jax.random.key(42), 2 * (2 + protocol.warmup + protocol.repeats))
        )

        def generate():
            return jax.random.uniform(next(keys), (n, n), dt), jax.random.uniform(
                next(keys), (n, n), dt
            )

        # eager jnp calls, as the capability analysis did: each op compiles once on first use (the first-call column)
        device = str(jax.devices()[0].platform)
        ops = (generate, lambda a: (jnp.mean(a), jnp.sum(a)), jnp.linalg.inv)
        a, b, c, c_inv, mean_a, sum_a = _four_ops(result, "jax", device, n, protocol, ops)
        _checks(result, "jax", n, a, b, c, c_inv, float(mean_a), float(sum_a), dtype)


def run_pytorch(
    result: Result, n: int, dtype: str, protocol: Protocol, device: str | None = None
) -> None:
    import torch

    dev = torch_device(device)
    dt = getattr(torch, dtype)
    gen = torch.Generator(device=dev).manual_seed(42)
    ops = (
        lambda: (
            torch.rand(n, n, dtype=dt, device=dev, generator=gen),
            torch.rand(n, n, dtype=dt, device=dev, generator=gen),
        ),
        lambda a: (a.mean(), a.sum()),
        torch.linalg.inv,
    )
    a, b, c, c_inv, mean_a, sum_a = _four_ops(result, "pytorch", dev.type, n, protocol, ops)
    a, b, c, c_inv = (x.cpu().numpy() for x in (a, b, c, c_inv))
    _checks(result, "pytorch", n, a, b, c, c_inv, float(mean_a), float(sum_a), dtype)


def run(
    modes,
    *,
    matrix_size: int = 2000,
    dtype: str = "float64",
    protocol: Protocol = DEFAULT_PROTOCOL,
    torch_device: str | None = None,
) -> Result:
    result = Result(
        "xla",
        {
            "modes": list(modes),
            "matrix_size": matrix_size,
            "dtype": dtype,
            "repeats": protocol.repeats,
            "warmup": protocol.warmup,
        },
    )
    for mode in modes:
        if mode == "numpy":
            run_numpy(result, matrix_size, dtype, protocol)
        elif mode == "jax":
            run_jax(result, matrix_size, dtype, protocol)
        else:
            run_pytorch(result, matrix_size, dtype, protocol, torch_device)
    result.notes.append(
        "published N=5000 product: pytorch 0.027 s on an unsynchronized GPU (queueing, not work); "
        "jax 1.221 s included compilation — here compilation is the 'first call' column."
    )
    return result
