"""Where a LeRobot dataset's camera frames are, and reading them: the shell around
`accelkit.stats.core.camera_stats`.

Frames come from the dataset's files as LeRobot's reader finds them: dtype "video" from the mp4 at
info.json's `video_path` (v3.0: the episode's `videos/<key>/chunk_index`, `file_index`,
`from_timestamp` in meta/episodes; v2.1: one file per episode; frame i at `from_timestamp + i /
fps`), decoded with PyAV; dtype "image" from the PNG/JPEG bytes stored in the parquet (`{bytes,
path}` structs), decoded with Pillow as LeRobot decodes them (`.convert("RGB")`). Each video file
is decoded once, whatever number of episodes it holds, on a reader thread that overlaps decoding
with the reduction; frames travel in batches of a few, so memory does not grow with an episode's
length. `compute_camera_stats` is the operation the CLI calls.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from accelkit.errors import DataError, InputError, require
from accelkit.stats.core.camera_stats import (
    IMAGE_MODES,
    CameraStats,
    PixelCounts,
    camera_keys,
    downsample_batch,
    finalize,
    init,
    merge,
    sample_frames,
    update,
)
from accelkit.stats.formats import lerobot

TIME_TOLERANCE_S = 1e-4  # LeRobot's default tolerance_s when it looks a frame up by timestamp


# --- where each episode's frames are ----------------------------------------------------------


@dataclass(frozen=True)
class Clip:
    """One episode of one camera: `length` frames, in a video file from `start` seconds, or rows
    `start`… of an image column in a parquet file."""

    episode: int
    length: int
    file: Path
    start: float | int


@dataclass
class Camera:
    key: str
    dtype: str  # "video" or "image"
    clips: list[Clip]


def _video_columns_v30(root: Path, keys: list[str]) -> dict[int, dict]:
    import pyarrow.parquet as pq

    rows: dict[int, dict] = {}
    for path in sorted((root / "meta" / "episodes").rglob("*.parquet")):
        schema = pq.read_schema(path)
        wanted = ["episode_index"] + [
            f"videos/{k}/{c}" for k in keys for c in ("chunk_index", "file_index", "from_timestamp")
        ]
        missing = [c for c in wanted if c not in schema.names]
        if missing:
            raise DataError(
                f"{path} has no column {missing[0]!r}; a LeRobot v3.0 dataset with videos lists "
                "each episode's video file and start there (is the metadata complete?)"
            )
        table = pq.read_table(path, columns=wanted).to_pydict()
        for i, episode in enumerate(table["episode_index"]):
            rows[int(episode)] = {c: table[c][i] for c in wanted}
    return rows


def find_cameras(source, keys: list[str] | None = None) -> list[Camera]:
    """Every camera feature of a LeRobot dataset (`lerobot.Source`) with its episodes' frames."""

    layout = source.layout
    if layout is None:
        raise InputError(
            "camera statistics follow the dataset's episode metadata; drop --trust-files or pass "
            "--images none"
        )
    info = lerobot.read_json(source.root / "meta" / "info.json")
    keys = camera_keys(source.features) if keys is None else keys
    videos = [k for k in keys if source.features[k].get("dtype") == "video"]
    template = info.get("video_path")
    if videos and not isinstance(template, str):
        raise DataError(
            f"{source.root / 'meta' / 'info.json'} declares video features ({', '.join(videos)}) "
            "but no video_path; the metadata is damaged"
        )
    v2 = source.version.startswith("v2")
    columns = {} if v2 or not videos else _video_columns_v30(source.root, videos)
    chunk = int(info.get("chunks_size", 1000) or 1000)
    offsets: dict[Path, int] = {}
    row_of: dict[int, int] = {}
    for episode in layout.episodes:  # rows of each episode inside its data file
        row_of[episode.index] = offsets.get(episode.file, 0)
        offsets[episode.file] = row_of[episode.index] + episode.length
    cameras = []
    for key in keys:
        dtype = str(source.features[key].get("dtype"))
        clips = []
        for episode in layout.episodes:
            if dtype == "image":
                clips.append(
                    Clip(episode.index, episode.length, episode.file, row_of[episode.index])
                )
                continue
            if v2:
                fields = {"episode_chunk": episode.index // chunk, "episode_index": episode.index}
                start = 0.0
            else:
                row = columns.get(episode.index)
                if row is None or any(v is None for v in row.values()):
                    raise DataError(
                        f"episode {episode.index} has no video entry for {key} in meta/episodes; "
                        "the metadata is damaged"
                    )
                fields = {
                    "chunk_index": row[f"videos/{key}/chunk_index"],
                    "file_index": row[f"videos/{key}/file_index"],
                }
                start = float(row[f"videos/{key}/from_timestamp"])
            assert isinstance(template, str)  # checked above: the dataset has videos
            path = lerobot._format_path(source.root, template, source.root, video_key=key, **fields)
            clips.append(Clip(episode.index, episode.length, path, start))
        cameras.append(Camera(key, dtype, clips))
    return cameras


# --- reading frames ---------------------------------------------------------------------------


class Frames(NamedTuple):
    """Some frames of one episode of one camera, [N, H, W, C] uint8 (an episode comes in several
    batches of at most `BATCH` frames, so memory stays a few frames whatever the episode's length)."""

    episode: int
    frames: np.ndarray


BATCH = 16  # frames per batch: large enough to amortize a histogram call, small enough for caches


def _multiplicity(clip: Clip, mode: str) -> np.ndarray:
    """How often each frame of the clip is counted: once each (all), or as LeRobot samples it."""
    if mode == "all":
        return np.ones(clip.length, np.int64)
    return np.bincount(sample_frames(clip.length), minlength=clip.length)


class _Batcher:
    """Collects each episode's counted frames and hands them on in batches of `BATCH`."""

    def __init__(self):
        self.pending: dict[int, list[np.ndarray]] = {}

    def add(self, episode: int, frame: np.ndarray, times: int) -> Iterator[Frames]:
        pending = self.pending.setdefault(episode, [])
        pending.extend([frame] * int(times))
        if len(pending) >= BATCH:
            yield self.flush(episode)

    def flush(self, episode: int) -> Frames:
        return Frames(episode, np.stack(self.pending.pop(episode)))

    def finish(self, episode: int) -> Iterator[Frames]:
        if self.pending.get(episode):
            yield self.flush(episode)


def _video_error(path: Path, clips: list[Clip], key: str, what: str) -> DataError:
    episodes = ", ".join(str(c.episode) for c in clips[:3]) + (" …" if len(clips) > 3 else "")
    word = "episode" if len(clips) == 1 else "episodes"
    return DataError(f"{path} ({key}, {word} {episodes}): {what}")


def _decoders() -> str:
    import av

    names = [
        n for n in ("av1", "libdav1d", "h264", "hevc", "vp9", "mpeg4") if n in av.codecs_available
    ]
    return ", ".join(names)


def _codec_error(path: Path, clips: list[Clip], key: str, codec: str | None) -> DataError:
    declared = f" (meta/info.json says {codec})" if codec else ""
    return _video_error(
        path, clips, key,
        f"encoded with a codec this PyAV build cannot decode{declared}; it decodes {_decoders()}:"
        " re-encode the video with one of them (LeRobot's default, libsvtav1, is AV1)",
    )  # fmt: skip


SKIPPING_DECODERS = (
    "libdav1d",
    "av1",
)  # key frames reset every reference: whole GOPs may be skipped


class _Episodes:
    """Which frame of which clip a video frame (or packet) at time t is, and what was seen."""

    def __init__(self, clips: list[Clip], fps: float, mode: str):
        self.clips = sorted(clips, key=lambda c: c.start)
        self.fps = fps
        self.starts = np.array([c.start for c in self.clips])
        self.counts = {c.episode: _multiplicity(c, mode) for c in self.clips}
        self.seen: dict[int, set[int]] = {c.episode: set() for c in self.clips}
        self.completed: set[int] = set()

    def slot(self, time: float | None) -> tuple[Clip, int] | None:
        """(clip, frame index) of a frame shown at `time`, if it is a frame LeRobot would return
        for a not yet completed clip (the frame at `start + i / fps`, within 1e-4 s)."""
        if time is None or not math.isfinite(time):
            return None
        at = int(np.searchsorted(self.starts, time + TIME_TOLERANCE_S, side="right")) - 1
        if at < 0:
            return None
        clip = self.clips[at]
        index = round((time - clip.start) * self.fps)
        if abs(clip.start + index / self.fps - time) > TIME_TOLERANCE_S:
            return None  # between two frame times
        if clip.episode in self.completed or not 0 <= index < clip.length:
            return None
        if index in self.seen[clip.episode]:
            return None
        return clip, index

    def wanted(self, time: float | None) -> bool:
        found = self.slot(time)
        return found is not None and bool(self.counts[found[0].episode][found[1]])

    def mark(self, clip: Clip, index: int, complete: bool = True) -> bool:
        """Record frame `index` of `clip` as present; True when that completes the clip (only
        with `complete`: frames decoded in display order, none still inside the decoder)."""
        self.seen[clip.episode].add(index)
        return complete and self.mark_complete(clip)

    def mark_complete(self, clip: Clip) -> bool:
        if clip.episode in self.completed or len(self.seen[clip.episode]) < clip.length:
            return False
        self.completed.add(clip.episode)
        return True


def read_video(
    path: Path, clips: list[Clip], key: str, fps: float, mode: str, codec: str | None = None
) -> Iterator[Frames]:
    """Decode `path` once and yield each clip's wanted frames (the frame at `start + i / fps`);
    `codec` is the one info.json declares, named if it cannot be decoded.

    In sample mode, AV1 groups of pictures (a key frame up to the next) holding no sampled frame
    are not decoded at all: an AV1 key frame refreshes every reference, so the frames after it
    decode the same without them (their packets still count as frames present). Other codecs
    (H.264 and HEVC open GOPs may reference across key frames) are decoded whole."""

    av = require("av", "stats")
    if not path.is_file():
        raise _video_error(path, clips, key, "the video file is missing; is the download complete?")
    episodes = _Episodes(clips, fps, mode)
    clips = episodes.clips
    batcher = _Batcher()
    try:
        container = av.open(str(path))
    except av.error.FFmpegError as exc:
        raise _video_error(
            path, clips, key, f"not a readable video ({exc}); re-download it"
        ) from exc

    def take(frame, finish: bool = True) -> Iterator[Frames]:
        found = episodes.slot(None if frame.pts is None else float(frame.pts * base))
        if found is None:
            return
        clip, index = found
        times = episodes.counts[clip.episode][index]
        if times:  # converted only when counted (sample mode skips most frames)
            yield from batcher.add(clip.episode, frame.to_ndarray(format="rgb24"), times)
        if episodes.mark(clip, index, complete=finish):
            yield from batcher.finish(clip.episode)

    with container:
        if not container.streams.video:
            raise _video_error(path, clips, key, "the file holds no video stream")
        stream = container.streams.video[0]
        if stream.codec_context is None:  # FFmpeg knows no decoder for the stream's codec
            raise _codec_error(path, clips, key, codec)
        stream.thread_type = "AUTO"  # FFmpeg's own decoding threads
        base = stream.time_base  # frame and packet times: pts x the stream's time base
        skipping = mode == "sample" and stream.codec_context.name in SKIPPING_DECODERS
        try:
            if not skipping:
                for frame in container.decode(stream):
                    yield from take(frame)
                    if len(episodes.completed) == len(clips):
                        break
            else:  # episodes complete only at the end: the decoder may still hold frames
                for gop in _groups_of_pictures(container.demux(stream)):
                    times = [None if p.pts is None else float(p.pts * base) for p in gop]
                    wanted = [i for i, t in enumerate(times) if episodes.wanted(t)]
                    # decoded up to the group's last sampled frame (AV1 frames only reference
                    # earlier ones), the rest present (their packets), never decoded
                    used = wanted[-1] + 1 if wanted else 0
                    for packet in gop[:used]:
                        for frame in stream.decode(packet):
                            yield from take(frame, finish=False)
                    for t in times[used:]:
                        found = episodes.slot(t)
                        if found is not None:
                            episodes.mark(*found, complete=False)
                for frame in stream.decode(None):  # frames still inside the decoder
                    yield from take(frame, finish=False)
                for clip in clips:
                    if episodes.mark_complete(clip):
                        yield from batcher.finish(clip.episode)
        except av.error.DecoderNotFoundError as exc:
            raise _codec_error(path, clips, key, codec) from exc
        except av.error.FFmpegError as exc:
            raise _video_error(
                path, clips, key, f"the video is corrupt ({exc}); re-download it"
            ) from exc
    for clip in clips:
        if clip.episode not in episodes.completed:
            raise _video_error(
                path, [clip], key,
                f"the video holds {len(episodes.seen[clip.episode])} of the episode's frames but"
                f" the metadata says {clip.length}; re-download or re-encode it",
            )  # fmt: skip


def _groups_of_pictures(packets) -> Iterator[list]:
    """Packets from one key frame up to the next (the demuxer's final empty packet dropped)."""
    group: list = []
    for packet in packets:
        if packet.size == 0:
            continue
        if packet.is_keyframe and group:
            yield group
            group = []
        group.append(packet)
    if group:
        yield group


def read_images(path: Path, clips: list[Clip], key: str, root: Path, mode: str) -> Iterator[Frames]:
    """The image column `key` of one parquet file: each clip's wanted frames, as LeRobot decodes
    them (Pillow, converted to RGB)."""
    import io

    import pyarrow.parquet as pq
    from PIL import Image, UnidentifiedImageError

    try:
        column = pq.read_table(path, columns=[key]).column(key).to_pylist()
    except Exception as exc:
        raise _video_error(path, clips, key, f"the image column is not readable ({exc})") from exc
    batcher = _Batcher()
    for clip in clips:
        for i, times in enumerate(_multiplicity(clip, mode).tolist()):
            if not times:
                continue
            row = clip.start + i
            cell = column[row] if row < len(column) else None
            try:
                if isinstance(cell, dict) and cell.get("bytes"):
                    image = Image.open(io.BytesIO(cell["bytes"]))
                elif isinstance(cell, dict) and cell.get("path"):
                    image = Image.open(root / cell["path"])
                else:
                    raise DataError(f"frame {i} holds no image")
                frame = np.asarray(image.convert("RGB"))
            except (OSError, UnidentifiedImageError, DataError) as exc:
                raise _video_error(
                    path, [clip], key, f"frame {i} is not a readable image ({exc})"
                ) from exc
            yield from batcher.add(clip.episode, frame, times)
        yield from batcher.finish(clip.episode)


# --- computing ---------------------------------------------------------------------------------


@dataclass
class CameraResult:
    """Per camera: the global statistics, each episode's, and how many frames were decoded."""

    mode: str
    stats: dict[str, CameraStats]
    episodes: dict[int, dict[str, CameraStats]]
    frames_counted: int
    files: int
    seconds: float


def _jobs(cameras: list[Camera]):
    """(camera, file, clips in that file), in dataset order."""
    for camera in cameras:
        by_file: dict[Path, list[Clip]] = {}
        for clip in camera.clips:
            by_file.setdefault(clip.file, []).append(clip)
        for path, clips in by_file.items():
            yield camera, path, clips


def compute_camera_stats(
    source,
    mode: str = "sample",
    levels=(),
    keys: list[str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> CameraResult:
    """Statistics of every camera of a LeRobot dataset (`lerobot.Source`) in `mode` ("sample":
    LeRobot's frame sample and downsampling; "all": every pixel of every frame)."""
    import time

    if mode not in ("sample", "all"):
        raise InputError(f"images mode {mode!r} is unknown; use one of {', '.join(IMAGE_MODES)}")
    started = time.perf_counter()
    cameras = find_cameras(source, keys)
    info = lerobot.read_json(source.root / "meta" / "info.json")
    fps = float(info.get("fps") or 0)
    if any(c.dtype == "video" for c in cameras) and not fps > 0:
        raise DataError(f"{source.root / 'meta' / 'info.json'} has no fps; the metadata is damaged")
    # every file exists before any is decoded: a missing one answers at once
    for camera, path, clips in _jobs(cameras):
        if not path.is_file():
            raise _video_error(
                path, clips, camera.key, "the file is missing; is the download complete?"
            )
    jobs = list(_jobs(cameras))
    states: dict[str, dict[int, PixelCounts]] = {c.key: {} for c in cameras}
    counted = 0
    for done, (camera, path, clips) in enumerate(jobs):
        if progress is not None:
            progress(done, len(jobs), f"{camera.key}: {path.name}")
        if camera.dtype == "video":
            declared = source.features[camera.key].get("info") or {}
            codec = declared.get("video.codec") if isinstance(declared, dict) else None
            reader = read_video(path, clips, camera.key, fps, mode, codec)
        else:
            reader = read_images(path, clips, camera.key, source.root, mode)
        for item in _ahead(reader):
            frames = item.frames
            if mode == "sample":
                frames = downsample_batch(frames)
            before = states[camera.key].get(item.episode) or init(frames.shape[-1])
            states[camera.key][item.episode] = update(before, frames)
            counted += len(frames)
    if progress is not None:
        progress(len(jobs), len(jobs), "done")
    episodes: dict[int, dict[str, CameraStats]] = {}
    stats = {}
    for key, per_episode in states.items():
        total = None
        for episode in sorted(per_episode):
            state = per_episode[episode]
            episodes.setdefault(episode, {})[key] = finalize(state, levels)
            total = state if total is None else merge(total, state)
        if total is not None:
            stats[key] = finalize(total, levels)
    return CameraResult(mode, stats, episodes, counted, len(jobs), time.perf_counter() - started)


def _ahead(items: Iterator, depth: int = 4) -> Iterator:
    """`items` produced on a thread, up to `depth` ahead of the consumer (decoding overlaps the
    reduction; PyAV and numpy release the GIL in their loops). Errors are raised here, in order."""
    pipe: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce():
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        pipe.put(("item", item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            pipe.put(("end", None))
        except BaseException as exc:  # handed to the consumer
            pipe.put(("error", exc))

    thread = threading.Thread(target=produce, name="accelkit-camera-reader", daemon=True)
    thread.start()
    try:
        while True:
            kind, item = pipe.get()
            if kind == "end":
                return
            if kind == "error":
                raise item
            yield item
    finally:
        stop.set()
        thread.join(timeout=5)
