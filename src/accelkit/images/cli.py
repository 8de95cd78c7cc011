"""`accelkit images embed`: embed image files, folders and globs into an .npy file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

images_app = typer.Typer(
    name="images",
    help="Image preprocessing (PIL-exact, on JAX) and embeddings (EfficientNet-Lite0 via ONNX Runtime).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}


def expand_inputs(paths: list[str]) -> list[str]:
    """Files as given; folders searched recursively for image files (sorted); globs expanded
    (sorted). A path or glob that finds nothing stays in the list so it is reported as a failure."""
    import glob

    found: list[str] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            files = sorted(str(p) for p in path.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
            found.extend(files)
        elif any(ch in text for ch in "*?["):
            matches = sorted(m for m in glob.glob(text, recursive=True) if Path(m).is_file())
            found.extend(matches or [text])
        else:
            found.append(text)
    seen: set[str] = set()
    return [p for p in found if not (p in seen or seen.add(p))]


def sidecar_paths(output: Path) -> tuple[Path, Path]:
    """embeddings.npy -> (embeddings.inputs.txt, embeddings.failures.json)."""
    stem = output.with_suffix("") if output.suffix == ".npy" else output
    return stem.with_name(stem.name + ".inputs.txt"), stem.with_name(stem.name + ".failures.json")


@images_app.command("embed")
def embed_command(
    paths: Annotated[list[str], typer.Argument(help="Image files, folders (searched recursively) and globs such as 'photos/**/*.jpg'.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the [N, D] float32 embeddings (.npy).")] = Path("embeddings.npy"),
    config: Annotated[Path | None, typer.Option("--config", help="ServiceConfig YAML (sections preprocess, model, triton).")] = None,
    batch_size: Annotated[int | None, typer.Option("--batch-size", help="Images per batch (default: the config's, 32).")] = None,
    fit: Annotated[str | None, typer.Option("--fit", help="stretch, center-crop or letterbox.")] = None,
    platform: Annotated[str | None, typer.Option("--platform", help="JAX platform for preprocessing: cpu or gpu.")] = None,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")] = True,
) -> None:
    """Embed images; writes OUTPUT (rows in the order of OUTPUT.inputs.txt) and OUTPUT.failures.json."""
    from accelkit.errors import ConfigError, DataError

    if batch_size is not None and batch_size < 1:
        raise ConfigError(f"--batch-size {batch_size} must be at least 1")
    items = expand_inputs(paths)
    if not items:
        raise DataError("no inputs given; pass image files, folders or globs")
    run_embed(items, output, config, batch_size, fit, platform, progress)


def run_embed(items, output, config, batch_size, fit, platform, progress) -> None:
    import numpy as np

    from accelkit.errors import DataError
    from accelkit.images.config import load_service_config
    from accelkit.images.pipeline import ImageEmbeddingPipeline
    from accelkit.runtime.files import atomic_open, write_json_atomic
    from accelkit.runtime.progress import RateColumn, stderr_console

    overrides = {k: v for k, v in {"batch_size": batch_size, "fit": fit, "jax_platform": platform}.items() if v is not None}
    settings = load_service_config(config, preprocess=overrides)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("[bold]embedding"), BarColumn(), MofNCompleteColumn(), RateColumn("images"),
                   TimeElapsedColumn(), console=stderr_console, disable=not progress, transient=False)
    with ImageEmbeddingPipeline(settings) as pipeline, bar:
        task = bar.add_task("embedding", total=len(items))
        result = pipeline.embed(items, progress=lambda n: bar.advance(task, n))
    inputs_path, failures_path = sidecar_paths(output)
    if not result.indices:
        write_json_atomic(failures_path, {items[i]: reason for i, reason in result.failures.items()})
        first = next(iter(result.failures.values()), "no inputs")
        raise DataError(f"none of the {len(items)} inputs could be embedded (first: {first}); details in {failures_path}")
    with atomic_open(output, "wb") as handle:
        np.save(handle, result.embeddings)
    with atomic_open(inputs_path, "w") as handle:
        handle.write("".join(items[i] + "\n" for i in result.indices))
    write_json_atomic(failures_path, {items[i]: reason for i, reason in result.failures.items()})
    n_ok, n_bad = len(result.indices), len(result.failures)
    typer.echo(f"wrote {n_ok} embeddings of dimension {result.embeddings.shape[1]} to {output} "
               f"(inputs: {inputs_path}; {n_bad} failed: {failures_path})")
    for reason in list(result.failures.values())[:5]:
        typer.echo(f"failed: {reason}", err=True)
    if n_bad > 5:
        typer.echo(f"... and {n_bad - 5} more failures in {failures_path}", err=True)


def register(app: typer.Typer) -> None:
    app.add_typer(images_app, name="images")
