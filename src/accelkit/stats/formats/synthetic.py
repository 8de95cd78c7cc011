"""Write synthetic LeRobot datasets (v2.1 or v3.0 layout) for demos, tests and benchmarks.

Each episode is a smooth random walk of joint positions with a 0/1 gripper per arm; actions lead
the state by one step with noise, so the columns have the shapes real robot data has: drifting,
bounded, point masses. Files follow LeRobot's layout (meta/info.json, data/chunk-*/...parquet) and
its column types (fixed-size float32 lists; int64 indices; float32 timestamp). No videos. A v2.1
dataset carries `meta/episodes_stats.jsonl` (every feature of every episode, as LeRobot 0.3 writes
it), which LeRobot needs to open a v2.1 dataset.

`columns="robot"` gives dimensions the harder shapes real robots' columns have (`ROBOT_COLUMNS`),
and `row_groups="file"` writes each v3.0 file as one row group (as pandas or a plain
`pq.write_table` does) instead of one per episode (as LeRobot does).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from accelkit.errors import InputError
from accelkit.runtime.files import atomic_open, staged_folder, write_json_atomic
from accelkit.stats.core.episodes import episode_stats
from accelkit.stats.formats.lerobot import episode_entry

LAYOUTS = ("v2.1", "v3.0")
COLUMN_KINDS = ("smooth", "robot")
ROW_GROUPS = ("episode", "file")
# `columns="robot"`: what dimension d % 8 holds, in state and action alike
ROBOT_COLUMNS = (
    "joint: a random walk from a per-episode offset",
    "gripper: 0 then 1 (two point masses)",
    "constant joint: 0.25 in every frame (one point mass)",
    "large offset: 1e6 + a random walk of std 0.5 (float32 steps of 0.0625)",
    "mode: one of four values (-1, 0, 0.5, 2), switching a few times per episode",
    "heavy tails: Student's t with 2 degrees of freedom, scale 0.1",
    "episode drift: noise around a mean that moves from -2 to 2 over the dataset's episodes",
    "gripper: 0/1 switching a few times per episode",
)
CHUNKS_SIZE = 1000  # files per chunk folder (LeRobot's chunks_size)
MAX_FRAMES = 2**63 - 1  # frame indices are int64
# What a dataset takes, for the checks before writing (measured with 6 episodes each of dim 1, 2,
# 14, 64, average lengths 20 and 2000). On disk, at least: parquet bytes per frame per --dim (state
# and action together: smooth columns 11.9 to 12.4, robot 6.3 to 6.7), per frame (the int columns),
# and per episode (v2.1 a file of its own, about 3.4 KB with its metadata lines; v3.0 a row group
# and a row). In memory, at most: the one episode being written, per frame per --dim (27 to 45
# bytes, peak RSS over 85k to 390k frames) and per frame (124 to 190 at --dim 1).
DISK_PER_VALUE = {"smooth": 11, "robot": 6}
DISK_PER_FRAME = 6
DISK_PER_EPISODE = {"v2.1": 2000, "v3.0": 100}
MEMORY_PER_VALUE = 48
MEMORY_PER_FRAME = 200
MEMORY_PER_EPISODE = {"v2.1": 8, "v3.0": 1000}  # its length; v3.0 its meta/episodes row (925)
MEMORY_PER_ROW_GROUP = 14_000  # v3.0: each of the open file's row groups, in its footer (13.9k)


def _episode(
    rng: np.random.Generator, length: int, dim: int, columns: str = "smooth", progress: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """One episode's (state, action); `progress` in [0, 1]: where it lies in the dataset."""
    if columns == "robot":
        return _robot_episode(rng, length, dim, progress)
    steps = rng.normal(0.0, 0.02, size=(length, dim)).astype(np.float32)
    offset = rng.uniform(-1.5, 1.5, size=dim).astype(np.float32)
    state = np.cumsum(steps, axis=0) + offset
    grippers = [dim // 2 - 1, dim - 1] if dim >= 4 else [dim - 1]
    for g in grippers:
        switch = rng.integers(0, length)
        state[:, g] = (np.arange(length) >= switch).astype(np.float32)
    action = np.empty_like(state)
    action[:-1] = state[1:]
    action[-1] = state[-1]
    action += rng.normal(0.0, 0.005, size=action.shape).astype(np.float32)
    for g in grippers:
        action[:, g] = state[:, g]
    return state, action


def _switching(rng: np.random.Generator, length: int, values: np.ndarray) -> np.ndarray:
    """A few segments (1-4), each holding one of `values`."""
    cuts = np.sort(rng.integers(0, length, size=int(rng.integers(0, 4))))
    segment = np.searchsorted(cuts, np.arange(length), side="right")
    return values[rng.integers(0, len(values), size=segment[-1] + 1)][segment]


def _robot_episode(
    rng: np.random.Generator, length: int, dim: int, progress: float
) -> tuple[np.ndarray, np.ndarray]:
    """`ROBOT_COLUMNS`: dimension d holds kind d % 8; continuous kinds get action noise, the
    point masses (grippers, constant, modes) are the same in the action."""
    state = np.empty((length, dim), np.float64)
    discrete = []
    for d in range(dim):
        kind = d % len(ROBOT_COLUMNS)
        if kind == 0:
            state[:, d] = rng.uniform(-1.5, 1.5) + np.cumsum(rng.normal(0.0, 0.02, length))
        elif kind == 1:
            state[:, d] = np.arange(length) >= rng.integers(0, length)
        elif kind == 2:
            state[:, d] = 0.25
        elif kind == 3:
            state[:, d] = 1e6 + np.cumsum(rng.normal(0.0, 0.5 / np.sqrt(length), length))
        elif kind == 4:
            state[:, d] = _switching(rng, length, np.array([-1.0, 0.0, 0.5, 2.0]))
        elif kind == 5:
            state[:, d] = 0.1 * rng.standard_t(2, length)
        elif kind == 6:
            state[:, d] = -2.0 + 4.0 * progress + rng.normal(0.0, 0.1, length)
        else:
            state[:, d] = _switching(rng, length, np.array([0.0, 1.0]))
        if kind in (1, 2, 4, 7):
            discrete.append(d)
    state = state.astype(np.float32)
    action = np.empty_like(state)
    action[:-1] = state[1:]
    action[-1] = state[-1]
    action += rng.normal(0.0, 0.005, size=action.shape).astype(np.float32)
    action[:, discrete] = state[:, discrete]
    return state, action


def _table(state, action, episode_index, first_index, fps):
    import pyarrow as pa

    length, dim = state.shape
    frame = np.arange(length, dtype=np.int64)

    def vectors(values):
        return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), pa.float32()), dim)

    return pa.table(
        {
            "observation.state": vectors(state),
            "action": vectors(action),
            "timestamp": pa.array((frame / fps).astype(np.float32)),
            "frame_index": pa.array(frame),
            "episode_index": pa.array(np.full(length, episode_index, np.int64)),
            "index": pa.array(first_index + frame),
            "task_index": pa.array(np.zeros(length, np.int64)),
        }
    )


def _episode_stats(table, features: dict) -> dict:
    """LeRobot's per-episode entry for every feature of one episode's table (exact, numpy)."""

    out = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        values = (
            column.flatten().to_numpy().reshape(len(column), -1)
            if hasattr(column, "flatten")
            else column.to_numpy()
        )
        out[name] = episode_entry(
            episode_stats(values, []), features[name]["dtype"], {}, with_quantiles=False
        )
    return out


def check_sample_sizes(episodes: int, frames_per_episode: int, dim: int, layout: str) -> None:
    """What `write_sample_dataset` is asked for, refused in one line naming the option: at
    least one episode of at least 2 frames (lengths are drawn around the average, from 2), at
    least one state/action column, sizes 64-bit indices count, a known layout (what fits the
    memory and disk there is: `check_room`)."""
    for value, option, least in (
        (episodes, "--episodes", 1),
        (frames_per_episode, "--frames", 2),
        (dim, "--dim", 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InputError(f"{option} must be a whole number {least} or more, not {value!r}")
    longest = _longest(frames_per_episode)
    if episodes * longest > MAX_FRAMES or longest * dim > MAX_FRAMES:
        raise InputError(
            f"--episodes {episodes:,} × --frames {frames_per_episode:,} at --dim {dim:,} is past"
            f" what 64-bit indices count ({MAX_FRAMES:,}); give sizes that fit on a disk"
        )
    if layout not in LAYOUTS:
        raise InputError(f"layout {layout!r} is unknown; use one of {', '.join(LAYOUTS)}")


def _longest(frames_per_episode: int) -> int:
    """The most frames one episode may get: lengths are drawn from half to 1.5 times the average."""
    return frames_per_episode * 3 // 2


def check_room(
    root: Path,
    episodes: int,
    frames_per_episode: int,
    dim: int,
    layout: str,
    columns: str = "smooth",
    episodes_per_file: int | None = None,
    data_files_size_in_mb: float = 100.0,
) -> None:
    """Before anything is written: the episode being written fits in the memory available, and
    the dataset on the free space (and files) of the file system `root` goes to; else one line
    naming the options and what fits. Estimates from `DISK_*`, `MEMORY_*` (measured)."""
    longest = _longest(frames_per_episode)
    available = _available_memory()
    per_frame = MEMORY_PER_VALUE * dim + MEMORY_PER_FRAME
    if available is not None and longest * per_frame > available:
        most_frames = available // per_frame * 2 // 3
        most_dim = (available // longest - MEMORY_PER_FRAME) // MEMORY_PER_VALUE
        fits = [f"at --dim {dim:,} up to --frames {most_frames:,}"] if most_frames >= 2 else []
        fits += [f"at --frames {frames_per_episode:,} up to --dim {most_dim:,}"] * (most_dim >= 1)
        raise InputError(
            f"--frames {frames_per_episode:,} at --dim {dim:,}: one episode (up to {longest:,}"
            f" frames) is held in memory while it is written, about"
            f" {_size(longest * per_frame)}, and {_size(available)} is available: lower --frames"
            f" or --dim ({' or '.join(fits) or 'none fits'})"
        )
    episode_bytes = frames_per_episode * (DISK_PER_VALUE[columns] * dim + DISK_PER_FRAME)
    episode_bytes += DISK_PER_EPISODE[layout]
    where = _existing_parent(root)
    try:
        stat = os.statvfs(where)
    except OSError:
        stat = None
    if stat is not None:
        free = stat.f_bavail * stat.f_frsize
        if episodes * episode_bytes > free:
            most = free // episode_bytes
            fits = f"up to --episodes {most:,} fit" if most >= 1 else "not one episode fits"
            raise InputError(
                f"--episodes {episodes:,} × --frames {frames_per_episode:,} at --dim {dim:,} would"
                f" take at least {_size(episodes * episode_bytes)} on disk, and {where} has"
                f" {_size(free)} free: lower --episodes, --frames or --dim (at these --frames and"
                f" --dim {fits}), or write to another disk"
            )
        files = episodes + episodes // CHUNKS_SIZE + 10  # v2.1: a file per episode
        if layout == "v2.1" and stat.f_files and files > stat.f_favail:
            raise InputError(
                f"--episodes {episodes:,} in LeRobot v2.1 is one file each, and {where} has room"
                f" for {stat.f_favail:,} more files: lower --episodes, or use --layout v3.0"
            )
    if available is None:
        return
    held = episodes * MEMORY_PER_EPISODE[layout]
    if layout == "v3.0":  # and the open file's footer, a row group per episode in it
        by_size = data_files_size_in_mb * 1e6 / episode_bytes  # a file closes at this size
        in_file = min(episodes, episodes_per_file or episodes)
        if by_size < in_file:
            in_file = int(by_size) + 1
        held += in_file * MEMORY_PER_ROW_GROUP
    if held + longest * per_frame > available:
        most = (available - longest * per_frame) // (held // episodes)
        raise InputError(
            f"--episodes {episodes:,}: the writer keeps about {_size(held // episodes)} per"
            f" episode in memory ({_size(held)}) beside the episode being written, and"
            f" {_size(available)} is available: lower --episodes (up to {max(most, 0):,} fit)"
        )


def _existing_parent(path: Path) -> Path:
    """`path`, or its nearest parent that exists (where it would be created)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def _available_memory() -> int | None:
    """Bytes of memory available now (Linux MemAvailable, else free pages); None if unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (OSError, ValueError, AttributeError):
        return None


def _size(n: int) -> str:
    """Bytes for people: 1.5 GiB."""
    for power, unit in enumerate(("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")):
        if n < 1024 ** (power + 1) or unit == "EiB":
            break
    if n >= 10**9 * 2**60:
        return "over a billion EiB"
    return f"{n:,} bytes" if power == 0 else f"{n / 1024**power:,.1f} {unit}"


def write_sample_dataset(
    root: str | Path,
    *,
    episodes: int = 20,
    frames_per_episode: int = 500,
    dim: int = 14,
    layout: str = "v2.1",
    seed: int = 0,
    fps: int = 50,
    episodes_per_file: int | None = None,
    data_files_size_in_mb: float = 100.0,
    progress: Callable[[int, int], None] | None = None,
    columns: str = "smooth",
    row_groups: str = "episode",
) -> Path:
    """Create a LeRobot-format dataset at `root` (which must not exist or be empty), whole or not
    at all (written beside it and renamed). `progress(episodes_done, episodes)` after each.
    `columns`: "smooth" (random walks and 0/1 grippers) or "robot" (`ROBOT_COLUMNS`);
    `row_groups` (v3.0): one per "episode" (LeRobot's) or one per "file"."""
    check_sample_sizes(episodes, frames_per_episode, dim, layout)
    if columns not in COLUMN_KINDS:
        raise InputError(f"columns {columns!r} is unknown; use one of {', '.join(COLUMN_KINDS)}")
    if row_groups not in ROW_GROUPS:
        raise InputError(
            f"row_groups {row_groups!r} is unknown; use one of {', '.join(ROW_GROUPS)}"
        )
    if not str(root):
        raise InputError("the output folder is empty text; give a folder path")
    root = Path(root)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise InputError(f"{root} already exists and is not empty; choose a new folder")
    check_room(
        root, episodes, frames_per_episode, dim, layout, columns, episodes_per_file,
        data_files_size_in_mb,
    )  # fmt: skip
    with staged_folder(root) as staging:
        _write(
            staging,
            episodes=episodes,
            frames_per_episode=frames_per_episode,
            dim=dim,
            layout=layout,
            seed=seed,
            fps=fps,
            episodes_per_file=episodes_per_file,
            data_files_size_in_mb=data_files_size_in_mb,
            progress=progress or (lambda done, total: None),
            columns=columns,
            row_groups=row_groups,
        )
    return root


def _write(
    root: Path,
    *,
    episodes: int,
    frames_per_episode: int,
    dim: int,
    layout: str,
    seed: int,
    fps: int,
    episodes_per_file: int | None,
    data_files_size_in_mb: float,
    progress: Callable[[int, int], None],
    columns: str = "smooth",
    row_groups: str = "episode",
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    lengths = rng.integers(
        max(2, frames_per_episode // 2), frames_per_episode * 3 // 2 + 1, size=episodes
    )
    total = int(lengths.sum())
    names = [f"joint_{i}" for i in range(dim)]
    features = {
        "observation.state": {"dtype": "float32", "shape": [dim], "names": names},
        "action": {"dtype": "float32", "shape": [dim], "names": names},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
    }
    info = {
        "codebase_version": layout,
        "robot_type": "synthetic_bimanual",
        "fps": fps,
        "total_episodes": episodes,
        "total_frames": total,
        "total_tasks": 1,
        "chunks_size": 1000,
        "features": features,
    }
    (root / "meta").mkdir(parents=True, exist_ok=True)
    first = 0
    if layout == "v2.1":
        info.update(
            data_path="data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            video_path=None,
            total_chunks=(episodes + 999) // 1000,
        )
        with (
            atomic_open(root / "meta" / "episodes.jsonl") as handle,
            atomic_open(root / "meta" / "episodes_stats.jsonl") as stats_handle,
        ):
            for e, length in enumerate(lengths):
                state, action = _episode(rng, int(length), dim, columns, e / max(1, episodes - 1))
                path = root / "data" / f"chunk-{e // 1000:03d}" / f"episode_{e:06d}.parquet"
                path.parent.mkdir(parents=True, exist_ok=True)
                table = _table(state, action, e, first, fps)
                pq.write_table(table, path)
                handle.write(
                    json.dumps({"episode_index": e, "tasks": ["move"], "length": int(length)})
                    + "\n"
                )
                stats_handle.write(
                    json.dumps({"episode_index": e, "stats": _episode_stats(table, features)})
                    + "\n"
                )
                first += int(length)
                progress(e + 1, episodes)
        with atomic_open(root / "meta" / "tasks.jsonl") as handle:
            handle.write(json.dumps({"task_index": 0, "task": "move"}) + "\n")
    else:
        info.update(
            data_path="data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            video_path=None,
            data_files_size_in_mb=data_files_size_in_mb,
        )
        rows = _write_v30_data(
            root, rng, lengths, dim, fps, episodes_per_file, data_files_size_in_mb, progress,
            columns, row_groups,
        )  # fmt: skip
        episodes_dir = root / "meta" / "episodes" / "chunk-000"
        episodes_dir.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), episodes_dir / "file-000.parquet")
        pq.write_table(
            pa.table({"task_index": [0], "task": ["move"]}), root / "meta" / "tasks.parquet"
        )
    write_json_atomic(root / "meta" / "info.json", info, indent=4)


def _write_v30_data(
    root: Path,
    rng: np.random.Generator,
    lengths: np.ndarray,
    dim: int,
    fps: int,
    episodes_per_file: int | None,
    data_files_size_in_mb: float,
    progress: Callable[[int, int], None],
    columns: str = "smooth",
    row_groups: str = "episode",
) -> list[dict]:
    """The data files as LeRobot (>= 0.4) records them: one parquet writer per file, one row group
    per episode, and a new file once the current one's size on disk plus the next episode's
    (estimated from the file's bytes per frame) reaches `data_files_size_in_mb` — or, if given,
    after `episodes_per_file` episodes. Returns the meta/episodes rows. `row_groups="file"`:
    each file's episodes are gathered and written as one row group when the file closes."""
    import pyarrow.parquet as pq

    def close(writer, path) -> None:
        writer.close()
        if row_groups == "file":
            _one_row_group(path)

    rows: list[dict] = []
    writer, path, file_index, in_file, frames_in_file, first = None, None, 0, 0, 0, 0
    try:
        for e, length in enumerate(int(n) for n in lengths):
            if writer is not None and path is not None:
                size_mb = path.stat().st_size / 1e6
                per_frame = size_mb / frames_in_file if frames_in_file else 0.0
                full = size_mb + per_frame * length >= data_files_size_in_mb
                if full or (episodes_per_file is not None and in_file >= episodes_per_file):
                    close(writer, path)
                    writer, file_index, in_file, frames_in_file = None, file_index + 1, 0, 0
            state, action = _episode(rng, length, dim, columns, e / max(1, len(lengths) - 1))
            table = _table(state, action, e, first, fps)
            if writer is None:
                chunk, index = divmod(file_index, CHUNKS_SIZE)
                path = root / "data" / f"chunk-{chunk:03d}" / f"file-{index:03d}.parquet"
                path.parent.mkdir(parents=True, exist_ok=True)
                writer = pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
            chunk, index = divmod(file_index, CHUNKS_SIZE)
            rows.append(
                {
                    "episode_index": e,
                    "length": length,
                    "dataset_from_index": first,
                    "dataset_to_index": first + length,
                    "data/chunk_index": chunk,
                    "data/file_index": index,
                }
            )
            first += length
            in_file += 1
            frames_in_file += length
            progress(e + 1, len(lengths))
        if writer is not None:
            close(writer, path)
            writer = None
    finally:
        if writer is not None:  # a failure: the staged folder goes
            writer.close()
    return rows


def _one_row_group(path: Path) -> None:
    """Rewrite a closed data file as a single row group (same rows, same schema)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    staged = path.with_suffix(".one.parquet")
    pq.write_table(table, staged, row_group_size=max(1, table.num_rows))
    staged.replace(path)
