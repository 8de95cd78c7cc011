"""One `accelkit stats` run's settings: a pydantic model that loads from YAML (named jobs), the
environment (`ACCELKIT_STATS_*`) and keywords, each value checked once whichever source gave it;
and the two list options' text forms."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from accelkit.errors import ConfigError, InputError
from accelkit.runtime.config import Settings

ENV_PREFIX = "ACCELKIT_STATS_"


class StatsSettings(Settings):
    """One stats job; a YAML file may hold several, picked with --config-name. In a file,
    `output` and `plot` are paths beside it, and `dataset` / `write_into` too when something
    exists there (else as written: a Hugging Face repo id, or a path below the working folder)."""

    file_paths = ("output", "plot")
    file_paths_if_found = ("dataset", "write_into")

    # several datasets: the statistics of their mixture (`stats/mixture/ranks.py`), with `keys` once
    # for all of them or once per dataset, and `weights` one per dataset (None: the union)
    dataset: str | list[str] | None = None
    keys: dict[str, str] | list[dict[str, str]] | None = None
    weights: list[str] | None = None
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
    # None: "sample" for --format lerobot, "none" for openpi (stats/core/camera_stats.py, docs/stats.md)
    images: Literal["none", "sample", "all"] | None = None

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
