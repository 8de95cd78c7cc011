"""The library API of `accelkit images`: what a user runs, as plain functions that open the
model, the store or the service, do one operation and return a result object
(`accelkit.images.operations.results`). The command line calls exactly these (one each) and
only renders what they return, so a notebook gets the same behaviour, checks and messages:

```python
from accelkit import images

images.embed(["photos/"], "embeddings.npy", config="images.yaml")          # EmbedReport
images.insert(["photos/"], "pics", create_collection=True, config="images.yaml")
report = images.search("query.jpg", topk=5, collection="pics", config="images.yaml")
[(hit.id, hit.score, hit.metadata["source"]) for hit in report.hits]
```

`config` is a YAML path, a `ServiceConfig`, or None (defaults and the environment); `server`
(a URL) works through a running `accelkit images serve` instead of the local store. The keyword
arguments are the command's options (`topk` is `--topk`, `ray_actors` is `--ray-actors`), and
messages about them name the option. For many operations on one store, open it once:
`with images.open_index(config) as index: index.insert(...); index.search(...)`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import closing
from typing import Any

from accelkit.errors import AccelkitError, ConfigError, DataError, InputError
from accelkit.images.importing.convert import import_model as convert_model
from accelkit.images.index.base import ImageIndex, ImageInput, Steering, TextQuery
from accelkit.images.index.local import SET_MODEL_MIN_COSINE, SET_MODEL_SAMPLE, open_local_index
from accelkit.images.index.opener import open_index as open_chosen_index
from accelkit.images.index.ranking import (
    DEFAULT_NEGATIVE_WEIGHT,
    check_fold,
    check_min_score,
    check_weight,
    parse_terms,
)
from accelkit.images.operations.inputs import check_image_header, expand_named, missing_inputs
from accelkit.images.operations.results import (
    EmbedReport,
    HealthReport,
    ImportReport,
    InsertReport,
    SearchReport,
)
from accelkit.images.operations.runners import open_runner, unreadable, warn
from accelkit.images.service import serve as run_service
from accelkit.images.settings.config import ConfigLike, ServiceConfig, StoreConfig, load_settings
from accelkit.images.settings.schema import check_filter, check_text
from accelkit.images.store.migrate import migrate as copy_store
from accelkit.images.store.records import ignored_warnings

log = logging.getLogger(__name__)


def open_index(
    config: ConfigLike = None, server: str | None = None, api_key: str | None = None
) -> ImageIndex:
    """The `ImageIndex` to work on: the service at `server` (its key: `api_key`, else
    `ACCELKIT_SERVER_API_KEY`, else `server.api_key`), else the config's own store and model."""
    return _open(config, server, api_key)[1]


def _open(
    config: ConfigLike, server: str | None, api_key: str | None = None
) -> tuple[ServiceConfig, ImageIndex]:
    settings = load_settings(config)
    return settings, open_chosen_index(settings, server, api_key)


def _named_inputs(paths: Sequence[str], endpoint_url: str | None) -> list[tuple[str, str]]:
    named = expand_named(list(paths), endpoint_url)
    if not named:
        raise DataError("no inputs given; pass image files, folders or globs")
    return named


# embed -------------------------------------------------------------------------------------------


def embed(
    inputs: Sequence[str],
    output: str | None = None,
    *,
    config: ConfigLike = None,
    batch_size: int | None = None,
    fit: str | None = None,
    platform: str | None = None,
    endpoint_url: str | None = None,
    ray: str | None = None,
    ray_actors: int | None = None,
    num_gpus: float = 0,
    progress: bool = False,
) -> EmbedReport:
    """Embed image files, folders, globs or s3:// URIs into `output` (an [N, D] float32 .npy,
    rows in the order of its `.inputs.txt`, failures in its `.failures.json`; with `ray`, Parquet
    shards in a folder). Raises `DataError` when no input could be embedded."""
    if batch_size is not None and batch_size < 1:
        raise ConfigError(f"--batch-size {batch_size} must be at least 1")
    runner = open_runner(ray, ray_actors, num_gpus)
    named = _named_inputs(inputs, endpoint_url)
    unreadable(
        [path for path, _ in named]
    )  # before the model loads: a typo fails in well under a second
    overrides = {
        k: v
        for k, v in {"batch_size": batch_size, "fit": fit, "platform": platform}.items()
        if v is not None
    }
    return runner.embed(
        named,
        output,
        config=config,
        overrides=overrides,
        endpoint_url=endpoint_url,
        progress=progress,
    )


# insert and search -------------------------------------------------------------------------------


def insert(
    inputs: Sequence[str],
    collection: str | None = None,
    *,
    ids: Sequence[str] | None = None,
    metadata: str | dict | list | None = None,
    create_collection: bool = False,
    config: ConfigLike = None,
    server: str | None = None,
    endpoint_url: str | None = None,
    ray: str | None = None,
    ray_actors: int | None = None,
    num_gpus: float = 0,
    progress: bool = False,
) -> InsertReport:
    """Embed and store image files, folders, globs or s3:// URIs (an existing id is replaced).
    `ids`: one per image (default: from the image bytes); `metadata`: one object for every image,
    a list (one per image), or that as JSON text or a file. Bad images are reported in the
    result's `failures` and the rest stored; `report.ok` is False when nothing was stored."""
    runner = open_runner(ray, ray_actors, num_gpus)
    return runner.insert(
        _named_inputs(inputs, endpoint_url),
        collection,
        ids=ids,
        metadata=metadata,
        create_collection=create_collection,
        config=config,
        server=server,
        endpoint_url=endpoint_url,
        progress=progress,
    )


def search(
    query: str | None = None,
    topk: int = 10,
    *,
    text: str | None = None,
    filter: str | None = None,
    collection: str | None = None,
    config: ConfigLike = None,
    server: str | None = None,
    min_score: float | None = None,
    auto_cut: bool = False,
    negatives: Sequence[str] | None = None,
    negative_ids: Sequence[str] | None = None,
    negative_weight: float = DEFAULT_NEGATIVE_WEIGHT,
    fold_duplicates: float | None = None,
) -> SearchReport:
    """The stored images nearest to the image file `query`, or to `text` (words, for a
    two-tower model; "cat -glasses" pushes the results away from "glasses", `"-word"` in quotes
    is a literal leading minus), best first; `filter`: a metadata filter such as
    `metadata["album"] == "2026"`.

    `min_score`: drop results scoring below it (COSINE/IP); `auto_cut`: also those below a
    clear gap in the scores (`accelkit.images.index.ranking.gap_cut`); `negatives` (texts) and
    `negative_ids` (stored items: "less like this", `ranking.push_away`): push the results
    away from them by `negative_weight`;
    `fold_duplicates` (a cosine, e.g. 0.95): near-duplicates folded under the best-ranked of
    them (`hit.similar`), `topk` distinct results. `report.message` says "no photo scores
    above X" when the cut leaves nothing."""
    if (query is None) == (text is None):
        raise InputError("give a query image or --text (one of the two)")
    if topk < 1:
        raise InputError(f"--topk {topk} must be at least 1")
    check_filter(filter, "--filter")
    steering = _steering(
        min_score, auto_cut, negatives, negative_ids, negative_weight, fold_duplicates
    )
    if text is not None:
        asked: Any = TextQuery(check_text(text, "--text"))
        _option_error("--text", parse_terms, asked.text, "--text")
    else:
        assert query is not None  # one of the two, checked above
        missing = missing_inputs([query])
        if missing:
            raise DataError(missing[0])
        check_image_header(query)
        asked = ImageInput(query)
    settings, index = _open(config, server)
    with closing(index):
        hits = index.search(asked, topk, filter, collection, steering=steering)
    warn(hits.warnings)
    name = hits.collection or collection or settings.store.collection_name
    return SearchReport(name, query, topk, hits, text=text, warnings=hits.warnings, cut=hits.cut)


def _option_error(option: str, check: Callable, *args: Any) -> Any:
    """`check(*args)`, its `InputError` said with the option's name (--min-score, not min_score)."""
    try:
        return check(*args)
    except InputError as exc:
        text = str(exc)
        field = option.removeprefix("--").replace("-", "_")
        raise InputError(
            option + text.removeprefix(field) if text.startswith(field) else text
        ) from None


def _steering(min_score, auto_cut, negatives, negative_ids, weight, fold) -> Steering:
    for option, check, value in (  # named as the CLI names them (fold_duplicates: its cosine)
        ("--min-score", check_min_score, min_score),
        ("--negative-weight", check_weight, weight),
        ("--fold-cosine", check_fold, fold),
    ):
        _option_error(option, check, value)
    return Steering.checked(min_score, auto_cut, negatives, negative_ids, weight, fold)


# collections -------------------------------------------------------------------------------------


def list_collections(config: ConfigLike = None, server: str | None = None) -> list[dict[str, Any]]:
    """Every collection's description (name, count, dim, index, metric, description)."""
    _, index = _open(config, server)
    with closing(index):
        return [index.describe(name) for name in index.list_collections()]


def create_collection(
    name: str,
    dim: int | None = None,
    description: str = "",
    *,
    index_type: str | None = None,
    metric_type: str | None = None,
    config: ConfigLike = None,
    server: str | None = None,
) -> dict[str, Any]:
    """Create a collection for the model's vectors; returns its description."""
    _, index = _open(config, server)
    with closing(index):
        info = index.create_collection(
            name, dim, description, index_type=index_type, metric_type=metric_type
        )
    warn(ignored_warnings(info))
    return info


def describe_collection(
    name: str, config: ConfigLike = None, server: str | None = None
) -> dict[str, Any]:
    """Size, dimension, index and metric of a collection."""
    _, index = _open(config, server)
    with closing(index):
        return index.describe(name)


def flush_collection(
    name: str, config: ConfigLike = None, server: str | None = None
) -> dict[str, Any]:
    """Seal inserted rows so a server's index covers them; returns the index progress."""
    _, index = _open(config, server)
    with closing(index):
        return index.flush(name)


def index_collection(
    name: str,
    *,
    wait: bool = False,
    index_type: str | None = None,
    metric_type: str | None = None,
    params: dict[str, Any] | None = None,
    config: ConfigLike = None,
    server: str | None = None,
) -> dict[str, Any]:
    """Index progress (indexed / total rows); `wait` waits for the build; `index_type` (with
    `metric_type`, `params`) first replaces the index (a Milvus server)."""
    if params is not None and not isinstance(params, dict):
        raise InputError('--params must be a JSON object such as {"nlist": 128}')
    if (metric_type or params) and not index_type:
        raise InputError("--metric and --params go with --index-type (which rebuilds the index)")
    _, index = _open(config, server)
    with closing(index):
        if index_type:
            index.rebuild_index(
                name, index_type=index_type, metric_type=metric_type, index_params=params
            )
        return index.index_progress(name, wait=wait)


def set_model(
    name: str,
    *,
    roots: Sequence[str] | None = None,
    sample: int | None = None,
    seed: int = 0,
    min_cosine: float | None = None,
    force: bool = False,
    config: ConfigLike = None,
) -> dict[str, Any]:
    """Record the configured model as the one that made collection `name` (after a change the
    user has checked: a tokenizer saved again, a setting that leaves vectors as they were, a
    legacy record). Up to `sample` stored items whose `source` is a readable file (absolute,
    or below one of `roots`, default the working directory) are embedded again and must match
    their stored vectors (cosine at least `min_cosine`, default 0.999, and the same length
    within 1%), else `ModelMismatchError` and nothing changes; with no such item, refused
    unless `force`. Works on the config's store (not through a service). Returns what was
    checked and the record kept (`LocalIndex.set_model`)."""
    settings = load_settings(config)
    with closing(open_local_index(settings)) as index:
        return index.set_model(
            name,
            roots=list(roots) if roots else None,
            sample=SET_MODEL_SAMPLE if sample is None else sample,
            seed=seed,
            min_cosine=SET_MODEL_MIN_COSINE if min_cosine is None else min_cosine,
            force=force,
        )


def import_model(path: str, output: str | None = None) -> ImportReport:
    """Make a Hugging Face transformers `CLIPModel` or `SiglipModel` folder (config.json,
    model.safetensors, tokenizer.json, preprocessor_config.json where present) into what text
    search loads: image_encoder.onnx, text_encoder.onnx, tokenizer.json and accelkit.yaml (the
    `preprocess:` and `model:` blocks) in `output` (default: the folder's name + `-accelkit`
    beside it). Checked against transformers' own outputs on shipped photos and texts (cosine
    at least 0.9999) before the folder appears; otherwise one line and nothing written."""
    return ImportReport(**convert_model(path, output))


def delete_collection(name: str, config: ConfigLike = None, server: str | None = None) -> None:
    """Delete a collection and everything in it."""
    _, index = _open(config, server)
    with closing(index):
        index.drop_collection(name)


def migrate(
    source: str,
    target: str,
    collections: Sequence[str] | None = None,
    *,
    config: ConfigLike = None,
    source_token: str | None = None,
    target_token: str | None = None,
    source_db: str | None = None,
    target_db: str | None = None,
    **options: Any,
):
    """Copy collections (default: all) from the store `source` to the store `target` (a Milvus
    Lite file or a server URI each): ids, vectors, metadata, thumbnails and the model record, in
    batches, resumable, verified. `options`: those of `accelkit.images.store.migrate.migrate`
    (batch_size, index_type, sample, source_thumbnails, target_thumbnails, restart, force,
    replace_changed, progress).
    Settings not given (timeout, batch sizes, consistency) come from the config's `store`."""
    base = load_settings(config).store.model_dump()

    def store(uri: str, token: str | None, db: str | None) -> StoreConfig:
        return StoreConfig(**{**base, "uri": uri, "token": token, "db_name": db or ""})

    return copy_store(
        store(source, source_token, source_db),
        store(target, target_token, target_db),
        collections,
        **options,
    )


# health and the service --------------------------------------------------------------------------


def health(config: ConfigLike = None, server: str | None = None) -> HealthReport:
    """Whether the model embeds a test image and the store answers (locally or at `server`);
    a store that cannot be opened is an unhealthy report, not an error."""
    try:
        _, index = _open(config, server)
    except AccelkitError as exc:  # the store cannot be opened: that is the answer
        return HealthReport({"status": "unhealthy", "store": {"ok": False, "error": str(exc)}})
    with closing(index):
        return HealthReport(index.health())


def serve(
    config: ConfigLike = None,
    host: str | None = None,
    port: int | None = None,
    on_ready: Callable[[str, ServiceConfig], None] | None = None,
) -> None:
    """Run the HTTP service until SIGINT/SIGTERM (in-flight requests finish first);
    `on_ready(url, settings)` is called once it listens."""
    given = {"host": host, "port": port}  # checked as the config's own (server.port's range)
    settings = load_settings(config, server={k: v for k, v in given.items() if v is not None})
    ready = None if on_ready is None else (lambda url: on_ready(url, settings))
    run_service(settings, on_ready=ready)
