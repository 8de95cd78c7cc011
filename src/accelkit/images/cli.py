"""`accelkit images`: embed images into .npy; store and search them (local store or a running
service); run the HTTP service."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

images_app = typer.Typer(
    name="images",
    help="Image preprocessing (PIL-exact, on JAX), embeddings (EfficientNet-Lite0 via ONNX Runtime), vector search (Milvus) and an HTTP service.",
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


# ---------------------------------------------------------------------------------------------
# Vector store and service: serve, insert, search, collection list|create|stats|delete, health.
# Each works on the local store of the config (Milvus Lite file or Milvus server), or, with
# --server URL, through a running `accelkit images serve` (which holds a Milvus Lite file itself).

ConfigOption = Annotated[Path | None, typer.Option("--config", help="ServiceConfig YAML (sections preprocess, model, store, server).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ServerOption = Annotated[str | None, typer.Option("--server", help="Use a running service at this URL (e.g. http://127.0.0.1:8080) instead of the local store.")]
CollectionOption = Annotated[str | None, typer.Option("--collection", "-c", help="Collection name (default: the config's store.collection_name).")]

collection_app = typer.Typer(name="collection", help="List, create, describe and delete collections.", no_args_is_help=True,
                             add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
images_app.add_typer(collection_app, name="collection")


def _settings(config: Path | None):
    from accelkit.images.config import load_service_config

    return load_service_config(config)


def _print_json(value) -> None:
    import json

    typer.echo(json.dumps(value, indent=2, default=str))


def _table(title: str, columns: list[str], rows: list[list]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*[str(v) for v in row])
    Console().print(table)


def remote(server: str, method: str, path: str, *, json_body=None, files=None, data=None, timeout: float = 120.0):
    """Call the service; its JSON errors become AccelkitErrors (exit 2) with the service's message."""
    import os

    import httpx

    from accelkit.errors import InputError

    headers = {}
    key = os.environ.get("ACCELKIT_SERVER_API_KEY")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    try:
        response = httpx.request(method, server.rstrip("/") + path, json=json_body, files=files, data=data, headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        raise InputError(f"cannot reach the service at {server}: {exc}; is `accelkit images serve` running?") from exc
    try:
        body = response.json()
    except ValueError:
        body = {}
    if response.status_code != 200:
        message = (body.get("error") or {}).get("message") if isinstance(body, dict) else None
        raise InputError(f"service answered {response.status_code}: {message or response.text[:200]}")
    return body


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
    if isinstance(value, list) and len(value) == count and all(isinstance(v, dict) or v is None for v in value):
        return value
    raise InputError(f"--metadata must be one JSON object or a list of {count} objects (one per image)")


def parse_ids(values: list[str] | None) -> list[str] | None:
    """--ids a,b,c or --ids a --ids b."""
    if not values:
        return None
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


@images_app.command("serve")
def serve_command(
    host: Annotated[str | None, typer.Option("--host", help="Address to listen on (default: the config's, 127.0.0.1).")] = None,
    port: Annotated[int | None, typer.Option("--port", help="Port (default: the config's, 8080).")] = None,
    config: ConfigOption = None,
) -> None:
    """Run the HTTP service (FastAPI + uvicorn) until Ctrl-C/SIGTERM; in-flight requests finish first."""
    from accelkit.images.service import serve
    from accelkit.images.store import redact_uri

    settings = _settings(config)
    server = settings.server
    typer.echo(f"accelkit images service on http://{host or server.host}:{port if port is not None else server.port} "
               f"(docs at /docs; store {redact_uri(settings.store.uri)}; API key {'required' if server.api_key else 'off'})", err=True)
    serve(settings, host, port)


@images_app.command("insert")
def insert_command(
    paths: Annotated[list[str], typer.Argument(help="Image files, folders (searched recursively) and globs.")],
    collection: CollectionOption = None,
    ids: Annotated[list[str] | None, typer.Option("--ids", help="One id per image, comma-separated or repeated (default: from the image bytes).")] = None,
    metadata: Annotated[str | None, typer.Option("--metadata", help="JSON object for every image, JSON list (one per image), or a file.")] = None,
    create_collection: Annotated[bool, typer.Option("--create-collection", help="Create the collection if missing.")] = False,
    config: ConfigOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Embed images and store them (an existing id is replaced); bad images are reported, the rest stored."""
    from accelkit.errors import DataError, InputError

    items = expand_inputs(paths)
    if not items:
        raise DataError("no inputs given; pass image files, folders or globs")
    id_list = parse_ids(ids)
    if id_list is not None and len(id_list) != len(items):
        raise InputError(f"got {len(items)} images but {len(id_list)} ids; give one id per image or none")
    meta = parse_metadata(metadata, len(items))
    if server:
        files, missing = [], {}
        for i, item in enumerate(items):
            try:
                files.append(("files", (Path(item).name, Path(item).read_bytes())))
            except OSError as exc:
                missing[i] = f"{item}: cannot read ({exc.strerror})"
        if missing:
            raise InputError(f"{len(missing)} inputs cannot be read: {next(iter(missing.values()))}")
        import json

        form = {"collection_name": collection or "", "create_collection": str(create_collection).lower()}
        if id_list:
            form["ids"] = json.dumps(id_list)
        if meta:
            form["metadata"] = json.dumps(meta)
        report = remote(server, "POST", "/insert", files=files, data=form)
        failures = {f["index"]: f["error"] for f in report["failures"]}
        stored = list(zip(report["indices"], report["ids"], strict=True))
        name = report["collection_name"]
    else:
        from accelkit.images.pipeline import ImageEmbeddingPipeline

        with ImageEmbeddingPipeline(_settings(config)) as pipeline:
            result = pipeline.insert_images(items, ids=id_list, metadata=meta, collection_name=collection, create_collection=create_collection)
        failures, stored, name = result.failures, list(zip(result.indices, result.ids, strict=True)), result.collection
    if as_json:
        _print_json({"collection": name, "inserted": len(stored), "items": [{"input": items[i], "id": id_} for i, id_ in stored],
                     "failures": [{"input": items[i], "error": e} for i, e in failures.items()]})
    else:
        _table(f"inserted {len(stored)} of {len(items)} into {name}", ["input", "id"], [[items[i], id_] for i, id_ in stored])
        for i, reason in failures.items():
            typer.echo(f"failed: {items[i]}: {reason}", err=True)
    if not stored:
        raise DataError(f"none of the {len(items)} images could be stored")


@images_app.command("search")
def search_command(
    query: Annotated[str, typer.Argument(help="Query image file.")],
    topk: Annotated[int, typer.Option("--topk", "-k", help="How many results.")] = 10,
    filter_expr: Annotated[str | None, typer.Option("--filter", help='Metadata filter, e.g. \'metadata["category"] == "nature"\'.')] = None,
    collection: CollectionOption = None,
    config: ConfigOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """The stored images nearest to QUERY (best first)."""
    from accelkit.errors import InputError

    if topk < 1:
        raise InputError(f"--topk {topk} must be at least 1")
    if server:
        path = Path(query)
        if not path.is_file():
            raise InputError(f"{query}: no such file; check the path")
        form = {"topk": str(topk), "collection_name": collection or ""}
        if filter_expr:
            form["filter_expr"] = filter_expr
        answer = remote(server, "POST", "/search", files=[("file", (path.name, path.read_bytes()))], data=form)
        hits, name = answer["results"], answer["collection_name"]
    else:
        from accelkit.images.pipeline import ImageEmbeddingPipeline

        settings = _settings(config)
        with ImageEmbeddingPipeline(settings) as pipeline:
            hits = [h.to_dict() for h in pipeline.search_images(query, topk=topk, filter_expr=filter_expr, collection_name=collection)]
        name = collection or settings.store.collection_name
    if as_json:
        _print_json({"collection": name, "query": query, "results": hits})
        return
    _table(f"top {topk} in {name} for {query}", ["rank", "id", "score", "metadata"],
           [[rank, h["id"], f"{h['score']:.4f}", _short_json(h["metadata"])] for rank, h in enumerate(hits, 1)])


def _short_json(value) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def _open_store(config: Path | None):
    from accelkit.images.store import VectorStore

    settings = _settings(config)
    return settings, VectorStore(settings.store)


@collection_app.command("list")
def collection_list(config: ConfigOption = None, server: ServerOption = None, as_json: JsonOption = False) -> None:
    """Collections and their sizes."""
    if server:
        names = remote(server, "GET", "/collections")["collections"]
        infos = [remote(server, "GET", f"/collections/{n}") for n in names]
    else:
        _, store = _open_store(config)
        with store:
            infos = [store.describe(n) for n in store.list_collections()]
    if as_json:
        _print_json({"collections": infos})
        return
    _table("collections", ["name", "count", "dim", "index", "metric", "description"],
           [[i["name"], i["count"], i["dim"], i["index_type"], i["metric_type"], i["description"]] for i in infos])


def _print_info(info: dict, as_json: bool) -> None:
    if as_json:
        _print_json(info)
        return
    _table(f"collection {info['name']}", ["field", "value"], [[k, _short_json(v) if isinstance(v, dict) else v] for k, v in info.items()])


@collection_app.command("create")
def collection_create(
    name: Annotated[str, typer.Argument(help="Collection name: letters, digits, underscores.")],
    dim: Annotated[int | None, typer.Option("--dim", help="Vector dimension (default: the model's, 1280).")] = None,
    description: Annotated[str, typer.Option("--description", help="Free text.")] = "",
    index_type: Annotated[str | None, typer.Option("--index-type", help="FLAT, IVF_FLAT (Milvus Lite) or HNSW (servers).")] = None,
    metric_type: Annotated[str | None, typer.Option("--metric", help="COSINE, IP or L2.")] = None,
    config: ConfigOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a collection."""
    if server:
        body = {"name": name, "dim": dim, "description": description, "index_type": index_type, "metric_type": metric_type}
        info = remote(server, "POST", "/collections/create", json_body={k: v for k, v in body.items() if v is not None})
    else:
        settings, store = _open_store(config)
        with store:
            info = store.create_collection(name, dim or settings.model.embedding_dim, description, index_type=index_type, metric_type=metric_type)
    _print_info(info, as_json)


@collection_app.command("stats")
def collection_stats(
    name: Annotated[str, typer.Argument(help="Collection name.")],
    config: ConfigOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Size, dimension, index and metric of a collection."""
    if server:
        info = remote(server, "GET", f"/collections/{name}")
    else:
        _, store = _open_store(config)
        with store:
            info = store.describe(name)
    _print_info(info, as_json)


@collection_app.command("delete")
def collection_delete(
    name: Annotated[str, typer.Argument(help="Collection name.")],
    config: ConfigOption = None,
    server: ServerOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a collection and everything in it."""
    if server:
        remote(server, "DELETE", f"/collections/{name}")
    else:
        _, store = _open_store(config)
        with store:
            store.drop_collection(name)
    if as_json:
        _print_json({"dropped": name})
    else:
        typer.echo(f"deleted collection {name}")


@images_app.command("health")
def health_command(config: ConfigOption = None, server: ServerOption = None, as_json: JsonOption = False) -> None:
    """Check the model (embeds a test image) and the store, locally or at --server; exit 2 if unhealthy."""
    from accelkit.errors import AccelkitError, DataError

    if server:
        report = remote(server, "GET", "/health")
    else:
        import numpy as np

        settings = _settings(config)
        report = {"status": "ok", "model": {"name": settings.model.name, "backend": settings.model.backend}, "store": {}}
        try:
            from accelkit.images.pipeline import ImageEmbeddingPipeline

            with ImageEmbeddingPipeline(settings) as pipeline:
                vector = pipeline.embed_images([np.full((64, 64, 3), 128, np.uint8)])[0]
                report["model"].update({"ok": True, "dim": int(vector.shape[0]), "device": str(pipeline.device)})
        except AccelkitError as exc:
            report["model"].update({"ok": False, "error": str(exc)})
        try:
            from accelkit.images.store import VectorStore

            with VectorStore(settings.store) as store:
                report["store"] = store.ping()
        except AccelkitError as exc:
            report["store"] = {"ok": False, "uri": settings.store.uri, "error": str(exc)}
        if not (report["model"].get("ok") and report["store"].get("ok")):
            report["status"] = "unhealthy"
    if as_json:
        _print_json(report)
    else:
        rows = [["status", report["status"]]]
        rows += [[f"model.{k}", v] for k, v in report["model"].items()] + [[f"store.{k}", v] for k, v in report["store"].items()]
        _table("accelkit images health", ["check", "value"], rows)
    if report["status"] not in ("ok",):
        raise DataError(f"unhealthy: {report}")
