"""`accelkit images`: embed images into .npy; store and search them (local store or a running
service); run the HTTP service."""

from __future__ import annotations

import os
from contextlib import closing
from pathlib import Path
from typing import Annotated

import typer

from accelkit.runtime.output import command_group

images_app = command_group(
    "images",
    "Image preprocessing (PIL-exact, on JAX), embeddings (EfficientNet-Lite0 via ONNX Runtime), vector search (Milvus) and an HTTP service.",
)

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}


def expand_named(paths: list[str]) -> list[tuple[str, str]]:
    """(path, name) for every input: files as given (named by their file name), folders searched
    recursively for image files (named by their path inside the folder), globs expanded (named by
    their path below the glob's fixed part); all sorted. A path or glob that finds nothing stays
    in the list so it is reported as a failure."""
    import glob

    found: list[tuple[str, str]] = []
    for text in paths:
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
        path = Path(item)
        if not path.exists():
            missing[i] = f"{item}: no such file; check the path"
        elif not path.is_file():
            missing[i] = f"{item}: not a file"
        elif not os.access(path, os.R_OK):
            missing[i] = f"{item}: cannot read (permission denied)"
    return missing


def sidecar_paths(output: Path) -> tuple[Path, Path]:
    """embeddings.npy -> (embeddings.inputs.txt, embeddings.failures.json)."""
    stem = output.with_suffix("") if output.suffix == ".npy" else output
    return stem.with_name(stem.name + ".inputs.txt"), stem.with_name(stem.name + ".failures.json")


@images_app.command("embed")
def embed_command(
    paths: Annotated[
        list[str],
        typer.Argument(
            help="Image files, folders (searched recursively) and globs such as 'photos/**/*.jpg'."
        ),
    ],
    output: Annotated[
        Path,
        typer.Option("--output", "-o", help="Where to write the [N, D] float32 embeddings (.npy)."),
    ] = Path("embeddings.npy"),
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
    items = expand_inputs(paths)
    if not items:
        raise DataError("no inputs given; pass image files, folders or globs")
    missing = missing_inputs(items)
    if len(missing) == len(items):  # before the model loads: a typo fails in well under a second
        raise DataError(
            f"none of the {len(items)} inputs can be read (first: {next(iter(missing.values()))})"
        )
    run_embed(items, output, config, batch_size, fit, platform, progress, as_json)


def run_embed(items, output, config, batch_size, fit, platform, progress, as_json=False) -> None:
    import numpy as np

    from accelkit.errors import DataError
    from accelkit.images.config import load_service_config
    from accelkit.images.pipeline import ImageEmbeddingPipeline
    from accelkit.runtime.files import atomic_open, write_json_atomic
    from accelkit.runtime.progress import RateColumn, stderr_console

    overrides = {
        k: v
        for k, v in {"batch_size": batch_size, "fit": fit, "platform": platform}.items()
        if v is not None
    }
    settings = load_service_config(config, preprocess=overrides)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("[bold]embedding"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn("images"),
        TimeElapsedColumn(),
        console=stderr_console,
        disable=not progress,
        transient=False,
    )
    with ImageEmbeddingPipeline(settings) as pipeline, bar:
        task = bar.add_task("embedding", total=len(items))
        result = pipeline.embed(items, progress=lambda n: bar.advance(task, n))
    inputs_path, failures_path = sidecar_paths(output)
    if not result.indices:
        write_json_atomic(
            failures_path, {items[i]: reason for i, reason in result.failures.items()}
        )
        first = next(iter(result.failures.values()), "no inputs")
        raise DataError(
            f"none of the {len(items)} inputs could be embedded (first: {first}); details in {failures_path}"
        )
    with atomic_open(output, "wb") as handle:
        np.save(handle, result.embeddings)
    with atomic_open(inputs_path, "w") as handle:
        handle.write("".join(items[i] + "\n" for i in result.indices))
    write_json_atomic(failures_path, {items[i]: reason for i, reason in result.failures.items()})
    n_ok, n_bad = len(result.indices), len(result.failures)
    if as_json:
        _print_json(
            {
                "output": str(output),
                "inputs": str(inputs_path),
                "failures_file": str(failures_path),
                "embedded": n_ok,
                "failed": n_bad,
                "dim": int(result.embeddings.shape[1]),
                "failures": {items[i]: reason for i, reason in result.failures.items()},
            }
        )
        return
    typer.echo(
        f"wrote {n_ok} embeddings of dimension {result.embeddings.shape[1]} to {output} "
        f"(inputs: {inputs_path}; {n_bad} failed: {failures_path})"
    )
    for reason in list(result.failures.values())[:5]:
        typer.echo(f"failed: {reason}", err=True)
    if n_bad > 5:
        typer.echo(f"... and {n_bad - 5} more failures in {failures_path}", err=True)


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
    from accelkit.images.index import LocalIndex

    return settings, LocalIndex.open(settings)


def _print_json(value) -> None:
    from accelkit.runtime.output import print_json

    print_json(value)


def _table(title: str, columns: list[str], rows: list[list]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*[str(v) for v in row])
    Console().print(table)


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
            f"accelkit images service on {url} (docs at /docs; store {redact_uri(settings.store.uri)}; "
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
    as_json: JsonOption = False,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")
    ] = True,
) -> None:
    """Embed images and store them (an existing id is replaced); bad images are reported, the rest stored."""
    from accelkit.errors import DataError, InputError
    from accelkit.images.index import ImageInput, insert_in_chunks
    from accelkit.runtime.progress import rows_progress

    named = expand_named(paths)
    if not named:
        raise DataError("no inputs given; pass image files, folders or globs")
    items = [path for path, _ in named]
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
    inputs = [
        ImageInput(
            items[i], id_list[i] if id_list else None, meta[i] if meta else None, named[i][1]
        )
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
    name = result.collection
    if as_json:
        _print_json(
            {
                "collection": name,
                "inserted": len(stored),
                "items": [
                    {"input": items[i], "source": named[i][1], "id": id_} for i, id_ in stored
                ],
                "failures": [{"input": items[i], "error": e} for i, e in failures.items()],
            }
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
        int | None, typer.Option("--dim", help="Vector dimension (default: the model's, 1280).")
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
        _print_json(report)
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
