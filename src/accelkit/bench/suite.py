"""`bench all`: every experiment in turn at CI sizes (`SIZES`: "full", or "quick", a smoke test in
seconds), and `write_report`: the results as REPORT.md with its figure, REPORT.png, beside it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from accelkit.bench.harness import Protocol, Result, environment
from accelkit.bench.render import markdown_report, plot_results
from accelkit.runtime.files import atomic_open

# CI sizes: every experiment in seconds to a minute on 2 cores; quick: a smoke test in seconds
SIZES = {
    "full": {
        "xla": 500,
        "chain": 300,
        "jit_scale": 0.02,
        "scipy": 10_000,
        "points": 1000,
        "loops": 10,
        "protocol": Protocol(3, 1),
        "mnist_limit": None,
        "mnist_epochs": None,
        "train": {"samples": 4000, "epochs": 6},
        "train_modes": ("pytorch", "flax", "keras-jax", "keras-torch"),
    },
    "quick": {
        "xla": 64,
        "chain": 48,
        "jit_scale": 0.0005,
        "scipy": 500,
        "points": 100,
        "loops": 2,
        "protocol": Protocol(2, 0),
        "mnist_limit": 512,
        "mnist_epochs": 3,
        "train": {"samples": 1000, "epochs": 2},
        "train_modes": ("pytorch", "flax"),  # each Keras backend is a child process (seconds each)
    },
}


EXPERIMENTS = ("xla", "chain", "jit", "scipy", "autograd", "mnist", "train", "parallel")


def run_all(
    quick: bool = False, progress: Callable[[str], None] = lambda name: None
) -> list[Result]:
    from accelkit.bench.experiments import (
        autograd,
        chain,
        jit,
        mnist,
        parallel,
        scipy_opt,
        train,
        xla,
    )

    size = SIZES["quick" if quick else "full"]
    protocol = size["protocol"]
    results = []
    progress("xla")
    results.append(xla.run(xla.MODES, matrix_size=size["xla"], dtype="float64", protocol=protocol))
    progress("chain")
    chain_modes = [
        m for m in chain.MODES if not (quick and m == "pytorch-compile")
    ]  # inductor's compile alone takes seconds
    results.append(chain.run(chain_modes, matrix_size=size["chain"], protocol=protocol))
    progress("jit")
    results.append(jit.run(scale=size["jit_scale"], protocol=protocol))
    progress("scipy")
    results.append(scipy_opt.run(scipy_opt.MODES, array_length=size["scipy"], protocol=protocol))
    progress("autograd")
    results.append(
        autograd.run(autograd.MODES, points=size["points"], loops=size["loops"], protocol=protocol)
    )
    progress("mnist")
    data = mnist.load_data("digits", limit=size["mnist_limit"])
    epochs = size["mnist_epochs"] or mnist.DEFAULT_EPOCHS["digits"]
    target = None if quick else mnist.TARGETS["digits"]
    results.append(
        mnist.run(
            mnist.MODES,
            data,
            epochs=epochs,
            batch_size=mnist.DEFAULT_BATCH["digits"],
            target=target,
        )
    )
    progress("train")
    results.append(
        train.run(
            size["train_modes"],
            train.Setup(**size["train"]),
            protocol=protocol,
            progress=lambda step: progress(f"train: {step}"),
        )
    )
    progress("parallel")
    results.append(parallel.run_in_subprocess(devices=8, protocol=protocol))
    return results


def write_report(
    results: list[Result], path: str | Path, env: dict | None = None, quick: bool = False
) -> Path:
    """REPORT.md with its figure beside it (REPORT.png), both written atomically; a quick run
    says so at the top (its sizes make a smoke test, not a measurement)."""
    target = Path(path)
    figure = plot_results(results, target.with_suffix(".png"))
    text = markdown_report(results, env or environment(), figure=figure.name, quick=quick)
    with atomic_open(target, "w") as handle:
        handle.write(text + "\n")
    return target
