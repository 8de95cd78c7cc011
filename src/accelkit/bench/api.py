"""The library API of `accelkit bench`: `run` one experiment, or `all`, and get a `BenchRun`.

    import accelkit.bench as bench

    done = bench.run("scipy", "numpy,jax", array_length=500, repeats=2)
    done.passed                # every correctness check held
    done.results[0].timings    # median, min, IQR, first call per operation and backend
    done.write_json("scipy.json"), done.write_plot("scipy.png"), done.write_report("scipy.md")

`accelkit bench EXPERIMENT` is this call and a rendering of what it returns. Inputs are checked
here, once, and a bad one raises a `ConfigError` (an `AccelkitError`) that names it as the
command line spells it (`matrix_size` is `--matrix-size`). A failed correctness check is a result,
not an error: `BenchRun.passed` is False, and `raise_for_failures()` turns it into `CheckFailed`.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from accelkit.bench.harness import Protocol, Result, document, environment, fix_threads
from accelkit.bench.processes import run_in_processes
from accelkit.bench.render import plot_results
from accelkit.bench.schema import validate
from accelkit.bench.suite import run_all, write_report
from accelkit.errors import CheckFailed, ConfigError, MissingDependencyError
from accelkit.runtime.files import write_json_atomic

Progress = Callable[[str], None]
STARTED = "running"  # the first progress step of every experiment: its inputs are checked


def _silent(step: str) -> None:
    pass


# ---------------------------------------------------------------------------------------------
# the result


@dataclass
class BenchRun:
    """What `run` returns: the experiments' results (one, or every one for `all`) and the record
    of the run's circumstances (machine, load, versions, threads) they were measured under."""

    experiment: str
    results: list[Result]
    environment: dict
    quick: bool = False  # `all` at smoke-test sizes: the report says its times are no measurements

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failed(self) -> list[str]:
        """The names of the correctness checks that failed."""
        return [c.name for r in self.results for c in r.checks if not c.passed]

    def document(self) -> dict:
        """The JSON document, schema `accelkit.bench/1` (validated)."""
        doc = document(self.results, self.environment)
        validate(doc)
        return doc

    def write_json(self, path: str | Path) -> Path:
        """`document()` written atomically."""
        write_json_atomic(Path(path), self.document(), trailing_newline=True)
        return Path(path)

    def write_plot(self, path: str | Path) -> Path:
        """A PNG: one panel per result (its series, else its median times)."""
        return plot_results(self.results, path)

    def write_report(self, path: str | Path) -> Path:
        """A markdown report with its figure beside it (REPORT.md, REPORT.png)."""
        return write_report(self.results, path, self.environment, quick=self.quick)

    def raise_for_failures(self) -> None:
        """Raise `CheckFailed` (exit 3 on the command line) naming every failed check."""
        failed = self.failed
        if failed:
            raise CheckFailed(f"{len(failed)} correctness check(s) failed: {'; '.join(failed)}")


# ---------------------------------------------------------------------------------------------
# checking inputs (each message names the option as the command line spells it)


def parse_modes(modes: str | Sequence[str] | None, allowed: tuple[str, ...]) -> list[str]:
    """ "numpy,jax" or ["numpy", "jax"] (None: all of `allowed`), each known, without repeats."""
    if modes is None:
        return list(allowed)
    parts = modes.split(",") if isinstance(modes, str) else modes
    items = [p.strip().lower() for p in parts if p.strip()]
    if not items:
        raise ConfigError(f"MODES is empty; choose from {', '.join(allowed)} (comma-separated)")
    bad = [p for p in items if p not in allowed]
    if bad:
        raise ConfigError(f"mode {bad[0]!r} is not known; choose from {', '.join(allowed)}")
    return list(dict.fromkeys(items))


def at_least(name: str, value, minimum=1) -> None:
    if value < minimum:
        raise ConfigError(f"{name} {value} must be at least {minimum}")


def training_rates(learning_rate: float | None, momentum: float, dropout: float = 0.0) -> None:
    """One check for the SGD options both training experiments take."""
    if learning_rate is not None and not learning_rate > 0:
        raise ConfigError(f"--learning-rate {learning_rate} must be positive")
    for name, value in (("--momentum", momentum), ("--dropout", dropout)):
        if not 0 <= value < 1:
            raise ConfigError(f"{name} {value} must lie in [0, 1)")


# ---------------------------------------------------------------------------------------------
# what every experiment shares: how it is timed and run


@dataclass
class _Options:
    """The options the experiments share (each takes those its plan names in `SHARED`)."""

    repeats: int = 3
    warmup: int = 1
    threads: int | None = None
    processes: bool = False
    rounds: int = 2
    device: str | None = None
    progress: Progress = _silent
    threads_used: int | None = field(default=None, init=False)

    def protocol(self) -> Protocol:
        at_least("--repeats", self.repeats)
        at_least("--warmup", self.warmup, 0)
        return Protocol(repeats=self.repeats, warmup=self.warmup)

    def start(self, announce: bool = True) -> None:
        """Fix the thread count of PyTorch and BLAS (recorded in each result's params); then,
        with `announce`, say that it runs: an experiment can take minutes before its results."""
        if self.threads is not None:
            at_least("--threads", self.threads)
        self.threads_used = fix_threads(self.threads)
        if announce:
            self.progress(STARTED)

    def per_backend(self, experiment: str, modes: list[str], **settings) -> Result:
        """The experiment's `run` here, or with `processes` one process per backend and round."""
        if not self.processes:
            module = importlib.import_module(f"accelkit.bench.experiments.{experiment}")
            return module.run(modes, protocol=self.protocol(), torch_device=self.device, **settings)

        at_least("--rounds", self.rounds)
        settings["torch_device"] = self.device
        return run_in_processes(
            experiment, modes, settings, self.protocol(), self.threads, self.rounds
        )

    def finish(
        self, experiment: str, results: list[Result], dtype: str | None, quick: bool = False
    ) -> BenchRun:
        """The results, each with the thread count it ran with, and the run's record."""
        if self.threads_used is not None:
            for result in results:
                result.params["threads"] = self.threads_used
        return BenchRun(experiment, results, environment(dtype), quick)


# ---------------------------------------------------------------------------------------------
# one plan per experiment: check its own inputs, then the shared ones, then run


def _xla(how: _Options, modes=None, *, matrix_size: int = 2000, dtype: str = "float64"):
    from accelkit.bench.experiments import xla

    mode_list = parse_modes(modes, xla.MODES)
    at_least("--matrix-size", matrix_size, 2)
    if dtype not in ("float64", "float32"):
        raise ConfigError(f"--dtype {dtype!r} is not supported; use float64 or float32")
    how.protocol()
    how.start()
    result = how.per_backend("xla", mode_list, matrix_size=matrix_size, dtype=dtype)
    return how.finish("xla", [result], dtype)


def _chain(how: _Options, modes=None, *, matrix_size: int = 1000):
    from accelkit.bench.experiments import chain

    mode_list = parse_modes(modes, chain.MODES)
    at_least("--matrix-size", matrix_size, 2)
    how.protocol()
    how.start()
    result = how.per_backend("chain", mode_list, matrix_size=matrix_size)
    return how.finish("chain", [result], "float32")


def _jit(how: _Options, *, scale: float = 0.25):
    from accelkit.bench.experiments import jit

    if not 0 < scale <= 10:
        raise ConfigError(f"--scale {scale} must lie in (0, 10]")
    protocol = how.protocol()
    how.start()
    return how.finish("jit", [jit.run(scale=scale, protocol=protocol)], "float32")


def _scipy(how: _Options, modes=None, *, array_length: int = 10_000):
    from accelkit.bench.experiments import scipy_opt

    mode_list = parse_modes(modes, scipy_opt.MODES)
    at_least("--array-length", array_length, 10)
    protocol = how.protocol()
    how.start()
    result = scipy_opt.run(mode_list, array_length=array_length, protocol=protocol)
    return how.finish("scipy", [result], "float64")


def _autograd(how: _Options, modes=None, *, points: int = 1000, loops: int = 10):
    from accelkit.bench.experiments import autograd

    mode_list = parse_modes(modes, autograd.MODES)
    at_least("--points", points)
    at_least("--loops", loops)
    protocol = how.protocol()
    how.start()
    result = autograd.run(mode_list, points=points, loops=loops, protocol=protocol)
    return how.finish("autograd", [result], "float32")


def _mnist(
    how: _Options,
    modes=None,
    *,
    data: str = "digits",
    epochs: int | None = None,
    batch_size: int | None = None,
    limit: int | None = None,
    target: float | None = None,
    learning_rate: float | None = None,
    momentum: float = 0.9,
    batch_size_validation: int | None = None,
    dry_run: bool = False,
):
    """Defaults by data set: epochs 40 digits, 10 mnist5k, 2 IDX; batch 32, 32, 128; the target
    accuracy 98 % digits, 96 % mnist5k, checked at the default epochs and with no limit."""
    from accelkit.bench.experiments import mnist

    mode_list = parse_modes(modes, mnist.MODES)
    for name, value, minimum in (
        ("--batch-size", batch_size, 1),
        ("--epochs", epochs, 1),
        ("--limit", limit, 10),
        ("--batch-size-validation", batch_size_validation, 1),
    ):
        if value is not None:
            at_least(name, value, minimum)
    training_rates(learning_rate, momentum)
    how.start(announce=False)
    dataset = mnist.load_data(data, limit=limit)
    how.progress(STARTED)
    default_epochs = mnist.DEFAULT_EPOCHS.get(dataset.name, 2)
    if target is None and (epochs is None or epochs >= default_epochs) and limit is None:
        target = mnist.TARGETS.get(dataset.name)
    result = mnist.run(
        mode_list,
        dataset,
        epochs=epochs or default_epochs,
        batch_size=batch_size or mnist.DEFAULT_BATCH.get(dataset.name, 128),
        lr=learning_rate,
        momentum=momentum,
        eval_batch_size=batch_size_validation,
        dry_run=dry_run,
        target=target,
    )
    return how.finish("mnist", [result], "float32")


def _train(
    how: _Options,
    modes=None,
    *,
    samples: int = 10_000,
    epochs: int = 10,
    batch_size: int = 64,
    learning_rate: float = 0.01,
    momentum: float = 0.9,
    dropout: float = 0.2,
    checkpoint_epoch: int | None = None,
    devices: int = 8,
):
    """`checkpoint_epoch`: save after this many epochs (default: half-way); `devices`: virtual
    CPU devices of the multi-device evaluation."""
    from accelkit.bench.experiments import train

    mode_list = parse_modes(modes, train.MODES)
    at_least("--epochs", epochs)
    at_least("--batch-size", batch_size, 2)
    at_least("--devices", devices, 2)
    if samples < 5 * batch_size:
        raise ConfigError(
            f"--samples {samples} is too few for --batch-size {batch_size}: "
            f"give at least {5 * batch_size} (four batches to train on, one to test)"
        )
    training_rates(learning_rate, momentum, dropout)
    if checkpoint_epoch is not None and not 1 <= checkpoint_epoch < epochs:
        raise ConfigError(f"--checkpoint-epoch {checkpoint_epoch} must lie in [1, --epochs)")
    keras = any(m.startswith("keras") for m in mode_list)
    for module, wanted in [("orbax.checkpoint", "flax" in mode_list), ("keras", keras)]:
        if wanted and importlib.util.find_spec(module) is None:  # found, not imported: keras
            raise MissingDependencyError(module, "bench")  # fixes its backend at import
    protocol = how.protocol()
    how.start()
    setup = train.Setup(  # samples, epochs, batch size, lr, momentum, dropout: Setup's order
        samples,
        epochs,
        batch_size,
        learning_rate,
        momentum,
        dropout,
        checkpoint_epoch=checkpoint_epoch,
    )
    result = train.run(
        mode_list,
        setup,
        devices=devices,
        protocol=protocol,
        threads=how.threads_used,
        progress=how.progress,
    )
    return how.finish("train", [result], "float32")


def _parallel(how: _Options, *, devices: int = 8):
    """In a child process with `devices` virtual CPU devices (XLA's count is fixed at start)."""
    from accelkit.bench.experiments.parallel import run_in_subprocess

    at_least("--devices", devices, 2)
    protocol = how.protocol()
    how.progress(STARTED)
    return how.finish(
        "parallel", [run_in_subprocess(devices=devices, protocol=protocol)], "float32"
    )


def _all(how: _Options, *, quick: bool = False):
    """Every experiment at CI sizes (`quick`: tiny sizes, a smoke test in seconds); progress
    names each experiment as it starts (and train's steps as `train: step`)."""
    how.start(announce=False)
    return how.finish("all", run_all(quick=quick, progress=how.progress), None, quick)


# plan, and the shared options it takes
PLANS: dict[str, tuple[Callable[..., BenchRun], tuple[str, ...]]] = {
    "xla": (_xla, ("repeats", "warmup", "threads", "processes", "rounds", "device")),
    "chain": (_chain, ("repeats", "warmup", "threads", "processes", "rounds", "device")),
    "jit": (_jit, ("repeats", "warmup", "threads")),
    "scipy": (_scipy, ("repeats", "warmup", "threads")),
    "autograd": (_autograd, ("repeats", "warmup", "threads")),
    "mnist": (_mnist, ("threads",)),
    "train": (_train, ("repeats", "warmup", "threads")),
    "parallel": (_parallel, ("repeats", "warmup")),
    "all": (_all, ("threads",)),
}


def defaults(experiment: str) -> dict[str, object]:
    """The options `run(experiment, ...)` takes and their defaults (`modes` first where it takes
    modes: None means all of them)."""
    plan, shared = _plan(experiment)
    own = list(inspect.signature(plan).parameters.values())[1:]
    return {p.name: p.default for p in own} | {name: getattr(_Options, name) for name in shared}


def _plan(experiment: str):
    if experiment not in PLANS:
        raise ConfigError(f"experiment {experiment!r} is not known; choose from {', '.join(PLANS)}")
    return PLANS[experiment]


def run(
    experiment: str,
    modes: str | Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
    **options,
) -> BenchRun:
    """Run `experiment` (xla, chain, jit, scipy, autograd, mnist, train, parallel, or all) and
    return its `BenchRun`; the keyword options are those of `accelkit bench EXPERIMENT`, spelt
    with underscores (docs/bench.md; `accelkit.bench.defaults(experiment)` lists them and their
    defaults).

    `modes`: the backends, "numpy,jax" or a list (default: every one the experiment knows).
    Shared options: `repeats` timed calls after `warmup` untimed ones; `threads` for PyTorch and
    BLAS; `processes` (one process per backend, `rounds` interleaved rounds); `device` for
    PyTorch. `progress(step)` hears what runs (first `"running"`, once the inputs are checked).
    """
    plan, shared = _plan(experiment)
    own = list(inspect.signature(plan).parameters)[1:]  # after the shared options' `how`
    for name in options:
        if name not in own and name not in shared:
            known = ", ".join(n for n in [*own, *shared] if n != "modes")
            raise ConfigError(f"bench {experiment} has no option {name!r}; it takes: {known}")
    how = _Options(
        **{n: options.pop(n) for n in shared if n in options}, progress=progress or _silent
    )
    if "modes" in own:
        options["modes"] = modes
    elif modes is not None:
        raise ConfigError(f"bench {experiment} takes no MODES; it runs what it runs")
    return plan(how, **options)
