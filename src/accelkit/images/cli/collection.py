"""`accelkit images collection …`: list, create, describe, flush, index, set-model and delete
collections,
each one call of the library API rendered as a table or the `--json` envelope."""

from __future__ import annotations

from typing import Annotated

import typer

from accelkit.errors import InputError
from accelkit.images.cli.options import (
    ConfigOption,
    JsonOption,
    NameArgument,
    ServerOption,
    emit_json,
    library,
    print_info,
    table,
)
from accelkit.runtime.cli_options import command_group

collection_app = command_group(
    "collection",
    "List, create, describe, flush, index, re-record the model of and delete collections.",
)


@collection_app.command("list")
def collection_list(
    config: ConfigOption = None, server: ServerOption = None, as_json: JsonOption = False
) -> None:
    """Collections and their sizes."""
    infos = library().list_collections(config, server)
    if as_json:
        emit_json({"collections": infos})
        return
    table(
        "collections",
        ["name", "count", "dim", "index", "metric", "description"],
        [
            [i["name"], i["count"], i["dim"], i["index_type"], i["metric_type"], i["description"]]
            for i in infos
        ],
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
    info = library().create_collection(
        name,
        dim,
        description,
        index_type=index_type,
        metric_type=metric_type,
        config=config,
        server=server,
    )
    print_info(f"collection {info['name']}", info, as_json)


@collection_app.command("stats")
def collection_stats(
    name: NameArgument,
    config: ConfigOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Size, dimension, index and metric of a collection."""
    info = library().describe_collection(name, config, server)
    print_info(f"collection {info['name']}", info, as_json)


@collection_app.command("flush")
def collection_flush(
    name: NameArgument,
    config: ConfigOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Seal inserted rows so a server's index covers them (bulk inserts do this by themselves)."""
    print_info(f"flushed {name}", library().flush_collection(name, config, server), as_json)


@collection_app.command("index")
def collection_index(
    name: NameArgument,
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
        str | None,
        typer.Option(
            "--metric", help="With --index-type: COSINE, IP or L2 (default: the collection's)."
        ),
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

    try:
        spec = None if params is None else json.loads(params)
    except ValueError as exc:
        raise InputError(f"--params is not valid JSON ({exc})") from exc
    info = library().index_collection(
        name,
        wait=wait,
        index_type=index_type,
        metric_type=metric_type,
        params=spec,
        config=config,
        server=server,
    )
    print_info(f"index of {name}", info, as_json)


@collection_app.command("set-model")
def collection_set_model(
    name: NameArgument,
    root: Annotated[
        list[str] | None,
        typer.Option(
            "--root",
            help="Folder the images were inserted from (their 'source' is below it); repeatable."
            " Default: the working directory.",
        ),
    ] = None,
    sample: Annotated[
        int | None, typer.Option("--sample", help="Items to embed again (default 32).")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sample's order.")] = 0,
    min_cosine: Annotated[
        float | None,
        typer.Option("--min-cosine", help="Least cosine with a stored vector (default 0.999)."),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Record without a check when no item can be read.")
    ] = False,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Record the configured model for a collection, after checking it re-makes stored vectors."""
    info = library().set_model(
        name,
        roots=root,
        sample=sample,
        seed=seed,
        min_cosine=min_cosine,
        force=force,
        config=config,
    )
    print_info(f"model of {name}", info, as_json)


@collection_app.command("delete")
def collection_delete(
    name: NameArgument,
    config: ConfigOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a collection and everything in it."""
    library().delete_collection(name, config, server)
    if as_json:
        emit_json({"dropped": name})
    else:
        typer.echo(f"deleted collection {name}")
