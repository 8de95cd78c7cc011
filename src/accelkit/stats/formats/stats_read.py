"""A statistics file as `stats diff` reads it: an openpi `norm_stats.json`, a LeRobot `stats.json`,
or a dataset folder (or repo id, `stats/formats/repo_ids.py`), which means the statistics it stores.

* openpi: `{"norm_stats": {key: {"mean", "std", "q01", "q99", ...}}}`; keys are openpi's names
  (`state`, `actions`), mapped to the dataset's columns by the sidecar accelkit writes beside it
  (`norm_stats.run.json`: `keys`), else by `--keys`, else `state=observation.state,
  actions=action`.
* LeRobot: `{column: {"min", "max", "mean", "std", "count", "q01", ...}}`.
* A dataset folder: its `meta/stats.json`; a v2.1 dataset without one, its
  `meta/episodes_stats.jsonl` aggregated as LeRobot does when it loads the dataset
  (`aggregate_stats`, `stats/upstream/lerobot.py`).

Every statistic becomes a float64 array (camera entries of shape (3, 1, 1) are flattened); a
`null` entry is left out (openpi writes a missing quantile as null). What each file's run facts say
(action horizon, chunk end, the actions transform, the sample) comes from its sidecar when there is
one, for `stats diff --dataset` to recompute from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from accelkit.errors import DataError, InputError
from accelkit.stats.checking import compare
from accelkit.stats.formats import repo_ids
from accelkit.stats.formats.sources import DEFAULT_KEYS
from accelkit.stats.formats.stats_files import quantile_name, sidecar_path
from accelkit.stats.upstream import lerobot as lerobot_rules

FORMATS = ("openpi", "lerobot")


@dataclass
class StatsFile:
    """One side of a diff: what was given, the file read, its format and its statistics (key ->
    statistic -> values), each key's dataset column, and its run facts."""

    given: str
    path: Path
    format: str  # "openpi" or "lerobot"
    read: str  # what was read, in words ("meta/stats.json of the dataset", ...)
    entries: dict[str, dict[str, np.ndarray]]
    columns: dict[str, str] = field(default_factory=dict)  # key -> dataset column
    facts: dict = field(default_factory=dict)  # the sidecar's run facts, {} without one
    dataset: Path | None = None  # the folder, when a dataset was given

    def describe(self) -> dict:
        return {
            "given": self.given,
            "path": str(self.path),
            "format": self.format,
            "read": self.read,
        }


def levels_of(names) -> list[float]:
    """The quantile levels behind statistic names (`q01` -> 0.01, `q99.5` -> 0.995): only names
    that accelkit's own writer would give back for the level."""
    out = []
    for name in names:
        if not (name.startswith("q") and name[1:].replace(".", "", 1).isdigit()):
            continue
        level = float(name[1:]) / 100
        if 0 < level < 1 and quantile_name(level) == name:
            out.append(level)
    return sorted(set(out))


def read(given: str | Path, *, keys: Mapping[str, str] | None = None, what: str = "A") -> StatsFile:
    """The statistics `given` names (a file, a dataset folder or a repo id); `keys` map openpi's
    keys to columns when the file's sidecar does not. Bad input raises an `InputError` naming
    it and `what` ("A", "B")."""
    text = repo_ids.resolve(str(given), f"{what} ({given})")
    path = Path(text).expanduser()
    if not path.exists():
        raise InputError(
            f"{what}: {given} does not exist; give a norm_stats.json, a stats.json, a dataset"
            " folder or a repo id"
        )
    if path.is_dir():
        return _from_dataset(str(given), path, what)
    data = compare.load_json(path)
    facts = _facts(path)
    if isinstance(data.get("norm_stats"), Mapping):
        entries = _entries(data["norm_stats"], path)
        mapping = dict(facts.get("keys") or keys or DEFAULT_KEYS)
        return StatsFile(
            str(given),
            path,
            "openpi",
            "openpi norm_stats.json",
            entries,
            {k: str(mapping.get(k, k)) for k in entries},
            facts,
        )
    if data and all(isinstance(v, Mapping) for v in data.values()):
        entries = _entries(data, path)
        return StatsFile(
            str(given),
            path,
            "lerobot",
            "LeRobot stats.json",
            entries,
            {k: k for k in entries},
            facts,
        )
    raise DataError(
        f"{what}: {path} is neither an openpi norm_stats.json (a 'norm_stats' mapping) nor a"
        " LeRobot stats.json (feature -> statistics); give one of those or a dataset folder"
    )


def _entries(raw: Mapping, path: Path) -> dict[str, dict[str, np.ndarray]]:
    out = {}
    for key, entry in raw.items():
        if not isinstance(entry, Mapping):
            raise DataError(f"{path}: {key!r} is not a mapping of statistics; the file is damaged")
        out[str(key)] = compare._entry(entry, f"{path}: {key!r}")
    return out


def _facts(path: Path) -> dict:
    sidecar = sidecar_path(path)
    return compare.load_json(sidecar) if sidecar.is_file() else {}


def _from_dataset(given: str, root: Path, what: str) -> StatsFile:
    from accelkit.stats.formats import lerobot

    if not (root / "meta" / "info.json").is_file():
        raise InputError(
            f"{what}: {root} is a folder but not a LeRobot dataset (no meta/info.json); give a"
            " norm_stats.json, a stats.json or a dataset folder"
        )
    stats_json = root / "meta" / "stats.json"
    if stats_json.is_file():
        entries = compare.read_stats_json(stats_json)
        columns = {k: k for k in entries}
        return StatsFile(
            given,
            stats_json,
            "lerobot",
            "the dataset's meta/stats.json",
            entries,
            columns,
            _facts(stats_json),
            root,
        )
    episodes = root / lerobot.EPISODES_JSONL
    if episodes.is_file():
        per_episode = compare.read_episodes_jsonl(episodes)
        features = sorted({f for entry in per_episode.values() for f in entry})
        entries = {}
        for feature in features:
            aggregated = lerobot_rules.aggregate(
                [e[feature] for _, e in sorted(per_episode.items()) if feature in e]
            )
            if aggregated:
                entries[feature] = aggregated
        return StatsFile(
            given,
            episodes,
            "lerobot",
            "the dataset's meta/episodes_stats.jsonl, aggregated as LeRobot does when it loads it",
            entries,
            {k: k for k in entries},
            {},
            root,
        )
    raise InputError(
        f"{what}: the dataset {root} stores no statistics (no meta/stats.json or"
        " meta/episodes_stats.jsonl); `accelkit stats {root} --format lerobot --write-into"
        f" {root}` writes them"
    )
