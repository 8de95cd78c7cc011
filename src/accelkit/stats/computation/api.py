"""`accelkit.stats.compute`: one statistics run as a user asks for it — a dataset in, the files
written (openpi `norm_stats.json` or LeRobot `stats.json`, per-episode files, a plot), a
`ComputeResult` out. The command line and a notebook call the same function:

    import accelkit.stats as stats
    done = stats.compute("path/to/dataset", format="lerobot", output="stats.json")
    done.result.stats["state"].mean, done.output

`compute_stats` (`stats/engine/driver.py`) is the engine below it, for rows already in Python.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from accelkit.errors import ConfigError, InputError
from accelkit.runtime import storage
from accelkit.runtime.config import load_settings
from accelkit.runtime.devices import enable_compilation_cache
from accelkit.runtime.files import temporary_folder
from accelkit.runtime.options import keyword_signature
from accelkit.runtime.progress import Steps, phase
from accelkit.stats.computation.outputs import write_outputs, write_plot
from accelkit.stats.computation.plot import check_plot_path
from accelkit.stats.core import action_chunks as transforms
from accelkit.stats.core.camera_stats import camera_keys
from accelkit.stats.engine.driver import compute_stats
from accelkit.stats.engine.runner import HOST, host_kernel_chosen
from accelkit.stats.formats import lerobot, repo_ids
from accelkit.stats.formats.sources import open_source
from accelkit.stats.formats.stats_files import (
    DEFAULT_OUTPUT,
    LEROBOT_QUANTILES,
    OPENPI_REQUIRED,
    check_openpi_quantiles,
    sidecar_path,
)
from accelkit.stats.formats.video import compute_camera_stats
from accelkit.stats.kernel import host as host_passes
from accelkit.stats.mixture import datasets as mixture_run
from accelkit.stats.settings import StatsSettings, engine_options
from accelkit.stats.types import StatsResult


@dataclass
class ComputeResult:
    """What `compute` did: the statistics (`result`: the engine's `StatsResult`, cameras included),
    where they went (`output`, a path or an object-storage URI), what the file holds (`written`)
    and its run-facts sidecar (`run`), the dataset files backed up (`backup`) and the figure."""

    result: StatsResult
    output: Path | storage.ObjectPath
    format: str
    source: str  # the dataset's name as the run shows it
    written: dict = field(repr=False)
    run: dict = field(repr=False)
    backup: Path | None = None
    plot: Path | None = None
    flagged: int | None = None  # dimensions the plot flags as looking broken

    def document(self) -> dict:
        """The `--json` result: the output, its format, what the file holds, the backup."""
        doc = {
            "output": str(self.output),
            "format": self.format,
            "stats": self.written,
            "backup": None if self.backup is None else str(self.backup),
        }
        if self.plot is not None:
            doc.update(plot=str(self.plot), flagged=self.flagged)
        return doc


def compute(
    dataset: str | Path | list[str | Path] | None = None,
    *,
    progress: bool = False,
    settings: StatsSettings | None = None,
    **options,
) -> ComputeResult:
    """Statistics of `dataset` (a LeRobot dataset folder or repo id, a file or folder of
    .parquet/.npz/.npy; a list: their union, or with `weights` their mixture), written as the
    keywords say, or as a loaded `settings`. The keywords are `StatsSettings`' fields — the
    command line's flags, with the same defaults (docs/stats.md, "Options"): `output` (default
    norm_stats.json or stats.json), `format`, `fast`, `quantiles`, `keys` (output key -> column),
    `per_episode`, `write_into`, `action_horizon`, `chunk_end`, `images`, `plot`, ….
    A path may be given as a `Path`.

    Bad options raise `accelkit.errors.ConfigError` naming the option; bad data `DataError`."""
    try:  # the signature (below) is the model's: an unknown keyword is a TypeError naming it
        compute.__signature__.bind(dataset, progress=progress, settings=settings, **options)
    except TypeError as exc:
        raise TypeError(f"compute() {exc}") from None
    options = {
        name: value
        for name, value in options.items()
        if not _is_default(value, StatsSettings.model_fields[name].default)
    }
    if settings is None:
        paths = {k: str(v) if isinstance(v, os.PathLike) else v for k, v in options.items()}
        settings = load_settings(StatsSettings, env={}, dataset=_text(dataset), **paths)
    elif dataset is not None or options:
        raise ConfigError("give compute() either settings or a dataset and options, not both")
    return _run(settings, progress)


# One declaration per option: compute's keywords are `StatsSettings`' fields, with their defaults
# and types (help(), inspect.signature and IPython show them; `runtime/options.py`).
compute.__signature__ = keyword_signature(
    StatsSettings,
    positional=("dataset",),
    extra=tuple(
        p
        for name, p in inspect.signature(compute, eval_str=True).parameters.items()
        if name in ("progress", "settings")
    ),
    returns=ComputeResult,
)


def _is_default(value, default) -> bool:
    """Whether a keyword of `compute` was left as its `StatsSettings` default (not passed on)."""
    return value is default or (type(value) is type(default) and value == default)


def _text(dataset) -> str | list[str] | None:
    """A dataset, or several (a mixture), as text."""
    if dataset is None:
        return None
    if isinstance(dataset, list | tuple):
        return [str(d) for d in dataset]
    return str(dataset)


def dataset_keys(settings: StatsSettings, dataset: str) -> Mapping[str, str] | None:
    """The keys to compute of one `dataset`: --keys, or with --per-episode/--write-into every
    numeric feature of a LeRobot dataset (LeRobot's statistics files hold them all:
    compute_episode_stats)."""
    keys = settings.keys
    assert not isinstance(keys, list)  # one dataset has one set (StatsSettings._member_keys)
    if (
        keys is None
        and (settings.per_episode or settings.write_into)
        and not settings.trust_files
        and not storage.is_uri(dataset)
    ):
        return lerobot.numeric_features(Path(dataset).expanduser(), required=False)
    return keys


def _run(settings: StatsSettings, progress: bool) -> ComputeResult:

    if not settings.dataset:
        raise ConfigError(
            "no dataset given; pass a path, or --config FILE --config-name NAME with a dataset entry"
        )

    dataset = settings.dataset  # several (a list): a mixture, `stats/mixture/datasets.py`
    if isinstance(dataset, str):
        dataset = repo_ids.resolve(dataset)  # `owner/name`: the folder LeRobot keeps it in
        settings = settings.model_copy(
            update={
                "dataset": dataset,
                "write_into": settings.write_into
                and repo_ids.resolve(settings.write_into, "--write-into"),
            }
        )
    levels = settings.quantiles or list(
        LEROBOT_QUANTILES if settings.format == "lerobot" else OPENPI_REQUIRED
    )
    if settings.format == "openpi":
        check_openpi_quantiles(levels, settings.allow_missing_quantiles)
    check_episode_options(settings)
    check_output_path(settings)
    plot_path = None
    if settings.plot:
        plot_path = check_plot_path(settings.plot)
    chunk_transform = chunk_transform_of(settings)
    cameras = None
    if isinstance(dataset, list):
        phase(f"reading the metadata of {len(dataset)} datasets")
        stream = mixture_run.open_mixture(settings, chunk_transform)
        target = stream.target
    else:
        phase(f"reading the metadata of {dataset}")
        stream = open_source(
            dataset,
            keys=dataset_keys(settings, dataset),
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
        # cameras first: a missing or broken video answers before JAX starts; nothing is written
        cameras = camera_stats(settings, stream, levels, progress)
    phase("starting the statistics kernel")  # JAX, or the compiled host loop on a CPU
    enable_compilation_cache()

    devices = None  # chosen by compute_stats (JAX's), unless the host kernel is known to run
    if host_kernel_chosen(settings.platform, host=settings.ray is None and not settings.fast):
        host_passes.warm_up(freeze=True)  # this process is the run (see warm_up)
        devices = [HOST]  # decided once: the plugin search is a listing of sys.path

    if isinstance(stream, mixture_run.MixtureSource):
        result = mixture_run.compute(settings, stream, levels, devices, progress)
    else:
        result = compute_stats(
            stream,
            **engine_options(settings, levels, devices, progress),
            max_time_minutes=settings.max_time_minutes,
            budget_from_process_start=True,  # the user's clock: from the command, start-up included
            per_episode=settings.per_episode,
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
            write_outputs(settings, stream, result, levels, local, target)
            for path, remote in (
                (local, output),
                (sidecar_path(local), output.parent / sidecar_path(output.name).name),
            ):
                remote.write_bytes(path.read_bytes())
            plotted = write_plot(plot_path, result, stream)
            return _result(settings, result, local, stream, None, shown=output, plotted=plotted)
    backup = write_outputs(settings, stream, result, levels, output, target)
    plotted = write_plot(plot_path, result, stream)
    return _result(settings, result, output, stream, backup, plotted=plotted)


def _result(settings, result, output: Path, stream, backup, shown=None, plotted=None):
    """`shown`: where the output went, if elsewhere (uploaded); `plotted`: the figure written and
    how many dimensions it flags. Read while the written files exist (a temporary folder's)."""
    import json

    from accelkit.stats.formats.stats_files import sidecar_path

    return ComputeResult(
        result=result,
        output=output if shown is None else shown,
        format=settings.format,
        source=stream.name,
        written=json.loads(output.read_text(encoding="utf-8")),  # what the file holds
        run=json.loads(sidecar_path(output).read_text(encoding="utf-8")),
        backup=backup,
        plot=None if plotted is None else plotted[0],
        flagged=None if plotted is None else plotted[1],
    )


def chunk_transform_of(settings: StatsSettings):
    """The action-chunk transform the settings ask for (`accelkit.stats.core.action_chunks`), or None
    when plain chunks (weights, no rows built) will do."""
    if not (settings.delta_actions or settings.transform or settings.per_timestep):
        return None

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


def check_output_path(settings: StatsSettings) -> None:
    """A local output that is a folder, refused before the dataset is read (writing it would
    fail only after the passes: `atomic_open`, with the same words)."""
    if settings.write_into:  # DATASET/meta/stats.json, checked against the dataset
        return
    output = settings.output or DEFAULT_OUTPUT[settings.format]
    if storage.is_uri(output) and not str(output).startswith("file:"):
        return
    path = storage.as_path(output)
    if path.is_dir():
        raise InputError(f"{path} is a folder; give a file path to write to")


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
    datasets = settings.dataset if isinstance(settings.dataset, list) else [settings.dataset]
    for what, value in (*(("the dataset", d) for d in datasets), ("--output", settings.output)):
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


def images_mode(settings: StatsSettings, stream) -> str:
    """What --images means for this run: the default follows the format (see docs/stats.md)."""

    source = getattr(stream, "lerobot", None)
    has_cameras = source is not None and bool(camera_keys(source.features))
    remote = source is not None and isinstance(source.root, storage.ObjectPath)
    mode = settings.images
    if mode is None:  # LeRobot's stats.json holds its cameras; openpi never reads them
        automatic = (
            settings.format == "lerobot"
            and has_cameras
            and not remote
            and source is not None
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
    """The camera features' statistics (`accelkit.stats.core.camera_stats`), or None with --images none."""
    mode = images_mode(settings, stream)
    if mode == "none":
        return None

    if not camera_keys(stream.lerobot.features):
        return None
    steps = Steps(1, f"camera statistics ({mode}): files")

    def show(done: int, total: int, what: str) -> None:
        steps.total, steps.done = max(total, 1), done
        if progress:
            steps.show(what)

    return compute_camera_stats(stream.lerobot, mode, levels, progress=show)
