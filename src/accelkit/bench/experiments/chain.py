"""`bench chain`: the tutorial's matrix chain, and what jit's speed-up is made of.

g(x) = x@x@…@x (11 factors, 10 matmuls) and f(x) = (g(x)·g(x) + g(x)·g(x)) / g(x) (elementwise)
call g five times: 50 matmuls as written. Under `jax.jit`, XLA sees five identical subexpressions
and keeps one (common-subexpression elimination): the compiled program has 10 matmuls. So the
tutorial's jit speed-up is mostly work deleted, not work done faster. We count the matmuls in the
compiled HLO and also time `f_distinct`, whose five g calls get five different matrices, so
nothing can be merged.

x is uniform [0, 1) scaled by 2/N so that its row sums are ≈ 1: the powers stay near a rank-one
matrix with entries ≈ 1/N instead of overflowing float32 (the tutorial's unscaled chain is inf).
f(x) = 2 g(x) mathematically; every backend is checked against NumPy float64.
"""

from __future__ import annotations

import re

import numpy as np

from accelkit.bench.harness import (
    DEFAULT_PROTOCOL,
    Protocol,
    Result,
    check_below,
    check_true,
    measure,
)

MODES = ("numpy", "jax", "jax-jit", "pytorch", "pytorch-compile")
FACTORS = 11


def g(x):
    y = x
    for _ in range(FACTORS - 1):
        y = y @ x
    return y


def f(x):
    return (g(x) * g(x) + g(x) * g(x)) / g(x)


def f_distinct(xs):
    """Five g calls on five different matrices: 50 matmuls that no compiler may merge."""
    return (g(xs[0]) * g(xs[1]) + g(xs[2]) * g(xs[3])) / g(xs[4])


def inputs(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = (rng.random((n, n)) * (2.0 / n)).astype(np.float32)
    xs = (rng.random((5, n, n)) * (2.0 / n)).astype(np.float32)
    return x, xs


def reference(x: np.ndarray, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NumPy float64: the independent reference for every backend."""
    return f(x.astype(np.float64)), f_distinct(xs.astype(np.float64))


def count_matmuls(hlo_text: str) -> int:
    """Matrix products in a compiled HLO module: `dot` ops plus GEMM library custom-calls."""
    dots = len(re.findall(r"=\s*\S+\s+dot\(", hlo_text))
    calls = len(re.findall(r'custom_call_target="[^"]*(?:gemm|matmul|Matmul|dot)[^"]*"', hlo_text))
    return dots + calls


def jax_matmul_counts(n: int) -> dict:
    """Matmuls in the compiled programs of f and f_distinct (as written: 50 and 50)."""
    import jax
    import jax.numpy as jnp

    x = jax.ShapeDtypeStruct((n, n), jnp.float32)
    xs = jax.ShapeDtypeStruct((5, n, n), jnp.float32)
    return {
        "jit(f) compiled matmuls": count_matmuls(jax.jit(f).lower(x).compile().as_text()),
        "jit(f_distinct) compiled matmuls": count_matmuls(
            jax.jit(f_distinct).lower(xs).compile().as_text()
        ),
        "matmuls as written (each)": 5 * (FACTORS - 1),
    }


def _backend(mode: str, x: np.ndarray, xs: np.ndarray, torch_device: str | None):
    """(run f, run f_distinct, to_numpy, device name, compile seconds or None) for one mode."""
    if mode == "numpy":
        return (lambda: f(x)), (lambda: f_distinct(xs)), np.asarray, "cpu", None
    if mode in ("jax", "jax-jit"):
        import time

        import jax

        jx, jxs = jax.device_put(x), jax.device_put(xs)
        device = jax.devices()[0].platform
        if mode == "jax":
            return (lambda: f(jx)), (lambda: f_distinct(jxs)), np.asarray, device, None
        start = time.perf_counter()  # ahead-of-time compilation, timed apart from the calls
        f_c = jax.jit(f).lower(jx).compile()
        fd_c = jax.jit(f_distinct).lower(jxs).compile()
        return (
            (lambda: f_c(jx)),
            (lambda: fd_c(jxs)),
            np.asarray,
            device,
            time.perf_counter() - start,
        )
    import torch

    from accelkit.bench.harness import torch_device as pick

    dev = pick(torch_device)
    tx, txs = torch.from_numpy(x).to(dev), torch.from_numpy(xs).to(dev)
    if mode == "pytorch":
        return (
            (lambda: f(tx)),
            (lambda: f_distinct(txs)),
            (lambda t: t.cpu().numpy()),
            dev.type,
            None,
        )
    f_c, fd_c = torch.compile(f), torch.compile(f_distinct)
    return (lambda: f_c(tx)), (lambda: fd_c(txs)), (lambda t: t.cpu().numpy()), dev.type, None


def run(
    modes,
    *,
    matrix_size: int = 1000,
    protocol: Protocol = DEFAULT_PROTOCOL,
    torch_device: str | None = None,
) -> Result:
    n = matrix_size
    result = Result(
        "chain",
        {
            "modes": list(modes),
            "matrix_size": n,
            "dtype": "float32",
            "factors": FACTORS,
            "repeats": protocol.repeats,
            "warmup": protocol.warmup,
        },
    )
    x, xs = inputs(n)
    want, want_distinct = reference(x, xs)
    for mode in modes:
        run_f, run_fd, to_np, device, compile_s = _backend(mode, x, xs, torch_device)
        backend = mode
        t, out = measure(
            "f (5 identical g)",
            backend,
            run_f,
            protocol,
            device=device,
            size=n,
            compile_s=compile_s,
        )
        result.timings.append(t)
        td, out_d = measure(
            "f_distinct (5 different g)", backend, run_fd, protocol, device=device, size=n
        )
        result.timings.append(td)
        for label, got, ref in (("f", out, want), ("f_distinct", out_d, want_distinct)):
            rel = float(np.max(np.abs(to_np(got) - ref)) / np.max(np.abs(ref)))
            # float32 through 10 chained products of size n: error grows like FACTORS·sqrt(n)·eps
            result.checks.append(
                check_below(
                    f"{mode}: {label} vs NumPy float64 (max rel err)",
                    rel,
                    FACTORS * 8 * np.sqrt(n) * np.finfo(np.float32).eps,
                )
            )
        result.facts[f"{mode}: f_distinct / f time"] = td.median_s / t.median_s
    if any(m.startswith("jax") for m in modes):
        counts = jax_matmul_counts(n)
        result.facts.update(counts)
        result.checks.append(
            check_true(
                "jit(f) merges the 5 identical g calls (10 matmuls)",
                counts["jit(f) compiled matmuls"] == FACTORS - 1,
                f"{counts['jit(f) compiled matmuls']} compiled",
            )
        )
        result.checks.append(
            check_true(
                "jit(f_distinct) keeps all 50 matmuls",
                counts["jit(f_distinct) compiled matmuls"] == 5 * (FACTORS - 1),
                f"{counts['jit(f_distinct) compiled matmuls']} compiled",
            )
        )
    result.notes.append(
        "tutorial numbers (1000×1000): numpy 0.91 s, jax 0.41 s, jax jit 0.034 s, torch 0.058 s; "
        "jit's 10 matmuls against eager's 50 explain most of that gap — compare f_distinct."
    )
    return result
