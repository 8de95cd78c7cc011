"""The vocabulary of `accelkit stats`: what flows into the driver (chunks of columns from a
`Stream`) and what comes out (`KeyStats` per key, a `RunSummary`). Sources, formats, episodes and the
driver all import from here; nothing here imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accelkit.errors import DataError

# --- what flows in --------------------------------------------------------------------------


@dataclass
class Column:
    """Rows of one output key within a chunk: values [R, D], integer weights [R], global row ids [R],
    and each row's episode index [R] where the source knows it."""

    values: np.ndarray
    weight: np.ndarray
    row_id: np.ndarray
    episode: np.ndarray | None = None


Chunk = Mapping[str, Column]


class Stream:
    """A re-iterable supply of chunks. Sources subclass it; `from_batches` wraps dict batches."""

    total_rows: int | None = None
    # reading it again gives the same rows at the cost of reading (files): exact mode then keeps
    # no copy of pass 1's chunks, and reads it again where a later pass is needed
    rereadable: bool = False

    def chunks(self) -> Generator[Chunk, None, None]:
        raise NotImplementedError

    def describe_row(self, key: str, row_id: int) -> str:
        return f"row {row_id}"

    def column_name(self, key: str) -> str:
        return key

    def freeze(self) -> None:
        """After exact mode's first pass (a `replay.Recording` replays it from then on)."""


class BatchStream(Stream):
    """Dict batches from a re-iterable (a list, a DataLoader, a callable returning an iterator).

    Every leading axis is flattened, so action chunks (B, H, D) count each of their H actions.
    """

    def __init__(
        self,
        batches: Iterable[Mapping[str, object]] | Callable[[], Iterable],
        keys: Mapping[str, str] | None = None,
    ):
        if isinstance(batches, Iterator):
            raise DataError(
                "batches is a one-shot iterator, but statistics read the data more than once; "
                "pass a list, a DataLoader, or a function that returns a new iterator"
            )
        self._batches = batches
        self._keys = dict(keys) if keys else None

    def chunks(self) -> Generator[Chunk, None, None]:
        source = self._batches() if callable(self._batches) else self._batches
        row = 0
        for index, batch in enumerate(source):
            if not isinstance(batch, Mapping):
                raise DataError(f"batch {index} is a {type(batch).__name__}, not a dict of arrays")
            keys = self._keys or {k: k for k in batch}
            chunk = {}
            rows = None
            for out, name in keys.items():
                if name not in batch:
                    raise DataError(
                        f"batch {index} has no key {name!r}; keys present: {', '.join(map(str, batch))}"
                    )
                values = as_rows(batch[name], f"batch {index} key {name!r}")
                rows = len(values)
                chunk[out] = Column(
                    values, np.ones(rows, np.int32), np.arange(row, row + rows, dtype=np.int64)
                )
            row += rows or 0
            yield chunk


def row_dtype(dtype: np.dtype | str) -> np.dtype:
    """The type statistics are computed in: int64 for integers wider than 16 bits (exact beyond
    float32's 2**24), float32 for everything else (bool and small integers are exact in it)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu" and dtype.itemsize > 2:
        return np.dtype(np.int64)
    return np.dtype(np.float32)


def integer_rows(values: np.ndarray, what: str) -> np.ndarray:
    """`values` as int64, refusing uint64 values that int64 cannot hold."""
    if values.dtype == np.uint64 and values.size and values.max() > np.iinfo(np.int64).max:
        raise DataError(
            f"{what} holds unsigned values above 2**63 - 1, which accelkit cannot compute exactly"
        )
    return np.ascontiguousarray(values, dtype=np.int64)


def as_rows(array: Any, what: str) -> np.ndarray:
    """A float32 (or int64, see `row_dtype`) [rows, D] array of an array-like: leading axes
    flattened, scalars per row -> D=1."""
    if hasattr(array, "detach"):  # torch tensors: may need grad, live on a GPU, or be bfloat16
        tensor = array.detach().cpu()
        array = (tensor.float() if tensor.is_floating_point() else tensor).numpy()
    try:
        values = np.asarray(array)
    except Exception as exc:  # ragged python lists, objects numpy cannot stack
        raise DataError(
            f"{what} cannot be read as a numeric array ({exc}); rows must all have the same width"
        ) from exc
    if values.dtype == object or not (
        np.issubdtype(values.dtype, np.number) or values.dtype == bool
    ):
        raise DataError(f"{what} holds {values.dtype} values, not numbers; choose a numeric column")
    if values.ndim == 0:
        raise DataError(f"{what} is a scalar, not rows of values")
    if values.shape[-1] == 0 and values.ndim > 1:
        raise DataError(f"{what} has rows of width 0; choose a column that holds values")
    values = values.reshape(-1, 1) if values.ndim == 1 else values.reshape(-1, values.shape[-1])
    if row_dtype(values.dtype) == np.int64:
        return integer_rows(values, what)
    return np.ascontiguousarray(values, dtype=np.float32)


# --- what flows out ---------------------------------------------------------------------------


@dataclass
class KeyStats:
    """Per-dimension statistics of one key."""

    count: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray
    quantiles: dict[float, np.ndarray]
    nonfinite: np.ndarray
    rank_error_bound: dict[float, np.ndarray] | None = None  # fast mode only
    # the pass's own histogram as bars per dimension (`histograms.Histogram`): what a figure of
    # the distribution is drawn from, with no second read of the data
    histogram: object | None = None

    @property
    def dim(self) -> int:
        return len(self.mean)


@dataclass
class RunSummary:
    mode: str
    platform: str
    devices: list[str]
    batch_size: int
    passes: int
    rows: int
    seconds: float
    peak_rss_bytes: int
    peak_device_bytes: int | None
    partial: bool
    compiles: int
    pass_seconds: list[float] = field(default_factory=list)
    cluster: dict | None = None  # with Ray: tasks, bytes sent and returned, driver merge seconds

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else float("nan")


@dataclass
class StatsResult:
    stats: dict[str, KeyStats]
    summary: RunSummary
    episodes: list | None = None  # [episodes.EpisodeResult] when asked for per-episode statistics
    cameras: object | None = None  # cameras.CameraResult when camera features were computed
