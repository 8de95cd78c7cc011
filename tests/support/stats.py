"""What the stats tests share: the LeRobot fixture datasets and a column of one read back, and the
references the engines are checked against (exact statistics in float64, the weighted quantile by
definition, adversarial columns, bit-identical results)."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FIXTURES = Path(__file__).parents[1] / "stats" / "fixtures"


def column_of(root: Path, column: str) -> np.ndarray:
    tables = [pq.read_table(f, columns=[column]) for f in listed_files(root)]
    values = [np.asarray(t.column(column).to_pylist()) for t in tables]
    rows = np.concatenate(values)
    return rows.reshape(len(rows), -1)


NAMED_LEVELS = {0.01: "q01", 0.1: "q10", 0.5: "q50", 0.9: "q90", 0.99: "q99"}  # LeRobot's


def exact_of(x: np.ndarray) -> dict:
    x64 = np.asarray(x, np.float64).reshape(len(x), -1)
    out = {
        "mean": x64.mean(axis=0),
        "std": x64.std(axis=0),
        "min": x64.min(axis=0),
        "max": x64.max(axis=0),
        "count": np.asarray([len(x64)], np.float64),
    }
    for q, name in NAMED_LEVELS.items():
        out[name] = np.quantile(x64, q, axis=0)
    return out


def adversarial_columns(rng, n):
    cols = {
        "gaussian": rng.standard_normal(n),
        "gripper": (rng.random(n) > 0.3).astype(float),
        "cauchy": rng.standard_cauchy(n),
        "mean_much_larger_than_std": 1e4 + 1e-2 * rng.standard_normal(n),
        "constant": np.full(n, 7.25),
        "signed_zeros": np.where(rng.random(n) > 0.5, 0.0, -0.0),
        "near_1e30": rng.choice([-1e30, 1e30, 3e29, -2.5e30], n) * (1 + 1e-3 * rng.random(n)),
        "ties": rng.integers(-3, 4, n).astype(float),
        "tiny_denormals": rng.standard_normal(n) * 1e-40,
        "all_negative": -np.exp(rng.standard_normal(n)),
    }
    return cols


def exact_reference(parts: list[np.ndarray], weights, levels) -> np.ndarray:
    """The weighted quantile by definition, in Fractions: the smallest value whose cumulative
    weight (a value of member m weighs w_m / (W N_m)) reaches the level read as a decimal."""
    total = sum(weights)
    values = np.concatenate(parts)
    share = np.concatenate([[weights[m] / (total * len(p))] * len(p) for m, p in enumerate(parts)])
    out = np.empty((len(levels), values.shape[1]), values.dtype)
    for d in range(values.shape[1]):
        order = np.argsort(values[:, d], kind="stable")
        cumulative = np.cumsum(share[order])  # Fractions: exact
        for j, q in enumerate(levels):
            i = int(np.searchsorted(cumulative, Fraction(repr(q)), side="left"))
            out[j, d] = values[order[min(i, len(order) - 1)], d]
    return out


def assert_exact_where_numpy_is(got, parts, weights, levels) -> None:
    """`got` equals the exact definition; numpy's inverted_cdf too, except on boundaries."""
    exact = exact_reference(parts, weights, levels)
    np.testing.assert_array_equal(got, exact)
    numpy = numpy_weighted(parts, weights, levels)
    for j, d in zip(*np.nonzero(numpy != exact), strict=True):
        assert on_boundary(parts, weights, levels[j], d, exact[j, d]), (levels[j], d)


LEVELS = [0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0]


def assert_bit_identical(a, b):
    assert a.stats.keys() == b.stats.keys() and a.summary.rows == b.summary.rows
    for key in a.stats:
        x, y = a.stats[key], b.stats[key]
        for name in ("count", "mean", "std", "min", "max", "nonfinite"):
            u, v = getattr(x, name), getattr(y, name)
            assert u.dtype == v.dtype and u.tobytes() == v.tobytes(), (key, name, u, v)
        assert x.quantiles.keys() == y.quantiles.keys()
        for q in x.quantiles:
            assert x.quantiles[q].tobytes() == y.quantiles[q].tobytes(), (key, q)
        for name in ("edges", "counts", "at_min", "at_max", "coarse"):  # what --plot draws
            u, v = getattr(x.histogram, name), getattr(y.histogram, name)
            assert u.tobytes() == v.tobytes(), (key, name)


def listed_files(root: Path) -> list[Path]:
    """The data files by the metadata, read independently of accelkit (LeRobot's conventions)."""
    info = json.loads((root / "meta" / "info.json").read_text())
    if info["codebase_version"] == "v2.1":
        lines = (root / "meta" / "episodes.jsonl").read_text().splitlines()
        indexes = sorted(json.loads(line)["episode_index"] for line in lines)
        return [
            root / info["data_path"].format(episode_chunk=e // info["chunks_size"], episode_index=e)
            for e in indexes
        ]
    episodes = pa.concat_tables(
        [pq.read_table(p) for p in sorted((root / "meta" / "episodes").rglob("*.parquet"))]
    )
    pairs = sorted(
        set(
            zip(
                episodes.column("data/chunk_index").to_pylist(),
                episodes.column("data/file_index").to_pylist(),
                strict=True,
            )
        )
    )
    return [root / info["data_path"].format(chunk_index=c, file_index=f) for c, f in pairs]


def on_boundary(parts: list[np.ndarray], weights, q: float, d: int, value) -> bool:
    """Whether the cumulative weight of the values <= `value` (dimension d) is exactly the level:
    where numpy's float64 sums may land on either side."""
    total = sum(weights)
    weight = sum(
        weights[m] / (total * len(p)) * int(np.sum(p[:, d] <= value)) for m, p in enumerate(parts)
    )
    return weight == Fraction(repr(q))


def numpy_weighted(parts: list[np.ndarray], weights, levels) -> np.ndarray:
    values = np.concatenate(parts)
    total = sum(weights)
    w = np.concatenate(
        [np.full(len(p), float(weights[m] / total) / len(p)) for m, p in enumerate(parts)]
    )
    return np.stack(
        [
            np.quantile(values[:, d], levels, weights=w, method="inverted_cdf")
            for d in range(values.shape[1])
        ],
        axis=1,
    )
