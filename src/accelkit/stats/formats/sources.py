"""Where rows come from: LeRobot datasets (v2.1, v3.0), .npy / .npz / parquet files or folders.

Only the needed columns are read (pyarrow column projection); videos and image columns are read by
`accelkit.stats.formats.video`, never here. A file is the
unit of reading, so memory is bounded by the largest file, not the dataset.

Action chunks (`action_horizon=H`) are never materialized: frame t's chunk holds actions t..t+H-1 of
its episode, so the flattened chunks are the episode's actions with integer multiplicities, and the
statistics take those multiplicities as weights (exact, and H times cheaper than building chunks).
End-of-episode rule:

* `truncate` (default): a chunk that runs past the episode's end holds only the actions inside it;
  action j of an episode is counted once per frame t with j-H < t <= j.
* `clamp`: openpi's loader, which clamps indices past the end to the last frame, so the final action
  is counted once more for every missing step.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Generator, Iterator, Mapping
from pathlib import Path
from typing import cast

import numpy as np

from accelkit.errors import DataError, InputError
from accelkit.runtime import storage
from accelkit.stats.core.action_chunks import (
    ACTIONS,
    STATE,
    ChunkTransform,
    check_keys,
    materialize,
)
from accelkit.stats.formats import lerobot
from accelkit.stats.formats.readers import (  # noqa: F401  (FileReader: where tests count the reads)
    FileReader,
    Fragment,
    arrow_column_rows,
    arrow_values,
    parquet_names,
)
from accelkit.stats.formats.stream_rows import (  # chunk_weights: also this module's, as it always was
    chunk_rows,
    chunk_weights,
    drain,
    last_rows,
    rows_of,
)
from accelkit.stats.types import Column, Stream

log = logging.getLogger(__name__)

DEFAULT_KEYS = {"state": "observation.state", "actions": "action"}
DATA_SUFFIXES = (".parquet", ".npz", ".npy")
CHUNK_ENDS = ("truncate", "clamp")
READ_THREADS = 2
PREFETCH = 4
SPLIT_ROWS = 1 << 18  # a file's rows reach the reduction in pieces of about this many rows
PIECES_AHEAD = 2  # decoded pieces of one file waiting for the reduction
GROUP_ROWS = 1 << 16  # small files are read by one task up to about this many rows


# --- the stream over files --------------------------------------------------------------------


class FileStream(Stream):
    """Chunks (one per file) of the requested keys, with sampling and action-chunk weights."""

    def __init__(
        self,
        name: str,
        fragments: list[Fragment],
        keys: Mapping[str, str],
        *,
        reader: FileReader | None = None,
        horizons: Mapping[str, int] | None = None,
        chunk_end: str = "truncate",
        max_frames: int | None = None,
        seed: int = 0,
        shuffle: bool = False,
        chunk_transform: ChunkTransform | None = None,
    ):
        if chunk_end not in CHUNK_ENDS:
            raise InputError(
                f"chunk end rule {chunk_end!r} is unknown; use one of {', '.join(CHUNK_ENDS)}"
            )
        self.name = name
        self.lerobot: lerobot.Source | None = None  # set when opened from a LeRobot dataset
        self.fragments = fragments
        self.keys = dict(keys)
        self.reader = reader or FileReader()
        self.horizons = {k: int(h) for k, h in (horizons or {}).items() if h and int(h) > 1}
        # action chunks built row by row (transforms, per-step statistics), or None
        self.chunk_transform = chunk_transform
        if chunk_transform is not None:
            check_keys(list(self.keys), "an action transform")
            self.horizons = {}  # the chunks are materialized, not weighted
        self.chunk_end = chunk_end
        self.all_rows = sum(f.num_rows for f in fragments)
        self.sample = None
        if max_frames is not None and max_frames < self.all_rows:
            if max_frames <= 0:
                raise InputError(f"max_frames must be positive, not {max_frames}")
            rng = np.random.default_rng(seed)
            self.sample = np.sort(rng.choice(self.all_rows, size=max_frames, replace=False))
        self.total_rows = self.all_rows
        self.order = list(range(len(fragments)))
        if shuffle:  # a time budget then stops after a random subset of files, not the first ones
            np.random.default_rng(seed).shuffle(self.order)
        self._offsets = [f.row_offset for f in fragments]

    @property
    def rereadable(self) -> bool:
        """Local files are read again at the cost of a read (object storage: downloaded again,
        so a run keeps what it decoded instead)."""
        return not any(isinstance(f.path, storage.ObjectPath) for f in self.fragments)

    def column_name(self, key: str) -> str:
        return self.keys.get(key, key)

    def describe_row(self, key: str, row_id: int) -> str:
        index = max(0, bisect.bisect_right(self._offsets, row_id) - 1)
        fragment = self.fragments[index]
        return f"{fragment.path} row {row_id - fragment.row_offset}"

    def _sampled(self, fragment: Fragment) -> np.ndarray:
        if self.sample is None:
            return np.ones(fragment.num_rows, bool)
        lo = np.searchsorted(self.sample, fragment.row_offset)
        hi = np.searchsorted(self.sample, fragment.row_offset + fragment.num_rows)
        mask = np.zeros(fragment.num_rows, bool)
        mask[self.sample[lo:hi] - fragment.row_offset] = True
        return mask

    def chunks(self) -> Generator[dict[str, Column], None, None]:
        """Chunks in `order`, each about SPLIT_ROWS rows of one file cut where an episode starts.

        Files are read ahead by a small thread pool, each a piece at a time into a bounded queue:
        pyarrow and numpy release the GIL while decoding, so reading overlaps with the device
        work on earlier chunks, inside one large file too (a LeRobot v3.0 file holds ~2M rows;
        read whole, it kept a time budget from being checked for seconds, and the reduction
        waited for it). The reader threads also cut the pieces into chunks, and read runs of
        small files (a v2.1 dataset's file per episode) as one task of ~GROUP_ROWS rows whose
        chunks reach the queue together: the thread that runs the reduction gets one item per
        ~GROUP_ROWS rows, not a queue, a task and a cut per file. Action chunks and transforms,
        which follow episodes across files, are cut on the consuming thread, a file at a time.
        The order of rows never changes, so neither do the results.
        """
        import queue
        import threading
        from concurrent.futures import ThreadPoolExecutor

        seen_episodes: dict[int, Path] = {}
        columns_wanted = list(dict.fromkeys(self.keys.values()))
        stop = threading.Event()
        queues: dict[int, queue.Queue] = {}
        cut = not self.horizons and self.chunk_transform is None  # chunks cut by the readers

        def pieces_of(index: int):
            fragment = self.fragments[index]
            listed = fragment.num_rows if fragment.listed else None
            return self.reader.read_pieces(fragment.path, columns_wanted, SPLIT_ROWS, listed)

        def produce(items: queue.Queue, indexes: list[int]) -> None:
            def put(item) -> bool:
                while not stop.is_set():
                    try:
                        items.put(item, timeout=0.1)
                        return True
                    except queue.Full:
                        continue
                return False

            try:
                if not cut:
                    for piece in pieces_of(indexes[0]):
                        if not put(("item", piece)):
                            return
                elif len(indexes) == 1:  # a large file: its chunks as they are cut
                    for chunk in self._file_chunks(indexes[0], pieces_of(indexes[0]), {}):
                        if not put(("item", chunk)):
                            return
                else:  # small files: their chunks together
                    pending, rows = [], 0
                    for index in indexes:
                        for chunk in self._file_chunks(index, pieces_of(index), {}):
                            pending.append(chunk)
                            rows += chunk_rows(chunk)
                        if rows >= GROUP_ROWS:
                            if not put(("items", pending)):
                                return
                            pending, rows = [], 0
                    if pending and not put(("items", pending)):
                        return
                put(("end", None))
            except BaseException as exc:  # handed to the consumer, raised there
                put(("error", exc))

        pool = ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="accelkit-read")
        tasks = self._tasks(cut)
        submitted = 0

        def submit_next() -> None:
            nonlocal submitted
            if submitted < len(tasks):
                queues[submitted] = queue.Queue(maxsize=PIECES_AHEAD)
                pool.submit(produce, queues[submitted], tasks[submitted])
                submitted += 1

        try:
            for _ in range(PREFETCH):
                submit_next()
            for position, indexes in enumerate(tasks):
                items = drain(queues.pop(position))
                if cut:
                    yield from items
                else:
                    yield from self._file_chunks(indexes[0], items, seen_episodes)
                submit_next()
        finally:  # a consumer that stops early (time budget, error) should not wait for unread files
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)

    def _tasks(self, cut: bool) -> list[list[int]]:
        """The reader threads' tasks, in order: runs of consecutive small files of about
        `GROUP_ROWS` rows (when the readers cut their chunks), else one file each; the first
        file alone, so that the run's first chunk (whose median is the moments' shift) comes as
        early as it can."""
        tasks: list[list[int]] = []
        rows = GROUP_ROWS
        for index in self.order:
            size = self.fragments[index].num_rows
            if not cut or size >= GROUP_ROWS or rows >= GROUP_ROWS or len(tasks) == 1:
                tasks.append([index])
                rows = size
            else:
                tasks[-1].append(index)
                rows += size
        return tasks

    def _file_chunks(self, index: int, pieces, seen_episodes: dict) -> Iterator[dict[str, Column]]:
        """One file's chunks from its pieces: each ends where an episode starts (the rows of the
        last, maybe unfinished, episode wait for the next piece), so every chunk holds whole
        episodes, as action chunks and per-episode statistics need."""
        fragment = self.fragments[index]
        carry: tuple[dict, np.ndarray | None] | None = None
        done = 0
        for columns, episodes in pieces:
            if (
                carry is not None
                and episodes is not None
                and carry[1] is not None
                and len(carry[1])
            ):
                # the carried episode's last rows open this piece: emit it whole on its own (a
                # small chunk) instead of copying the whole piece behind it
                end = int(np.argmax(episodes != carry[1][-1])) if len(episodes) else 0
                if end or (len(episodes) and episodes[0] != carry[1][-1]):
                    whole = {
                        c: np.concatenate([carry[0][c], v[:end]]) if c in carry[0] else v[:end]
                        for c, v in columns.items()
                    }
                    head = np.concatenate([carry[1], episodes[:end]])
                    yield from self._emit(index, whole, head, seen_episodes, done)
                    done += len(head)
                    columns = {c: v[end:] for c, v in columns.items()}
                    episodes, carry = episodes[end:], None
            if carry is not None:
                columns = {
                    c: np.concatenate([carry[0][c], v]) if c in carry[0] else v
                    for c, v in columns.items()
                }
                episodes = (
                    None
                    if episodes is None or carry[1] is None
                    else np.concatenate([carry[1], episodes])
                )
            n = rows_of(columns, episodes)
            if episodes is not None:
                starts = np.flatnonzero(np.diff(episodes)) + 1
                cut = int(starts[-1]) if len(starts) else 0
            else:
                whole = self.horizons or self.chunk_transform is not None
                cut = 0 if whole else n  # one episode: action chunks need all of it
            if cut:
                yield from self._emit(
                    index,
                    {c: v[:cut] for c, v in columns.items()},
                    None if episodes is None else episodes[:cut],
                    seen_episodes,
                    done,
                )
                done += cut
            carry = (
                {c: v[cut:] for c, v in columns.items()},
                None if episodes is None else episodes[cut:],
            )
        if carry is not None and rows_of(*carry):
            yield from self._emit(index, carry[0], carry[1], seen_episodes, done)
            done += rows_of(*carry)
        if done != fragment.num_rows:
            names = self.reader.names(fragment.path)
            missing = [name for name in self.keys.values() if name not in names]
            if missing:  # none of the keys' columns: nothing was read of the file's rows
                raise DataError(
                    f"{fragment.path} has no column {missing[0]!r}; columns: {', '.join(names)}"
                )
            raise DataError(
                f"{fragment.path} has {done} rows, expected {fragment.num_rows}; the file changed "
                "while it was read, or its metadata is wrong"
            )

    def _emit(self, index, columns, episodes, seen_episodes, first) -> Iterator[dict[str, Column]]:
        if self.chunk_transform is None:
            yield self._chunk(index, columns, episodes, seen_episodes, first)
        else:
            yield from self._transformed(
                self.chunk_transform, index, columns, episodes, seen_episodes, first
            )

    def _transformed(
        self,
        spec: ChunkTransform,
        index: int,
        columns: dict,
        episodes,
        seen_episodes: dict,
        first: int,
    ) -> Iterator[dict[str, Column]]:
        """Rows `first`.. of file `index` (whole episodes) with their action chunks built and
        transformed (`accelkit.stats.core.action_chunks`), in blocks of whole episodes of at most about
        SPLIT_ROWS chunk elements each (a 50-step horizon makes 50 rows of every frame)."""
        fragment = self.fragments[index]
        n = rows_of(columns, episodes)
        for name in self.keys.values():
            if name not in columns:
                raise DataError(
                    f"{fragment.path} has no column {name!r}; columns: {', '.join(self.reader.names(fragment.path))}"
                )
            if len(columns[name]) != n or first + n > fragment.num_rows:
                raise DataError(
                    f"{fragment.path} column {name!r} has {first + len(columns[name])} rows, expected {fragment.num_rows}"
                )
        known = episodes is not None
        if not known:
            episodes = np.full(n, -1 - index, np.int64)  # the file is one episode
        else:
            for episode in np.unique(episodes):
                where = seen_episodes.setdefault(int(episode), fragment.path)
                if where != fragment.path:
                    raise DataError(
                        f"episode {int(episode)} spans {where} and {fragment.path}; "
                        "action chunks need each episode inside one file"
                    )
        sampled = self._sampled(fragment)[first : first + n]
        state = columns[self.keys[STATE]]
        actions = columns[self.keys[ACTIONS]]
        starts = np.flatnonzero(np.r_[True, episodes[1:] != episodes[:-1]])
        frames_per_block = max(1, SPLIT_ROWS // max(1, spec.horizon))
        block_starts = [0]
        for start in starts[1:]:
            if start - block_starts[-1] >= frames_per_block:
                block_starts.append(int(start))
        bounds = [*block_starts, n]
        base = fragment.row_offset + first
        for lo, hi in itertools.pairwise(bounds):
            values, frames, frame_of, row_of = materialize(
                state[lo:hi], actions[lo:hi], episodes[lo:hi], sampled[lo:hi], spec
            )
            episode_rows = episodes[lo:hi]
            chunk = {}
            for key, rows_values in values.items():
                if key == STATE:
                    frame_rows, value_rows = frames, frames
                elif key == ACTIONS:
                    frame_rows, value_rows = frame_of, row_of
                else:  # one chunk step's rows: the frames whose chunk reaches it
                    step = int(key.split("@")[1])
                    last = last_rows(episode_rows, frames)
                    reach = (
                        frames + step <= last
                        if spec.end == "truncate"
                        else np.ones(len(frames), bool)
                    )
                    frame_rows = frames[reach]
                    value_rows = np.minimum(frame_rows + step, last[reach])
                chunk[key] = Column(
                    np.ascontiguousarray(rows_values),
                    np.ones(len(rows_values), np.int32),
                    base + lo + np.asarray(value_rows, np.int64),
                    episode_rows[frame_rows] if known else None,
                )
            for out, name in self.keys.items():  # other keys: each sampled frame once
                if out not in (STATE, ACTIONS):
                    keep = sampled[lo:hi]
                    chunk[out] = Column(
                        columns[name][lo:hi][keep],
                        np.ones(int(keep.sum()), np.int32),
                        base + lo + np.flatnonzero(keep),
                        episode_rows[keep] if known else None,
                    )
            yield chunk

    def chunk_at(self, index: int) -> dict[str, Column]:
        """The first chunk of file `index`, as `chunks` gives it (a Ray run's driver reads the
        first file's: the shift of the moments comes from it, as in a local run)."""
        order, self.order = self.order, [index]
        try:
            chunks = self.chunks()
            try:
                return next(chunks)
            finally:
                chunks.close()
        finally:
            self.order = order

    def _chunk(
        self,
        index: int,
        columns: dict,
        episodes: np.ndarray | None,
        seen_episodes: dict,
        first: int = 0,
    ) -> dict[str, Column]:
        """Rows `first`.. of file `index` (whole episodes) as a chunk."""
        fragment = self.fragments[index]
        n = rows_of(columns, episodes)
        every = self.sample is None  # every row once, unless a key has a horizon
        sampled = np.ones(n, bool) if every else self._sampled(fragment)[first : first + n]
        ones = np.ones(n, np.int32) if every else None  # shared by the keys: read, never written
        row_id = np.arange(
            fragment.row_offset + first, fragment.row_offset + first + n, dtype=np.int64
        )
        known_episodes = episodes is not None
        if episodes is None:
            episodes = np.full(n, -1 - index, np.int64)  # the file is one episode
        elif self.horizons:
            for episode in np.unique(episodes):
                if int(episode) in seen_episodes and seen_episodes[int(episode)] != (fragment.path):
                    raise DataError(
                        f"episode {int(episode)} spans {seen_episodes[int(episode)]} and {fragment.path}; "
                        "action chunks need each episode inside one file"
                    )
                seen_episodes[int(episode)] = fragment.path
        chunk = {}
        for out, name in self.keys.items():
            if name not in columns:
                raise DataError(
                    f"{fragment.path} has no column {name!r}; columns: {', '.join(self.reader.names(fragment.path))}"
                )
            values = columns[name]
            if len(values) != n or first + n > fragment.num_rows:
                raise DataError(
                    f"{fragment.path} column {name!r} has {first + len(values)} rows, expected {fragment.num_rows}"
                )
            horizon = self.horizons.get(out)
            episode = episodes if known_episodes else None
            if not horizon and ones is not None:  # every row once
                chunk[out] = Column(values, ones, row_id, episode)
                continue
            weight = chunk_weights(
                episodes, sampled, horizon, self.chunk_end
            ) if horizon else sampled.astype(np.int32)  # fmt: skip
            ids = row_id
            keep = weight > 0
            if not keep.all():  # rows outside the sample cost nothing downstream
                values, weight, ids = values[keep], weight[keep], ids[keep]
                episode = None if episode is None else episode[keep]
            chunk[out] = Column(values, weight, ids, episode)
        return chunk


# --- opening a path ---------------------------------------------------------------------------


def _lerobot_files(root: Path, info: dict, info_file: Path, trust_files: bool):
    """The dataset's data files (from its metadata, or what is on disk with `trust_files`)."""
    if trust_files:
        files = lerobot.files_on_disk(root)
        if not files:
            version = str(info.get("codebase_version", "?"))
            raise DataError(
                f"{root} is a LeRobot dataset ({version}) but {root / 'data'} holds no parquet files; "
                "is the download complete?"
            )
        return files, None
    layout = lerobot.read_layout(root, info, info_file)
    lerobot.check_missing(layout, root)
    lerobot.warn_strays(root, layout)
    return layout.files, layout


def _resolve_keys(
    available: list[str],
    keys: Mapping[str, str] | None,
    where: str,
    features: Mapping | None = None,
) -> dict[str, str]:
    listing = ", ".join(available)
    if keys:
        for out, name in keys.items():
            if name not in available:
                raise DataError(
                    f"{where} has no column {name!r} (for key {out!r}); available: {listing}"
                )
        if features is not None:
            for name in keys.values():
                dtype = str(features.get(name, {}).get("dtype", "float32"))
                if dtype in ("video", "image", "string"):
                    hint = (
                        "; camera statistics come with --format lerobot --images sample|all"
                        if dtype in ("video", "image")
                        else ""
                    )
                    raise DataError(
                        f"{where} column {name!r} is a {dtype} feature, not a numeric vector{hint}"
                    )
        return dict(keys)
    chosen = {out: name for out, name in DEFAULT_KEYS.items() if name in available}
    if not chosen:
        chosen = {out: out for out in DEFAULT_KEYS if out in available}
    if not chosen:
        raise DataError(
            f"{where} has none of the default columns {', '.join(DEFAULT_KEYS.values())}; "
            f"name them with --keys out=column (available: {listing})"
        )
    if len(chosen) < len(DEFAULT_KEYS):  # half a match would silently leave a key out
        wanted = (
            DEFAULT_KEYS
            if set(chosen.values()) <= set(DEFAULT_KEYS.values())
            else {out: out for out in DEFAULT_KEYS}
        )
        missing = [name for out, name in wanted.items() if out not in chosen]
        example = ",".join(f"{out}={name}" for out, name in chosen.items())
        raise DataError(
            f"{where} has {', '.join(chosen.values())} but not {', '.join(missing)} (available: "
            f"{listing}); name every key to compute with --keys, e.g. --keys {example}"
        )
    return chosen


def _check_declared_columns(features: Mapping, chosen: Mapping[str, str], first: Path) -> None:
    """Numeric features meta/info.json declares but the data does not hold: an error for one
    the run needs, a warning naming the rest (their statistics would silently be missing)."""
    present = set(parquet_names(first))
    absent = [
        n
        for n, f in features.items()
        if isinstance(f, dict)
        and str(f.get("dtype")) in lerobot.NUMERIC_DTYPES
        and n not in present
    ]
    needed = [n for n in chosen.values() if n in absent]
    if needed:
        raise DataError(
            f"meta/info.json declares feature {needed[0]!r} but {first} has no such column; "
            "repair the metadata or the data, or choose other columns with --keys"
        )
    if absent:
        log.warning(
            "meta/info.json declares %s, which %s does not hold: no statistics for %s",
            ", ".join(map(repr, absent)),
            first,
            "them" if len(absent) > 1 else "it",
        )


def _row_counts(reader: FileReader, files: list, first_name: str):
    """Rows of every file: one footer read each (on object storage, several in flight)."""
    if not files or not isinstance(files[0], storage.ObjectPath):
        return (reader.num_rows(file, first_name) for file in files)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=storage.LISTING_THREADS) as pool:
        return list(pool.map(lambda file: reader.num_rows(file, first_name), files))


def open_source(
    path: str | Path,
    *,
    keys: Mapping[str, str] | None = None,
    action_horizon: int | None = None,
    horizon_keys: tuple[str, ...] = ("actions",),
    chunk_end: str = "truncate",
    max_frames: int | None = None,
    seed: int = 0,
    shuffle: bool = False,
    trust_files: bool = False,
    endpoint_url: str | None = None,
    chunk_transform: ChunkTransform | None = None,
) -> FileStream:
    """Open a LeRobot dataset folder, a data file, or a folder of data files as a `FileStream`.

    A LeRobot dataset is read as its metadata describes it (see `accelkit.stats.formats.lerobot`);
    `trust_files=True` reads the parquet files under its data/ folder instead. `path` may be an
    `s3://`, `gs://` or `file://` URI (`accelkit.runtime.storage`; `endpoint_url` reaches an
    S3-compatible store). `chunk_transform` builds the keys' action chunks row by row and
    transforms them (openpi's DeltaActions, a hook, per-step statistics:
    `accelkit.stats.core.action_chunks`).
    """
    # an ObjectPath has the Path methods the readers use: it stands in for one below
    root = cast(Path, storage.as_path(path, endpoint_url))
    if not root.exists():
        raise InputError(f"dataset path {root} does not exist; check the path")
    reader = FileReader()
    features = None
    layout = None
    info = None
    info_file = root / "meta" / "info.json"
    if root.is_dir() and info_file.is_file():
        info = lerobot.read_json(info_file)
        files, layout = _lerobot_files(root, info, info_file, trust_files)
        features = info.get("features", {})
        if not isinstance(features, dict):
            raise DataError(f"{info_file}: features is not a mapping; the metadata is damaged")
        reader = FileReader(features)
        available = list(features) or parquet_names(files[0])
        name = f"LeRobot {info.get('codebase_version', '?')} dataset {root}"
    elif root.is_dir():
        files = [p for p in storage.files_under(root, "*") if p.suffix in DATA_SUFFIXES]
        if not files:
            raise DataError(
                f"{root} holds no data files (.parquet, .npz, .npy) and no LeRobot meta/info.json"
            )
        kinds = {p.suffix for p in files}
        if len(kinds) > 1:
            raise DataError(
                f"{root} mixes {', '.join(sorted(kinds))} files; point at a folder of one kind"
            )
        available = sorted({p.stem for p in files}) if kinds == {".npy"} else reader.names(files[0])
        name = f"folder {root}"
    else:
        if root.suffix not in DATA_SUFFIXES:
            raise InputError(f"{root} is not a .parquet, .npz or .npy file nor a dataset folder")
        files = [root]
        available = reader.names(root)
        name = f"file {root}"
    chosen = _resolve_keys(available, keys, name, features)
    if features and files and files[0].suffix == ".parquet":
        _check_declared_columns(features, chosen, files[0])
    if files[0].suffix == ".npy":
        if len(set(chosen.values())) > 1 and len(files) > 1:
            raise DataError(
                f"{name}: .npy files hold one array each; compute one key at a time from a folder of .npy files"
            )
        files = [p for p in files if p.stem in set(chosen.values())]
    fragments, offset = [], 0
    first_name = next(iter(chosen.values()))
    # a LeRobot dataset's metadata lists every file's rows: no file is opened to list them (a
    # dataset of thousands of files would read as many footers, one request each on object storage)
    listed = layout is not None and all(f.suffix == ".parquet" for f in files)
    counts = (
        [layout.rows_per_file[f] for f in files]
        if listed and layout is not None
        else _row_counts(reader, files, first_name)
    )
    for file, rows in zip(files, counts, strict=True):
        fragments.append(Fragment(file, rows, offset, listed))
        offset += rows
    if offset == 0:
        raise DataError(f"{name} holds no rows")
    total = info.get("total_frames") if info is not None else None
    if layout is None and isinstance(total, int) and total != offset:
        log.warning(
            "%s holds %d frames but meta/info.json says total_frames is %d (read as it is: --trust-files)",
            name,
            offset,
            total,
        )
    horizons = (
        {key: action_horizon for key in horizon_keys if key in chosen} if action_horizon else None
    )
    if action_horizon and not horizons:
        raise InputError(
            f"--action-horizon applies to keys {', '.join(horizon_keys)}, which {name} does not compute"
        )
    stream = FileStream(
        name,
        fragments,
        chosen,
        reader=reader,
        horizons=horizons,
        chunk_end=chunk_end,
        max_frames=max_frames,
        seed=seed,
        shuffle=shuffle,
        chunk_transform=chunk_transform,
    )
    if info is not None:
        stream.lerobot = lerobot.Source(
            root, str(info.get("codebase_version", "?")), features or {}, layout
        )
    return stream
