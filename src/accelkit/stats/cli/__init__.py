"""`accelkit stats` (and the mount of `stats check`, `sample-dataset`): parse, call the library
(`accelkit.stats.compute`), render a table or the `--json` envelope. `stats check` is in
`stats/cli/check.py`, `sample-dataset` in `stats/cli/sample.py`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import typer.core

from accelkit.errors import ConfigError
from accelkit.runtime.cli_options import endpoint_option, ray_option
from accelkit.runtime.config import load_settings
from accelkit.stats.cli.check import check_command
from accelkit.stats.cli.diff import diff_command
from accelkit.stats.cli.report import print_report
from accelkit.stats.cli.sample import sample_dataset_command
from accelkit.stats.settings import (
    ENV_PREFIX,
    StatsSettings,
    parse_member_keys,
    parse_quantiles,
)

__all__ = ["ENV_PREFIX", "StatsSettings", "register"]


def stats_command(
    dataset: Annotated[
        list[str] | None,
        typer.Argument(
            help="LeRobot dataset folder (v2.1 or v3.0) or repo id (owner/name, found where LeRobot"
            " keeps it: $HF_LEROBOT_HOME), a .parquet/.npz/.npy file, or a folder of them. Several:"
            " the exact statistics of their union (every frame once), or with --weights of their"
            " weighted mixture."
        ),
    ] = None,
    keys: Annotated[
        list[str] | None,
        typer.Option(
            "--keys",
            help="Output keys and their columns: state=observation.state,actions=action. With"
            " several datasets: once for all, or repeated once per dataset in their order"
            " (--keys state=obs,actions=act --keys state=observation.state,actions=action).",
        ),
    ] = None,
    weights: Annotated[
        str | None,
        typer.Option(
            "--weights",
            help="With several datasets: one weight each (0.7,0.2,0.1 or 1/3,2/3; normalized):"
            " a frame of dataset i weighs w_i / N_i, as a weighted sampler draws; quantiles as"
            " numpy.quantile(weights=…, method='inverted_cdf'), exact.",
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
            help="Where exact mode keeps pass 1's decoded data for pass 2 (levels between 2 and"
            " 98 %, object storage, JAX devices): this much memory, the rest in a temporary file"
            " (default: a quarter of free memory, at most 32).",
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

    `accelkit stats check DATASET` compares the statistics a dataset stores with exact ones;
    `accelkit stats diff A B` compares two statistics files."""
    if config_name and config is None:
        raise ConfigError("--config-name needs --config FILE naming the YAML file that holds it")
    settings = load_settings(
        StatsSettings,
        yaml_path=config,
        section=config_name if config is not None else None,
        env_prefix=ENV_PREFIX,
        dataset=dataset[0] if dataset and len(dataset) == 1 else (dataset or None),
        keys=parse_member_keys(keys),
        weights=weights,
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
    from accelkit.stats.computation.api import compute

    done = compute(settings=settings, progress=not no_progress)
    if as_json:
        from accelkit.runtime.json_output import print_json

        print_json(done.document(), run=done.run)
        return
    print_report(done.result, done.output, done.format, done.source)
    from accelkit.stats.formats.video import CameraResult

    cameras = done.result.cameras
    if isinstance(cameras, CameraResult):
        print(
            f"cameras ({cameras.mode}): {', '.join(cameras.stats)}: {cameras.frames_counted:,}"
            f" frames counted from {cameras.files} files in {cameras.seconds:.1f} s"
        )
    if done.backup is not None:
        print(f"previous files kept in {done.backup}")
    if done.plot is not None:
        flagged = f"; {done.flagged} dimension(s) flagged, see the warnings" if done.flagged else ""
        print(f"drew the distributions in {done.plot}{flagged}")


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
        help="Normalization statistics of robot datasets; `stats check` compares stored ones,"
        " `stats diff` two statistics files.",
    )
    stats.command("compute", hidden=True)(stats_command)
    stats.command("check")(check_command)
    stats.command("diff")(diff_command)
    app.add_typer(stats, name="stats")
    app.command("sample-dataset")(sample_dataset_command)
