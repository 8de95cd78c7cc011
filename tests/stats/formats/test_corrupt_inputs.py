"""Bad input generated: the stats readers fed mutated copies of real files (Parquet
episodes of a sample dataset; norm_stats.json and LeRobot stats.json), seeded. Whatever the
mutation, a command either exits 2 with one line that names the file, or gives the numbers of
what the file really holds; never a traceback (exit 1), never numbers from a file that does not
read whole.

The oracles are independent of accelkit: pyarrow reads each mutated Parquet file on its own
(numbers then come from numpy float64 over what it read), and a validator written here says
whether a mutated statistics file is still one (JSON as Python writes it, features as mappings,
every statistic numbers); one that still is may be compared (exit 0 or 3: `stats diff` reports
NaN, a missing statistic or another width as findings: docs/stats.md, stats diff)."""

import contextlib
import io
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from accelkit.cli import main
from accelkit.stats.formats.synthetic import write_sample_dataset
from tests.support.cli import run_cli

DIM = 3
EPISODE = "data/chunk-000/episode_000001.parquet"  # the file every Parquet mutation hits
COLUMNS = {"state": "observation.state", "actions": "action"}
CASES_PER_KIND = 6  # seeded cases of each byte-level mutation (benchmarks/ has no longer run)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_sample_dataset(
        tmp_path_factory.mktemp("corrupt") / "ds", episodes=3, frames_per_episode=40, dim=DIM
    )


@pytest.fixture(scope="module")
def stats_files(dataset, tmp_path_factory):
    """The exact norm_stats.json and LeRobot stats.json of the dataset, as accelkit writes them."""
    folder = tmp_path_factory.mktemp("stats-files")
    files = {}
    for fmt, name in (("openpi", "norm_stats.json"), ("lerobot", "stats.json")):
        files[fmt] = folder / name
        command = ["stats", str(dataset), "--format", fmt, "-o", str(files[fmt]), "--no-progress"]
        with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit) as exited:
            main(command)
        assert exited.value.code == 0
    return files


# -- mutations, seeded ------------------------------------------------------------------------


def flip_bytes(data: bytes, rng: np.random.Generator) -> bytes:
    out = bytearray(data)
    for position in rng.choice(len(out), size=int(rng.integers(1, 9)), replace=False):
        out[position] ^= int(rng.integers(1, 256))
    return bytes(out)


def truncate(data: bytes, rng: np.random.Generator) -> bytes:
    return data[: int(rng.integers(0, len(data)))]


def wrong_footer(data: bytes, rng: np.random.Generator) -> bytes:
    """A Parquet file ends with the footer's length (4 bytes, little-endian) and b"PAR1"."""
    choice = int(rng.integers(3))
    if choice == 0:  # the magic
        return data[:-4] + bytes(rng.integers(0, 256, 4, dtype=np.uint8))
    if choice == 1:  # the footer's length
        length = int(rng.integers(0, 2**32))
        return data[:-8] + length.to_bytes(4, "little") + data[-4:]
    footer = int.from_bytes(data[-8:-4], "little")  # the footer's bytes, scrambled
    start = len(data) - 8 - footer
    body = bytes(rng.integers(0, 256, footer, dtype=np.uint8))
    return data[:start] + body + data[-8:]


def wrong_schema(table: pa.Table, kind: str) -> pa.Table:
    """The same rows under a schema the dataset's info.json does not describe."""
    column = table.column("observation.state")
    index = table.schema.get_field_index("observation.state")
    if kind == "renamed":
        return table.rename_columns(
            ["state" if n == "observation.state" else n for n in table.column_names]
        )
    if kind == "dropped":
        return table.remove_column(index)
    if kind == "strings":
        values = [[str(v) for v in row] for row in column.to_pylist()]
        return table.set_column(index, "observation.state", pa.array(values))
    if kind == "wider":
        values = [[*row, 0.0] for row in column.to_pylist()]
        return table.set_column(
            index, "observation.state", pa.array(values, pa.list_(pa.float32(), DIM + 1))
        )
    if kind == "ragged":
        values = [row[: 1 + i % DIM] for i, row in enumerate(column.to_pylist())]
        return table.set_column(index, "observation.state", pa.array(values))
    if kind == "nulls":
        return table.set_column(
            index, "observation.state", pa.nulls(len(table), pa.list_(pa.float32(), DIM))
        )
    if kind == "scalar":
        values = [row[0] for row in column.to_pylist()]
        return table.set_column(index, "observation.state", pa.array(values, pa.float32()))
    if kind == "no rows":
        return table.slice(0, 0)
    raise AssertionError(kind)


SCHEMA_KINDS = ["renamed", "dropped", "strings", "wider", "ragged", "nulls", "scalar", "no rows"]


def readable(path: Path) -> pa.Table | None:
    """The table pyarrow reads from `path` on its own, or None where it cannot."""
    try:
        return pq.read_table(path)
    except Exception:
        return None


def assert_one_line_naming(code: int, err: str, *names: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (code, err[-2000:])
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error: "), err
    assert any(name in lines[0] for name in names), (names, lines[0])


# -- Parquet ------------------------------------------------------------------------------------


def _expected(folder: Path) -> dict[str, dict[str, np.ndarray]] | None:
    """numpy float64 over what pyarrow reads of every episode (None if one does not read)."""
    tables = [readable(p) for p in sorted((folder / "data").rglob("*.parquet"))]
    if any(t is None for t in tables):
        return None
    out = {}
    for key, column in COLUMNS.items():
        if any(column not in t.column_names for t in tables):
            return None
        try:
            rows = np.concatenate(
                [np.asarray(t.column(column).to_pylist(), np.float64) for t in tables]
            )
        except (TypeError, ValueError):
            return None
        if rows.ndim != 2 or not np.isfinite(rows).all():
            return None
        out[key] = {"mean": rows.mean(0), "min": rows.min(0), "max": rows.max(0)}
    return out


def _compute_on(folder: Path, tmp_path: Path, capsys):
    output = tmp_path / "out.json"
    code, _, err = run_cli(["stats", str(folder), "-o", str(output), "--no-progress"], capsys)
    return code, err, output


def _check_parquet_case(dataset: Path, tmp_path: Path, capsys, data: bytes, label: str) -> str:
    folder = tmp_path / label
    shutil.copytree(dataset, folder)
    target = folder / EPISODE
    target.write_bytes(data)
    code, err, output = _compute_on(folder, tmp_path, capsys)
    assert code != 1 and "Traceback" not in err, (label, err[-3000:])
    if code == 2:
        assert_one_line_naming(code, err, str(target), EPISODE, target.name)
        outcome = "refused"
    else:
        assert code == 0, (label, code, err)
        expected = _expected(folder)
        assert expected is not None, f"{label}: numbers from a file pyarrow cannot read whole"
        written = json.loads(output.read_text())["norm_stats"]
        for key, reference in expected.items():
            np.testing.assert_allclose(written[key]["mean"], reference["mean"], rtol=1e-9)
            np.testing.assert_array_equal(written[key]["min"], reference["min"].astype(np.float32))
            np.testing.assert_array_equal(written[key]["max"], reference["max"].astype(np.float32))
        outcome = "read"
    shutil.rmtree(folder)
    return outcome


@pytest.mark.parametrize("mutate", [flip_bytes, truncate, wrong_footer], ids=lambda f: f.__name__)
def test_mutated_parquet_is_refused_naming_the_file_or_read_exactly(
    dataset, tmp_path, capsys, mutate
):
    original = (dataset / EPISODE).read_bytes()
    outcomes = []
    for seed in range(CASES_PER_KIND):
        rng = np.random.default_rng([47, seed])
        mutated = mutate(original, rng)
        outcomes.append(
            _check_parquet_case(dataset, tmp_path, capsys, mutated, f"{mutate.__name__}-{seed}")
        )
    print(mutate.__name__, outcomes)
    if mutate is not flip_bytes:  # a flip inside a page may still decode: then it is read
        assert set(outcomes) == {"refused"}


@pytest.mark.parametrize("kind", SCHEMA_KINDS)
def test_parquet_of_a_wrong_schema_is_refused_naming_the_file(dataset, tmp_path, capsys, kind):
    table = wrong_schema(pq.read_table(dataset / EPISODE), kind)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    outcome = _check_parquet_case(dataset, tmp_path, capsys, sink.getvalue().to_pybytes(), kind)
    assert outcome == "refused", kind


# -- statistics files ---------------------------------------------------------------------------


def _numbers(value) -> bool:
    """A number or (nested) lists of them. NaN and Infinity count: `stats diff` reports a stored
    NaN as a finding ("not a number stored"), as it reports a missing statistic or another width;
    true/false count too (LeRobot writes a boolean feature's min and max as booleans)."""
    if isinstance(value, list):
        return len(value) > 0 and all(_numbers(v) for v in value)
    return isinstance(value, (int, float))


def still_statistics(text: str, fmt: str) -> bool:
    """Independent validator: is `text` still a statistics file (if not, no number may be read
    from it)? Python's JSON (as LeRobot and numpy write it), features as mappings of statistics,
    each statistic null (left out) or numbers."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return False
    if not isinstance(document, dict):
        return False
    if fmt == "openpi":
        features = document.get("norm_stats")
        if not isinstance(features, dict):
            return False
    else:
        features = document
        if not features or any(not isinstance(v, dict) for v in features.values()):
            return False  # (then it is not a LeRobot stats.json either)
    for feature in features.values():
        if not isinstance(feature, dict):
            return False
        if any(value is not None and not _numbers(value) for value in feature.values()):
            return False
    return True


REPLACEMENTS = ["text", None, {}, [], True, [1.0], ["x"] * DIM, [None] * DIM, {"a": 1}]


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _paths(inner, (*prefix, i))


def restructure(text: str, rng: np.random.Generator) -> str:
    """Replace one value anywhere in the document by a value of another shape, delete a key,
    or write a NaN / Infinity (not JSON, yet Python's json module writes and reads it)."""
    document = json.loads(text)
    paths = [p for p in _paths(document) if p]
    if rng.integers(2):  # as often a feature or a statistic as a number inside one
        paths = [p for p in paths if not isinstance(p[-1], int)]
    path = paths[int(rng.integers(len(paths)))]
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    choice = int(rng.integers(4))
    if choice == 0 and isinstance(parent, dict):
        del parent[path[-1]]
    elif choice == 1:
        parent[path[-1]] = [math.nan, math.inf, -math.inf][int(rng.integers(3))]
    else:
        parent[path[-1]] = REPLACEMENTS[int(rng.integers(len(REPLACEMENTS)))]
    return json.dumps(document)


def _text_cases(text: str, kind: str, seed: int) -> str:
    rng = np.random.default_rng([47, 2, seed])
    if kind == "flip":
        return flip_bytes(text.encode(), rng).decode("utf-8", "replace")
    if kind == "truncate":
        return text[: int(rng.integers(0, len(text)))]
    return restructure(text, rng)


STATS_KINDS = ["flip", "truncate", "restructure"]


@pytest.mark.parametrize("kind", STATS_KINDS)
@pytest.mark.parametrize("fmt", ["openpi", "lerobot"])
def test_mutated_statistics_files_are_refused_naming_the_file(
    dataset, stats_files, tmp_path, capsys, fmt, kind
):
    """`stats diff GOOD MUTATED` and (norm_stats.json) `stats check DATASET --stats MUTATED`."""
    good = stats_files[fmt]
    text = good.read_text()
    outcomes = {"refused": 0, "compared": 0}
    for seed in range(CASES_PER_KIND * 2):
        mutated_text = _text_cases(text, kind, seed)
        mutated = tmp_path / f"{kind}-{seed}" / good.name
        mutated.parent.mkdir()
        mutated.write_text(mutated_text)
        commands = [["stats", "diff", str(good), str(mutated)]]
        if fmt == "openpi":
            commands.append(["stats", "check", str(dataset), "--stats", str(mutated)])
        valid = still_statistics(mutated_text, fmt)
        for command in commands:
            code, _, err = run_cli(
                [*command, "--no-progress"] if "check" in command else command, capsys
            )
            assert code != 1 and "Traceback" not in err, (command, mutated_text[:300], err[-3000:])
            if not valid:
                assert_one_line_naming(code, err, str(mutated))
                outcomes["refused"] += 1
            else:
                assert code in (0, 2, 3), (command, code, err)
                outcomes["compared"] += 1
    print(fmt, kind, outcomes)


# -- the cases the mutations found, reduced ---------------------------------------------------


def test_a_library_message_with_a_line_break_is_still_one_line(dataset, tmp_path, capsys):
    """A scrambled footer: pyarrow's message ("Couldn't deserialize thrift: ... Invalid data\\n")
    ends in a line break, and the error took two lines."""
    data = (dataset / EPISODE).read_bytes()
    footer = int.from_bytes(data[-8:-4], "little")
    scrambled = data[: len(data) - 8 - footer] + b"\xff" * footer + data[-8:]
    assert _check_parquet_case(dataset, tmp_path, capsys, scrambled, "footer") == "refused"


@pytest.mark.parametrize(
    ("fmt", "change", "why"),
    [
        ("openpi", lambda d: d["norm_stats"]["state"]["mean"].__setitem__(0, "x"), "numbers"),
        ("lerobot", lambda d: d["action"]["std"].__setitem__(1, [1.0, "y"]), "numbers"),
        ("lerobot", lambda d: d["action"].__setitem__("min", {"a": 1}), "numbers"),
        # numpy reads a null among numbers as NaN: `stats diff` compared it (exit 3)
        ("openpi", lambda d: d["norm_stats"]["actions"]["q99"].__setitem__(1, None), "null"),
        ("lerobot", lambda d: d["action"]["mean"].__setitem__(0, None), "null"),
    ],
    ids=["openpi-string", "lerobot-string", "lerobot-object", "openpi-null", "lerobot-null"],
)
def test_a_damaged_file_is_refused_by_its_path(stats_files, tmp_path, capsys, fmt, change, why):
    """Were named by the file's name only ("norm_stats.json: 'state'.mean ..."): with A and B
    both called norm_stats.json, the message did not say which of the two was damaged."""
    good = stats_files[fmt]
    document = json.loads(good.read_text())
    change(document)
    mutated = tmp_path / good.name  # the same name as the good file: only the path tells them
    mutated.write_text(json.dumps(document))
    code, _, err = run_cli(["stats", "diff", str(good), str(mutated)], capsys)
    assert_one_line_naming(code, err, str(mutated))
    assert why in err, err


def test_check_names_a_damaged_norm_stats_file_by_its_path(dataset, stats_files, tmp_path, capsys):
    document = json.loads(stats_files["openpi"].read_text())
    document["norm_stats"]["actions"]["std"] = ["x"] * DIM
    mutated = tmp_path / "norm_stats.json"
    mutated.write_text(json.dumps(document))
    code, _, err = run_cli(
        ["stats", "check", str(dataset), "--stats", str(mutated), "--no-progress"], capsys
    )
    assert_one_line_naming(code, err, str(mutated))
