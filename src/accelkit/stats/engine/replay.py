"""Decode once, read twice: the chunks of exact mode's first pass, kept for the later passes.

Exact mode makes two (sometimes more) passes over the same rows. Reading and decoding parquet is
most of a pass's cost on a CPU, so `Recording` keeps every chunk the first pass consumed: in memory
up to a budget, and beyond it in an anonymous temporary file (unlinked at creation, so it disappears
with the process even on a crash), read back chunk by chunk into fresh buffers — resident memory stays
at the budget plus one chunk, whatever the dataset's size. Later passes replay exactly the chunks
pass 1 consumed, in the same order (a pass stopped by a time budget replays what it saw).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Generator, Iterator

import numpy as np

from accelkit.stats.types import Chunk, Column, Stream

DEFAULT_BUDGET_FRACTION = 0.25  # of the memory available when the run starts
MAX_BUDGET_BYTES = 32 << 20  # more in memory was no faster (quiet, 2.19M frames, both layouts)


def default_budget_bytes() -> int:
    """A quarter of available memory, at most 32 MiB (beyond it, a file: memory stays bounded)."""
    available = None
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if available is None:
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    return int(min(MAX_BUDGET_BYTES, available * DEFAULT_BUDGET_FRACTION))


class _Spill:
    """An unlinked temporary file of arrays, appended once and read back by offset."""

    def __init__(self, folder: str | None):
        # lives across passes; closed by close()
        self.handle = tempfile.TemporaryFile(dir=folder, prefix="accelkit-stats-")  # noqa: SIM115
        self.size = 0

    def put(self, array: np.ndarray) -> tuple[int, tuple, np.dtype]:
        array = np.ascontiguousarray(array)
        offset = self.size
        self.handle.write(array.data.cast("B"))
        self.size += array.nbytes
        return offset, array.shape, array.dtype

    def get(self, offset: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
        self.handle.flush()  # reads go to the descriptor: nothing may wait in Python's buffer
        out = np.empty(shape, dtype)
        view = out.data.cast("B")
        done = 0
        while done < len(view):
            n = os.preadv(self.handle.fileno(), [view[done:]], offset + done)
            if n <= 0:
                raise OSError("the statistics spill file ended early")
            done += n
        return out

    def close(self) -> None:
        self.handle.close()


class Recording(Stream):
    """Wraps a stream: `chunks()` reads it and records every chunk it yields, until `freeze()`;
    after that, `chunks()` replays the last recording instead of reading.

    The driver freezes after a successful first pass, so a pass that is retried (out of memory)
    records afresh, and a pass stopped early (time budget) leaves exactly what it consumed.
    """

    def __init__(self, source: Stream, budget_bytes: int | None = None, folder: str | None = None):
        self.source = source
        self.total_rows = source.total_rows
        self.budget = default_budget_bytes() if budget_bytes is None else int(budget_bytes)
        self.folder = folder or os.environ.get("ACCELKIT_SPILL_DIR")
        self.entries: list | None = None  # the frozen recording
        self._last: list | None = None
        self.memory_bytes = 0
        self.spilled_bytes = 0
        self._spill: _Spill | None = None

    def describe_row(self, key: str, row_id: int) -> str:
        return self.source.describe_row(key, row_id)

    def column_name(self, key: str) -> str:
        return self.source.column_name(key)

    def chunks(self) -> Generator[Chunk, None, None]:
        if self.entries is not None:
            yield from self._replay()
            return
        self._reset()
        entries: list = []
        self._last = entries
        for chunk in self.source.chunks():
            entries.append(self._keep(chunk))
            yield chunk

    def freeze(self) -> None:
        """From now on replay the chunks the last `chunks()` yielded."""
        self.entries = self._last if self._last is not None else []

    def _keep(self, chunk) -> dict:
        kept = {}
        for key, column in chunk.items():
            rows = len(column.weight)
            # the usual weights (all 1) and row ids (consecutive) are stored as two numbers
            ones = bool(np.all(column.weight == 1))
            start = int(column.row_id[0]) if rows else 0
            consecutive = rows == 0 or (
                int(column.row_id[-1]) - start == rows - 1
                and bool(np.all(np.diff(column.row_id) == 1))
            )
            arrays = [column.values]
            if not ones:
                arrays.append(column.weight)
            if not consecutive:
                arrays.append(column.row_id)
            size = sum(a.nbytes for a in arrays)
            shape = (rows, ones, consecutive, start)
            if self.memory_bytes + size <= self.budget:
                self.memory_bytes += size
                kept[key] = (shape, "memory", arrays)
            else:
                if self._spill is None:
                    self._spill = _Spill(self.folder)
                kept[key] = (shape, "spill", [self._spill.put(a) for a in arrays])
                self.spilled_bytes += size
        return kept

    def _replay(self) -> Iterator[dict[str, Column]]:
        assert self.entries is not None  # frozen
        for entry in self.entries:
            chunk = {}
            for key, ((rows, ones, consecutive, start), where, arrays) in entry.items():
                if where == "spill":
                    assert self._spill is not None  # `_keep` spilled these
                    arrays = [self._spill.get(*a) for a in arrays]
                arrays = list(arrays)
                values = arrays.pop(0)
                weight = np.ones(rows, np.int32) if ones else arrays.pop(0)
                row_id = (
                    np.arange(start, start + rows, dtype=np.int64) if consecutive else arrays.pop(0)
                )
                chunk[key] = Column(values, weight, row_id)
            yield chunk

    def _reset(self) -> None:
        self.close()
        self.memory_bytes = self.spilled_bytes = 0

    def close(self) -> None:
        """Drop the recording (memory and spill file)."""
        if self._spill is not None:
            self._spill.close()
            self._spill = None
        self.entries = self._last = None
