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

The `.at[].set` section: JAX arrays are immutable, so `x.at[i].set(v)` returns a new array — eager,
each of K writes copies all N elements. NumPy and PyTorch write in place. Under `jax.jit` XLA
updates in place after at most one copy of the input, and with the input donated
(`donate_argnums`) not even that: the output reuses the input's buffer (checked by its address
and by the `input_output_alias` of the compiled module). All four give the same array.
"""

from __future__ import annotations

import re
import time

import numpy as np

from accelkit.bench.harness import (
    DEFAULT_PROTOCOL,
    Protocol,
    Result,
    check_below,
    check_true,
    measure,
)
from accelkit.bench.harness import torch_device as pick

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
        "jit(f) compiled matmuls": count_matmuls(jax.jit(f).lower(x).compile().as_text() or ""),
        "jit(f_distinct) compiled matmuls": count_matmuls(
            jax.jit(f_distinct).lower(xs).compile().as_text() or ""
        ),
        "matmuls as written (each)": 5 * (FACTORS - 1),
    }


def _backend(mode: str, x: np.ndarray, xs: np.ndarray, torch_device: str | None):
    """(run f, run f_distinct, to_numpy, device name, compile seconds or None) for one mode."""
    if mode == "numpy":
        return (lambda: f(x)), (lambda: f_distinct(xs)), np.asarray, "cpu", None
    if mode in ("jax", "jax-jit"):
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
    if any(m.startswith("jax") for m in modes):
        at_set(result, matrix_size * matrix_size, protocol)
    result.notes.append(
        "tutorial numbers (1000×1000): numpy 0.91 s, jax 0.41 s, jax jit 0.034 s, torch 0.058 s; "
        "jit's 10 matmuls against eager's 50 explain most of that gap — compare f_distinct."
    )
    return result


AT_SET_WRITES = 100


def at_set(result: Result, n: int, protocol: Protocol, writes: int = AT_SET_WRITES) -> None:
    """K single-element writes into a length-N float32 vector: NumPy and PyTorch in place, JAX's
    functional `x.at[i].set(v)` eager, under jit, and under jit with the input donated."""
    import jax
    import jax.numpy as jnp
    import torch

    rng = np.random.default_rng(1)
    base = rng.random(n).astype(np.float32)
    idx = rng.choice(n, size=min(writes, n), replace=False)
    vals = rng.normal(size=len(idx)).astype(np.float32)
    want = base.copy()
    want[idx] = vals  # the reference: one vectorized NumPy assignment

    x_np, x_t = base.copy(), torch.from_numpy(base.copy())
    pairs = list(zip(idx.tolist(), vals.tolist(), strict=True))

    def numpy_writes():
        for i, v in pairs:
            x_np[i] = v
        return x_np

    def torch_writes():
        for i, v in pairs:
            x_t[i] = v
        return x_t

    x_jax = jnp.asarray(base)

    def eager_writes():
        y = x_jax
        for i, v in pairs:
            y = y.at[i].set(v)
        return y

    j_idx, j_vals = jnp.asarray(idx), jnp.asarray(vals)

    def loop(y):
        return jax.lax.fori_loop(0, len(idx), lambda k, y: y.at[j_idx[k]].set(j_vals[k]), y)

    copying = jax.jit(loop)
    donating = jax.jit(loop, donate_argnums=0)
    compiled = donating.lower(x_jax).compile().as_text() or ""  # None where XLA keeps no text
    held = [jnp.asarray(base)]
    address = held[0].unsafe_buffer_pointer()

    def donated_writes():  # the writes are idempotent, so the output can be fed back
        held[0] = donating(held[0])
        return held[0]

    size = len(idx)
    runs = [
        ("numpy", "x[i] = v, in place", numpy_writes, np.asarray),
        ("pytorch", "x[i] = v, in place", torch_writes, lambda t: t.numpy()),
        ("jax", "x.at[i].set(v), eager (a copy per write)", eager_writes, np.asarray),
        ("jax-jit", "x.at[i].set(v), jit (one copy of x)", lambda: copying(x_jax), np.asarray),
        ("jax-jit", "x.at[i].set(v), jit, x donated", donated_writes, np.asarray),
    ]
    medians = {}
    for backend, name, call, to_np in runs:
        timing, out = measure(f"{size} writes: {name}", backend, call, protocol, size=n)
        result.timings.append(timing)
        medians[backend, name] = timing.median_s
        result.checks.append(
            check_true(
                f".at[].set section, {backend}: {name} = NumPy result",
                bool(np.array_equal(to_np(out), want)),
            )
        )
    result.checks.append(
        check_true(
            ".at[].set leaves the original JAX array unchanged (immutable)",
            bool(np.array_equal(np.asarray(x_jax), base)),
        )
    )
    result.checks.append(
        check_true(
            "jit with donation updates in place (same buffer, input_output_alias)",
            held[0].unsafe_buffer_pointer() == address and "input_output_alias" in compiled,
            f"buffer {'reused' if held[0].unsafe_buffer_pointer() == address else 'moved'}",
        )
    )
    eager = medians["jax", "x.at[i].set(v), eager (a copy per write)"]
    result.facts[f".at[].set: eager / jit-donated time ({size} writes, N = {n})"] = eager / max(
        medians["jax-jit", "x.at[i].set(v), jit, x donated"], 1e-12
    )
    result.facts[f".at[].set: eager / NumPy in-place time ({size} writes, N = {n})"] = eager / max(
        medians["numpy", "x[i] = v, in place"], 1e-12
    )
