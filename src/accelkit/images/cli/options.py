"""What the `accelkit images` commands share: their options and the rendering of a result as a
table or the `--json` envelope."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from accelkit.runtime.json_output import print_json
from accelkit.runtime.tables import print_table

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
NameArgument = Annotated[str, typer.Argument(help="Collection name.")]
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
ProgressOption = Annotated[
    bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")
]
RAY_STAGES = "decoding (tasks) and the model (an actor pool)"


def library():
    """The library API, imported on a command's first call: `accelkit --help` pays for none of it."""
    from accelkit.images import api

    return api


def emit_json(value, ok: bool = True) -> None:
    print_json(value, ok=ok)


def table(title: str, columns: list[str], rows: list[list]) -> None:
    print_table(title, columns, rows)  # fits the terminal; file names and numbers stay whole


def short_json(value) -> str:
    import json

    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def print_info(title: str, info: dict, as_json: bool) -> None:
    if as_json:
        emit_json(info)
        return
    table(
        title,
        ["field", "value"],
        [[k, short_json(v) if isinstance(v, dict) else v] for k, v in info.items()],
    )


def index_in_use(collection: dict) -> str:
    """One health row: `IVF_FLAT COSINE nlist=128 (ignored: nprobe)`."""
    if "error" in collection:
        return collection["error"]
    params = " ".join(f"{k}={v}" for k, v in collection["params"].items())
    ignored = ", ".join(collection["ignored"])
    text = " ".join(p for p in (collection["index_type"], collection["metric_type"], params) if p)
    return text + (f" (ignored: {ignored})" if ignored else "")


# `images search`: cut and steer the answer (accelkit.images.index.ranking) ------------------------
MinScoreOption = Annotated[
    float | None,
    typer.Option(
        "--min-score",
        help="Drop results scoring below this (a cosine, -1 to 1); says so when none is left.",
    ),
]
AutoCutOption = Annotated[
    bool,
    typer.Option("--auto-cut", help="Also drop results below a clear gap in the scores."),
]
NegativeOption = Annotated[
    list[str] | None,
    typer.Option(
        "--negative",
        help="Words to push the results away from (repeatable; or '-word' in --text).",
    ),
]
NegativeIdOption = Annotated[
    list[str] | None,
    typer.Option("--negative-id", help="A stored item to push the results away from (repeatable)."),
]
NegativeWeightOption = Annotated[
    float,
    typer.Option("--negative-weight", help="How far negatives push (0 to 1; default 0.5)."),
]
FoldOption = Annotated[
    bool,
    typer.Option(
        "--fold-duplicates", help="Fold near-duplicates under the best-ranked one (+N similar)."
    ),
]
FoldCosineOption = Annotated[
    float | None,
    typer.Option(
        "--fold-cosine", help="The cosine at which results fold (default 0.95; implies folding)."
    ),
]


def search_rows(hits) -> list[list]:
    """The rows of `images search`'s table: rank, source, id, score (+N similar), metadata."""
    from accelkit.images.settings.schema import SOURCE_KEY

    return [
        [
            rank,
            hit.metadata.get(SOURCE_KEY, ""),
            hit.id,
            f"{hit.score:.4f}" + (f" +{len(hit.similar)} similar" if hit.similar else ""),
            short_json({k: v for k, v in hit.metadata.items() if k != SOURCE_KEY}),
        ]
        for rank, hit in enumerate(hits, 1)
    ]
