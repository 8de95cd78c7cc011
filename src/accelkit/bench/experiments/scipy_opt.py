"""`bench scipy`: calibrate a sensor with BFGS, in SciPy (NumPy) and in JAX.

t = linspace(0, 100, N); a = sin t + 1 + t/10 + N(0, 0.3) is the true signal and
b = a·N(1.5, 0.1) + N(3, 0.1) the sensor; we look for x = (slope, offset) minimizing
rmse(x) = sqrt(mean((a − (b − x[1]) / x[0])²)) from x0 = (1, 0). The optimum must be near the
truth (1.5, 3). `jax.scipy.optimize.minimize` re-traces its whole BFGS loop on every eager call;
inside `jax.jit` it is compiled once, and calling a jitted function with a new input shape
compiles again — counted here with a trace counter.

JAX runs in float64 (`jax.enable_x64` for this experiment only): in float32 the line search can
stop with success=False next to the right answer.
"""

from __future__ import annotations

import numpy as np

from accelkit.bench.harness import (
    DEFAULT_PROTOCOL,
    Protocol,
    Result,
    check_close,
    check_true,
    measure,
)

MODES = ("numpy", "jax")
TRUE_SLOPE, TRUE_OFFSET = 1.5, 3.0


def make_data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 100, n)
    a = np.sin(t) + 1 + t / 10 + rng.normal(0, 0.3, n)
    b = a * rng.normal(1.5, 0.1, n) + rng.normal(3, 0.1, n)
    return a, b


def rmse_with_calibration(x, a, b, xp=np):
    return xp.sqrt(xp.mean((a - (b - x[1]) / x[0]) ** 2))


def _tolerances(n: int) -> tuple[float, float]:
    """How far from (1.5, 3) the optimum may land: the multiplicative noise (sd 0.1) biases and
    scatters the slope; a fixed floor keeps small N honest."""
    return 0.05 + 2.0 / np.sqrt(n), 0.5 + 20.0 / np.sqrt(n)


def run(modes, *, array_length: int = 10_000, protocol: Protocol = DEFAULT_PROTOCOL) -> Result:
    result = Result(
        "scipy",
        {
            "modes": list(modes),
            "array_length": array_length,
            "dtype": "float64",
            "repeats": protocol.repeats,
            "warmup": protocol.warmup,
        },
    )
    a, b = make_data(array_length)
    slope_tol, offset_tol = _tolerances(array_length)
    x0 = np.array([1.0, 0.0])
    found = {}
    if "numpy" in modes:
        from scipy.optimize import minimize

        t, res = measure(
            "BFGS",
            "scipy",
            lambda: minimize(rmse_with_calibration, x0, args=(a, b), method="BFGS", tol=1e-4),
            protocol,
            size=array_length,
        )
        result.timings.append(t)
        found["numpy"] = res.x
        result.facts["scipy: iterations"] = int(res.nit)
        result.facts["scipy: rmse at optimum"] = float(res.fun)
    if "jax" in modes:
        found["jax"] = _run_jax(result, a, b, x0, protocol)
    for mode, x in found.items():
        result.checks.append(check_close(f"{mode}: slope ≈ 1.5", x[0], TRUE_SLOPE, slope_tol))
        result.checks.append(check_close(f"{mode}: offset ≈ 3", x[1], TRUE_OFFSET, offset_tol))
        result.facts[f"{mode}: optimum (slope, offset)"] = f"({x[0]:.5f}, {x[1]:.5f})"
    exact = exact_optimum(a, b)
    result.facts["closed-form optimum (slope, offset)"] = f"({exact[0]:.5f}, {exact[1]:.5f})"
    for mode, x in found.items():
        result.checks.append(
            check_close(f"{mode}: slope = closed-form optimum", x[0], exact[0], 1e-3)
        )
        result.checks.append(
            check_close(f"{mode}: offset = closed-form optimum", x[1], exact[1], 1e-2)
        )
    return result


def exact_optimum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The independent reference: with u = 1/slope and w = −offset/slope the residual
    a − (b − offset)/slope = a − (u·b + w) is linear, so the optimum is a least-squares fit."""
    (u, w), *_ = np.linalg.lstsq(np.stack([b, np.ones_like(b)], axis=1), a, rcond=None)
    return np.array([1 / u, -w / u])


def _run_jax(result: Result, a, b, x0, protocol: Protocol):
    import jax
    import jax.numpy as jnp
    from jax.scipy.optimize import minimize

    with jax.enable_x64(True):
        ja, jb, jx0 = jnp.asarray(a), jnp.asarray(b), jnp.asarray(x0)
        device = jax.devices()[0].platform

        def objective(x, a, b):
            return rmse_with_calibration(x, a, b, jnp)

        def solve(x, a, b):
            return minimize(objective, x, args=(a, b), method="BFGS", tol=1e-4)

        # eager: every call re-traces the BFGS while_loop; one call shows the cost
        once = Protocol(repeats=1, warmup=0)
        t_eager, _ = measure(
            "BFGS eager (re-traces per call)",
            "jax",
            lambda: solve(jx0, ja, jb).x,
            once,
            device=device,
            size=len(a),
        )
        solve_jit = jax.jit(solve)
        t_jit, res = measure(
            "BFGS inside jax.jit",
            "jax",
            lambda: solve_jit(jx0, ja, jb),
            protocol,
            device=device,
            size=len(a),
        )
        result.timings += [t_eager, t_jit]
        result.facts["jax: success flag"] = bool(res.success)
        result.facts["jax: iterations"] = int(res.nit)

        # recompilation on shape change: x of shape (2,), (3,), (4,) each trace once, repeats hit the cache
        traces = []

        def counted(x, a, b):
            traces.append(x.shape)  # runs only while tracing
            return objective(x, a, b)

        counted_jit = jax.jit(counted)
        values = []
        for size in (2, 3, 4, 2, 3, 4):
            x = jnp.concatenate([jx0, jnp.zeros(size - 2)]) + jnp.array(
                [0.5, 3.0] + [0.0] * (size - 2)
            )
            values.append(float(counted_jit(x, ja, jb)))
        result.facts["jax: traces for shapes (2,),(3,),(4,) then again"] = len(traces)
        result.checks.append(
            check_true(
                "jit compiles once per new shape (3 traces for 6 calls)",
                len(traces) == 3,
                f"traced shapes {traces}",
            )
        )
        want = float(rmse_with_calibration(np.array([1.5, 3.0]), a, b))
        result.checks.append(
            check_close(
                "jitted objective equals NumPy at x=(1.5, 3)", values[0], want, 1e-12 * max(1, want)
            )
        )
        return np.asarray(res.x)
