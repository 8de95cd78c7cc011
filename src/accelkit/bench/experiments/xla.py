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
            50 * n * eps,
            f"max |C·C⁻¹ − I| = {np.max(np.abs(residual)):.3e}",
        )
    )


def run_numpy(result: Result, n: int, dtype: str, protocol: Protocol) -> None:
    rng = np.random.default_rng(42)
    dt = np.dtype(dtype)
    t, (a, b) = measure(
        "generate",
        "numpy",
        lambda: (rng.random((n, n), dtype=dt), rng.random((n, n), dtype=dt)),
        protocol,
        size=n,
    )
    result.timings.append(t)
    t, (mean_a, sum_a) = measure("mean+sum", "numpy", lambda: (a.mean(), a.sum()), protocol, size=n)
    result.timings.append(t)
    t, c = measure("product", "numpy", lambda: a @ b, protocol, size=n)
    result.timings.append(t)
    t, c_inv = measure("inverse", "numpy", lambda: np.linalg.inv(c), protocol, size=n)
    result.timings.append(t)
    _checks(result, "numpy", n, a, b, c, c_inv, mean_a, sum_a, dtype)


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
        t, (a, b) = measure("generate", "jax", generate, protocol, size=n, device=device)
        result.timings.append(t)
        t, (mean_a, sum_a) = measure(
            "mean+sum", "jax", lambda: (jnp.mean(a), jnp.sum(a)), protocol, size=n, device=device
        )
        result.timings.append(t)
        t, c = measure("product", "jax", lambda: a @ b, protocol, size=n, device=device)
        result.timings.append(t)
        t, c_inv = measure(
            "inverse", "jax", lambda: jnp.linalg.inv(c), protocol, size=n, device=device
        )
        result.timings.append(t)
        _checks(result, "jax", n, a, b, c, c_inv, float(mean_a), float(sum_a), dtype)


def run_pytorch(
    result: Result, n: int, dtype: str, protocol: Protocol, device: str | None = None
) -> None:
    import torch

    from accelkit.bench.harness import torch_device

    dev = torch_device(device)
    dt = getattr(torch, dtype)
    gen = torch.Generator(device=dev).manual_seed(42)
    name = dev.type
    t, (a, b) = measure(
        "generate",
        "pytorch",
        lambda: (
            torch.rand(n, n, dtype=dt, device=dev, generator=gen),
            torch.rand(n, n, dtype=dt, device=dev, generator=gen),
        ),
        protocol,
        size=n,
        device=name,
    )
    result.timings.append(t)
    t, (mean_a, sum_a) = measure(
        "mean+sum", "pytorch", lambda: (a.mean(), a.sum()), protocol, size=n, device=name
    )
    result.timings.append(t)
    t, c = measure("product", "pytorch", lambda: a @ b, protocol, size=n, device=name)
    result.timings.append(t)
    t, c_inv = measure(
        "inverse", "pytorch", lambda: torch.linalg.inv(c), protocol, size=n, device=name
    )
    result.timings.append(t)
    _checks(
        result,
        "pytorch",
        n,
        a.cpu().numpy(),
        b.cpu().numpy(),
        c.cpu().numpy(),
        c_inv.cpu().numpy(),
        float(mean_a),
        float(sum_a),
        dtype,
    )


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
