"""What a statistics run writes: the statistics file and its run-facts sidecar, LeRobot's
per-episode files (into the dataset, backed up first, restored if the write fails or is stopped, or
beside the output), and the --plot figure."""

from __future__ import annotations

from pathlib import Path

from accelkit import __version__
from accelkit.errors import DataError
from accelkit.runtime.progress import phase
from accelkit.stats.core.action_chunks import describe
from accelkit.stats.core.camera_stats import lerobot_entry
from accelkit.stats.core.quantiles import quantile_name
from accelkit.stats.formats import lerobot
from accelkit.stats.formats.stats_files import empty_dimensions, fill_empty_dimensions, sidecar_path
from accelkit.stats.settings import StatsSettings


def write_plot(path: Path | None, result, stream) -> tuple[Path, int] | None:
    """The --plot figure, and its flagged dimensions as warnings: (path, how many flagged)."""
    if path is None:
        return None
    from accelkit.stats.computation.plot import plot_data, warn_flags, write_plot

    phase(f"drawing {path}")
    data = plot_data(result, {k: stream.column_name(k) for k in result.stats}, stream.name)
    flagged = warn_flags(data)
    return write_plot(path, data), flagged


def write_outputs(settings, stream, result, levels, output: Path, target):
    """Per-episode files (if asked), the statistics and their sidecar; returns the backup folder.
    Written into a dataset (`target`), its files are as they were if this fails or is stopped."""
    import contextlib

    from accelkit.stats.formats.stats_files import write_stats

    episodes = episodes_to_write(settings, stream, result)  # checked before anything is written
    keep = existing_stats(output) if target is not None else None
    replaced = dataset_files_replaced(settings, stream, output) if target is not None else []
    with lerobot.as_it_was(replaced) if target is not None else contextlib.nullcontext() as guard:
        backup = None
        if target is not None:
            assert guard is not None  # `as_it_was`'s, with a target
            backup = guard.created(lerobot.backup(target, replaced, stamp()))
        if episodes is not None:  # per-episode files first: their checks run before stats.json
            write_episode_outputs(stream, result, episodes, output, into=target is not None)
        cameras = None
        if result.cameras is not None:
            names = {float(q): quantile_name(q) for q in levels}
            cameras = {k: lerobot_entry(s, names) for k, s in result.cameras.stats.items()}
        write_stats(
            output,
            result.stats,
            settings.format,
            stream.keys,
            fill_empty=settings.fill_empty,
            allow_missing_quantiles=settings.allow_missing_quantiles,
            run=run_facts(settings, result, stream, levels),
            keep=keep,
            extra=cameras,
        )
    return backup


def stamp() -> str:
    import time

    return time.strftime("%Y%m%dT%H%M%S")


def existing_stats(path: Path) -> dict | None:
    """The dataset's current stats.json, whose other features --write-into keeps."""
    import json

    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(
            f"{path} is not readable JSON ({exc}); move it away or repair it before --write-into"
        ) from exc
    return data if isinstance(data, dict) else None


def episodes_to_write(settings: StatsSettings, stream, result) -> list | None:
    """Per-episode results ready to write (empty dimensions filled or refused), or None."""

    if not settings.per_episode:
        return None
    names = dict(stream.keys)
    for episode in result.episodes or []:
        empty = empty_dimensions(episode.stats)
        if empty and settings.fill_empty is None:
            key, dims = next(iter(empty.items()))
            raise DataError(
                f"episode {episode.index}: {names.get(key, key)!r} dimensions {dims} hold no "
                "finite values; fix the data, or pass --fill-empty VALUE to write VALUE for them"
            )
        if empty and settings.fill_empty is not None:  # else refused above
            episode.stats = fill_empty_dimensions(episode.stats, settings.fill_empty)
    return result.episodes or []


def dataset_files_replaced(settings: StatsSettings, stream, output: Path) -> list[Path]:
    """The dataset files --write-into replaces (backed up under meta/.accelkit-backup/<time>/)."""

    source = stream.lerobot
    replaced = [output, sidecar_path(output)]
    if settings.per_episode:
        replaced += (
            [source.root / lerobot.EPISODES_JSONL]
            if source.version.startswith("v2")
            else lerobot.episode_meta_files(source.root)
        )
    return replaced


def write_episode_outputs(stream, result, episodes: list, output: Path, into: bool) -> list[Path]:
    """Per-episode statistics where the dataset's version keeps them: in its meta/ folder (`into`),
    or beside `output` (v2.1 episodes_stats.jsonl, v3.0 an episodes/ folder of its meta files)."""

    source = stream.lerobot
    names = dict(stream.keys)
    levels = next(iter(result.stats.values())).quantiles
    quantile_names = {float(q): quantile_name(q) for q in levels}
    meta = source.root / "meta" if into else output.parent
    v2 = source.version.startswith("v2")
    cameras = None
    if result.cameras is not None:  # LeRobot 0.3 (v2.1) keeps no quantiles per episode
        cameras = {
            episode: {k: lerobot_entry(s, None if v2 else quantile_names) for k, s in per.items()}
            for episode, per in result.cameras.episodes.items()
        }
    if v2:
        path = lerobot.write_episodes_v21(
            source.root,
            meta / "episodes_stats.jsonl",
            episodes,
            names,
            source.features,
            quantile_names,
            cameras,
            source.layout,
        )
        return [path]
    return lerobot.write_episodes_v30(
        source.root, meta / "episodes", episodes, names, source.features, quantile_names, cameras
    )


def run_facts(settings: StatsSettings, result, stream, levels) -> dict:
    """What a reader of the output may need to know about the run (the sidecar's content)."""
    import numpy as np

    s = result.summary
    facts = {
        "accelkit": __version__,
        "dataset": list(settings.dataset)
        if isinstance(settings.dataset, list)
        else str(settings.dataset),
        "source": stream.name,
        "keys": dict(stream.keys),
        "mode": s.mode,
        "quantiles": [float(q) for q in levels],
        "rows": s.rows,
        "partial": s.partial,
        "max_frames": settings.max_frames,
        "seed": settings.seed,
        "action_horizon": settings.action_horizon,
        "chunk_end": settings.chunk_end if settings.action_horizon else None,
        "nonfinite_skipped": {
            stream.column_name(k): int(v.nonfinite.sum()) for k, v in result.stats.items()
        },
        "devices": len(s.devices),
        "platform": s.platform,
    }
    bounds = {
        stream.column_name(k): float(max(float(np.max(b)) for b in v.rank_error_bound.values()))
        for k, v in result.stats.items()
        if v.rank_error_bound is not None
    }
    if bounds:  # fast mode: the worst quantile's rank error, as a fraction of the rows
        facts["rank_error_bound"] = bounds
    if stream.chunk_transform is not None:
        facts["actions_transform"] = describe(stream.chunk_transform)
    if hasattr(stream, "facts"):  # a mixture: its kind and members (`mixture/datasets.py`)
        facts["mixture"] = stream.facts()
    if settings.ray:  # where it ran: the number of Ray tasks is then `devices`
        facts["ray"] = settings.ray
    cameras = getattr(result, "cameras", None)
    facts["images"] = (
        {"mode": "none"}
        if cameras is None
        else {
            "mode": cameras.mode,
            "cameras": list(cameras.stats),
            "frames": cameras.frames_counted,
            "files": cameras.files,
            "seconds": round(cameras.seconds, 3),
        }
    )
    return facts
