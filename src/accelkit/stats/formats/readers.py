"""Reading one file's columns as numpy rows: parquet (pyarrow, column projection, record batches),
.npz and .npy; each LeRobot column checked against the dtype and width its `info.json` declares.
`stats/formats/sources.py` builds streams of chunks over many files on top of this."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from accelkit.errors import DataError
from accelkit.runtime import storage
from accelkit.stats.formats import lerobot
from accelkit.stats.formats.lerobot import check_feature
from accelkit.stats.types import integer_rows, row_dtype

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fragment:
    path: Path
    num_rows: int
    row_offset: int  # global row index of the fragment's first row
    # rows as the dataset's metadata lists them, checked against the file's footer when it is read
    # (a listing from metadata opens no file; each reader, or each Ray task, checks its own)
    listed: bool = False


# --- reading one file -------------------------------------------------------------------------


def parquet_names(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    source, filesystem = storage.arrow_source(path)
    try:
        return list(pq.read_schema(source, filesystem=filesystem).names)
    except Exception as exc:
        raise DataError(
            f"{path} is not a readable parquet file ({type(exc).__name__}: {exc}); re-export it, or restore it from a copy"
        ) from exc


def _parquet_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    source, filesystem = storage.arrow_source(path)
    try:
        return pq.ParquetFile(source, filesystem=filesystem).metadata.num_rows
    except Exception as exc:
        raise DataError(
            f"{path} is not a readable parquet file ({type(exc).__name__}: {exc}); re-export it, or restore it from a copy"
        ) from exc


def open_parquet(path: Path):
    """`pq.ParquetFile` of a local or object-storage path. A local file is read without
    pyarrow's pre-buffering (its default, which coalesces ranged requests for object storage):
    on a page-cached local disk it only adds a copy of every column chunk and an I/O thread hop,
    which costs CPU on LeRobot datasets of few large files and of many small ones. A local file is opened
    directly (`pa.OSFile`, closed with the reader), not through pyarrow's file-system lookup
    (a LocalFileSystem and a stat per file: a share of each small file's read worth saving)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source, filesystem = storage.arrow_source(path)
    if filesystem is None:
        return pq.ParquetFile(pa.OSFile(str(source)), pre_buffer=False)
    return pq.ParquetFile(source, filesystem=filesystem, pre_buffer=True)


def arrow_values(array) -> np.ndarray:
    """A null-free numeric or boolean pyarrow array as numpy, read from its buffers.

    (`Array.to_numpy` imports pandas, a tenth of a second at every start of the command.)
    """
    import pyarrow as pa

    kind = array.type
    data = array.buffers()[1]
    if data is None or not len(array):
        return np.zeros(0, np.bool_ if pa.types.is_boolean(kind) else arrow_value_dtype(kind))
    if pa.types.is_boolean(kind):
        bits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")
        return bits[array.offset : array.offset + len(array)].astype(np.bool_)
    dtype = np.dtype(arrow_value_dtype(kind))
    return np.frombuffer(data, dtype, count=len(array), offset=array.offset * dtype.itemsize)


def arrow_column_rows(
    column, where: str, first_row: int = 0, warn_float64: bool = True
) -> np.ndarray:
    """A pyarrow column of fixed-size lists, lists or scalars as a [rows, D] array: int64 for
    integers wider than 16 bits (kept exact), float32 otherwise. `first_row`: the file's row
    number of the column's first row (a piece of a file), for the messages."""
    import pyarrow as pa

    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if array.null_count:
        first = int(np.flatnonzero(~np.asarray(array.is_valid()))[0])
        raise DataError(
            f"{where} is null at row {first_row + first}; fill or drop the missing rows"
        )
    kind = array.type
    if pa.types.is_fixed_size_list(kind):
        width = kind.list_size
        # its child's rows of this piece (no nulls, checked above): `flatten` is the same through
        # pyarrow.compute's Python wrapper, a cost per column per file
        values = array.values.slice(array.offset * width, len(array) * width)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        offsets = np.asarray(array.offsets)
        lengths = np.diff(offsets)
        if len(lengths) and np.any(lengths != lengths[0]):
            row = int(np.flatnonzero(lengths != lengths[0])[0])
            raise DataError(
                f"{where} is ragged: row {first_row + row} has {lengths[row]} values but row "
                f"{first_row} has {lengths[0]}; every row must have the same width"
            )
        width = int(lengths[0]) if len(lengths) else 0
        values = array.flatten()
    else:
        width, values = 1, array
    if values.null_count:
        raise DataError(
            f"{where} holds null values inside its rows; fill them before computing statistics"
        )
    inner = values.type
    if not (
        pa.types.is_floating(inner) or pa.types.is_integer(inner) or pa.types.is_boolean(inner)
    ):
        raise DataError(f"{where} holds {inner} values, not numbers; choose a numeric column")
    flat = arrow_values(values)
    if row_dtype(flat.dtype) == np.int64:
        return integer_rows(flat, where).reshape(-1, max(width, 1))
    if (
        warn_float64
        and flat.dtype == np.float64
        and len(flat)
        and not np.array_equal(flat.astype(np.float32).astype(np.float64), flat, equal_nan=True)
    ):
        log.warning("%s is float64; statistics are computed on its float32 rounding", where)
    return np.ascontiguousarray(flat, dtype=np.float32).reshape(-1, max(width, 1))


def _numpy_rows(array: np.ndarray, where: str) -> np.ndarray:
    if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
        raise DataError(f"{where} holds {array.dtype} values, not numbers; choose a numeric array")
    if array.ndim == 0:
        raise DataError(f"{where} is a scalar, not rows of values")
    rows = array.reshape(-1, 1) if array.ndim == 1 else array.reshape(-1, array.shape[-1])
    if row_dtype(rows.dtype) == np.int64:
        return integer_rows(rows, where)
    return rows if rows.dtype == np.float32 else rows.astype(np.float32)


_VALUE_DTYPES: dict = {}  # arrow type -> arrow_value_dtype's answer (asked per column per file)


def arrow_value_dtype(kind) -> str:
    """numpy dtype name of the values of a scalar or (fixed-size) list arrow type."""
    known = _VALUE_DTYPES.get(kind)
    if known is not None:
        return known
    import pyarrow as pa

    inner = kind
    while (
        pa.types.is_list(inner)
        or pa.types.is_large_list(inner)
        or pa.types.is_fixed_size_list(inner)
    ):
        inner = inner.value_type
    try:
        name = np.dtype(inner.to_pandas_dtype()).name
    except (NotImplementedError, TypeError):
        name = str(inner)
    _VALUE_DTYPES[kind] = name
    return name


def huge_row_groups(metadata, rows: int) -> bool:
    """Whether a file's row groups hold many pieces of `rows` rows each (a file written as one
    row group, as pandas or a plain `pq.write_table` writes it): its columns then decode in
    pyarrow's threads, so the first piece is not one thread's decode of the file's biggest
    column. Else threads off: files are read in parallel by the stream's prefetch pool, and a
    LeRobot file's row group per episode is a piece's small part."""
    groups = metadata.num_row_groups
    return bool(groups) and metadata.num_rows > 2 * rows * groups


class FileReader:
    """Reads named columns (and `episode_index` where present) from one file of a known kind.

    `features` (a LeRobot info.json's) are checked against every parquet column read: dtype and
    values per row must be what the metadata declares.
    """

    def __init__(self, features: Mapping[str, dict] | None = None):
        self.features = dict(features or {})

    def _check_dtypes(self, schema, wanted: list[str], path: Path) -> None:
        for c in wanted:
            if c in self.features:
                lerobot.check_dtype(
                    c, self.features[c], arrow_value_dtype(schema.field(c).type), str(path)
                )

    def names(self, path: Path) -> list[str]:
        suffix = path.suffix
        if suffix == ".parquet":
            return parquet_names(path)
        if suffix == ".npz":
            try:
                with np.load(
                    path.open_binary() if isinstance(path, storage.ObjectPath) else path
                ) as archive:
                    return list(archive.files)
            except Exception as exc:
                raise DataError(
                    f"{path} is not a readable .npz file ({exc}); re-export it, or restore it from a copy"
                ) from exc
        return [path.stem]

    def num_rows(self, path: Path, first_name: str) -> int:
        if path.suffix == ".parquet":
            return _parquet_rows(path)
        array = self._numpy_array(path, first_name)
        return (
            1
            if array.ndim == 0
            else int(np.prod(array.shape[:-1]))
            if array.ndim > 1
            else len(array)
        )

    def _numpy_array(self, path: Path, name: str) -> np.ndarray:
        try:
            if isinstance(path, storage.ObjectPath):
                path_or_file = path.open_binary()
                if path.suffix == ".npy":
                    return np.load(path_or_file)
            else:
                path_or_file = path
                if path.suffix == ".npy":
                    return np.load(path, mmap_mode="r")
            with np.load(path_or_file) as archive:
                return archive[name]
        except Exception as exc:
            raise DataError(
                f"{path} is not a readable {path.suffix} file ({exc}); re-export it, or restore it from a copy"
            ) from exc

    def read(
        self, path: Path, columns: list[str]
    ) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
        if path.suffix == ".parquet":
            try:
                # ParquetFile, not read_table: no dataset discovery, half the cost per small file
                parquet = open_parquet(path)
                names = set(parquet.schema_arrow.names)
                wanted = [c for c in columns if c in names]
                with_episodes = "episode_index" in names
                # threads off: files are already read in parallel by the stream's prefetch pool
                table = parquet.read(
                    columns=wanted + (["episode_index"] if with_episodes else []), use_threads=False
                )
            except Exception as exc:
                raise DataError(
                    f"{path} is not a readable parquet file ({type(exc).__name__}: {exc}); re-export it, or restore it from a copy"
                ) from exc
            self._check_dtypes(table.schema, wanted, path)
            out = {c: arrow_column_rows(table.column(c), f"{path} column {c!r}") for c in wanted}
            for c in wanted:
                if c in self.features:
                    check_feature(
                        c,
                        self.features[c],
                        arrow_value_dtype(table.schema.field(c).type),
                        out[c].shape[1],
                        str(path),
                    )
            episodes = (
                np.asarray(arrow_values(table.column("episode_index").combine_chunks()), np.int64)
                if with_episodes
                else None
            )
            return out, episodes
        if path.suffix == ".npy":
            return {path.stem: _numpy_rows(self._numpy_array(path, path.stem), f"{path}")}, None
        out = {}
        for c in columns:
            out[c] = _numpy_rows(self._numpy_array(path, c), f"{path} array {c!r}")
        return out, None

    def read_pieces(
        self, path: Path, columns: list[str], rows: int, listed_rows: int | None = None
    ) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray | None]]:
        """`read`, in order, about `rows` rows at a time: a parquet file by record batches (the
        first arrives while the rest is still being decoded), other files whole. `listed_rows`:
        what the dataset's metadata says the file holds, checked against its footer first."""
        if path.suffix != ".parquet":
            yield self.read(path, columns)
            return
        try:
            parquet = open_parquet(path)
            if listed_rows is not None:
                lerobot.check_rows(path, parquet.metadata.num_rows, listed_rows)
            schema = parquet.schema_arrow
            wanted = [c for c in columns if c in schema.names]
            with_episodes = "episode_index" in schema.names
            batches = parquet.iter_batches(
                batch_size=rows,
                columns=wanted + (["episode_index"] if with_episodes else []),
                use_threads=huge_row_groups(parquet.metadata, rows),
            )
            first_row = 0
            while True:
                try:
                    batch = next(batches)
                except StopIteration:
                    break
                except Exception as exc:
                    raise DataError(
                        f"{path} is not a readable parquet file ({type(exc).__name__}: {exc}); "
                        "re-export it, or restore it from a copy"
                    ) from exc
                if first_row == 0:  # the file's schema, once it proved readable
                    self._check_dtypes(schema, wanted, path)
                out = {
                    c: arrow_column_rows(
                        batch.column(c), f"{path} column {c!r}", first_row, first_row == 0
                    )
                    for c in wanted
                }
                for c in wanted:
                    if c in self.features:
                        check_feature(
                            c,
                            self.features[c],
                            arrow_value_dtype(schema.field(c).type),
                            out[c].shape[1],
                            str(path),
                        )
                episodes = (
                    np.asarray(arrow_values(batch.column("episode_index")), np.int64)
                    if with_episodes
                    else None
                )
                first_row += batch.num_rows
                yield out, episodes
        except DataError:
            raise
        except Exception as exc:
            raise DataError(
                f"{path} is not a readable parquet file ({type(exc).__name__}: {exc}); re-export it, or restore it from a copy"
            ) from exc


# --- weights: sampling and action chunks ------------------------------------------------------


def episode_rows(source: lerobot.Source, wanted: dict[int, set[str]], progress=None):
    """(episode, feature, rows [n, D] in the dtype the data holds) for the wanted episodes'
    features, reading each data file that holds one once (only those columns); `progress(done,
    total, file name)` before each file."""
    import pyarrow.parquet as pq

    by_file: dict[Path, list[int]] = {}
    for episode in source.layout.episodes if source.layout is not None else []:
        if episode.index in wanted:
            by_file.setdefault(episode.file, []).append(episode.index)
    for number, (path, episodes) in enumerate(by_file.items()):
        if progress is not None:
            progress(number, len(by_file), path.name)
        features = sorted(set().union(*(wanted[e] for e in episodes)))
        table = pq.read_table(path, columns=sorted({*features, "episode_index"}))
        owner = arrow_values(table.column("episode_index").combine_chunks())
        columns = {}
        for name in features:
            array = table.column(name).combine_chunks()
            nested = hasattr(array, "flatten")  # a list per row; else a scalar per row
            values = arrow_values(array.flatten() if nested else array)
            columns[name] = values.reshape(len(array), -1) if len(array) else values.reshape(0, 1)
        for episode in episodes:
            rows = owner == episode
            for name in sorted(wanted[episode]):
                yield episode, name, columns[name][rows]
