"""`accelkit stats` and `accelkit sample-dataset`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

import typer
from pydantic import field_validator

from accelkit.errors import CheckFailed, ConfigError, DataError, InputError
from accelkit.runtime import storage
from accelkit.runtime.config import Settings, load_settings
from accelkit.runtime.files import temporary_folder
from accelkit.runtime.output import endpoint_option, ray_option

ENV_PREFIX = "ACCELKIT_STATS_"


class StatsSettings(Settings):
    """One stats job; a YAML file may hold several, picked with --config-name."""

    dataset: str | None = None
    keys: dict[str, str] | None = None
    output: str | None = None
    format: Literal["openpi", "lerobot"] = "openpi"
    fast: bool = False
    quantiles: list[float] | None = None
    max_frames: int | None = None
    max_time_minutes: float | None = None
    batch_size: int | None = None
    platform: str | None = None
    action_horizon: int | None = None
    chunk_end: Literal["truncate", "clamp"] = "truncate"
    skip_nonfinite: bool = False
    seed: int = 0
    trust_files: bool = False
    fill_empty: float | None = None
    allow_missing_quantiles: bool = False
    per_episode: bool = False
    write_into: str | None = None
    cache_mb: float | None = None
    endpoint_url: str | None = None  # S3-compatible store (default: AWS_ENDPOINT_URL)
    ray: str | None = None  # a Ray cluster's address, "auto" or "local" (default: no Ray)
    ray_tasks: int | None = None
    delta_actions: str | None = None  # openpi's DeltaActions mask: "6,-1,6,-1" or "true,false,…"
    transform: str | None = None  # module:callable, a dict batch in and out (openpi's shape)
    per_timestep: bool = False  # also one set of statistics per action-chunk step
    plot: str | None = None  # a figure of the distributions: PATH.png or a self-contained PATH.html
    # camera features (LeRobot video/image): LeRobot's frame sample, every frame, or skipped;
    # None: "sample" for --format lerobot, "none" for openpi (stats/cameras.py, docs/stats.md)
    images: Literal["none", "sample", "all"] | None = None

    @field_validator("delta_actions")
    @classmethod
    def _mask(cls, value):
        if value is not None:
            from accelkit.stats.transforms import parse_mask

            try:
                parse_mask(value)
            except ConfigError as exc:
                raise ValueError(str(exc).removeprefix("--delta-actions ")) from None
        return value

    # Each value is checked here, once, whichever source gave it (flag, environment, file); the
    # error names that source (`--max-frames 0: must be positive`). compute_stats and open_source
    # check their own arguments for Python callers.
    @field_validator("max_frames", "max_time_minutes", "batch_size", "action_horizon", "ray_tasks")
    @classmethod
    def _positive(cls, value):
        if value is not None and not value > 0:  # `not >` also rejects NaN
            raise ValueError("must be positive")
        return value

    @field_validator("cache_mb", "seed")
    @classmethod
    def _not_negative(cls, value):
        if value is not None and not value >= 0:
            raise ValueError("must be 0 or more")
        return value

    @field_validator("quantiles")
    @classmethod
    def _levels(cls, value):
        if value is None:
            return value
        if not value:
            raise ValueError("give at least one level, e.g. 0.01,0.99")
        if not all(0.0 <= q <= 1.0 for q in value):  # also rejects NaN
            raise ValueError("every level must lie in [0, 1]")
        from accelkit.stats.formats import check_quantile_names

        try:
            check_quantile_names(value)
        except InputError as exc:
            raise ValueError(str(exc)) from None
        return value


def parse_keys(text: str | None) -> dict[str, str] | None:
    """ "state=observation.state,actions=action" -> {"state": "observation.state", "actions": "action"}."""
    if not text:
        return None
    keys = {}
    for part in text.split(","):
        out, sep, column = part.partition("=")
        if not sep or not out.strip() or not column.strip():
            raise ConfigError(
                f"--keys entry {part!r} is not out=column; e.g. --keys state=observation.state,actions=action"
            )
        if out.strip() in keys:
            raise ConfigError(
                f"--keys names the output key {out.strip()!r} twice; give each output key once"
            )
        keys[out.strip()] = column.strip()
    return keys


def parse_quantiles(text: str | None) -> list[float] | None:
    if not text:
        return None
    try:
        levels = [float(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise ConfigError(
            f"--quantiles {text!r} is not a comma-separated list of numbers; e.g. 0.01,0.99"
        ) from exc
    return levels


def _format_count(n: float) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n:,.0f}"


def print_report(result, output: Path, fmt: str, source_name: str) -> None:
    import numpy as np
    from rich.text import Text

    from accelkit.runtime.output import Col, print_table, stdout_console
    from accelkit.stats.formats import quantile_name, sidecar_path

    console = stdout_console()
    s = result.summary
    run = [
        ["mode", f"{s.mode} ({s.passes} pass{'es' if s.passes != 1 else ''} over the data)"],
        [
            "devices",
            f"{s.platform}: {len(s.devices)} ({', '.join(s.devices[:4])}{' …' if len(s.devices) > 4 else ''})",
        ],
        [
            "batch size",
            f"{s.batch_size:,} rows ({s.compiles} kernel shape{'s' if s.compiles != 1 else ''} compiled or loaded from cache)",
        ],
        ["rows", f"{s.rows:,}"],
        [
            "time",
            f"{s.seconds:.2f} s, {_format_count(s.rows_per_second)} rows/s end to end (passes: {', '.join(f'{t:.2f} s' for t in s.pass_seconds)})",
        ],
    ]
    memory = f"{s.peak_rss_bytes / 2**20:,.0f} MiB host RSS"
    if s.peak_device_bytes is not None:
        memory += f", {s.peak_device_bytes / 2**20:,.0f} MiB device"
    run.append(["peak memory", memory])
    if s.partial:
        run.append(
            [Text("partial", style="yellow"), "time budget ran out; results cover the rows above"]
        )
    print_table(
        f"accelkit stats: {source_name}",
        [Col("what", numeric=False), Col("value", numeric=False)],
        run,
        console=console,
        show_header=False,
    )
    for key, stats in result.stats.items():
        levels = sorted(stats.quantiles)
        names = ["mean", "std", "min", "max", *(quantile_name(q) for q in levels)]
        shown = min(stats.dim, 16)
        rows = []
        for d in range(shown):
            cells = [
                stats.mean[d],
                stats.std[d],
                stats.min[d],
                stats.max[d],
                *(stats.quantiles[q][d] for q in levels),
            ]
            rows.append([str(d), *(f"{float(v):.5g}" for v in cells)])
        print_table(
            f"{key}: {stats.dim} dims, count {int(stats.count.max()):,}",
            [Col("dim", numeric=True, key=True), *(Col(n, numeric=True) for n in names)],
            rows,
            console=console,
            caption=f"{stats.dim - shown} more dimensions in {output}"
            if stats.dim > shown
            else None,
        )
        if stats.rank_error_bound is not None:
            worst = max(float(np.max(b)) for b in stats.rank_error_bound.values())
            console.print(
                f"  fast-mode rank error bound for {key}: {worst:.2e} of the rows (exact mode: 0)"
            )
        if int(stats.nonfinite.sum()):
            console.print(
                f"  skipped {int(stats.nonfinite.sum()):,} non-finite values in {key} (per dimension: {stats.nonfinite.tolist()})"
            )
    console.print(
        f"wrote {output} ({fmt}{', partial' if s.partial else ''}); run facts in {output.parent / sidecar_path(output.name).name}",
        soft_wrap=True,
    )


def stats_command(
    dataset: Annotated[
        str | None,
        typer.Argument(
            help="LeRobot dataset folder (v2.1 or v3.0), a .parquet/.npz/.npy file, or a folder of them."
        ),
    ] = None,
    keys: Annotated[
        str | None,
        typer.Option(
            "--keys", help="Output keys and their columns: state=observation.state,actions=action"
        ),
    ] = None,
    output: Annotated[
        str | None,
        typer.Option(
            "--output", "-o", help="Where to write (default: ./norm_stats.json or ./stats.json)."
        ),
    ] = None,
    fmt: Annotated[
        str | None,
        typer.Option("--format", help="openpi (norm_stats.json) or lerobot (stats.json)."),
    ] = None,
    fast: Annotated[
        bool | None,
        typer.Option(
            "--fast/--no-fast",
            "--use-fast-stats/--no-use-fast-stats",
            help="One pass with a quantile sketch (rank error reported) instead of exact quantiles;"
            " openpi's --use-fast-stats=True|False works too.",
        ),
    ] = None,
    quantiles: Annotated[
        str | None,
        typer.Option("--quantiles", help="Levels, e.g. 0.01,0.99 (lerobot adds 0.1,0.5,0.9)."),
    ] = None,
    max_frames: Annotated[
        int | None,
        typer.Option("--max-frames", help="Use a seeded uniform sample of this many frames."),
    ] = None,
    max_time_minutes: Annotated[
        float | None,
        typer.Option(
            "--max-time-minutes", help="Stop cleanly after this long; results are marked partial."
        ),
    ] = None,
    batch_size: Annotated[
        int | None,
        typer.Option(
            "--batch-size",
            help="Rows per batch, split across devices (default: from free memory and row width).",
        ),
    ] = None,
    platform: Annotated[
        str | None, typer.Option("--platform", help="cpu or gpu (default: gpu if JAX has one).")
    ] = None,
    action_horizon: Annotated[
        int | None,
        typer.Option(
            "--action-horizon", help="Statistics of H-step action chunks, as openpi trains on."
        ),
    ] = None,
    chunk_end: Annotated[
        str | None,
        typer.Option(
            "--chunk-end",
            help="Action chunks past an episode's end: truncate (default) or clamp (openpi's loader).",
        ),
    ] = None,
    delta_actions: Annotated[
        str | None,
        typer.Option(
            "--delta-actions",
            help="openpi's DeltaActions(mask) on every chunk step before counting: 6,-1,6,-1"
            " (as make_bool_mask reads it) or true,false,... (docs/stats.md).",
        ),
    ] = None,
    transform: Annotated[
        str | None,
        typer.Option(
            "--transform",
            help="module:callable applied to each batch {state [R,Ds], actions [R,H,Da],"
            " actions_is_pad [R,H]} before --delta-actions; returns the same keys.",
        ),
    ] = None,
    per_timestep: Annotated[
        bool,
        typer.Option(
            "--per-timestep",
            help="Also statistics per action-chunk step, written to <output>.per_timestep.json.",
        ),
    ] = False,
    images: Annotated[
        str | None,
        typer.Option(
            "--images",
            help="Camera (video/image) features of LeRobot datasets: sample (LeRobot's frame sample;"
            " default with --format lerobot), all (every frame) or none (default with openpi).",
        ),
    ] = None,
    skip_nonfinite: Annotated[
        bool,
        typer.Option(
            "--skip-nonfinite",
            help="Exclude NaN/Inf values (counted per dimension) instead of failing.",
        ),
    ] = False,
    seed: Annotated[
        int | None, typer.Option("--seed", help="Seed of the --max-frames sample.")
    ] = None,
    fill_empty: Annotated[
        float | None,
        typer.Option(
            "--fill-empty",
            help="Write this value for every statistic of a dimension without finite values"
            " (default: such a dimension is an error; outputs never hold nulls).",
        ),
    ] = None,
    allow_missing_quantiles: Annotated[
        bool,
        typer.Option(
            "--allow-missing-quantiles",
            help="openpi format: allow --quantiles without 0.01/0.99 (q01/q99 are then null).",
        ),
    ] = False,
    per_episode: Annotated[
        bool,
        typer.Option(
            "--per-episode",
            help="Also every episode's exact statistics, where the dataset's version keeps them"
            " (v2.1 episodes_stats.jsonl, v3.0 meta/episodes/ stats columns), beside --output.",
        ),
    ] = False,
    write_into: Annotated[
        str | None,
        typer.Option(
            "--write-into",
            help="Write stats.json (and with --per-episode the per-episode files) into this"
            " dataset's meta/ folder (the dataset being read); replaced files are backed up"
            " under meta/.accelkit-backup/.",
        ),
    ] = None,
    cache_mb: Annotated[
        float | None,
        typer.Option(
            "--cache-mb",
            help="Exact mode keeps pass 1's decoded data for pass 2 in this much memory, the rest"
            " in a temporary file (default: a quarter of free memory, at most 32).",
        ),
    ] = None,
    endpoint_url: Annotated[str | None, endpoint_option()] = None,
    ray: Annotated[
        str | None, ray_option("the passes", " Results equal the local run's bit for bit.")
    ] = None,
    ray_tasks: Annotated[
        int | None,
        typer.Option(
            "--ray-tasks", help="With --ray: groups of files, one task each (default: 2 per CPU)."
        ),
    ] = None,
    trust_files: Annotated[
        bool,
        typer.Option(
            "--trust-files",
            help="LeRobot datasets: read the parquet files under data/ even where the dataset's"
            " metadata (episodes, total_frames) disagrees with them (default: metadata decides).",
        ),
    ] = False,
    plot: Annotated[
        str | None,
        typer.Option(
            "--plot",
            help="Also draw each dimension's distribution (from the run's own histograms), mean ±"
            " std and quantiles, flagging dimensions that look broken: PATH.png, or PATH.html (one"
            " self-contained page with the numbers). With --per-episode, a heat map of episode means.",
        ),
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="YAML file of named stats jobs.")
    ] = None,
    config_name: Annotated[
        str | None, typer.Option("--config-name", help="The job to run from --config.")
    ] = None,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="Hide the progress bar.")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help="Print the written statistics and the run facts as JSON on stdout."
        ),
    ] = False,
) -> None:
    """Normalization statistics (mean, std, min, max, exact quantiles) of robot datasets.

    `accelkit stats check DATASET` compares the statistics a dataset stores with exact ones."""
    if config_name and config is None:
        raise ConfigError("--config-name needs --config FILE naming the YAML file that holds it")
    settings = load_settings(
        StatsSettings,
        yaml_path=config,
        section=config_name if config is not None else None,
        env_prefix=ENV_PREFIX,
        dataset=dataset,
        keys=parse_keys(keys),
        output=output,
        format=fmt,
        fast=fast,
        quantiles=parse_quantiles(quantiles),
        max_frames=max_frames,
        max_time_minutes=max_time_minutes,
        batch_size=batch_size,
        platform=platform,
        action_horizon=action_horizon,
        chunk_end=chunk_end,
        skip_nonfinite=skip_nonfinite or None,
        seed=seed,
        trust_files=trust_files or None,
        fill_empty=fill_empty,
        allow_missing_quantiles=allow_missing_quantiles or None,
        per_episode=per_episode or None,
        write_into=write_into,
        cache_mb=cache_mb,
        endpoint_url=endpoint_url,
        ray=ray,
        ray_tasks=ray_tasks,
        delta_actions=delta_actions,
        transform=transform,
        per_timestep=per_timestep or None,
        plot=plot,
        images=images,
    )
    run_stats(settings, progress=not no_progress, as_json=as_json)


def run_stats(settings: StatsSettings, progress: bool = True, as_json: bool = False):
    from accelkit.runtime.devices import enable_compilation_cache
    from accelkit.runtime.progress import phase
    from accelkit.stats.formats import (
        DEFAULT_OUTPUT,
        LEROBOT_QUANTILES,
        OPENPI_REQUIRED,
        check_openpi_quantiles,
        sidecar_path,
    )
    from accelkit.stats.sources import open_source

    if not settings.dataset:
        raise ConfigError(
            "no dataset given; pass a path, or --config FILE --config-name NAME with a dataset entry"
        )
    levels = settings.quantiles or list(
        LEROBOT_QUANTILES if settings.format == "lerobot" else OPENPI_REQUIRED
    )
    if settings.format == "openpi":
        check_openpi_quantiles(levels, settings.allow_missing_quantiles)
    check_episode_options(settings)
    plot_path = None
    if settings.plot:
        from accelkit.stats.plot import check_plot_path

        plot_path = check_plot_path(settings.plot)
    chunk_transform = chunk_transform_of(settings)
    phase(f"reading the metadata of {settings.dataset}")
    keys = settings.keys
    if (
        keys is None
        and (settings.per_episode or settings.write_into)
        and not settings.trust_files
        and not storage.is_uri(settings.dataset)
    ):
        from accelkit.stats import lerobot

        # a LeRobot dataset's statistics files hold every numeric feature (compute_episode_stats)
        keys = lerobot.numeric_features(Path(settings.dataset).expanduser(), required=False)
    stream = open_source(
        settings.dataset,
        keys=keys,
        action_horizon=settings.action_horizon,
        chunk_end=settings.chunk_end,
        max_frames=settings.max_frames,
        seed=settings.seed,
        shuffle=settings.max_time_minutes is not None,
        trust_files=settings.trust_files,
        endpoint_url=settings.endpoint_url,
        chunk_transform=chunk_transform,
    )
    target = dataset_target(settings, stream)
    # cameras first: a missing or broken video answers before JAX starts, and nothing is written
    cameras = camera_stats(settings, stream, levels, progress)
    phase("starting the statistics kernel")  # JAX, or the compiled host loop on a CPU
    enable_compilation_cache()
    from accelkit.stats.compute import compute_stats, host_kernel_chosen

    if host_kernel_chosen(settings.platform, host=settings.ray is None and not settings.fast):
        from accelkit.stats import host_passes

        host_passes.warm_up(freeze=True)  # this process is the run (see warm_up)

    result = compute_stats(
        stream,
        quantiles=levels,
        fast=settings.fast,
        skip_nonfinite=settings.skip_nonfinite,
        batch_size=settings.batch_size,
        platform=settings.platform,
        max_time_minutes=settings.max_time_minutes,
        budget_from_process_start=True,  # the user's clock: from the command, start-up included
        progress=progress,
        per_episode=settings.per_episode,
        cache_bytes=None if settings.cache_mb is None else int(settings.cache_mb * 2**20),
        ray=settings.ray,
        ray_tasks=settings.ray_tasks,
    )
    result.cameras = cameras
    output = storage.as_path(
        settings.output or DEFAULT_OUTPUT[settings.format], settings.endpoint_url
    )
    if target is not None:
        output = target / "meta" / "stats.json"
    if isinstance(output, storage.ObjectPath):  # written here, then uploaded (one object each)
        with temporary_folder("accelkit-stats-") as folder:
            local = Path(folder) / output.name
            _write_outputs(settings, stream, result, levels, local, target)
            for path, remote in (
                (local, output),
                (sidecar_path(local), output.parent / sidecar_path(output.name).name),
            ):
                remote.write_bytes(path.read_bytes())
            plotted = _write_plot(plot_path, result, stream)
            return _report(
                settings, result, local, stream, None, as_json, shown=output, plotted=plotted
            )
    backup = _write_outputs(settings, stream, result, levels, output, target)
    plotted = _write_plot(plot_path, result, stream)
    return _report(settings, result, output, stream, backup, as_json, plotted=plotted)


def _write_plot(path: Path | None, result, stream) -> tuple[Path, int] | None:
    """The --plot figure, and its flagged dimensions as warnings: (path, how many flagged)."""
    if path is None:
        return None
    from accelkit.runtime.progress import phase
    from accelkit.stats.plot import plot_data, warn_flags, write_plot

    phase(f"drawing {path}")
    data = plot_data(result, {k: stream.column_name(k) for k in result.stats}, stream.name)
    flagged = warn_flags(data)
    return write_plot(path, data), flagged


def _write_outputs(settings, stream, result, levels, output: Path, target):
    """Per-episode files (if asked), the statistics and their sidecar; returns the backup folder.
    Written into a dataset (`target`), its files are as they were if this fails or is stopped."""
    import contextlib

    from accelkit.stats import lerobot
    from accelkit.stats.formats import write_stats

    episodes = episodes_to_write(settings, stream, result)  # checked before anything is written
    keep = existing_stats(output) if target is not None else None
    replaced = dataset_files_replaced(settings, stream, output) if target is not None else []
    with lerobot.as_it_was(replaced) if target is not None else contextlib.nullcontext() as guard:
        backup = None
        if target is not None:
            backup = guard.created(lerobot.backup(target, replaced, _stamp()))
        if episodes is not None:  # per-episode files first: their checks run before stats.json
            write_episode_outputs(stream, result, episodes, output, into=target is not None)
        cameras = None
        if result.cameras is not None:
            from accelkit.stats.cameras import lerobot_entry
            from accelkit.stats.formats import quantile_name

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


def _stamp() -> str:
    import time

    return time.strftime("%Y%m%dT%H%M%S")


def _report(
    settings, result, output: Path, stream, backup, as_json: bool, shown=None, plotted=None
):
    """The --json document or the printed report (`shown`: where the output went, if elsewhere;
    `plotted`: the figure written and how many dimensions it flags)."""
    shown = output if shown is None else shown
    if as_json:
        import json

        from accelkit.runtime.output import print_json
        from accelkit.stats.formats import sidecar_path

        print_json(
            {
                "output": str(shown),
                "format": settings.format,
                "stats": json.loads(output.read_text(encoding="utf-8")),  # what the file holds
                "backup": None if backup is None else str(backup),
                **({} if plotted is None else {"plot": str(plotted[0]), "flagged": plotted[1]}),
            },
            run=json.loads(sidecar_path(output).read_text(encoding="utf-8")),
        )
        return result
    print_report(result, shown, settings.format, stream.name)
    cameras = result.cameras
    if cameras is not None:
        print(
            f"cameras ({cameras.mode}): {', '.join(cameras.stats)}: {cameras.frames_counted:,}"
            f" frames counted from {cameras.files} files in {cameras.seconds:.1f} s"
        )
    if backup is not None:
        print(f"previous files kept in {backup}")
    if plotted is not None:
        flagged = f"; {plotted[1]} dimension(s) flagged, see the warnings" if plotted[1] else ""
        print(f"drew the distributions in {plotted[0]}{flagged}")
    return result


def chunk_transform_of(settings: StatsSettings):
    """The action-chunk transform the settings ask for (`accelkit.stats.transforms`), or None
    when plain chunks (weights, no rows built) will do."""
    if not (settings.delta_actions or settings.transform or settings.per_timestep):
        return None
    from accelkit.stats import transforms

    wanted = next(
        flag
        for flag, on in (
            ("--delta-actions", settings.delta_actions),
            ("--transform", settings.transform),
            ("--per-timestep", settings.per_timestep),
        )
        if on
    )
    if settings.per_episode or settings.write_into:
        raise ConfigError(
            f"{wanted} changes the actions, while LeRobot's per-episode statistics are of the raw"
            " features; run the two separately"
        )
    if settings.per_timestep and settings.format != "openpi":
        raise ConfigError("--per-timestep is written in openpi's layout; use --format openpi")
    steps, names = [], []
    if settings.transform:
        steps.append(transforms.load_hook(settings.transform))
        names.append(settings.transform)
    if settings.delta_actions:
        mask = transforms.parse_mask(settings.delta_actions)
        steps.append(transforms.DeltaActions(mask))
        names.append(f"DeltaActions({''.join('1' if m else '0' for m in mask)})")
    return transforms.ChunkTransform(
        horizon=settings.action_horizon or 1,
        end=settings.chunk_end,
        transforms=tuple(steps),
        per_timestep=settings.per_timestep,
        names=tuple(names),
    )


def check_episode_options(settings: StatsSettings) -> None:
    wanted = [
        flag
        for flag, on in (
            ("--per-episode", settings.per_episode),
            ("--write-into", settings.write_into),
        )
        if on
    ]
    if not wanted:
        return
    if settings.ray:
        raise ConfigError(f"{wanted[0]} runs on one machine; drop --ray or {wanted[0]}")
    if settings.format != "lerobot":
        raise ConfigError(f"{wanted[0]} writes LeRobot's files; add --format lerobot")
    for flag, value in (
        ("--max-frames", settings.max_frames),
        ("--max-time-minutes", settings.max_time_minutes),
        ("--action-horizon", settings.action_horizon),
    ):
        if value is not None:
            raise ConfigError(
                f"{wanted[0]} writes statistics of every frame of the dataset; drop {flag}"
            )
    for what, value in (("the dataset", settings.dataset), ("--output", settings.output)):
        if storage.is_uri(value) and not str(value).startswith("file:"):
            raise ConfigError(
                f"{wanted[0]} writes LeRobot's files into local folders; {what} {value} is on "
                "object storage: compute there without it, or copy the dataset to a local disk"
            )
    if settings.write_into and settings.output:
        raise ConfigError(
            "--write-into writes DATASET/meta/stats.json; drop --output or --write-into"
        )


def dataset_target(settings: StatsSettings, stream) -> Path | None:
    """The dataset folder to write into (--write-into), checked to be the one being read."""
    if not settings.per_episode and not settings.write_into:
        return None
    source = getattr(stream, "lerobot", None)
    if source is None:
        raise ConfigError(
            f"--per-episode and --write-into need a LeRobot dataset (with meta/info.json); {stream.name} is not one"
        )
    if source.layout is None and settings.per_episode:
        raise ConfigError(
            "--per-episode follows the dataset's episode metadata; drop --trust-files"
        )
    if not settings.write_into:
        return None
    target = Path(settings.write_into).expanduser()
    if target.resolve() != source.root.resolve():
        raise ConfigError(
            f"--write-into {target} is not the dataset being read ({source.root}); statistics go "
            "into the dataset they were computed from"
        )
    return source.root


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
    from accelkit.stats.formats import empty_dimensions, fill_empty_dimensions

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
        if empty:
            episode.stats = fill_empty_dimensions(episode.stats, settings.fill_empty)
    return result.episodes or []


def dataset_files_replaced(settings: StatsSettings, stream, output: Path) -> list[Path]:
    """The dataset files --write-into replaces (backed up under meta/.accelkit-backup/<time>/)."""
    from accelkit.stats import lerobot
    from accelkit.stats.formats import sidecar_path

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
    from accelkit.stats import lerobot
    from accelkit.stats.formats import quantile_name

    source = stream.lerobot
    names = dict(stream.keys)
    levels = next(iter(result.stats.values())).quantiles
    quantile_names = {float(q): quantile_name(q) for q in levels}
    meta = source.root / "meta" if into else output.parent
    v2 = source.version.startswith("v2")
    cameras = None
    if result.cameras is not None:  # LeRobot 0.3 (v2.1) keeps no quantiles per episode
        from accelkit.stats.cameras import lerobot_entry

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

    from accelkit import __version__

    s = result.summary
    facts = {
        "accelkit": __version__,
        "dataset": str(settings.dataset),
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
        from accelkit.stats.transforms import describe

        facts["actions_transform"] = describe(stream.chunk_transform)
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


def images_mode(settings: StatsSettings, stream) -> str:
    """What --images means for this run: the default follows the format (see docs/stats.md)."""
    from accelkit.stats.cameras import camera_keys

    source = getattr(stream, "lerobot", None)
    has_cameras = source is not None and bool(camera_keys(source.features))
    remote = source is not None and isinstance(source.root, storage.ObjectPath)
    mode = settings.images
    if mode is None:  # LeRobot's stats.json holds its cameras; openpi never reads them
        automatic = (
            settings.format == "lerobot"
            and has_cameras
            and not remote
            and source.layout is not None
            and settings.max_time_minutes is None
        )
        return "sample" if automatic else "none"
    if mode == "none":
        return mode
    if settings.format != "lerobot":
        raise ConfigError(
            f"--images {mode}: openpi's norm_stats.json holds no camera statistics (openpi scales"
            " images to [-1, 1] in its model); add --format lerobot, or drop --images"
        )
    if source is None:
        raise ConfigError(
            f"--images {mode} reads the camera features of a LeRobot dataset (meta/info.json);"
            f" {stream.name} is not one"
        )
    if remote:
        raise ConfigError(
            f"--images {mode} decodes videos from a local folder; {source.root} is on object"
            " storage: copy the dataset to a local disk, or pass --images none"
        )
    if settings.max_time_minutes is not None:
        raise ConfigError(
            f"--images {mode} decodes every episode's video; drop --max-time-minutes or pass"
            " --images none"
        )
    return mode


def camera_stats(settings: StatsSettings, stream, levels, progress: bool):
    """The camera features' statistics (`accelkit.stats.cameras`), or None with --images none."""
    mode = images_mode(settings, stream)
    if mode == "none":
        return None
    from accelkit.runtime.progress import Steps
    from accelkit.stats.camera_files import compute_camera_stats
    from accelkit.stats.cameras import camera_keys

    if not camera_keys(stream.lerobot.features):
        return None
    steps = Steps(1, f"camera statistics ({mode}): files")

    def show(done: int, total: int, what: str) -> None:
        steps.total, steps.done = max(total, 1), done
        if progress:
            steps.show(what)

    return compute_camera_stats(stream.lerobot, mode, levels, progress=show)


def sample_dataset_command(
    path: Annotated[Path, typer.Argument(help="Folder to create (must not exist, or be empty).")],
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
    from accelkit.stats.sample import write_sample_dataset

    if seed < 0:
        raise ConfigError(f"--seed must be 0 or more, not {seed}")
    import json

    from accelkit.runtime.output import print_json

    if exist_ok and (path / "meta" / "info.json").is_file():
        if as_json:
            print_json({"path": str(path), "written": False})
        else:
            typer.echo(f"keeping the dataset already at {path}")
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


class StatsGroup(typer.core.TyperGroup):
    """`accelkit stats DATASET …` computes (the hidden `compute` command); `accelkit stats check
    DATASET …` compares. Anything that is not a subcommand's name goes to `compute`, so every
    existing command line (and `accelkit stats --help`) means what it meant; a dataset folder
    named like a subcommand is given as ./check."""

    def parse_args(self, ctx, args):
        if not args or args[0] not in self.commands:
            args = ["compute", *args]
        return super().parse_args(ctx, args)


def register(app: typer.Typer) -> None:
    stats = typer.Typer(
        cls=StatsGroup,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        help="Normalization statistics of robot datasets; `stats check` compares stored ones.",
    )
    stats.command("compute", hidden=True)(stats_command)
    stats.command("check")(check_command)
    app.add_typer(stats, name="stats")
    app.command("sample-dataset")(sample_dataset_command)


# --- accelkit stats check ----------------------------------------------------------------------


def check_command(
    dataset: Annotated[str, typer.Argument(help="LeRobot dataset folder (v2.1 or v3.0).")],
    stats_files: Annotated[
        list[str] | None,
        typer.Option(
            "--stats",
            help="Also an openpi norm_stats.json to compare (repeat for several); its keys map to"
            " columns by --keys (default state=observation.state,actions=action).",
        ),
    ] = None,
    keys: Annotated[
        str | None,
        typer.Option(
            "--keys", help="norm_stats.json keys and their columns: state=col,actions=col"
        ),
    ] = None,
    action_horizon: Annotated[
        int | None,
        typer.Option(
            "--action-horizon",
            help="norm_stats.json of H-step action chunks (default: what its sidecar records).",
        ),
    ] = None,
    chunk_end: Annotated[
        str | None,
        typer.Option("--chunk-end", help="With --action-horizon: truncate (default) or clamp."),
    ] = None,
    tolerance: Annotated[
        float | None,
        typer.Option(
            "--tolerance",
            help="Largest error allowed, in stds (mean, std) or ranges (min, max, quantiles);"
            " default 1e-3, a quarter of bfloat16's step near 1 (docs/stats.md).",
        ),
    ] = None,
    images: Annotated[
        str | None,
        typer.Option(
            "--images",
            help="Camera statistics: none (default: named, not compared), sample (LeRobot's frame"
            " sample, as it stores them) or all (every frame).",
        ),
    ] = None,
    plot: Annotated[
        str | None,
        typer.Option("--plot", help="Draw each feature's error per dimension: PATH.png."),
    ] = None,
    fix: Annotated[
        bool,
        typer.Option(
            "--fix",
            help="Write the exact statistics in place (stats.json, per-episode files, the"
            " --stats files), atomically; the old files are kept under meta/.accelkit-backup/.",
        ),
    ] = False,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="Hide the progress bar.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print every finding as JSON on stdout.")
    ] = False,
) -> None:
    """How far the statistics stored in a dataset (and norm_stats.json files) are from the exact
    ones, and why. Exit 0: all within --tolerance; 3: some are not; 2: bad input."""
    from accelkit.stats.check import TOLERANCE

    tolerance = TOLERANCE if tolerance is None else tolerance
    if not (tolerance > 0 and math.isfinite(tolerance)):
        raise ConfigError(f"--tolerance must be a positive number, not {tolerance}")
    if images not in (None, "none", "sample", "all"):
        raise ConfigError(f"--images takes none, sample or all, not {images!r}")
    if chunk_end not in (None, "truncate", "clamp"):
        raise ConfigError(f"--chunk-end takes truncate or clamp, not {chunk_end!r}")
    if action_horizon is not None and action_horizon < 1:
        raise ConfigError(f"--action-horizon must be 1 or more, not {action_horizon}")
    run_check(
        dataset,
        stats_files=[Path(p).expanduser() for p in stats_files or []],
        keys=parse_keys(keys),
        action_horizon=action_horizon,
        chunk_end=chunk_end,
        tolerance=tolerance,
        images=images or "none",
        plot=plot,
        fix=fix,
        progress=not no_progress,
        as_json=as_json,
    )


def run_check(
    dataset: str,
    *,
    stats_files: list[Path],
    keys: dict[str, str] | None,
    action_horizon: int | None,
    chunk_end: str | None,
    tolerance: float,
    images: str,
    plot: str | None,
    fix: bool,
    progress: bool,
    as_json: bool,
):
    from accelkit.runtime.progress import phase
    from accelkit.stats import check
    from accelkit.stats.formats import LEROBOT_QUANTILES, quantile_name
    from accelkit.stats.sources import DEFAULT_KEYS

    root = Path(dataset).expanduser()
    if storage.is_uri(dataset) and not dataset.startswith("file:"):
        raise ConfigError(
            f"stats check reads a local dataset folder; {dataset} is on object storage: copy it"
            " to a local disk first"
        )
    if not (root / "meta" / "info.json").is_file():
        raise InputError(
            f"{root} is not a LeRobot dataset (no meta/info.json); stats check compares the"
            " statistics stored in one"
        )
    for path in stats_files:
        if not path.is_file():
            raise InputError(f"--stats {path} does not exist; check the path")
    plot_path = None
    if plot:
        plot_path = Path(plot).expanduser()
        if plot_path.suffix.lower() != ".png" or not plot_path.parent.is_dir():
            raise ConfigError(
                f"--plot {plot} must be a .png file in an existing folder, e.g. --plot errors.png"
            )
    openpi = {path: check.read_norm_stats(path) for path in stats_files}  # bad files: exit 2 now
    mapping = keys or dict(DEFAULT_KEYS)
    levels = list(LEROBOT_QUANTILES)
    names = {float(q): quantile_name(q) for q in levels}
    phase(f"reading the metadata of {root}")
    stream = _all_features_stream(root)
    source = stream.lerobot
    settings = StatsSettings(
        dataset=str(root),
        format="lerobot",
        per_episode=True,
        write_into=str(root) if fix else None,
        images=images,
        keys=dict(stream.keys),
    )
    cameras = camera_stats(settings, stream, levels, progress)
    phase("starting the statistics kernel")
    from accelkit.runtime.devices import enable_compilation_cache

    enable_compilation_cache()
    from accelkit.stats.compute import compute_stats

    result = compute_stats(
        stream, quantiles=levels, progress=progress, per_episode=True, skip_nonfinite=False
    )
    result.cameras = cameras
    exact = {k: check.exact_values(s, names) for k, s in result.stats.items()}
    per_episode = {
        e.index: {k: check.exact_values(s, names) for k, s in e.stats.items()}
        for e in result.episodes or []
    }
    if cameras is not None:
        exact.update({k: check.exact_values(s, names) for k, s in cameras.stats.items()})
        for episode, per in cameras.episodes.items():
            per_episode.setdefault(episode, {}).update(
                {k: check.exact_values(s, names) for k, s in per.items()}
            )
    report = check.Report(str(root), tolerance)
    lengths = {e.index: e.length for e in source.layout.episodes}
    frames = sum(lengths.values())
    from accelkit.stats.cameras import camera_keys

    camera_names = camera_keys(source.features)
    unchecked_cameras = [c for c in camera_names if c not in exact]
    episodes_stored, episodes_file = _stored_episodes(source)
    integers = frozenset(
        name
        for name, feature in source.features.items()
        if str(feature.get("dtype")).startswith(("int", "uint", "bool"))
    )
    if episodes_file is not None:  # first: a dataset-wide aggregate takes their causes
        from accelkit.stats import lerobot

        stored_checked = {
            e: {k: v for k, v in per.items() if k not in unchecked_cameras}
            for e, per in episodes_stored.items()
        }
        numeric = set(dict(stream.keys).values())
        check.check_episodes(
            report,
            episodes_file,
            stored_checked,
            per_episode,
            lengths,
            rows_of=lambda wanted: lerobot.episode_rows(
                source,
                {e: f & numeric for e, f in wanted.items() if f & numeric},
                progress=_steps("recomputing the stored numbers' causes: files", progress),
            ),
            levels=levels,
            integers=integers,
        )
    stats_json = root / "meta" / "stats.json"
    if stats_json.is_file():
        stored = check.read_stats_json(stats_json)
        check.check_global(
            report,
            "meta/stats.json",
            stored,  # unchecked cameras: named if absent, not compared (not in `exact`)
            exact,
            frames=frames,
            episodes_stored=episodes_stored,
            episodes_exact=per_episode,
            expected=list(exact) + unchecked_cameras,
            episode_file=episodes_file,
            integers=integers,
        )
    elif source.version.startswith("v2"):
        report.not_checked.append(
            "meta/stats.json: absent (v2.1 keeps per-episode statistics; LeRobot aggregates them"
            " when it loads the dataset)"
        )
    else:
        report.findings.append(
            check.Finding("meta/stats.json", "-", "-", math.inf, "", "missing", fails=True)
        )
    if unchecked_cameras:
        report.not_checked.append(
            f"cameras {', '.join(unchecked_cameras)}: not compared (--images sample or all"
            " computes and compares them)"
        )
    openpi_exact = _openpi_exact(
        root, stats_files, mapping, action_horizon, chunk_end, exact, levels, names, progress
    )
    for path, stored in openpi.items():
        truth = openpi_exact[path][0]
        unmapped = [k for k in stored if k not in truth]
        for key in unmapped:
            report.not_checked.append(
                f"{path.name}: key {key!r} has no column; map it with --keys {key}=COLUMN"
            )
        check.check_global(
            report,
            str(path),
            {k: v for k, v in stored.items() if k in truth},
            truth,
            frames=frames,
            expected=[k for k in truth if k in stored],
        )
    fixed = None
    if fix and not report.ok:
        fixed = _fix(settings, stream, result, levels, root, openpi_exact, mapping)
    if plot_path is not None:
        phase(f"drawing {plot_path}")
        check.draw(report, plot_path)
    _report_check(report, as_json, fixed, plot_path)
    if not report.ok and not fixed:
        raise CheckFailed(
            f"{_verdict(report)} in {root}; `accelkit stats check {dataset} --fix` writes the"
            " exact ones"
        )
    return report


def _steps(label: str, shown: bool):
    """A progress callback (done, total, what) on the activity line, or None."""
    if not shown:
        return None
    from accelkit.runtime.progress import Steps

    steps = Steps(1, label)

    def show(done: int, total: int, what: str) -> None:
        steps.total, steps.done = max(total, 1), done
        steps.show(what)

    return show


def _verdict(report) -> str:
    """How many stored numbers are off, and how many features or episodes have none stored (a
    dataset without statistics is not "701 of 0 off")."""
    missing = sum(f.cause == "missing" for f in report.failures)
    off = len(report.failures) - missing
    if report.ok:
        return (
            f"all {report.numbers:,} stored numbers within {report.tolerance:g} of the exact ones"
        )
    parts = [
        f"{off:,} of {report.numbers:,} stored statistics off by more than {report.tolerance:g}"
    ]
    if missing:
        parts = parts if off else []
        parts.append(f"{missing:,} features or episodes with no statistics stored")
    return "; ".join(parts)


def _all_features_stream(root: Path):
    """A stream of every numeric feature the dataset declares and its data files hold (LeRobot
    stores statistics of each, index columns included)."""
    from accelkit.stats import lerobot
    from accelkit.stats.sources import open_source

    return open_source(root, keys=lerobot.numeric_features(root))


def _stored_episodes(source) -> tuple[dict, str | None]:
    """The dataset's per-episode statistics and the file(s) holding them (None: it keeps none)."""
    from accelkit.stats import check, lerobot

    if source.version.startswith("v2"):
        path = source.root / lerobot.EPISODES_JSONL
        if not path.is_file():
            return {}, None
        return check.read_episodes_jsonl(path), str(lerobot.EPISODES_JSONL)
    files = lerobot.episode_meta_files(source.root)
    if not files:
        return {}, None
    return check.read_episodes_parquet(files), "meta/episodes"


def _openpi_exact(root, paths, mapping, action_horizon, chunk_end, exact, levels, names, progress):
    """For each norm_stats.json: (exact values per key, KeyStats per key or None, key -> column),
    from the per-frame run where it holds plain frames, else from a run of its action chunks
    (the horizon and chunk end its sidecar records, unless given)."""
    from accelkit.stats import check
    from accelkit.stats.formats import sidecar_path

    out = {}
    for path in paths:
        facts = {}
        sidecar = sidecar_path(path)
        if sidecar.is_file():
            facts = check.load_json(sidecar)
        if facts.get("actions_transform"):
            raise ConfigError(
                f"{path} was written with an actions transform ({facts['actions_transform']});"
                " stats check compares plain frames and action chunks only"
            )
        horizon = action_horizon or facts.get("action_horizon")
        end = chunk_end or facts.get("chunk_end") or "truncate"
        usable = {k: c for k, c in mapping.items() if c in exact}
        if not horizon:
            out[path] = ({k: exact[c] for k, c in usable.items()}, None, usable)
            continue
        from accelkit.runtime.progress import phase
        from accelkit.stats.compute import compute_stats
        from accelkit.stats.sources import open_source

        phase(f"{path.name}: statistics of {horizon}-step action chunks")
        stream = open_source(root, keys=usable, action_horizon=int(horizon), chunk_end=end)
        result = compute_stats(stream, quantiles=levels, progress=progress)
        out[path] = (
            {k: check.exact_values(s, names) for k, s in result.stats.items()},
            result.stats,
            dict(stream.keys),
        )
    return out


def _fix(settings, stream, result, levels, root: Path, openpi_exact, mapping) -> dict:
    """Write the exact statistics over the stored ones (the old files backed up); returns what was
    written and where the backups are. Failed or stopped, every file is as it was."""
    import shutil

    from accelkit.runtime.progress import phase
    from accelkit.stats import lerobot
    from accelkit.stats.formats import write_stats

    phase(f"writing the exact statistics into {root / 'meta'}")
    output = root / "meta" / "stats.json"
    replaced = dataset_files_replaced(settings, stream, output) + list(openpi_exact)
    with lerobot.as_it_was(replaced) as guard:
        backup = guard.created(_write_outputs(settings, stream, result, levels, output, root))
        written = [str(output)]
        stamp = _stamp()
        backups = [str(backup)] if backup else []
        for path, (_, keystats, columns) in openpi_exact.items():
            if keystats is None:
                keystats = {k: result.stats[c] for k, c in columns.items()}
            copy = guard.created(path.with_name(f"{path.name}.{stamp}.bak"))
            shutil.copy2(path, copy)
            backups.append(str(copy))
            write_stats(path, keystats, "openpi", columns)
            written.append(str(path))
    return {"written": written, "backups": backups}


def _report_check(report, as_json: bool, fixed: dict | None, plot_path: Path | None) -> None:
    from accelkit.stats.check import format_error, summary_rows

    rows = summary_rows(report)
    if as_json:
        from accelkit.runtime.output import print_json

        print_json(
            {
                "dataset": report.dataset,
                "tolerance": report.tolerance,
                "within_tolerance": report.ok,
                "compared": report.numbers,
                "failing": len(report.failures),
                "summary": rows,
                "findings": [f.as_dict() for f in report.findings if f.fails],
                "worst": _worst_by_file(report),
                "not_checked": report.not_checked,
                "fixed": fixed,
                "plot": None if plot_path is None else str(plot_path),
            },
            ok=report.ok or bool(fixed),
        )
        return
    from accelkit.runtime.output import Col, print_table, stdout_console
    from accelkit.stats.causes import CAUSE_HELP, CAUSES

    if rows:
        table = [
            [
                r["file"],
                r["feature"],
                r["worst"] + (f" ep. {r['worst_episode']}" if r["episodes"] else ""),
                format_error(r["error"], r["unit"]),
                r["cause"],
                str(len(r["episodes"])) if r["episodes"] else "",
            ]
            for r in rows
        ]
        print_table(
            f"stored statistics off by more than {report.tolerance:g}",
            [
                Col("stored in", key=True),
                Col("feature"),
                Col("worst"),
                Col("error", numeric=True),
                Col("cause"),
                Col("episodes", numeric=True, short="ep."),
            ],
            table,
        )
        used = {r["cause"] for r in rows}
        console = stdout_console()
        for key, name in CAUSES.items():
            if name in used and key in CAUSE_HELP:  # wrapped at the terminal's width
                console.print(CAUSE_HELP[key], markup=False, highlight=False)
    worst = _worst_by_file(report)
    for file, item in worst.items():
        print(
            f"{file}: worst {item['statistic']} of {item['feature']}:"
            f" {format_error(item['error'], item['unit'])}"
        )
    for note in report.not_checked:
        print(f"not checked: {note}")
    print(_verdict(report))
    if fixed:
        print(f"fixed: wrote {', '.join(fixed['written'])}")
        if fixed["backups"]:
            print(f"previous files kept in {', '.join(fixed['backups'])}")
    if plot_path is not None:
        print(f"drew the errors in {plot_path}")


def _worst_by_file(report) -> dict:
    """Per stored file: the largest finite error of any statistic (in its unit)."""
    worst: dict = {}
    for f in report.findings:
        if not math.isfinite(f.error) or f.stat == "count":
            continue
        key = f.file
        if key not in worst or f.error > worst[key]["error"]:
            worst[key] = {
                "feature": f.feature,
                "statistic": f.stat if f.dim is None else f"{f.stat}[{f.dim}]",
                "episode": f.episode,
                "error": f.error,
                "unit": f.unit,
            }
    return worst
