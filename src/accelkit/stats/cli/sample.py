"""`accelkit sample-dataset`: parse, call `accelkit.stats.write_sample_dataset`, say what was written."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from accelkit.errors import ConfigError, DataError, InputError


def sample_dataset_command(
    folder: Annotated[
        str,
        typer.Argument(  # text, not Path: Path("") would be "." (the working folder)
            metavar="path", help="Folder to create (must not exist, or be empty)."
        ),
    ],
    episodes: Annotated[int, typer.Option("--episodes", help="Number of episodes.")] = 20,
    frames: Annotated[int, typer.Option("--frames", help="Average frames per episode.")] = 500,
    dim: Annotated[int, typer.Option("--dim", help="State and action width.")] = 14,
    layout: Annotated[str, typer.Option("--layout", help="LeRobot layout: v2.1 or v3.0.")] = "v2.1",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    exist_ok: Annotated[
        bool,
        typer.Option(
            "--exist-ok", help="Keep an existing LeRobot dataset at PATH instead of failing."
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print what was written (or kept) as JSON on stdout.")
    ] = False,
) -> None:
    """Write a synthetic LeRobot-format dataset (no videos) to try `accelkit stats` on."""
    from accelkit.stats.formats.synthetic import check_sample_sizes, write_sample_dataset

    if not folder:
        raise InputError("the output folder is empty text; give a folder path")
    path = Path(folder)
    if seed < 0:
        raise ConfigError(f"--seed must be 0 or more, not {seed}")
    check_sample_sizes(episodes, frames, dim, layout)  # also when a dataset is kept
    import json

    from accelkit.runtime.json_output import print_json

    if exist_ok and (path / "meta" / "info.json").is_file():
        kept = check_readable(path)
        if as_json:
            print_json({"path": str(path), "written": False, **kept})
        else:
            typer.echo(
                f"keeping the dataset already at {path} (LeRobot {kept['layout']},"
                f" {kept['episodes']:,} episodes, {kept['frames']:,} frames; not rewritten to the"
                " options given)"
            )
        return
    from accelkit.runtime.progress import Steps, pause

    steps = Steps(episodes, f"writing {path}: episodes")

    def progress(done: int, total: int) -> None:
        steps.done = done
        steps.show()

    try:
        root = write_sample_dataset(
            path,
            episodes=episodes,
            frames_per_episode=frames,
            dim=dim,
            layout=layout,
            seed=seed,
            progress=progress,
        )
    finally:
        pause()
    if as_json:
        info = json.loads((root / "meta" / "info.json").read_text(encoding="utf-8"))
        print_json(
            {
                "path": str(root),
                "written": True,
                "layout": layout,
                "episodes": info["total_episodes"],
                "frames": info["total_frames"],
            }
        )
    else:
        typer.echo(f"wrote LeRobot {layout} sample dataset to {root}")


def check_readable(path: Path) -> dict:
    """The dataset `--exist-ok` keeps must be one `accelkit stats` can read: its metadata, and
    each data file it lists present with the rows and feature columns it lists (parquet footers
    only); a damaged one is named with what is wrong, not kept as if it were the sample.
    Returns what is kept: its layout, episodes and frames."""
    import pyarrow.parquet as pq

    from accelkit.stats.formats.lerobot import check_missing, check_rows, read_json, read_layout

    info_file = path / "meta" / "info.json"
    try:
        info = read_json(info_file)
        layout = read_layout(path, info, info_file)
        check_missing(layout)
        features = info.get("features")
        features = features if isinstance(features, dict) else {}
        stored = [  # what each data file holds (videos and images are files of their own)
            k
            for k, f in features.items()
            if not (isinstance(f, dict) and f.get("dtype") in ("video", "image"))
        ]
        for file, rows in layout.rows_per_file.items():
            try:
                footer = pq.read_metadata(file)
            except (OSError, ValueError) as exc:
                raise DataError(f"{file} is not a readable parquet file ({exc})") from None
            check_rows(file, footer.num_rows, rows)
            names = set(footer.schema.to_arrow_schema().names)
            missing = [k for k in stored if k not in names]
            if missing:
                raise DataError(f"{file} has no column {missing[0]!r} of the dataset's features")
        return {
            "layout": layout.version,
            "episodes": len(layout.episodes),
            "frames": sum(layout.rows_per_file.values()),
        }
    except DataError as exc:
        reason = str(exc).split("; ")[0]
        raise DataError(
            f"--exist-ok: {path} holds a LeRobot dataset that cannot be read ({reason}); it is"
            " left as it is — write the sample to another folder (accelkit sample-dataset NEW_PATH)"
        ) from None
