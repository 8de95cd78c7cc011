"""`accelkit stats DS1 DS2 … [--weights …]`: the part of `compute` (`stats/computation/api.py`) that opens a
mixture's datasets and runs `compute_mixture_stats` on them.

Each member is opened as a single dataset is (`open_source`: any layout, repo ids, its own
`--keys`), and their keys are checked to agree from the datasets' metadata before anything is read.
`--write-into MERGED` writes the union's exact statistics into a dataset that LeRobot's
`merge_datasets` made of the members, after checking from the metadata that it holds exactly their
episodes, in order; the bookkeeping columns that the merge renumbers (`index`, `episode_index`,
`task_index`) are computed from MERGED itself, every other feature from the members.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from accelkit.errors import ConfigError, DataError
from accelkit.stats.engine.driver import compute_stats
from accelkit.stats.formats import lerobot, repo_ids
from accelkit.stats.formats.sources import open_source
from accelkit.stats.mixture.engine import compute_mixture_stats
from accelkit.stats.settings import StatsSettings, engine_options
from accelkit.stats.types import row_dtype

RENUMBERED = ("index", "episode_index", "task_index")  # what merge_datasets rewrites


@dataclass
class MixtureSource:
    """What the outputs ask of a run's stream (`name`, `keys`, `column_name`, `lerobot`,
    `chunk_transform`), for a mixture: the first member's column names, and its members."""

    members: list
    datasets: list[str]
    weights: list[str] | None
    keys: dict = field(default_factory=dict)
    lerobot: object = None  # no per-episode files: a mixture has no episodes of its own
    target: Path | None = None  # --write-into: the merged dataset

    def __post_init__(self):
        if not self.keys:
            self.keys = dict(self.members[0].keys)
        self.chunk_transform = self.members[0].chunk_transform
        kind = "union" if self.weights is None else f"weighted mixture ({','.join(self.weights)})"
        self.name = f"{kind} of {len(self.members)} datasets: " + ", ".join(
            m.name for m in self.members
        )

    def column_name(self, key: str) -> str:
        return self.keys.get(key, key)

    def facts(self) -> dict:
        """The run facts of the mixture (the sidecar's `mixture` entry)."""
        return {
            "kind": "union" if self.weights is None else "weighted",
            "quantiles": "numpy.quantile(rows, q) (linear) of the concatenated rows"
            if self.weights is None
            else 'numpy.quantile(rows, q, weights=w_m / N_m, method="inverted_cdf"), exact',
            "members": [
                {
                    "dataset": dataset,
                    "source": member.name,
                    "keys": dict(member.keys),
                    "weight": None if self.weights is None else self.weights[i],
                    "frames": member.total_rows,
                }
                for i, (dataset, member) in enumerate(zip(self.datasets, self.members, strict=True))
            ],
            "from_merged_dataset": [k for k in self.keys if k in RENUMBERED]
            if self.target is not None
            else [],
        }


def check_options(settings: StatsSettings) -> None:
    """What a mixture cannot do, each in one line naming the flag to drop."""
    refused = (
        ("--per-episode", settings.per_episode, "per-episode statistics are each dataset's own"),
        (
            "--max-time-minutes",
            settings.max_time_minutes is not None,
            "a partial mixture would leave some datasets out",
        ),
        (
            "--max-frames",
            settings.max_frames is not None,
            "a sample of the mixture is not defined",
        ),
        (
            f"--images {settings.images}",
            settings.images not in (None, "none"),
            "camera statistics are computed per dataset",
        ),
    )
    for flag, on, why in refused:
        if on:
            raise ConfigError(f"{flag} with several datasets: {why}; drop {flag.split()[0]}")
    if settings.write_into and settings.weights:
        raise ConfigError(
            "--write-into writes the merged dataset's statistics (every frame once); drop --weights"
        )


def member_keys(settings: StatsSettings, count: int) -> list:
    """Each member's --keys: one mapping for all, or one per member in their order."""
    keys = settings.keys
    if keys is None or isinstance(keys, dict):
        return [keys] * count
    if len(keys) != count:
        raise ConfigError(
            f"--keys is given {len(keys)} times for {count} datasets; give it once (for every"
            " dataset) or once per dataset, in the order the datasets are given"
        )
    outs = [sorted(k) for k in keys]
    for i, names in enumerate(outs[1:], start=2):
        if names != outs[0]:
            raise ConfigError(
                f"--keys for dataset {i} names the output keys {','.join(names)}, for dataset 1"
                f" {','.join(outs[0])}; every dataset must give the same output keys"
            )
    return list(keys)


def open_mixture(settings: StatsSettings, chunk_transform) -> MixtureSource:
    """The members opened (each checked as a single dataset is), their keys checked to agree,
    and with --write-into the merged dataset checked to hold exactly their episodes."""

    check_options(settings)
    datasets = [repo_ids.resolve(d) for d in settings.dataset or ()]
    keys = member_keys(settings, len(datasets))
    target, all_keys = None, None
    if settings.write_into:
        target = Path(repo_ids.resolve(settings.write_into, "--write-into")).expanduser()
        if not (target / "meta" / "info.json").is_file():
            raise ConfigError(
                f"--write-into {target} is not a LeRobot dataset (no meta/info.json); it names the"
                " dataset that LeRobot's merge_datasets made of these datasets"
            )
        if keys[0] is None:
            all_keys = lerobot.numeric_features(target) or {}  # required: None never comes back
            keys = [{k: v for k, v in all_keys.items() if k not in RENUMBERED}] * len(datasets)
        else:
            all_keys = dict(keys[0])
    members = [
        open_source(
            dataset,
            keys=member,
            action_horizon=settings.action_horizon,
            chunk_end=settings.chunk_end,
            trust_files=settings.trust_files,
            endpoint_url=settings.endpoint_url,
            chunk_transform=chunk_transform,
        )
        for dataset, member in zip(datasets, keys, strict=True)
    ]
    check_widths(members)
    if target is not None:
        check_merged(target, members, settings.trust_files)
    return MixtureSource(members, datasets, settings.weights, all_keys or {}, target=target)


def _declared(member, key: str) -> tuple[int, str] | None:
    """(values per row, type) of a key as the member's metadata declares it, if it does."""

    source = getattr(member, "lerobot", None)
    feature = None if source is None else source.features.get(member.column_name(key))
    if not isinstance(feature, dict) or member.chunk_transform is not None:
        return None
    shape = feature.get("shape") or [1]
    kind = "int64" if row_dtype(str(feature.get("dtype"))) == "int64" else "float32"
    return math.prod(int(s) for s in shape), kind


def check_widths(members: list) -> None:
    """Features agree in shape and type across the members, where the metadata says so (the
    engine checks the rest as it reads)."""
    for key in members[0].keys:
        first = _declared(members[0], key)
        for member in members[1:]:
            other = _declared(member, key)
            if first is not None and other is not None and first != other:
                raise DataError(
                    f"key {key!r} holds {first[0]} {first[1]} values per row in {members[0].name}"
                    f" (column {members[0].column_name(key)!r}) but {other[0]} {other[1]} in"
                    f" {member.name} (column {member.column_name(key)!r}); the datasets of a"
                    " mixture must agree in shape: choose matching columns with --keys"
                )


def check_merged(target: Path, members: list, trust_files: bool) -> None:
    """`target` holds exactly the members' episodes, in order (what `merge_datasets` makes)."""
    from accelkit.stats.formats import lerobot

    info_file = target / "meta" / "info.json"
    layout = lerobot.read_layout(target, lerobot.read_json(info_file), info_file)
    lengths = []
    for member in members:
        source = getattr(member, "lerobot", None)
        if source is None or source.layout is None or trust_files:
            raise ConfigError(
                f"--write-into checks that {target} is the merge of the datasets from their"
                f" episode metadata; {member.name} has none (a LeRobot dataset, without"
                " --trust-files, is needed)"
            )
        lengths += [e.length for e in source.layout.episodes]
    theirs = [e.length for e in layout.episodes]
    if theirs != lengths:
        where = next(
            (i for i, (a, b) in enumerate(zip(theirs, lengths, strict=False)) if a != b),
            min(len(theirs), len(lengths)),
        )
        raise DataError(
            f"--write-into {target} is not the merge of these datasets: it holds {len(theirs)}"
            f" episodes ({sum(theirs)} frames), they hold {len(lengths)} ({sum(lengths)} frames),"
            f" first different at episode {where}; give the datasets merge_datasets merged, in"
            " its order"
        )


def compute(settings: StatsSettings, source: MixtureSource, levels, devices, progress: bool):
    """The mixture's `StatsResult`; with --write-into, the renumbered columns from the merged
    dataset itself."""

    options = engine_options(settings, levels, devices, progress)
    result = compute_mixture_stats(source.members, weights=settings.weights, **options)
    own = {k: v for k, v in source.keys.items() if k not in result.stats}
    if own:  # the merged dataset's renumbered columns
        assert source.target is not None  # they come from --write-into
        merged = compute_stats(open_source(source.target, keys=own), **options)
        stats = {**result.stats, **merged.stats}
        result.stats = {k: stats[k] for k in source.keys}
        result.summary.seconds += merged.summary.seconds
    return result
