"""A LeRobot dataset's own metadata as the contract for what is read.

`meta/info.json` names the data files (`data_path` with `chunks_size`) and the total frame count; the
episode metadata (v2.1 `meta/episodes.jsonl`, v3.0 `meta/episodes/**/*.parquet`) gives every
episode's length and, in v3.0, the data file that holds it. `read_layout` turns those into the list
of data files in dataset order with the rows each must hold. Parquet files under `data/` that the
metadata does not name (a backup copy, a half-written download) are named in a warning and not read;
a file the metadata names but that is missing, or holds another number of rows, is an error naming
both numbers. `trust_files=True` reads whatever parquet files are under `data/` instead (warning on
each disagreement), for datasets whose metadata is known to be stale.

`check_feature` compares a feature's declared dtype and shape with the column actually read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import overload

import numpy as np

from accelkit.errors import DataError
from accelkit.runtime import storage
from accelkit.runtime.files import atomic_open, copy_atomic

log = logging.getLogger(__name__)

SHOWN = 5  # stray files named in the warning; the rest are counted


@dataclass(frozen=True)
class Episode:
    index: int
    length: int
    file: Path


@dataclass
class Layout:
    version: str
    files: list[Path]  # in dataset order
    rows_per_file: dict[Path, int]  # what the metadata says each file holds
    total_frames: int | None
    episodes: list[Episode] = field(default_factory=list)


@dataclass
class Source:
    """What a stream opened from a LeRobot dataset knows about it."""

    root: Path
    version: str
    features: dict
    layout: Layout | None  # None when read with trust_files

    @property
    def episodes(self) -> list[Episode]:
        """The episodes its metadata lists; a source read with trust_files has no such list."""
        if self.layout is None:
            raise ValueError(f"{self.root} was read with trust_files: no episode list")
        return self.layout.episodes


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(
            f"{path} is not valid JSON ({exc}); the dataset's metadata is damaged"
        ) from exc
    if not isinstance(data, dict):
        raise DataError(f"{path} is not a JSON object; the dataset's metadata is damaged")
    return data


def _format_path(root: Path, template: str, where: Path, **fields) -> Path:
    try:
        relative = template.format(**fields)
    except (KeyError, IndexError, ValueError) as exc:
        raise DataError(
            f"{where}: data_path {template!r} does not take {', '.join(fields)} ({exc}); "
            "the dataset's metadata is damaged"
        ) from exc
    # checked as written, not resolved: data/ or each file may be a symlink (a hub-cache snapshot)
    parts = PurePosixPath(relative).parts
    if PurePosixPath(relative).is_absolute() or ".." in parts or not parts:
        raise DataError(f"{where}: data_path {template!r} points outside the dataset ({relative})")
    return root / relative


def _int(value, what: str, where: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise DataError(f"{where}: {what} is {value!r}, not a count; the metadata is damaged")
    return int(value)


def _episodes_v21(root: Path, info: dict, info_file: Path) -> list[tuple[int, int]]:
    path = root / "meta" / "episodes.jsonl"
    if not path.is_file():
        raise DataError(
            f"{root} is a LeRobot v2.1 dataset without {path}; restore it, or pass --trust-files "
            "to read the parquet files under data/"
        )
    episodes = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            episodes.append((int(entry["episode_index"]), _int(entry["length"], "length", path)))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{path} line {number} is not an episode entry ({exc})") from exc
    return sorted(episodes)


def _episodes_v30(root: Path) -> list[tuple[int, int, int, int]]:
    import pyarrow.parquet as pq

    folder = root / "meta" / "episodes"
    if isinstance(folder, storage.ObjectPath):
        files = storage.files_under(folder, "*.parquet")
    else:
        files = sorted(folder.rglob("*.parquet")) if folder.is_dir() else []
    if not files:
        raise DataError(
            f"{root} is a LeRobot v3.0 dataset without episode metadata in {folder}; restore it, or "
            "pass --trust-files to read the parquet files under data/"
        )
    wanted = ["episode_index", "length", "data/chunk_index", "data/file_index"]
    rows = []
    for path in files:
        source, filesystem = storage.arrow_source(path)
        try:
            # ParquetFile, not read_table: read_table starts pyarrow's dataset layer (and pandas)
            table = pq.ParquetFile(source, filesystem=filesystem).read(columns=wanted)
        except Exception as exc:
            raise DataError(
                f"{path} is not readable episode metadata with columns {', '.join(wanted)} "
                f"({type(exc).__name__}: {exc})"
            ) from exc
        columns = [table.column(c).to_pylist() for c in wanted]
        rows.extend(zip(*columns, strict=True))
    return sorted(  # `_int` refuses nulls and negatives with a one-line error
        (
            _int(e, "episode_index", folder),
            _int(n, "length", folder),
            _int(c, "data/chunk_index", folder),
            _int(f, "data/file_index", folder),
        )
        for e, n, c, f in rows
    )


def read_layout(root: Path, info: dict, info_file: Path) -> Layout:
    """The data files of a LeRobot v2.x / v3.x dataset, from its metadata, in dataset order."""
    version = str(info.get("codebase_version", "?"))
    template = info.get("data_path")
    if not isinstance(template, str):
        raise DataError(f"{info_file} has no data_path; is this a LeRobot v2.1 or v3.0 dataset?")
    total = info.get("total_frames")
    total = None if total is None else _int(total, "total_frames", info_file)
    episodes: list[Episode] = []
    if version.startswith("v2"):
        chunk = _int(info.get("chunks_size", 1000), "chunks_size", info_file) or 1
        for index, length in _episodes_v21(root, info, info_file):
            path = _format_path(
                root, template, info_file, episode_chunk=index // chunk, episode_index=index
            )
            episodes.append(Episode(index, length, path))
    else:
        for index, length, chunk_index, file_index in _episodes_v30(root):
            path = _format_path(
                root, template, info_file, chunk_index=chunk_index, file_index=file_index
            )
            episodes.append(Episode(index, length, path))
    rows: dict[Path, int] = {}
    for episode in episodes:
        rows[episode.file] = rows.get(episode.file, 0) + episode.length
    if not rows:
        raise DataError(f"{root}: the episode metadata lists no episodes")
    layout = Layout(version, list(rows), rows, total, episodes)
    listed = sum(rows.values())
    if total is not None and listed != total:
        raise DataError(
            f"{root}: the episodes' lengths add up to {listed:,} frames but {info_file} says "
            f"total_frames is {total:,}; repair the metadata, or pass --trust-files to read the files as they are"
        )
    return layout


def files_on_disk(root: Path | storage.ObjectPath) -> list:
    data = root / "data"
    if isinstance(data, storage.ObjectPath):  # one listing; a missing prefix lists nothing
        return storage.files_under(data, "*.parquet")
    return sorted(data.rglob("*.parquet")) if data.is_dir() else []


def warn_strays(root: Path, layout: Layout) -> None:
    """Name parquet files under data/ that the metadata does not list (they are not read)."""
    # by name first (both come from `root`); resolving symlinks, slow per file, only for the rest
    named = {str(p) for p in layout.files}
    unmatched = [p for p in files_on_disk(root) if str(p) not in named]
    listed = {p.resolve() for p in layout.files} if unmatched else set()
    strays = [p for p in unmatched if p.resolve() not in listed]
    if strays:
        shown = ", ".join(str(p.relative_to(root)) for p in strays[:SHOWN])
        more = f" and {len(strays) - SHOWN} more" if len(strays) > SHOWN else ""
        log.warning(
            "%s: %d parquet file%s under data/ not part of the dataset (not in its episode metadata) "
            "and not read: %s%s",
            root,
            len(strays),
            "s" if len(strays) != 1 else "",
            shown,
            more,
        )


def check_rows(path: Path, rows: int, expected: int) -> None:
    """A data file must hold the rows its episodes' metadata lists."""
    if rows != expected:
        raise DataError(
            f"{path} holds {rows:,} rows but the episode metadata says {expected:,}; repair the "
            "dataset, or pass --trust-files to read the files as they are"
        )


def check_missing(layout: Layout, root=None) -> None:
    if isinstance(root, storage.ObjectPath):  # one listing, not a request per file
        present = set(files_on_disk(root))
        missing = [p for p in layout.files if p not in present]
    else:
        missing = [p for p in layout.files if not p.is_file()]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise DataError(
            f"{missing[0]} is listed by the episode metadata but missing{more}; is the download "
            "complete? (--trust-files reads the files that are there)"
        )


# --- declared features against the data -----------------------------------------------------


NUMERIC_DTYPES = {
    "float16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "bool",
}


def check_dtype(name: str, feature: dict, dtype: str, where: str) -> None:
    """The data of feature `name` is `dtype`: does info.json agree? Checked before the values are
    converted, so a float64 column declared float32 gets this error alone, not first a warning
    about its float32 rounding."""
    declared = str(feature.get("dtype", ""))
    if declared in NUMERIC_DTYPES and declared != dtype:
        raise DataError(
            f"{where}: column {name!r} holds {dtype} values but meta/info.json declares {declared}; "
            "repair the metadata or the data"
        )


def check_feature(name: str, feature: dict, dtype: str, width: int, where: str) -> None:
    """The data of feature `name` is `dtype` with `width` values per row: does info.json agree?"""
    check_dtype(name, feature, dtype, where)
    shape = feature.get("shape")
    if isinstance(shape, (list, tuple)) and all(isinstance(s, int) for s in shape):
        size = math.prod(shape) if shape else 1
        if size != width:
            raise DataError(
                f"{where}: column {name!r} has {width} values per row but meta/info.json declares "
                f"shape {list(shape)}; repair the metadata or the data"
            )


# --- writing per-episode statistics where the dataset's version keeps them -----------------------


V21_STATS = ("min", "max", "mean", "std", "count")  # what LeRobot 0.3 writes per episode (v2.1)
EPISODES_JSONL = Path("meta") / "episodes_stats.jsonl"
BACKUP_FOLDER = Path("meta") / ".accelkit-backup"


def _typed(values, dtype: str) -> list:
    """min/max in the feature's own type, as LeRobot writes them (ints as ints, bools as bools)."""
    array = np.asarray(values)
    if dtype == "bool":
        return [bool(v) for v in array.tolist()]
    if dtype.startswith(("int", "uint")):
        return [int(v) for v in array.tolist()]
    return [float(v) for v in np.asarray(array, np.float64).tolist()]


def episode_entry(
    stats, dtype: str, quantile_names: dict[float, str], with_quantiles: bool
) -> dict:
    """One feature's statistics for one episode, in LeRobot's per-episode shape."""
    entry = {
        "min": _typed(stats.min, dtype),
        "max": _typed(stats.max, dtype),
        "mean": np.asarray(stats.mean, np.float64).tolist(),
        "std": np.asarray(stats.std, np.float64).tolist(),
        "count": [int(np.max(stats.count, initial=0))],
    }
    if with_quantiles:
        for q, values in sorted(stats.quantiles.items()):
            entry[quantile_names[q]] = np.asarray(values, np.float64).tolist()
    return entry


def backup(root: Path, paths: list[Path], stamp: str) -> Path | None:
    """Copy each existing file to meta/.accelkit-backup/<stamp>/<its path in the dataset>, each
    copy atomic (a process killed mid-copy leaves a temporary file, never a torn backup)."""

    folder = root / BACKUP_FOLDER / stamp
    copied = False
    for path in paths:
        if path.is_file():
            copy_atomic(path, folder / path.relative_to(root))
            copied = True
    return folder if copied else None


class _Restore:
    def __init__(self, paths: list[Path]):
        self.saved = {Path(p): (Path(p).read_bytes() if Path(p).is_file() else None) for p in paths}
        self.made: list[Path] = []

    @overload
    def created(self, path: Path) -> Path: ...
    @overload
    def created(self, path: Path | None) -> Path | None: ...
    def created(self, path: Path | None) -> Path | None:
        """A file or folder the block makes (a backup): removed if the block fails."""
        if path is not None:
            self.made.append(Path(path))
        return path

    def undo(self) -> None:
        import shutil

        for path, data in self.saved.items():
            with contextlib.suppress(OSError):
                if data is None:
                    path.unlink(missing_ok=True)
                else:
                    with atomic_open(path, "wb", output=False) as handle:
                        handle.write(data)
        for path in self.made:
            with contextlib.suppress(OSError):
                shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
                if path.parent.name == BACKUP_FOLDER.name and not any(path.parent.iterdir()):
                    path.parent.rmdir()


@contextlib.contextmanager
def as_it_was(paths: list[Path]):
    """Files written together, or not at all: if the block raises or is interrupted (SIGINT and
    SIGTERM raise in the main thread, runtime/interrupts.py), each of `paths` gets back the bytes
    it had (or is removed if it did not exist) and what the block `created()` is removed. The
    files are dataset metadata (stats.json, per-episode files): small enough to keep in memory."""
    guard = _Restore(paths)
    try:
        yield guard
    except BaseException:
        guard.undo()
        raise


def empty_episodes(layout: Layout | None) -> list[int]:
    """Episodes the metadata lists with no frames (length 0)."""
    return sorted(e.index for e in (layout.episodes if layout else []) if e.length == 0)


def episode_lines(path: Path) -> list[tuple[int, dict]]:
    """The one reader of v2.1 `meta/episodes_stats.jsonl`: (episode, its `stats` as written) per
    line, blank lines skipped; a line that is not an episode's statistics is a DataError naming it.
    `stats_files.read_episodes_jsonl` reads the numbers from these, the writer keeps the dataset's
    other features as they were."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path} is not readable ({exc})") from exc
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            episode = int(item["episode_index"])
            stats = item.get("stats", {})
            if not isinstance(stats, dict):
                raise TypeError(f"stats is a {type(stats).__name__}, not an object")
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise DataError(f"{path} line {number} is not an episode's statistics ({exc})") from exc
        out.append((episode, stats))
    return out


def episode_tables(files: list[Path]) -> dict:
    """The one reader of v3.0 `meta/episodes/**.parquet`: each file's whole table (the writer
    copies every column; `stats_files.read_episodes_parquet` reads the `stats/*` ones)."""
    import pyarrow.parquet as pq

    return {path: pq.read_table(path) for path in files}


def write_episodes_v21(
    source_root: Path,
    destination: Path,
    episodes,
    names: dict[str, str],
    features: dict,
    quantile_names,
    cameras: dict[int, dict[str, dict]] | None = None,
    layout: Layout | None = None,
) -> Path:
    """`episodes_stats.jsonl` with our features' statistics, keeping the dataset's other features;
    `cameras`: each episode's camera entries by column, in LeRobot's shape, written as given.
    An episode without frames has no statistics: it gets no line (LeRobot's loader aggregates the
    lines there are), and a warning names it."""

    written = {result.index for result in episodes}
    empty = [e for e in empty_episodes(layout) if e not in written]
    if empty:
        shown = ", ".join(map(str, empty[:SHOWN])) + (
            f" and {len(empty) - SHOWN} more" if len(empty) > SHOWN else ""
        )
        log.warning(
            "episode%s %s %s no frames (length 0 in meta/episodes.jsonl): %s no line in "
            "episodes_stats.jsonl",
            "s" if len(empty) > 1 else "",
            shown,
            "have" if len(empty) > 1 else "has",
            "they get" if len(empty) > 1 else "it gets",
        )

    current = source_root / EPISODES_JSONL
    existing = dict(episode_lines(current)) if current.is_file() else {}
    with atomic_open(destination) as handle:
        for result in episodes:
            stats = dict(existing.get(result.index, {}))
            for key, s in result.stats.items():
                column = names.get(key, key)
                dtype = str(features.get(column, {}).get("dtype", "float32"))
                stats[column] = episode_entry(s, dtype, quantile_names, with_quantiles=False)
            stats.update((cameras or {}).get(result.index, {}))
            handle.write(json.dumps({"episode_index": result.index, "stats": stats}) + "\n")
    return destination


def episode_meta_files(root: Path) -> list[Path]:
    folder = root / "meta" / "episodes"
    return sorted(folder.rglob("*.parquet")) if folder.is_dir() else []


def write_episodes_v30(
    source_root: Path,
    destination: Path,
    episodes,
    names: dict[str, str],
    features: dict,
    quantile_names,
    cameras: dict[int, dict[str, dict]] | None = None,
) -> list[Path]:
    """Copies of `meta/episodes/**.parquet` under `destination` with our `stats/<feature>/<stat>`
    columns (LeRobot's types: min/max in the feature's type, the rest float64, count int64);
    every other column as it was. `cameras`: each episode's camera entries by column (LeRobot's
    (3, 1, 1) nested lists, count [n]), written as list<list<list<double>>> columns as LeRobot
    writes them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    by_index = {r.index: r for r in episodes}
    written = []
    tables = episode_tables(episode_meta_files(source_root))
    for path, table in tables.items():  # every file checked before any is written
        listed = table.column("episode_index").to_pylist()
        missing = [e for e in listed if e not in by_index]
        if missing:
            lengths = (
                dict(zip(listed, table.column("length").to_pylist(), strict=True))
                if "length" in table.column_names
                else {}
            )
            if lengths.get(missing[0]) == 0:
                raise DataError(
                    f"{path} lists episode {missing[0]} with no frames (length 0): its "
                    "stats/* columns need values; delete the episode (lerobot-edit-dataset "
                    "delete_episodes) or run without --per-episode"
                )
            raise DataError(f"{path} lists episode {missing[0]}, which the data does not hold")
        if cameras is not None:
            missing = [e for e in table.column("episode_index").to_pylist() if e not in cameras]
            if missing:
                raise DataError(
                    f"{path} lists episode {missing[0]}, which has no camera statistics"
                )

    def put(table, name, array):
        index = table.schema.get_field_index(name)
        return (
            table.set_column(index, name, array) if index >= 0 else table.append_column(name, array)
        )

    for path, table in tables.items():
        order = [int(e) for e in table.column("episode_index").to_pylist()]
        for key in episodes[0].stats:
            column = names.get(key, key)
            dtype = str(features.get(column, {}).get("dtype", "float32"))
            entries = [
                episode_entry(by_index[e].stats[key], dtype, quantile_names, with_quantiles=True)
                for e in order
            ]
            for stat in entries[0]:
                values = [entry[stat] for entry in entries]
                if stat in ("min", "max"):
                    kind = (
                        pa.bool_()
                        if dtype == "bool"
                        else pa.int64()
                        if dtype.startswith(("int", "uint"))
                        else pa.float64()
                    )
                elif stat == "count":
                    kind = pa.int64()
                else:
                    kind = pa.float64()
                array = pa.array(values, pa.list_(kind))
                table = put(table, f"stats/{column}/{stat}", array)
        by_episode = cameras or {}
        for column in next(iter(by_episode.values())) if by_episode else ():
            entries = [by_episode[e][column] for e in order]
            for stat in entries[0]:
                kind = pa.int64() if stat == "count" else pa.list_(pa.list_(pa.float64()))
                array = pa.array([entry[stat] for entry in entries], pa.list_(kind))
                table = put(table, f"stats/{column}/{stat}", array)
        target = destination / path.relative_to(source_root / "meta" / "episodes")
        with atomic_open(target, "wb") as handle:
            pq.write_table(table, handle)
        written.append(target)
    return written


def numeric_features(root: Path, required: bool = True) -> dict[str, str] | None:
    """{name: name} for every numeric feature `meta/info.json` declares and the data holds — what
    LeRobot's `compute_episode_stats` computes statistics of (the bookkeeping columns `index`,
    `frame_index`, `episode_index`, `task_index`, `timestamp` included; cameras and strings
    apart). None where `root` is not a LeRobot dataset and not `required`."""
    import pyarrow.parquet as pq

    info_file = root / "meta" / "info.json"
    if not required and not info_file.is_file():
        return None
    info = read_json(info_file)
    features = info.get("features")
    if not isinstance(features, dict):
        raise DataError(f"{info_file}: features is not a mapping; the metadata is damaged")
    layout = read_layout(root, info, info_file)
    present = set(pq.read_schema(layout.files[0]).names) if layout.files else set()
    numeric = [
        name
        for name, feature in features.items()
        if str(feature.get("dtype")) in NUMERIC_DTYPES and name in present
    ]
    if not numeric:
        raise DataError(f"{root}: the data holds none of the numeric features meta/info.json lists")
    return {name: name for name in numeric}
