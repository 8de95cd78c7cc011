"""One `accelkit stats` run's settings: a pydantic model that loads from YAML (named jobs), the
environment (`ACCELKIT_STATS_*`) and keywords, each value checked once whichever source gave it;
and the two list options' text forms."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field, field_validator

from accelkit.errors import ConfigError, InputError
from accelkit.runtime.cli_options import ENDPOINT_HELP, ray_help
from accelkit.runtime.config import Settings
from accelkit.runtime.options import Flag

ENV_PREFIX = "ACCELKIT_STATS_"


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


def parse_member_keys(
    texts: list[str] | None,
) -> dict[str, str] | list[dict[str, str] | None] | None:
    """--keys given once (every dataset's) or once per dataset of a mixture, in their order."""
    if not texts:
        return None
    parsed = [parse_keys(text) for text in texts]
    return parsed[0] if len(parsed) == 1 else parsed


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


class StatsSettings(Settings):
    """One stats job; a YAML file may hold several, picked with --config-name. In a file,
    `output` and `plot` are paths beside it, and `dataset` / `write_into` too when something
    exists there (else as written: a Hugging Face repo id, or a path below the working folder)."""

    file_paths = ("output", "plot")
    file_paths_if_found = ("dataset", "write_into")

    # Each field is one option, declared once: its command-line flag and help text are here, the
    # `accelkit stats` options and `accelkit.stats.compute`'s keywords are made from it
    # (`runtime/options.py`), in this order.
    # several datasets: the statistics of their mixture (`stats/mixture/ranks.py`), with `keys` once
    # for all of them or once per dataset, and `weights` one per dataset (None: the union)
    dataset: Annotated[
        str | list[str] | None,
        Flag(
            argument=True,
            text=list[str] | None,
            parse=lambda given: given[0] if len(given) == 1 else given,
        ),
    ] = Field(
        default=None,
        description="LeRobot dataset folder (v2.1 or v3.0) or repo id (owner/name, found where"
        " LeRobot keeps it: $HF_LEROBOT_HOME), a .parquet/.npz/.npy file, or a folder of them."
        " Several: the exact statistics of their union (every frame once), or with --weights of"
        " their weighted mixture.",
    )
    keys: Annotated[
        dict[str, str] | list[dict[str, str]] | None,
        Flag("--keys", text=list[str] | None, parse=parse_member_keys),
    ] = Field(
        default=None,
        description="Output keys and their columns: state=observation.state,actions=action. With"
        " several datasets: once for all, or repeated once per dataset in their order"
        " (--keys state=obs,actions=act --keys state=observation.state,actions=action).",
    )
    weights: Annotated[list[str] | None, Flag("--weights", text=str | None)] = Field(
        default=None,
        description="With several datasets: one weight each (0.7,0.2,0.1 or 1/3,2/3; normalized):"
        " a frame of dataset i weighs w_i / N_i, as a weighted sampler draws; quantiles as"
        " numpy.quantile(weights=…, method='inverted_cdf'), exact.",
    )
    output: Annotated[str | None, Flag("--output", "-o")] = Field(
        default=None, description="Where to write (default: ./norm_stats.json or ./stats.json)."
    )
    format: Annotated[Literal["openpi", "lerobot"], Flag("--format")] = Field(
        default="openpi", description="openpi (norm_stats.json) or lerobot (stats.json)."
    )
    fast: Annotated[bool, Flag("--fast/--no-fast", "--use-fast-stats/--no-use-fast-stats")] = Field(
        default=False,
        description="One pass with a quantile sketch (rank error reported) instead of exact"
        " quantiles; openpi's --use-fast-stats=True|False works too.",
    )
    quantiles: Annotated[
        list[float] | None, Flag("--quantiles", text=str | None, parse=parse_quantiles)
    ] = Field(default=None, description="Levels, e.g. 0.01,0.99 (lerobot adds 0.1,0.5,0.9).")
    max_frames: Annotated[int | None, Flag("--max-frames")] = Field(
        default=None, description="Use a seeded uniform sample of this many frames."
    )
    max_time_minutes: Annotated[float | None, Flag("--max-time-minutes")] = Field(
        default=None, description="Stop cleanly after this long; results are marked partial."
    )
    batch_size: Annotated[int | None, Flag("--batch-size")] = Field(
        default=None,
        description="Rows per batch, split across devices (default: from free memory and row"
        " width).",
    )
    platform: Annotated[str | None, Flag("--platform")] = Field(
        default=None, description="cpu or gpu (default: gpu if JAX has one)."
    )
    action_horizon: Annotated[int | None, Flag("--action-horizon")] = Field(
        default=None, description="Statistics of H-step action chunks, as openpi trains on."
    )
    chunk_end: Annotated[Literal["truncate", "clamp"], Flag("--chunk-end")] = Field(
        default="truncate",
        description="Action chunks past an episode's end: truncate (default) or clamp (openpi's"
        " loader).",
    )
    # openpi's DeltaActions mask: "6,-1,6,-1" or "true,false,…"
    delta_actions: Annotated[str | None, Flag("--delta-actions")] = Field(
        default=None,
        description="openpi's DeltaActions(mask) on every chunk step before counting: 6,-1,6,-1"
        " (as make_bool_mask reads it) or true,false,... (docs/stats.md).",
    )
    # module:callable, a dict batch in and out (openpi's shape)
    transform: Annotated[str | None, Flag("--transform")] = Field(
        default=None,
        description="module:callable applied to each batch {state [R,Ds], actions [R,H,Da],"
        " actions_is_pad [R,H]} before --delta-actions; returns the same keys.",
    )
    per_timestep: Annotated[bool, Flag("--per-timestep")] = Field(
        default=False,
        description="Also statistics per action-chunk step, written to <output>.per_timestep.json.",
    )
    # camera features (LeRobot video/image): LeRobot's frame sample, every frame, or skipped;
    # None: "sample" for --format lerobot, "none" for openpi (stats/core/camera_stats.py, docs/stats.md)
    images: Annotated[Literal["none", "sample", "all"] | None, Flag("--images")] = Field(
        default=None,
        description="Camera (video/image) features of LeRobot datasets: sample (LeRobot's frame"
        " sample; default with --format lerobot), all (every frame) or none (default with"
        " openpi).",
    )
    skip_nonfinite: Annotated[bool, Flag("--skip-nonfinite")] = Field(
        default=False,
        description="Exclude NaN/Inf values (counted per dimension) instead of failing.",
    )
    seed: Annotated[int, Flag("--seed")] = Field(
        default=0, description="Seed of the --max-frames sample."
    )
    fill_empty: Annotated[float | None, Flag("--fill-empty")] = Field(
        default=None,
        description="Write this value for every statistic of a dimension without finite values"
        " (default: such a dimension is an error; outputs never hold nulls).",
    )
    allow_missing_quantiles: Annotated[bool, Flag("--allow-missing-quantiles")] = Field(
        default=False,
        description="openpi format: allow --quantiles without 0.01/0.99 (q01/q99 are then null).",
    )
    per_episode: Annotated[bool, Flag("--per-episode")] = Field(
        default=False,
        description="Also every episode's exact statistics, where the dataset's version keeps"
        " them (v2.1 episodes_stats.jsonl, v3.0 meta/episodes/ stats columns), beside --output.",
    )
    write_into: Annotated[str | None, Flag("--write-into")] = Field(
        default=None,
        description="Write stats.json (and with --per-episode the per-episode files) into this"
        " dataset's meta/ folder (the dataset being read); replaced files are backed up under"
        " meta/.accelkit-backup/.",
    )
    cache_mb: Annotated[float | None, Flag("--cache-mb")] = Field(
        default=None,
        description="Where exact mode keeps pass 1's decoded data for pass 2 (levels between 2"
        " and 98 %, object storage, JAX devices): this much memory, the rest in a temporary file"
        " (default: a quarter of free memory, at most 32).",
    )
    # S3-compatible store (default: AWS_ENDPOINT_URL)
    endpoint_url: Annotated[str | None, Flag("--endpoint-url")] = Field(
        default=None, description=ENDPOINT_HELP
    )
    # a Ray cluster's address, "auto" or "local" (default: no Ray)
    ray: Annotated[str | None, Flag("--ray")] = Field(
        default=None,
        description=ray_help("the passes", " Results equal the local run's bit for bit."),
    )
    ray_tasks: Annotated[int | None, Flag("--ray-tasks")] = Field(
        default=None, description="With --ray: groups of files, one task each (default: 2 per CPU)."
    )
    trust_files: Annotated[bool, Flag("--trust-files")] = Field(
        default=False,
        description="LeRobot datasets: read the parquet files under data/ even where the"
        " dataset's metadata (episodes, total_frames) disagrees with them (default: metadata"
        " decides).",
    )
    # a figure of the distributions: PATH.png or a self-contained PATH.html
    plot: Annotated[str | None, Flag("--plot")] = Field(
        default=None,
        description="Also draw each dimension's distribution (from the run's own histograms),"
        " mean ± std and quantiles, flagging dimensions that look broken: PATH.png, or PATH.html"
        " (one self-contained page with the numbers). With --per-episode, a heat map of episode"
        " means.",
    )

    @field_validator("dataset")
    @classmethod
    def _datasets(cls, value):
        if isinstance(value, list):
            if not value:
                raise ValueError("give at least one dataset")
            if len(value) == 1:  # one dataset in a list is that dataset
                return value[0]
        return value

    @field_validator("keys")
    @classmethod
    def _member_keys(cls, value, info):
        if isinstance(value, list):
            if len(value) == 1:
                return value[0]
            if not isinstance(info.data.get("dataset"), list):
                raise ValueError(f"given {len(value)} times for one dataset; give it once")
        return value

    @field_validator("weights", mode="before")
    @classmethod
    def _weights_text(cls, value):
        if value is None:
            return value
        parts = value.split(",") if isinstance(value, str) else list(value)
        return [str(part).strip() for part in parts]

    @field_validator("weights")
    @classmethod
    def _weights(cls, value, info):
        """One positive rational per dataset (`core/weights.py`), for several datasets."""
        if value is None:
            return value
        from accelkit.stats.core.weights import parse_weight

        try:
            for i, part in enumerate(value):
                parse_weight(part, f"value {i + 1}")
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        datasets = info.data.get("dataset")
        if not isinstance(datasets, list):
            raise ValueError("the weights of a mixture need several datasets")
        if len(value) != len(datasets):
            raise ValueError(
                f"{len(value)} value(s) for {len(datasets)} datasets; give one weight per"
                " dataset, in the order the datasets are given"
            )
        return value

    @field_validator("delta_actions")
    @classmethod
    def _mask(cls, value):
        if value is not None:
            from accelkit.stats.core.action_chunks import parse_mask

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

    @field_validator("output", "plot")
    @classmethod
    def _not_empty(cls, value):
        if value is not None and not str(value):  # "" would be ./norm_stats.json unasked
            raise ValueError("is empty text; give a file path, or leave the option out")
        return value

    @field_validator("fill_empty")
    @classmethod
    def _finite(cls, value):
        if value is not None and not math.isfinite(value):
            raise ValueError(f"must be a finite number, not {value}")
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
        from accelkit.stats.core.quantiles import check_quantile_names

        try:
            check_quantile_names(value)
        except InputError as exc:
            raise ValueError(str(exc)) from None
        return value


def engine_options(settings: StatsSettings, levels, devices, progress: bool) -> dict:
    """The engine's keywords (`compute_stats`, `compute_mixture_stats`) a run's settings give."""
    return dict(
        quantiles=levels,
        fast=settings.fast,
        skip_nonfinite=settings.skip_nonfinite,
        batch_size=settings.batch_size,
        platform=settings.platform,
        devices=devices,
        progress=progress,
        cache_bytes=None if settings.cache_mb is None else int(settings.cache_mb * 2**20),
        ray=settings.ray,
        ray_tasks=settings.ray_tasks,
    )
