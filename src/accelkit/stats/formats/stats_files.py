"""Statistics files, written and read: openpi `norm_stats.json`, LeRobot `stats.json` and its
per-episode files (v2.1 `meta/episodes_stats.jsonl`, v3.0 the `stats/<feature>/<stat>` columns of
`meta/episodes/`). Each format has one reader here; `stats check`, `fix` and `diff` read through it.

Writing (atomically). openpi: `{"norm_stats": {key: {"mean", "std", "q01", "q99", ...}}}` with
2-space indent and no trailing newline, as openpi writes it; extra keys (min, max, count, other
quantiles) are ignored by openpi's loader. LeRobot: `{feature: {"min", "max", "mean", "std",
"count": [n], "q01", ...}}`, keyed by the dataset's column names and nothing else (LeRobot's
`aggregate_stats` treats every top-level key as a feature).

Both always load: no nulls (a dimension without finite values is an error unless a fill value is
given), and openpi's q01/q99 are required unless explicitly waived (then they are null, which only
openpi's quantile normalization reads). Facts about the run (partial, rows, levels, fills) go to a
sidecar `<name>.run.json` next to the output, never into it.

Reading. Every statistic becomes a float64 array (camera entries of shape (3, 1, 1) are
flattened); a `null` entry is left out (openpi writes a missing quantile as null); a file that is
not JSON, holds null among its numbers or is not a mapping of statistics is a `DataError`.
`read` takes what `stats diff` is given — a `norm_stats.json` (its keys mapped to the dataset's
columns by the sidecar's `keys`, else by `--keys`, else `state=observation.state,
actions=action`), a `stats.json`, or a dataset folder or repo id (`stats/formats/repo_ids.py`),
which means its `meta/stats.json`, or for a v2.1 dataset without one its
`meta/episodes_stats.jsonl` aggregated as LeRobot does when it loads the dataset
(`aggregate_stats`, `stats/upstream/lerobot.py`) — with the run facts of its sidecar, for
`stats diff --dataset` to recompute from.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from accelkit.errors import DataError, InputError
from accelkit.runtime.files import write_json_atomic
from accelkit.stats.core.quantiles import check_quantile_names, quantile_name
from accelkit.stats.formats import lerobot, repo_ids
from accelkit.stats.formats.sources import DEFAULT_KEYS
from accelkit.stats.types import KeyStats
from accelkit.stats.upstream import lerobot as lerobot_rules

FORMATS = ("openpi", "lerobot")
OPENPI_REQUIRED = (0.01, 0.99)
LEROBOT_QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
DEFAULT_OUTPUT = {"openpi": "norm_stats.json", "lerobot": "stats.json"}

log = logging.getLogger(__name__)


def _floats(values) -> list[float | None]:
    return [
        None if not math.isfinite(v) else float(v) for v in np.asarray(values, np.float64).tolist()
    ]


def empty_dimensions(stats: Mapping[str, KeyStats]) -> dict[str, list[int]]:
    """Dimensions without a single finite value, per key."""
    out = {}
    for key, s in stats.items():
        empty = np.flatnonzero(np.asarray(s.count) == 0)
        if len(empty):
            out[key] = empty.tolist()
    return out


def fill_empty_dimensions(stats: Mapping[str, KeyStats], value: float) -> dict[str, KeyStats]:
    """Every statistic of a dimension without finite values set to `value` (count stays 0)."""
    import dataclasses

    out = {}
    for key, s in stats.items():
        empty = np.asarray(s.count) == 0
        if not empty.any():
            out[key] = s
            continue

        def filled(values, dtype, empty=empty):
            return np.where(empty, value, values).astype(dtype)

        out[key] = dataclasses.replace(
            s,
            mean=filled(s.mean, np.float64),
            std=filled(s.std, np.float64),
            min=filled(s.min, np.float32),
            max=filled(s.max, np.float32),
            quantiles={q: filled(v, np.asarray(v).dtype) for q, v in s.quantiles.items()},
        )
    return out


def _extreme(values) -> list:
    """min/max as LeRobot writes them: ints for integer data (every digit kept), floats otherwise."""
    values = np.asarray(values)
    return [int(v) for v in values.tolist()] if values.dtype == np.int64 else _floats(values)


def openpi_payload(stats: Mapping[str, KeyStats]) -> dict:
    norm = {}
    for key, s in stats.items():
        entry: dict = {"mean": _floats(s.mean), "std": _floats(s.std)}
        for q in OPENPI_REQUIRED:
            entry[quantile_name(q)] = _floats(s.quantiles[q]) if q in s.quantiles else None
        for q, values in s.quantiles.items():
            entry.setdefault(quantile_name(q), _floats(values))
        entry.update(min=_floats(s.min), max=_floats(s.max), count=[int(c) for c in s.count])
        norm[key] = entry
    return {"norm_stats": norm}


def lerobot_payload(stats: Mapping[str, KeyStats], column_names: Mapping[str, str]) -> dict:
    payload: dict = {}
    for key, s in stats.items():
        entry = {
            "min": _extreme(s.min),
            "max": _extreme(s.max),
            "mean": _floats(s.mean),
            "std": _floats(s.std),
            "count": [int(s.count.max(initial=0))],
        }
        for q, values in sorted(s.quantiles.items()):
            entry[quantile_name(q)] = _floats(values)
        payload[column_names.get(key, key)] = entry
    return payload


def check_openpi_quantiles(levels, allow_missing: bool) -> None:
    missing = [quantile_name(q) for q in OPENPI_REQUIRED if q not in {float(v) for v in levels}]
    if missing and not allow_missing:
        raise InputError(
            f"--quantiles lacks {' and '.join(missing)}, which openpi's norm_stats.json carries for "
            "quantile normalization; add 0.01,0.99, or pass --allow-missing-quantiles to write them as null"
        )


def sidecar_path(path: str | Path) -> Path:
    """stats.json -> stats.run.json"""
    path = Path(path)
    return path.with_name(f"{path.stem}.run.json")


def write_stats(
    path: str | Path,
    stats: Mapping[str, KeyStats],
    fmt: str,
    column_names: Mapping[str, str],
    *,
    fill_empty: float | None = None,
    allow_missing_quantiles: bool = False,
    run: Mapping | None = None,
    keep: Mapping | None = None,
    extra: Mapping | None = None,
) -> Path:
    """Write `stats` in `fmt`, atomically; with `run`, also the sidecar of run facts.

    Raises `DataError` for a dimension without finite values unless `fill_empty` gives its value,
    and `InputError` for openpi without q01/q99 unless `allow_missing_quantiles`. `keep` (LeRobot
    format): the entries of an existing stats.json, kept for the features not computed here.
    `extra` (LeRobot format): entries written as given, over `keep` (the camera features'
    statistics, `accelkit.stats.core.camera_stats.lerobot_entry`).
    """
    if fmt not in FORMATS:
        raise InputError(f"output format {fmt!r} is unknown; use one of {', '.join(FORMATS)}")
    for s in stats.values():
        check_quantile_names(s.quantiles)
        if fmt == "openpi":
            check_openpi_quantiles(s.quantiles, allow_missing_quantiles)
    empty = empty_dimensions(stats)
    if empty:
        where = "; ".join(f"{column_names.get(k, k)!r} dimensions {d}" for k, d in empty.items())
        if fill_empty is None:
            raise DataError(
                f"{where} hold no finite values, so they have no statistics and the output would hold "
                "nulls its readers reject; fix the data, or pass --fill-empty VALUE to write VALUE for them"
            )
        if not math.isfinite(fill_empty):
            raise InputError(f"--fill-empty must be a finite number, not {fill_empty}")
        log.warning("%s hold no finite values: every statistic written as %s", where, fill_empty)
        stats = fill_empty_dimensions(stats, fill_empty)
    single = [k for k, s in stats.items() if "@" not in k and int(np.max(s.count, initial=0)) == 1]
    if single:
        log.warning(
            "%s computed from 1 frame: std is 0 and every quantile is that frame's value "
            "(openpi's own RunningStats refuses fewer than 2); a normalizer dividing by std or "
            "q99 - q01 gets 0 for %s",
            ", ".join(repr(column_names.get(k, k)) for k in single),
            "them" if len(single) > 1 else "it",
        )
    steps = {k: v for k, v in stats.items() if "@" in k}  # per chunk step ("actions@3")
    stats = {k: v for k, v in stats.items() if "@" not in k}
    if steps and fmt != "openpi":
        raise InputError(
            "per-timestep statistics are written in openpi's layout; use --format openpi"
        )
    payload = openpi_payload(stats) if fmt == "openpi" else lerobot_payload(stats, column_names)
    if (
        keep and fmt == "lerobot"
    ):  # another stats.json's features we did not compute stay as they are
        payload = {**{k: v for k, v in keep.items()}, **payload}
    if extra and fmt == "lerobot":
        payload = {**payload, **extra}
    written = write_json_atomic(path, payload, indent=2 if fmt == "openpi" else 4)
    if steps:
        write_json_atomic(per_timestep_path(written), per_timestep_payload(steps), indent=2)
    if run is not None:
        facts = dict(run)
        facts["output"] = written.name
        facts["format"] = fmt
        if steps:
            facts["per_timestep_output"] = per_timestep_path(written).name
        if empty:
            facts["filled"] = {
                "value": fill_empty,
                "dimensions": {
                    (k if fmt == "openpi" else column_names.get(k, k)): d for k, d in empty.items()
                },
            }
        write_json_atomic(sidecar_path(written), facts, indent=2)
    return written


def per_timestep_path(path: str | Path) -> Path:
    """norm_stats.json -> norm_stats.per_timestep.json (beside it)."""
    path = Path(path)
    return path.with_name(f"{path.stem}.per_timestep{path.suffix or '.json'}")


def per_timestep_payload(steps: Mapping[str, KeyStats]) -> dict:
    """openpi's layout with one row per chunk step: `norm_stats.actions.mean` is [H][D] (and so
    std, the quantiles, min, max, count), so it broadcasts against an [..., H, D] action chunk
    as openpi's `Normalize` applies its statistics; the global file keeps [D]."""
    by_key: dict[str, dict[int, KeyStats]] = {}
    for name, s in steps.items():
        key, _, step = name.partition("@")
        by_key.setdefault(key, {})[int(step)] = s
    norm = {}
    for key, per_step in by_key.items():
        rows = [openpi_payload({key: per_step[k]})["norm_stats"][key] for k in sorted(per_step)]
        norm[key] = {field: [row[field] for row in rows] for field in rows[0]}
    return {"norm_stats": norm}


# --- reading: the one reader of each statistics file (check, fix and diff read through these) --


def _holds_null(value) -> bool:
    return value is None or (isinstance(value, list) and any(_holds_null(v) for v in value))


def _first_text(value) -> str:
    """Where the first text is in a (nested) list: "2", "1][0"; "0" for a bare string."""
    if isinstance(value, str):
        return "0"
    for i, v in enumerate(value):
        if isinstance(v, str):
            return str(i)
        if isinstance(v, list) and _holds_text(v):
            return f"{i}][{_first_text(v)}"
    return "0"


def _holds_text(value) -> bool:
    return isinstance(value, str) or (
        isinstance(value, list) and any(_holds_text(v) for v in value)
    )


def _array(value, where: str) -> np.ndarray:
    if _holds_null(value):  # numpy would read it as NaN: a number the file does not hold
        raise DataError(f"{where} holds null among its numbers; the file is damaged")
    if _holds_text(value):  # numpy would read "5" as 5.0: text where a number belongs
        index = _first_text(value)
        raise DataError(
            f"{where} holds text among its numbers (at index {index}); the file is damaged"
        )
    try:
        array = np.asarray(value, np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{where} is not a list of numbers ({exc}); the file is damaged") from exc
    return array


def _entry(raw, where: str) -> dict[str, np.ndarray]:
    if not isinstance(raw, Mapping):
        raise DataError(f"{where} is not a mapping of statistics; the file is damaged")
    return {str(k): _array(v, f"{where}.{k}") for k, v in raw.items() if v is not None}


def _entries(raw: Mapping, path: str | Path) -> dict[str, dict[str, np.ndarray]]:
    """key -> statistic -> values, for every key of a statistics mapping."""
    return {str(k): _entry(v, f"{path}: {k!r}") for k, v in raw.items()}


def read_stats_json(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """LeRobot's `meta/stats.json`: feature -> statistic -> values (flattened)."""
    return _entries(load_json(path), path)


def load_json(path: str | Path) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(
            f"{path} is not readable JSON ({exc}); repair it, or restore it from a copy"
        ) from exc
    if not isinstance(data, dict):
        raise DataError(f"{path} does not hold a JSON object; repair it, or restore it from a copy")
    return data


def read_episodes_jsonl(path: Path) -> dict[int, dict[str, dict[str, np.ndarray]]]:
    """v2.1 `meta/episodes_stats.jsonl`: episode -> feature -> statistic -> values."""
    return {
        episode: {k: _entry(v, f"{path} episode {episode} {k!r}") for k, v in stats.items()}
        for episode, stats in lerobot.episode_lines(path)
    }


def read_episodes_parquet(files: list[Path]) -> dict[int, dict[str, dict[str, np.ndarray]]]:
    """v3.0 `meta/episodes/**.parquet`: the `stats/<feature>/<stat>` columns, per episode."""
    out: dict[int, dict] = {}
    for path, table in lerobot.episode_tables(files).items():
        columns = [c for c in table.column_names if c.startswith("stats/")]
        episodes = table.column("episode_index").to_pylist()
        values = {c: table.column(c).to_pylist() for c in columns}
        for row, episode in enumerate(episodes):
            entry = out.setdefault(int(episode), {})
            for column in columns:
                feature, _, stat = column[len("stats/") :].rpartition("/")
                value = values[column][row]
                if value is not None:
                    where = f"{path} episode {episode} {column}"
                    entry.setdefault(feature, {})[stat] = _array(value, where)
    return out


def read_norm_stats(path: str | Path) -> dict[str, dict[str, np.ndarray]]:
    """An openpi `norm_stats.json`: key -> statistic (mean, std, q01, q99, and any other it
    stores) -> float64 values; a null statistic is left out, a damaged file is a `DataError`."""
    data = load_json(path)
    if not isinstance(data.get("norm_stats"), Mapping):
        raise DataError(f"{path} has no 'norm_stats' mapping; is it an openpi norm_stats.json?")
    return _entries(data["norm_stats"], path)


# --- a statistics file as `stats diff` reads it ----------------------------------------------


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
    data = load_json(path)
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


def _facts(path: Path) -> dict:
    sidecar = sidecar_path(path)
    return load_json(sidecar) if sidecar.is_file() else {}


def _from_dataset(given: str, root: Path, what: str) -> StatsFile:

    if not (root / "meta" / "info.json").is_file():
        raise InputError(
            f"{what}: {root} is a folder but not a LeRobot dataset (no meta/info.json); give a"
            " norm_stats.json, a stats.json or a dataset folder"
        )
    stats_json = root / "meta" / "stats.json"
    if stats_json.is_file():
        entries = read_stats_json(stats_json)
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
        per_episode = read_episodes_jsonl(episodes)
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
