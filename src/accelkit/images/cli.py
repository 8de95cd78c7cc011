"""`accelkit images`: embed images into .npy; store and search them (local store or a running
service); run the HTTP service."""

from __future__ import annotations

import json
import os
from contextlib import closing
from pathlib import Path
from typing import Annotated

import typer

from accelkit.runtime import storage
from accelkit.runtime.output import command_group, endpoint_option, ray_option

images_app = command_group(
    "images",
    "Image preprocessing (PIL-exact, on JAX), embeddings (EfficientNet-Lite0 via ONNX Runtime), vector search (Milvus) and an HTTP service.",
)

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}


def expand_named(paths: list[str], endpoint_url: str | None = None) -> list[tuple[str, str]]:
    """(path, name) for every input: files as given (named by their file name), folders searched
    recursively for image files (named by their path inside the folder), globs expanded (named by
    their path below the glob's fixed part); all sorted. The same for s3:// and gs:// URIs (a
    prefix is a folder). A path or glob that finds nothing stays in the list so it is reported as
    a failure."""
    import glob

    found: list[tuple[str, str]] = []
    for text in paths:
        if storage.is_uri(text) and not text.lower().startswith("file:"):
            found.extend(_expand_uri(text, endpoint_url))
            continue
        if storage.is_uri(text):
            text = str(storage.as_path(text))
        path = Path(text)
        if path.is_dir():
            files = sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
            )
            found.extend((str(p), p.relative_to(path).as_posix()) for p in files)
        elif any(ch in text for ch in "*?["):
            fixed = Path(
                glob.escape(text[: min(text.find(ch) for ch in "*?[" if ch in text)])
            ).parent
            matches = sorted(m for m in glob.glob(text, recursive=True) if Path(m).is_file())
            found.extend((m, _relative(m, fixed)) for m in matches) if matches else found.append(
                (text, text)
            )
        else:
            found.append((text, path.name))
    seen: set[str] = set()
    return [(p, n) for p, n in found if not (p in seen or seen.add(p))]


def _expand_uri(text: str, endpoint_url: str | None) -> list[tuple[str, str]]:
    """`expand_named` for one object-storage URI: one listing of its fixed prefix."""
    import fnmatch

    wild = [text.find(ch) for ch in "*?[" if ch in text]
    if not wild:
        path = storage.as_path(text, endpoint_url)
        if path.is_dir():
            return [
                (str(p), p.relative_to(path).as_posix())
                for p in path.rglob("*")
                if p.suffix.lower() in IMAGE_SUFFIXES
            ]
        return [(text, path.name)]
    fixed = storage.as_path(text[: min(wild)], endpoint_url).parent
    pattern = str(storage.as_path(text, endpoint_url))
    matches = [p for p in fixed.rglob("*") if fnmatch.fnmatchcase(str(p), pattern)]
    return [(str(p), p.relative_to(fixed).as_posix()) for p in matches] or [(text, text)]


def open_items(items: list[str], endpoint_url: str | None = None) -> list:
    """What the decoder reads: local paths as they are, URIs as `storage.ObjectPath`s."""
    return [storage.as_path(i, endpoint_url) if storage.is_uri(i) else i for i in items]


def _relative(path: str, base: Path) -> str:
    try:
        return Path(path).relative_to(base).as_posix()
    except ValueError:
        return Path(path).name


def expand_inputs(paths: list[str]) -> list[str]:
    """The paths of `expand_named`."""
    return [path for path, _ in expand_named(paths)]


def missing_inputs(items: list[str]) -> dict[int, str]:
    """Inputs that are not readable files, found before any model or store is opened."""
    missing = {}
    for i, item in enumerate(items):
        if storage.is_uri(item):  # read (and reported) by the decoder: no request per object here
            continue
        path = Path(item)
        if not path.exists():
            missing[i] = f"{item}: no such file; check the path"
        elif not path.is_file():
            missing[i] = f"{item}: not a file"
        elif not os.access(path, os.R_OK):
            missing[i] = f"{item}: cannot read (permission denied)"
    return missing


HEADER_BYTES = 1 << 20  # enough for any image header, EXIF included


def check_image_header(item: str) -> None:
    """A local query that is not an image is refused from its first bytes, before the model or
    the store opens (objects on s3:// are read, and refused, by the decoder)."""
    from accelkit.errors import DataError
    from accelkit.images.decode import FORMATS, header_cost

    if storage.is_uri(item):
        return
    with open(item, "rb") as handle:
        head = handle.read(HEADER_BYTES)
    if header_cost(head)[0] == 0:
        raise DataError(
            f"{item}: not an image this tool reads ({', '.join(FORMATS)}); give an image file"
        )


def sidecar_paths(output: Path) -> tuple[Path, Path]:
    """embeddings.npy -> (embeddings.inputs.txt, embeddings.failures.json)."""
    stem = output.with_suffix("") if output.suffix == ".npy" else output
    return stem.with_name(stem.name + ".inputs.txt"), stem.with_name(stem.name + ".failures.json")


RayActorsOption = Annotated[
    int | None,
    typer.Option(
        "--ray-actors",
        help="With --ray: model actors (default: one per CPU of the cluster, or per --num-gpus).",
    ),
]
NumGpusOption = Annotated[
    float, typer.Option("--num-gpus", help="With --ray: GPUs per model actor (default 0).")
]
DEFAULT_OUTPUT = "embeddings.npy"
DEFAULT_RAY_OUTPUT = "embeddings"  # with --ray: a folder of Parquet shards


@images_app.command("embed")
def embed_command(
    paths: Annotated[
        list[str],
        typer.Argument(
            help="Image files, folders (searched recursively) and globs such as 'photos/**/*.jpg';"
            " s3://, gs:// and file:// URIs too."
        ),
    ],
    output: Annotated[
        str | None,
        typer.Option(
            "--output",
            "-o",
            help="Where to write the [N, D] float32 embeddings (.npy; a path or URI). With --ray: a"
            f" folder (or URI) for Parquet shards. Default: {DEFAULT_OUTPUT}, {DEFAULT_RAY_OUTPUT}/"
            " with --ray.",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="ServiceConfig YAML (sections preprocess, model, triton)."),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option("--batch-size", help="Images per batch (default: the config's, 32)."),
    ] = None,
    fit: Annotated[
        str | None, typer.Option("--fit", help="stretch, center-crop or letterbox.")
    ] = None,
    platform: Annotated[
        str | None, typer.Option("--platform", help="JAX platform for preprocessing: cpu or gpu.")
    ] = None,
    endpoint_url: Annotated[str | None, endpoint_option()] = None,
    ray: Annotated[
        str | None,
        ray_option(
            "decoding (tasks) and the model (an actor pool)",
            " Writes Parquet shards (position, source, vector) into OUTPUT.",
        ),
    ] = None,
    ray_actors: RayActorsOption = None,
    num_gpus: NumGpusOption = 0,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")
    ] = True,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print a JSON summary (paths, counts, failures) on stdout."),
    ] = False,
) -> None:
    """Embed images; writes OUTPUT (rows in the order of OUTPUT.inputs.txt) and OUTPUT.failures.json."""
    from accelkit.errors import ConfigError, DataError

    if batch_size is not None and batch_size < 1:
        raise ConfigError(f"--batch-size {batch_size} must be at least 1")
    check_ray_options(ray, ray_actors, num_gpus)
    named = expand_named(paths, endpoint_url)
    if not named:
        raise DataError("no inputs given; pass image files, folders or globs")
    items = [path for path, _ in named]
    missing = missing_inputs(items)
    if len(missing) == len(items):  # before the model loads: a typo fails in well under a second
        raise DataError(
            f"none of the {len(items)} inputs can be read (first: {next(iter(missing.values()))})"
        )
    overrides = {
        k: v
        for k, v in {"batch_size": batch_size, "fit": fit, "platform": platform}.items()
        if v is not None
    }
    if ray:
        if output is not None and output.endswith(".npy"):
            raise ConfigError(
                f"-o {output}: with --ray the embeddings are Parquet shards in a folder; give a"
                " folder or URI (e.g. -o embeddings/)"
            )
        run_embed_on_ray(
            named,
            output or DEFAULT_RAY_OUTPUT,
            config,
            overrides,
            endpoint_url,
            ray,
            ray_actors,
            num_gpus,
            progress,
            as_json,
        )
        return
    run_embed(
        open_items(items, endpoint_url),
        output or DEFAULT_OUTPUT,
        config,
        overrides,
        endpoint_url,
        progress,
        as_json,
    )


def check_ray_options(ray: str | None, actors: int | None, num_gpus: float) -> None:
    from accelkit.errors import ConfigError

    if not ray and (actors is not None or num_gpus):
        flag = "--ray-actors" if actors is not None else "--num-gpus"
        raise ConfigError(f"{flag} sets up Ray actors; add --ray ADDRESS|auto|local or drop it")
    if actors is not None and actors < 1:
        raise ConfigError(f"--ray-actors {actors} must be at least 1")
    if not num_gpus >= 0:
        raise ConfigError(f"--num-gpus {num_gpus} must be 0 or more")


def embed_bar(progress: bool):
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from accelkit.runtime.progress import LogBar, RateColumn, pause, stderr_console

    pause()  # one display at a time: the activity line comes down for the bar
    if not stderr_console.is_terminal:
        return LogBar("images", progress)
    return Progress(
        TextColumn("[bold]embedding"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn("images"),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=stderr_console,
        disable=not progress,
        transient=False,
    )


def run_embed(items, output: str, config, overrides, endpoint_url, progress, as_json=False) -> None:
    import numpy as np

    from accelkit.errors import DataError
    from accelkit.images.config import load_service_config
    from accelkit.images.pipeline import ImageEmbeddingPipeline
    from accelkit.runtime.files import atomic_open, temporary_folder, write_json_atomic
    from accelkit.runtime.progress import phase

    settings = load_service_config(config, preprocess=overrides)
    target = storage.as_path(output, endpoint_url)
    remote = target if isinstance(target, storage.ObjectPath) else None
    names = [str(item) for item in items]
    phase("loading the model and starting JAX")
    pipeline = ImageEmbeddingPipeline(settings)
    bar = embed_bar(progress)
    with pipeline, bar:
        task = bar.add_task("embedding", total=len(items))
        result = pipeline.embed(items, progress=lambda n: bar.advance(task, n))
    failures = {names[i]: reason for i, reason in result.failures.items()}
    with temporary_folder("accelkit-embed-") as folder:
        local = Path(folder) / target.name if remote else target  # uploaded whole below
        inputs_path, failures_path = sidecar_paths(local)
        shown = {local: output}
        if remote:
            for path in (inputs_path, failures_path):
                shown[path] = str(remote.parent / path.name)
        if not result.indices:
            write_json_atomic(failures_path, failures)
            _upload(remote, [failures_path])
            first = next(iter(result.failures.values()), "no inputs")
            raise DataError(
                f"none of the {len(items)} inputs could be embedded (first: {first}); details in"
                f" {shown.get(failures_path, failures_path)}"
            )
        with atomic_open(local, "wb") as handle:
            np.save(handle, result.embeddings)
        with atomic_open(inputs_path, "w") as handle:
            handle.write("".join(names[i] + "\n" for i in result.indices))
        write_json_atomic(failures_path, failures)
        _upload(remote, [local, inputs_path, failures_path])
        report_embedded(
            {
                "output": output,
                "inputs": str(shown.get(inputs_path, inputs_path)),
                "failures_file": str(shown.get(failures_path, failures_path)),
                "embedded": len(result.indices),
                "failed": len(failures),
                "dim": int(result.embeddings.shape[1]),
                "failures": failures,
            },
            as_json,
        )


def _upload(remote, paths: list[Path]) -> None:
    """Local files written by a run, each uploaded whole beside `remote` (the output's URI)."""
    if remote is not None:
        for path in paths:
            (remote.parent / path.name).write_bytes(path.read_bytes())


def report_embedded(summary: dict, as_json: bool) -> None:
    if as_json:
        _print_json(summary)
        return
    n_bad = summary["failed"]
    where = summary.get("inputs") or "the shards' source column"
    typer.echo(
        f"wrote {summary['embedded']} embeddings of dimension {summary['dim']} to "
        f"{summary['output']} (inputs: {where}; {n_bad} failed: {summary['failures_file']})"
    )
    for name, reason in list(summary["failures"].items())[:5]:
        typer.echo(f"failed: {reason}" if name in reason else f"failed: {name}: {reason}", err=True)
    if n_bad > 5:
        typer.echo(f"... and {n_bad - 5} more failures in {summary['failures_file']}", err=True)


def run_embed_on_ray(
    named, output, config, overrides, endpoint_url, address, actors, num_gpus, progress, as_json
) -> None:
    from accelkit.errors import DataError
    from accelkit.images import cluster
    from accelkit.images.config import load_service_config

    settings = load_service_config(config, preprocess=overrides)
    cluster.prepare_folder(output, endpoint_url)
    bar = embed_bar(progress)
    with bar:
        task = bar.add_task("embedding", total=len(named))
        outcome = cluster.run(
            named,
            settings,
            address,
            cluster.Sink(folder=output),
            endpoint_url=endpoint_url,
            actors=actors,
            num_gpus=num_gpus,
            progress=lambda n: bar.advance(task, n),
        )
    failures = {named[p][0]: reason for p, (_, reason) in sorted(outcome.items()) if reason}
    failures_file = output.rstrip("/") + ".failures.json"
    cluster.write_file(
        str(storage.as_path(failures_file, endpoint_url).parent),
        storage.as_path(failures_file, endpoint_url).name,
        json.dumps(failures, indent=2).encode(),
        endpoint_url,
    )
    dim = settings.model.embedding_dim
    manifest = cluster.write_manifest(output, len(named), outcome, dim, endpoint_url)
    if not manifest["embedded"]:
        first = next(iter(failures.values()), "no inputs")
        raise DataError(
            f"none of the {len(named)} inputs could be embedded (first: {first}); details in"
            f" {failures_file}"
        )
    report_embedded(
        {
            "output": output,
            "inputs": None,
            "failures_file": failures_file,
            "embedded": manifest["embedded"],
            "failed": manifest["failed"],
            "dim": dim,
            "shards": len(manifest["shards"]),
            "failures": failures,
        },
        as_json,
    )


def register(app: typer.Typer) -> None:
    app.add_typer(images_app, name="images")


# ---------------------------------------------------------------------------------------------
# Vector store and service: serve, insert, search, collection list|create|stats|delete|flush|index,
# health. Each opens one `ImageIndex` — the local store of the config (Milvus Lite file or Milvus
# server), or with --server URL a running `accelkit images serve` — and calls the same method.

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", help="ServiceConfig YAML (sections preprocess, model, store, server)."
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ServerOption = Annotated[
    str | None,
    typer.Option(
        "--server",
        help="Use a running service at this URL (e.g. http://127.0.0.1:8080) instead of the local store; its key from ACCELKIT_SERVER_API_KEY.",
    ),
]
CollectionOption = Annotated[
    str | None,
    typer.Option(
        "--collection", "-c", help="Collection name (default: the config's store.collection_name)."
    ),
]

collection_app = command_group(
    "collection",
    "List, create, describe, flush, index and delete collections.",
)
images_app.add_typer(collection_app, name="collection")


def _settings(config: Path | None):
    from accelkit.images.config import load_service_config

    return load_service_config(config)


def open_index(config: Path | None, server: str | None):
    """(settings, the `ImageIndex` to work on): the service at `server`, else the local store."""
    settings = _settings(config)
    if server:
        from accelkit.images.remote import RemoteIndex

        return settings, RemoteIndex(
            server, os.environ.get("ACCELKIT_SERVER_API_KEY") or settings.server.api_key
        )
    from accelkit.images.pipeline import open_local_index
    from accelkit.runtime.progress import phase

    phase("opening the store and loading the model")
    return settings, open_local_index(settings)


def _print_json(value, ok: bool = True) -> None:
    from accelkit.runtime.output import print_json

    print_json(value, ok=ok)


def _table(title: str, columns: list[str], rows: list[list]) -> None:
    from accelkit.runtime.output import print_table

    print_table(title, columns, rows)  # fits the terminal; file names and numbers stay whole


def parse_metadata(text: str | None, count: int) -> list[dict | None] | None:
    """--metadata: a JSON object (for every image), a JSON list (one per image), or a file holding either."""
    import json

    from accelkit.errors import InputError

    if text is None:
        return None
    source = text
    if not text.lstrip().startswith(("{", "[")):
        path = Path(text)
        if not path.is_file():
            raise InputError(f"--metadata {text!r} is neither JSON nor a file")
        source = path.read_text(encoding="utf-8")
    try:
        value = json.loads(source)
    except ValueError as exc:
        raise InputError(f"--metadata is not valid JSON ({exc})") from exc
    if isinstance(value, dict):
        return [dict(value) for _ in range(count)]
    if (
        isinstance(value, list)
        and len(value) == count
        and all(isinstance(v, dict) or v is None for v in value)
    ):
        return value
    raise InputError(
        f"--metadata must be one JSON object or a list of {count} objects (one per image)"
    )


def parse_ids(values: list[str] | None) -> list[str] | None:
    """--ids a,b,c or --ids a --ids b."""
    if not values:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


@images_app.command("serve")
def serve_command(
    host: Annotated[
        str | None,
        typer.Option("--host", help="Address to listen on (default: the config's, 127.0.0.1)."),
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", help="Port (default: the config's, 8080).")
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Run the HTTP service (FastAPI + uvicorn) until Ctrl-C/SIGTERM; in-flight requests finish first."""
    from accelkit.images.service import serve
    from accelkit.images.store import redact_uri

    settings = _settings(config)

    def ready(url: str) -> None:
        typer.echo(
            f"accelkit images service on {url} (search page at /, docs at /docs; store {redact_uri(settings.store.uri)}; "
            f"API key {'required' if settings.server.api_key else 'off'})",
            err=True,
        )

    serve(settings, host, port, on_ready=ready)


@images_app.command("insert")
def insert_command(
    paths: Annotated[
        list[str], typer.Argument(help="Image files, folders (searched recursively) and globs.")
    ],
    collection: CollectionOption = None,
    ids: Annotated[
        list[str] | None,
        typer.Option(
            "--ids",
            help="One id per image, comma-separated or repeated (default: from the image bytes).",
        ),
    ] = None,
    metadata: Annotated[
        str | None,
        typer.Option(
            "--metadata",
            help='JSON object for every image, JSON list (one per image), or a file. The file name is recorded under "source" unless given.',
        ),
    ] = None,
    create_collection: Annotated[
        bool, typer.Option("--create-collection", help="Create the collection if missing.")
    ] = False,
    config: ConfigOption = None,
    server: ServerOption = None,
    endpoint_url: Annotated[str | None, endpoint_option()] = None,
    ray: Annotated[
        str | None,
        ray_option(
            "decoding (tasks) and the model (an actor pool)",
            " The actors upsert into the config's Milvus server (store.uri).",
        ),
    ] = None,
    ray_actors: RayActorsOption = None,
    num_gpus: NumGpusOption = 0,
    as_json: JsonOption = False,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")
    ] = True,
) -> None:
    """Embed images and store them (an existing id is replaced); bad images are reported, the rest stored."""
    from accelkit.errors import DataError, InputError
    from accelkit.images.index import ImageInput, insert_in_chunks
    from accelkit.runtime.progress import rows_progress

    check_ray_options(ray, ray_actors, num_gpus)
    named = expand_named(paths, endpoint_url)
    if not named:
        raise DataError("no inputs given; pass image files, folders or globs")
    items = [path for path, _ in named]
    if ray:
        if ids or metadata or server:
            from accelkit.errors import ConfigError

            flag = "--ids" if ids else "--metadata" if metadata else "--server"
            raise ConfigError(
                f"{flag} is not taken with --ray (ids come from the image bytes and the actors"
                " write to store.uri); drop one of them"
            )
        return insert_on_ray(
            named,
            collection,
            create_collection,
            config,
            endpoint_url,
            ray,
            ray_actors,
            num_gpus,
            progress,
            as_json,
        )
    id_list = parse_ids(ids)
    if id_list is not None and len(id_list) != len(items):
        raise InputError(
            f"got {len(items)} images but {len(id_list)} ids; give one id per image or none"
        )
    meta = parse_metadata(metadata, len(items))
    missing = missing_inputs(items)  # before the model or the store is opened
    if len(missing) == len(items):
        raise DataError(
            f"none of the {len(items)} inputs can be read (first: {next(iter(missing.values()))})"
        )
    keep = [i for i in range(len(items)) if i not in missing]
    data = open_items(items, endpoint_url)
    inputs = [
        ImageInput(data[i], id_list[i] if id_list else None, meta[i] if meta else None, named[i][1])
        for i in keep
    ]
    settings, index = open_index(config, server)
    with closing(index), rows_progress(progress and len(inputs) > 1, "images") as bar:
        task = bar.add_task("inserting", total=len(inputs))
        result = insert_in_chunks(
            index,
            inputs,
            collection,
            create_collection,
            flush_after_rows=settings.store.flush_after_rows,
            progress=lambda n: bar.advance(task, n),
        )
    stored = [(keep[i], id_) for i, id_ in zip(result.indices, result.ids, strict=True)]
    failures = dict(
        sorted({**missing, **{keep[i]: reason for i, reason in result.failures.items()}}.items())
    )
    report_inserted(result.collection, named, stored, failures, as_json)


def report_inserted(name, named, stored, failures, as_json) -> None:
    from accelkit.errors import DataError

    items = [path for path, _ in named]
    if as_json:
        _print_json(
            {
                "collection": name,
                "inserted": len(stored),
                "items": [
                    {"input": items[i], "source": named[i][1], "id": id_} for i, id_ in stored
                ],
                "failures": [{"input": items[i], "error": e} for i, e in failures.items()],
            },
            ok=bool(stored),
        )
    else:
        _table(
            f"inserted {len(stored)} of {len(items)} into {name}",
            ["input", "id"],
            [[items[i], id_] for i, id_ in stored],
        )
        for i, reason in failures.items():
            typer.echo(f"failed: {items[i]}: {reason}", err=True)
    if not stored:
        raise DataError(
            f"none of the {len(items)} images could be stored (first: {next(iter(failures.values()))})"
        )


def insert_on_ray(
    named,
    collection,
    create_collection,
    config,
    endpoint_url,
    address,
    actors,
    num_gpus,
    progress,
    as_json,
) -> None:
    from accelkit.errors import ConfigError
    from accelkit.images import cluster
    from accelkit.images.pipeline import open_local_index
    from accelkit.images.store import CollectionNotFoundError, is_local_uri
    from accelkit.runtime.progress import rows_progress

    settings = _settings(config)
    if is_local_uri(settings.store.uri):
        raise ConfigError(
            f"store.uri {settings.store.uri!r} is a Milvus Lite file, which one process opens;"
            " with --ray the actors write to a Milvus server: set store.uri to http://HOST:19530"
        )
    with closing(open_local_index(settings)) as index:  # the collection, checked or made first
        name = index._name(collection)
        try:
            index.store.describe_dim(name)
        except CollectionNotFoundError:
            if not create_collection:
                raise
            index.store.create_collection(name, settings.model.embedding_dim, exist_ok=True)
        with rows_progress(progress and len(named) > 1, "images") as bar:
            task = bar.add_task("inserting on Ray", total=len(named))
            outcome = cluster.run(
                named,
                settings,
                address,
                cluster.Sink(collection=name),
                endpoint_url=endpoint_url,
                actors=actors,
                num_gpus=num_gpus,
                progress=lambda n: bar.advance(task, n),
            )
        stored = [(p, item_id) for p, (item_id, reason) in sorted(outcome.items()) if not reason]
        if (
            settings.store.flush_after_rows is not None
            and len(stored) >= settings.store.flush_after_rows
        ):
            index.flush(name)
    failures = {p: reason for p, (_, reason) in sorted(outcome.items()) if reason}
    report_inserted(name, named, stored, failures, as_json)


@images_app.command("search")
def search_command(
    query: Annotated[str, typer.Argument(help="Query image file.")],
    topk: Annotated[int, typer.Option("--topk", "-k", help="How many results.")] = 10,
    filter_expr: Annotated[
        str | None,
        typer.Option(
            "--filter", help='Metadata filter, e.g. \'metadata["category"] == "nature"\'.'
        ),
    ] = None,
    collection: CollectionOption = None,
    config: ConfigOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """The stored images nearest to QUERY (best first), with the file each was inserted from."""
    from accelkit.errors import DataError, InputError
    from accelkit.images.index import ImageInput
    from accelkit.images.schema import SOURCE_KEY, check_filter

    if topk < 1:
        raise InputError(f"--topk {topk} must be at least 1")
    check_filter(filter_expr, "--filter")
    missing = missing_inputs([query])
    if missing:
        raise DataError(missing[0])
    check_image_header(query)
    settings, index = open_index(config, server)
    with closing(index):
        hits = [h.to_dict() for h in index.search(ImageInput(query), topk, filter_expr, collection)]
    name = collection or settings.store.collection_name
    if as_json:
        _print_json({"collection": name, "query": query, "results": hits})
        return
    _table(
        f"top {topk} in {name} for {query}",
        ["rank", "source", "id", "score", "metadata"],
        [
            [
                rank,
                h["metadata"].get(SOURCE_KEY, ""),
                h["id"],
                f"{h['score']:.4f}",
                _short_json({k: v for k, v in h["metadata"].items() if k != SOURCE_KEY}),
            ]
            for rank, h in enumerate(hits, 1)
        ],
    )


def _short_json(value) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


@collection_app.command("list")
def collection_list(
    config: ConfigOption = None, server: ServerOption = None, as_json: JsonOption = False
) -> None:
    """Collections and their sizes."""
    _, index = open_index(config, server)
    with closing(index):
        infos = [index.describe(n) for n in index.list_collections()]
    if as_json:
        _print_json({"collections": infos})
        return
    _table(
        "collections",
        ["name", "count", "dim", "index", "metric", "description"],
        [
            [i["name"], i["count"], i["dim"], i["index_type"], i["metric_type"], i["description"]]
            for i in infos
        ],
    )


def _print_info(title: str, info: dict, as_json: bool) -> None:
    if as_json:
        _print_json(info)
        return
    _table(
        title,
        ["field", "value"],
        [[k, _short_json(v) if isinstance(v, dict) else v] for k, v in info.items()],
    )


@collection_app.command("create")
def collection_create(
    name: Annotated[str, typer.Argument(help="Collection name: letters, digits, underscores.")],
    dim: Annotated[
        int | None,
        typer.Option("--dim", help="Vector dimension: the model's (1280), the default; no other."),
    ] = None,
    description: Annotated[str, typer.Option("--description", help="Free text.")] = "",
    index_type: Annotated[
        str | None,
        typer.Option("--index-type", help="FLAT, IVF_FLAT (Milvus Lite) or HNSW (servers)."),
    ] = None,
    metric_type: Annotated[str | None, typer.Option("--metric", help="COSINE, IP or L2.")] = None,
    config: ConfigOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a collection."""
    _, index = open_index(config, server)
    with closing(index):
        info = index.create_collection(
            name, dim, description, index_type=index_type, metric_type=metric_type
        )
    _print_info(f"collection {info['name']}", info, as_json)


@collection_app.command("stats")
def collection_stats(
    name: Annotated[str, typer.Argument(help="Collection name.")],
    config: ConfigOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Size, dimension, index and metric of a collection."""
    _, index = open_index(config, server)
    with closing(index):
        info = index.describe(name)
    _print_info(f"collection {info['name']}", info, as_json)


@collection_app.command("flush")
def collection_flush(
    name: Annotated[str, typer.Argument(help="Collection name.")],
    config: ConfigOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Seal inserted rows so a server's index covers them (bulk inserts do this by themselves)."""
    _, index = open_index(config, server)
    with closing(index):
        info = index.flush(name)
    _print_info(f"flushed {name}", info, as_json)


@collection_app.command("index")
def collection_index(
    name: Annotated[str, typer.Argument(help="Collection name.")],
    wait: Annotated[
        bool, typer.Option("--wait", help="Flush, then wait until the index covers every row.")
    ] = False,
    index_type: Annotated[
        str | None,
        typer.Option(
            "--index-type", help="Replace the index (Milvus server): FLAT, IVF_FLAT or HNSW."
        ),
    ] = None,
    metric_type: Annotated[
        str | None, typer.Option("--metric", help="With --index-type: COSINE, IP or L2.")
    ] = None,
    params: Annotated[
        str | None,
        typer.Option(
            "--params",
            help='With --index-type: JSON such as \'{"M": 16, "efConstruction": 200, "ef": 64}\'.',
        ),
    ] = None,
    config: ConfigOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Index progress (indexed / total rows); --wait waits for the build, --index-type rebuilds."""
    import json

    from accelkit.errors import InputError

    spec = None
    if params is not None:
        try:
            spec = json.loads(params)
        except ValueError as exc:
            raise InputError(f"--params is not valid JSON ({exc})") from exc
        if not isinstance(spec, dict):
            raise InputError('--params must be a JSON object such as {"nlist": 128}')
    if (metric_type or spec) and not index_type:
        raise InputError("--metric and --params go with --index-type (which rebuilds the index)")
    _, index = open_index(config, server)
    with closing(index):
        if index_type:
            index.rebuild_index(
                name, index_type=index_type, metric_type=metric_type, index_params=spec
            )
        info = index.index_progress(name, wait=wait)
    _print_info(f"index of {name}", info, as_json)


@collection_app.command("delete")
def collection_delete(
    name: Annotated[str, typer.Argument(help="Collection name.")],
    config: ConfigOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a collection and everything in it."""
    _, index = open_index(config, server)
    with closing(index):
        index.drop_collection(name)
    if as_json:
        _print_json({"dropped": name})
    else:
        typer.echo(f"deleted collection {name}")


@images_app.command("health")
def health_command(
    config: ConfigOption = None, server: ServerOption = None, as_json: JsonOption = False
) -> None:
    """Check the model (embeds a test image) and the store, locally or at --server; exit 3 if unhealthy."""
    from accelkit.errors import AccelkitError, CheckFailed

    try:
        _, index = open_index(config, server)
    except AccelkitError as exc:  # the store cannot be opened: that is the answer
        report = {"status": "unhealthy", "store": {"ok": False, "error": str(exc)}}
    else:
        with closing(index):
            report = index.health()
    if as_json:
        _print_json(report, ok=report["status"] == "ok")
    else:
        rows = [["status", report["status"]]]
        for section in ("model", "store"):
            rows += [[f"{section}.{k}", v] for k, v in (report.get(section) or {}).items()]
        _table("accelkit images health", ["check", "value"], rows)
    if report["status"] != "ok":
        problems = [
            f"{s}: {report[s]['error']}"
            for s in ("model", "store")
            if (report.get(s) or {}).get("error")
        ]
        raise CheckFailed(
            f"unhealthy: {'; '.join(problems) or report.get('error') or report['status']}"
        )
