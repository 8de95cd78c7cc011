"""`accelkit images`: each command parses its options, calls one function of the library API
(`accelkit.images.api`) and renders the result it returns, as a table or the `--json` envelope.
Store commands work on the config's store (Milvus Lite file or Milvus server), or with
`--server URL` on a running `accelkit images serve`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from accelkit.errors import CheckFailed, DataError
from accelkit.images.cli.collection import collection_app
from accelkit.images.cli.importing import import_model_command
from accelkit.images.cli.options import (
    RAY_STAGES,
    AutoCutOption,
    CollectionOption,
    ConfigOption,
    FoldCosineOption,
    FoldOption,
    JsonOption,
    MinScoreOption,
    NegativeIdOption,
    NegativeOption,
    NegativeWeightOption,
    NumGpusOption,
    ProgressOption,
    RayActorsOption,
    ServerOption,
    emit_json,
    index_in_use,
    library,
    search_rows,
    short_json,
    table,
)
from accelkit.images.settings.config import PreprocessConfig
from accelkit.images.settings.schema import SOURCE_KEY
from accelkit.images.store import redact_uri
from accelkit.runtime.cli_options import command_group, endpoint_option, ray_option
from accelkit.runtime.options import given, with_options

images_app = command_group(
    "images",
    "Image preprocessing (PIL-exact, on JAX), embeddings (EfficientNet-Lite0 via ONNX Runtime), vector search (Milvus) and an HTTP service.",
)
images_app.add_typer(collection_app, name="collection")
images_app.command("import-model")(import_model_command)


def register(app: typer.Typer) -> None:
    app.add_typer(images_app, name="images")


@images_app.command("embed")
@with_options(PreprocessConfig, after="config")  # --batch-size, --fit, --platform: its fields
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
            " folder (or URI) for Parquet shards. Default: embeddings.npy, embeddings/"
            " with --ray.",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="ServiceConfig YAML (sections preprocess, model, triton)."),
    ] = None,
    endpoint_url: Annotated[str | None, endpoint_option()] = None,
    ray: Annotated[
        str | None,
        ray_option(RAY_STAGES, " Writes Parquet shards (position, source, vector) into OUTPUT."),
    ] = None,
    ray_actors: RayActorsOption = None,
    num_gpus: NumGpusOption = 0,
    progress: ProgressOption = True,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print a JSON summary (paths, counts, failures) on stdout."),
    ] = False,
    **preprocess,
) -> None:
    """Embed images; writes OUTPUT (rows in the order of OUTPUT.inputs.txt) and OUTPUT.failures.json."""
    report = library().embed(
        paths,
        output,
        config=config,
        **given(PreprocessConfig, preprocess),
        endpoint_url=endpoint_url,
        ray=ray,
        ray_actors=ray_actors,
        num_gpus=num_gpus,
        progress=progress,
    )
    if as_json:
        emit_json(report.document())
        return
    where = report.inputs or "the shards' source column"
    typer.echo(
        f"wrote {report.embedded} embeddings of dimension {report.dim} to "
        f"{report.output} (inputs: {where}; {report.failed} failed: {report.failures_file})"
    )
    for name, reason in list(report.failures.items())[:5]:
        typer.echo(f"failed: {reason}" if name in reason else f"failed: {name}: {reason}", err=True)
    if report.failed > 5:
        typer.echo(f"... and {report.failed - 5} more failures in {report.failures_file}", err=True)


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

    def ready(url: str, settings) -> None:
        typer.echo(
            f"accelkit images service on {url} (search page at /, docs at /docs; store {redact_uri(settings.store.uri)}; "
            f"API key {'required' if settings.server.api_key else 'off'})",
            err=True,
        )

    library().serve(config, host, port, on_ready=ready)


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
        ray_option(RAY_STAGES, " The actors upsert into the config's Milvus server (store.uri)."),
    ] = None,
    ray_actors: RayActorsOption = None,
    num_gpus: NumGpusOption = 0,
    as_json: JsonOption = False,
    progress: ProgressOption = True,
) -> None:
    """Embed images and store them (an existing id is replaced); bad images are reported, the rest stored."""
    split = None if not ids else [p.strip() for v in ids for p in v.split(",") if p.strip()]
    report = library().insert(
        paths,
        collection,
        ids=split,
        metadata=metadata,
        create_collection=create_collection,
        config=config,
        server=server,
        endpoint_url=endpoint_url,
        ray=ray,
        ray_actors=ray_actors,
        num_gpus=num_gpus,
        progress=progress,
    )
    items = [path for path, _ in report.inputs]
    if as_json:
        emit_json(report.document(), ok=report.ok)
    else:
        table(
            f"inserted {len(report.stored)} of {len(items)} into {report.collection}",
            ["input", "id"],
            [[items[i], item_id] for i, item_id in report.stored],
        )
        for i, reason in report.failures.items():
            shown = reason if reason.startswith(f"{items[i]}: ") else f"{items[i]}: {reason}"
            typer.echo(f"failed: {shown}", err=True)
    if not report.ok:
        raise DataError(report.problem)


@images_app.command("search")
def search_command(
    query: Annotated[
        str | None, typer.Argument(help="Query image file (or search by words with --text).")
    ] = None,
    text: Annotated[
        str | None,
        typer.Option(
            "--text", "-t", help="Search by words instead of an image (a two-tower model's)."
        ),
    ] = None,
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
    min_score: MinScoreOption = None,
    auto_cut: AutoCutOption = False,
    negative: NegativeOption = None,
    negative_id: NegativeIdOption = None,
    negative_weight: NegativeWeightOption = 0.5,
    fold: FoldOption = False,
    fold_cosine: FoldCosineOption = None,
) -> None:
    """The stored images nearest to QUERY or to --text (best first), with the file each was
    inserted from. --text 'cat -glasses' pushes the results away from "glasses" ('"-word"' in
    quotes is a literal minus)."""
    report = library().search(
        query,
        topk,
        text=text,
        filter=filter_expr,
        collection=collection,
        config=config,
        server=server,
        min_score=min_score,
        auto_cut=auto_cut,
        negatives=negative,
        negative_ids=negative_id,
        negative_weight=negative_weight,
        fold_duplicates=fold_cosine if fold_cosine is not None else (0.95 if fold else None),
    )
    if as_json:
        emit_json(report.document())
        return
    table(
        f"top {report.topk} in {report.collection} for {report.asked}",
        ["rank", "source", "id", "score", "metadata"],
        search_rows(report.hits),
    )
    if report.message:
        typer.echo(report.message)


@images_app.command("health")
def health_command(
    config: ConfigOption = None, server: ServerOption = None, as_json: JsonOption = False
) -> None:
    """Check the model (embeds a test image) and the store, locally or at --server; exit 3 if unhealthy."""
    report = library().health(config, server)
    if as_json:
        emit_json(report.document(), ok=report.ok)
    else:
        rows = [["status", report.report["status"]]]
        for section in ("model", "store"):
            rows += [[f"{section}.{k}", v] for k, v in (report.report.get(section) or {}).items()]
        rows += [[f"index.{c.get('name', '?')}", index_in_use(c)] for c in report.collections]
        table("accelkit images health", ["check", "value"], rows)
    if not report.ok:
        raise CheckFailed(report.problem)


@images_app.command("migrate")
def migrate_command(
    source: Annotated[
        str,
        typer.Argument(
            help="Store to copy from: a Milvus Lite .db (a 2.x file too, under Lite 3) or a server URI."
        ),
    ],
    target: Annotated[
        str, typer.Argument(help="Store to copy into: a Milvus Lite .db or a server URI.")
    ],
    collection: Annotated[
        list[str] | None,
        typer.Option("--collection", "-c", help="Collection to copy (repeat; default: all)."),
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Items per batch.")] = 1000,
    index_type: Annotated[
        str | None,
        typer.Option(
            "--index-type", help="Index of the copies (default: the source's; HNSW needs a server)."
        ),
    ] = None,
    restart: Annotated[
        bool, typer.Option("--restart", help="Drop an unfinished or stale copy and start over.")
    ] = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="With --restart: drop a complete copy, or DST's own items."),
    ] = False,
    replace_changed: Annotated[
        bool,
        typer.Option(
            "--replace-changed",
            help="Items that differ between SRC and DST (written to since copied) take SRC's version.",
        ),
    ] = False,
    source_token: Annotated[
        str | None, typer.Option("--source-token", help="SRC server's token.")
    ] = None,
    target_token: Annotated[
        str | None, typer.Option("--target-token", help="DST server's token.")
    ] = None,
    source_db: Annotated[
        str | None, typer.Option("--source-db", help="SRC server's database.")
    ] = None,
    target_db: Annotated[
        str | None, typer.Option("--target-db", help="DST server's database.")
    ] = None,
    source_thumbnails: Annotated[
        str,
        typer.Option(
            "--source-thumbnails", help="auto (beside a Lite file), off or a SQLite file."
        ),
    ] = "auto",
    target_thumbnails: Annotated[
        str,
        typer.Option(
            "--target-thumbnails", help="auto (beside a Lite file), off or a SQLite file."
        ),
    ] = "auto",
    config: ConfigOption = None,
    progress: ProgressOption = True,
    as_json: JsonOption = False,
) -> None:
    """Copy collections from SRC to DST (Milvus Lite <-> a server): ids, vectors, metadata, thumbnails, model; resumable, verified."""
    report = library().migrate(
        source,
        target,
        collection,
        config=config,
        source_token=source_token,
        target_token=target_token,
        source_db=source_db,
        target_db=target_db,
        batch_size=batch_size,
        index_type=index_type,
        source_thumbnails=source_thumbnails,
        target_thumbnails=target_thumbnails,
        restart=restart,
        force=force,
        replace_changed=replace_changed,
        progress=progress,
    )
    if as_json:
        emit_json(report.document())
        return
    table(
        f"migrated {report.source} -> {report.target}",
        ["collection", "copied", "total", "resumed after", "thumbnails", "verified", "index"],
        [
            [
                c.name,
                c.copied,
                c.total,
                c.resumed_after or "",
                c.thumbnails,
                f"all {c.compared:,} equal" if c.verified else "no",
                c.index_type,
            ]
            for c in report.collections
        ],
    )
    for line in (c.note for c in report.collections if c.note):
        typer.echo(line)
