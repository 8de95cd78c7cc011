"""`accelkit.stats.check` and `accelkit.stats.fix`: how far the statistics a LeRobot dataset
stores (and openpi `norm_stats.json` files) are from the exact ones, why (`stats/checking/causes.py`), and
the exact ones written over them.

    import accelkit.stats as stats
    report = stats.check("path/to/dataset")
    report.ok, report.verdict(), report.summary()
    if not report.ok:
        stats.fix(report)          # the old files backed up; stopped, the dataset is as it was

The comparison itself is the pure core in `stats/checking/compare.py`; the engine computes the exact
statistics (`stats/engine/driver.py`), with LeRobot's quantile levels, every episode too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, cast

from accelkit.errors import ConfigError, InputError
from accelkit.runtime import storage
from accelkit.runtime.devices import enable_compilation_cache
from accelkit.runtime.files import copy_atomic
from accelkit.runtime.progress import Steps, phase
from accelkit.stats.checking import causes
from accelkit.stats.checking import compare as core
from accelkit.stats.checking.compare import Report, summary_rows
from accelkit.stats.checking.plot import draw
from accelkit.stats.computation import outputs
from accelkit.stats.computation.api import camera_stats
from accelkit.stats.core import tolerance as tolerance_rule
from accelkit.stats.core.camera_stats import camera_keys
from accelkit.stats.core.quantiles import quantile_name
from accelkit.stats.core.tolerance import TOLERANCE, exact_values, sortable
from accelkit.stats.engine.driver import compute_stats
from accelkit.stats.formats import lerobot, readers, repo_ids
from accelkit.stats.formats.sources import DEFAULT_KEYS, open_source
from accelkit.stats.formats.stats_files import (
    LEROBOT_QUANTILES,
    load_json,
    read_episodes_jsonl,
    read_episodes_parquet,
    read_norm_stats,
    read_stats_json,
    sidecar_path,
)
from accelkit.stats.settings import StatsSettings

__all__ = ["CheckReport", "FixResult", "check", "fix"]


@dataclass
class FixResult:
    """What `fix` wrote, and where the files it replaced were kept."""

    written: list[str]
    backups: list[str]

    def document(self) -> dict:
        return {"written": self.written, "backups": self.backups}


@dataclass(frozen=True)
class _FixInputs:
    """What `fix` writes from: the run of `check` that computed the exact statistics."""

    settings: StatsSettings
    stream: object
    result: object
    levels: list
    root: Path
    openpi_exact: dict[Path, tuple]  # norm_stats.json -> (exact values, KeyStats or None, columns)
    mapping: dict


@dataclass
class CheckReport(Report):
    """Every finding of one check (`findings`, `failures`, `ok`), what was not compared and why
    (`not_checked`), the figure drawn (`plot`) and, once `fix` ran, what it wrote (`fixed`)."""

    plot: Path | None = None
    fixed: FixResult | None = None
    _fix_inputs: _FixInputs | None = field(default=None, repr=False, compare=False)

    def summary(self) -> list[dict]:
        """One row per (file, feature, statistic, cause): how many numbers, which dimensions, the
        worst one (its error and episode), the episodes."""
        return summary_rows(self)

    def verdict(self) -> str:
        """How many stored numbers are off, and how many features or episodes have none stored (a
        dataset without statistics is not "701 of 0 off")."""
        return _verdict(self)

    def worst_by_file(self) -> dict:
        """Per stored file: the largest finite error of any statistic (in its unit)."""
        return _worst_by_file(self)

    def document(self) -> dict:
        """The `--json` result."""
        return {
            "dataset": self.dataset,
            "tolerance": self.tolerance,
            "within_tolerance": self.ok,
            "compared": self.numbers,
            "failing": self.numbers_off,  # stored numbers off
            "failing_entries": len(self.failures) - self.numbers_off,  # missing, gone, shape
            "summary": self.summary(),
            "findings": [f.document() for f in self.findings if f.fails],
            "worst": self.worst_by_file(),
            "not_checked": self.not_checked,
            "fixed": None if self.fixed is None else self.fixed.document(),
            "plot": None if self.plot is None else str(self.plot),
        }


def check(
    dataset: str | Path,
    *,
    stats_files: Sequence[str | Path] = (),
    keys: dict[str, str] | None = None,
    action_horizon: int | None = None,
    chunk_end: str | None = None,
    tolerance: float | None = TOLERANCE,
    images: str = "none",
    plot: str | Path | None = None,
    progress: bool = False,
) -> CheckReport:
    """Compare every statistic `dataset` stores (meta/stats.json, its per-episode statistics, each
    of `stats_files`, an openpi norm_stats.json whose keys map to columns by `keys`) with exact
    ones. `tolerance`: the largest error allowed, in stds (mean, std) or ranges (min, max,
    quantiles); `images`: camera statistics none (named, not compared), sample or all; `plot`: a
    .png of each feature's error per dimension. Bad input raises an `AccelkitError` naming it."""
    tolerance = tolerance_rule.given(tolerance)
    if images not in (None, "none", "sample", "all"):
        raise ConfigError(f"--images takes none, sample or all, not {images!r}")
    if chunk_end not in (None, "truncate", "clamp"):
        raise ConfigError(f"--chunk-end takes truncate or clamp, not {chunk_end!r}")
    if action_horizon is not None and action_horizon < 1:
        raise ConfigError(f"--action-horizon must be 1 or more, not {action_horizon}")
    return _check(
        str(dataset),
        stats_files=[Path(p).expanduser() for p in stats_files or []],
        keys=keys,
        action_horizon=action_horizon,
        chunk_end=chunk_end,
        tolerance=tolerance,
        images=images or "none",
        plot=None if plot is None else str(plot),
        progress=progress,
    )


def fix(report: CheckReport) -> FixResult:
    """Write the exact statistics `report` computed over the stored ones — meta/stats.json (every
    feature computed; cameras with images sample|all), the per-episode files, each of its
    norm_stats.json files — each atomically, the old files kept under meta/.accelkit-backup/<time>/
    (a norm_stats.json beside itself, .<time>.bak). Stopped or failing, every file is as it was."""
    run = report._fix_inputs
    if run is None:
        raise ConfigError("fix() takes the report stats.check() returned; this one holds no run")
    settings = run.settings.model_copy(update={"write_into": str(run.root)})
    report.fixed = _fix(
        settings, run.stream, run.result, run.levels, run.root, run.openpi_exact, run.mapping
    )
    return report.fixed


def _check(
    dataset: str,
    *,
    stats_files: list[Path],
    keys: dict[str, str] | None,
    action_horizon: int | None,
    chunk_end: str | None,
    tolerance: float,
    images: str,
    plot: str | None,
    progress: bool,
) -> CheckReport:

    root = Path(repo_ids.resolve(dataset)).expanduser()  # `owner/name`: where LeRobot keeps it
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
    openpi = {path: read_norm_stats(path) for path in stats_files}  # bad files: exit 2 now
    mapping = keys or dict(DEFAULT_KEYS)
    levels = list(LEROBOT_QUANTILES)
    names = {float(q): quantile_name(q) for q in levels}
    phase(f"reading the metadata of {root}")
    stream = _all_features_stream(root)
    source = stream.lerobot
    assert source is not None  # a LeRobot dataset's stream
    settings = StatsSettings(
        dataset=str(root),
        format="lerobot",
        per_episode=True,
        images=cast(Literal["none", "sample", "all"] | None, images),  # checked on entry
        keys=dict(stream.keys),
    )
    cameras = camera_stats(settings, stream, levels, progress)
    phase("starting the statistics kernel")

    enable_compilation_cache()

    result = compute_stats(
        stream, quantiles=levels, progress=progress, per_episode=True, skip_nonfinite=False
    )
    result.cameras = cameras
    exact = {k: exact_values(s, names) for k, s in result.stats.items()}
    per_episode = {
        e.index: {k: exact_values(s, names) for k, s in e.stats.items()}
        for e in result.episodes or []
    }
    if cameras is not None:
        exact.update({k: exact_values(s, names) for k, s in cameras.stats.items()})
        for episode, per in cameras.episodes.items():
            per_episode.setdefault(episode, {}).update(
                {k: exact_values(s, names) for k, s in per.items()}
            )
    report = CheckReport(str(root), tolerance, plot=plot_path)
    lengths = {e.index: e.length for e in source.episodes}
    frames = sum(lengths.values())

    camera_names = camera_keys(source.features)
    unchecked_cameras = [c for c in camera_names if c not in exact]
    episodes_stored, episodes_file = _stored_episodes(source)
    integers = frozenset(
        name
        for name, feature in source.features.items()
        if str(feature.get("dtype")).startswith(("int", "uint", "bool"))
    )
    numeric = set(dict(stream.keys).values())
    if episodes_file is not None:  # first: a dataset-wide aggregate takes their causes
        stored_checked = {
            e: {k: v for k, v in per.items() if k not in unchecked_cameras}
            for e, per in episodes_stored.items()
        }
        core.check_episodes(
            report,
            episodes_file,
            stored_checked,
            per_episode,
            lengths,
            rows_of=lambda wanted: readers.episode_rows(
                source,
                {e: f & numeric for e, f in wanted.items() if f & numeric},
                progress=_steps("recomputing the stored numbers' causes: files", progress),
            ),
            levels=levels,
            integers=integers,
        )
    stats_json = root / "meta" / "stats.json"
    if stats_json.is_file():
        stored = read_stats_json(stats_json)
        core.check_global(
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
            rows_of=lambda features: readers.episode_rows(
                source,
                {e: features & numeric for e, n in lengths.items() if n and features & numeric},
                progress=_steps("recomputing the dataset-wide numbers' causes: files", progress),
            ),
            levels=levels,
        )
    elif source.version.startswith("v2"):
        report.not_checked.append(
            "meta/stats.json: absent (v2.1 keeps per-episode statistics; LeRobot aggregates them"
            " when it loads the dataset)"
        )
    else:
        report.findings.append(
            core.Finding("meta/stats.json", "-", "-", math.inf, "", "missing", fails=True)
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
        core.check_global(
            report,
            str(path),
            {k: v for k, v in stored.items() if k in truth},
            truth,
            frames=frames,
            expected=[k for k in truth if k in stored],
        )
    report._fix_inputs = _FixInputs(
        settings=settings,
        stream=stream,
        result=result,
        levels=levels,
        root=root,
        openpi_exact=openpi_exact,
        mapping=mapping,
    )
    if plot_path is not None:
        phase(f"drawing {plot_path}")
        draw(report, plot_path)
    return report


def _steps(label: str, shown: bool):
    """A progress callback (done, total, what) on the activity line, or None."""
    if not shown:
        return None

    steps = Steps(1, label)

    def show(done: int, total: int, what: str) -> None:
        steps.total, steps.done = max(total, 1), done
        steps.show(what)

    return show


def _verdict(report) -> str:
    """How many stored numbers are off (each dimension of each statistic counts), how many entries
    are structurally wrong, and how many features or episodes have none stored (a dataset without
    statistics is not "701 of 0 off")."""
    if report.ok:
        return (
            f"all {report.numbers:,} stored numbers within {report.tolerance:g} of the exact ones"
        )
    failures = report.failures
    missing = sum(f.cause == "missing" for f in failures)
    structural = sum(f.dim is None and f.cause != "missing" for f in failures)
    off = report.numbers_off
    parts = []
    if off or not (missing or structural):
        parts.append(
            f"{off:,} of {report.numbers:,} stored numbers off by more than {report.tolerance:g}"
        )
    if structural:
        parts.append(
            f"{structural:,} stored entries of the wrong shape or of episodes the data no longer"
            " holds"
        )
    if missing:
        parts.append(f"{missing:,} features or episodes with no statistics stored")
    return "; ".join(parts)


def _all_features_stream(root: Path):
    """A stream of every numeric feature the dataset declares and its data files hold (LeRobot
    stores statistics of each, index columns included)."""

    return open_source(root, keys=lerobot.numeric_features(root))


def _stored_episodes(source) -> tuple[dict, str | None]:
    """The dataset's per-episode statistics and the file(s) holding them (None: it keeps none)."""

    if source.version.startswith("v2"):
        path = source.root / lerobot.EPISODES_JSONL
        if not path.is_file():
            return {}, None
        return read_episodes_jsonl(path), str(lerobot.EPISODES_JSONL)
    files = lerobot.episode_meta_files(source.root)
    if not files:
        return {}, None
    return read_episodes_parquet(files), "meta/episodes"


def _openpi_exact(root, paths, mapping, action_horizon, chunk_end, exact, levels, names, progress):
    """For each norm_stats.json: (exact values per key, KeyStats per key or None, key -> column),
    from the per-frame run where it holds plain frames, else from a run of its action chunks
    (the horizon and chunk end its sidecar records, unless given)."""

    out = {}
    for path in paths:
        facts = {}
        sidecar = sidecar_path(path)
        if sidecar.is_file():
            facts = load_json(sidecar)
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

        phase(f"{path.name}: statistics of {horizon}-step action chunks")
        stream = open_source(root, keys=usable, action_horizon=int(horizon), chunk_end=end)
        result = compute_stats(stream, quantiles=levels, progress=progress)
        out[path] = (
            {k: exact_values(s, names) for k, s in result.stats.items()},
            result.stats,
            dict(stream.keys),
        )
    return out


def _fix(settings, stream, result, levels, root: Path, openpi_exact, mapping) -> FixResult:
    """Write the exact statistics over the stored ones (the old files backed up); returns what was
    written and where the backups are. Failed or stopped, every file is as it was."""
    from accelkit.stats.formats.stats_files import write_stats

    phase(f"writing the exact statistics into {root / 'meta'}")
    output = root / "meta" / "stats.json"
    replaced = outputs.dataset_files_replaced(settings, stream, output) + list(openpi_exact)
    with lerobot.as_it_was(replaced) as guard:
        backup = guard.created(
            outputs.write_outputs(settings, stream, result, levels, output, root)
        )
        written = [str(output)]
        stamp = outputs.stamp()
        backups = [str(backup)] if backup else []
        for path, (_, keystats, columns) in openpi_exact.items():
            if keystats is None:
                keystats = {k: result.stats[c] for k, c in columns.items()}
            copy = path.with_name(f"{path.name}.{stamp}.bak")
            guard.created(copy)
            copy_atomic(path, copy)  # a kill mid-copy leaves no torn .bak (SIGKILL, OOM)
            backups.append(str(copy))
            write_stats(path, keystats, "openpi", columns)
            written.append(str(path))
    return FixResult(written, backups)


def _worst_by_file(report) -> dict:
    """Per stored file: the largest finite error of any statistic (in its unit), or a number
    not a number stored (NaN, Inf: `error` None, `cause` saying so), which is worse."""
    worst: dict = {}
    ranks: dict = {}
    for f in report.findings:
        nan = f.cause == "nan"
        if (not math.isfinite(f.error) and not nan) or f.stat == "count":
            continue
        key, rank = f.file, sortable(f.error)
        if key not in worst or rank > ranks[key]:
            ranks[key] = rank
            worst[key] = {
                "feature": f.feature,
                "statistic": f.stat if f.dim is None else f"{f.stat}[{f.dim}]",
                "episode": f.episode,
                "error": None if nan else f.error,
                "unit": f.unit,
                "cause": causes.label("nan") if nan else None,
            }
    return worst
