"""Output formats: openpi `norm_stats.json` and LeRobot `stats.json`, written atomically.

openpi: `{"norm_stats": {key: {"mean", "std", "q01", "q99", ...}}}` with 2-space indent and no
trailing newline, as openpi writes it; a quantile that was not computed is `null`; extra keys (min,
max, count, other quantiles) are ignored by openpi's loader. LeRobot: `{feature: {"min", "max",
"mean", "std", "count": [n], "q01", ...}}`, keyed by the dataset's column names.
A run stopped by its time budget adds `"partial": true` at the top level.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from accelkit.errors import DataError, InputError
from accelkit.runtime.files import write_json_atomic
from accelkit.stats.compute import KeyStats

FORMATS = ("openpi", "lerobot")
OPENPI_REQUIRED = (0.01, 0.99)
LEROBOT_QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
DEFAULT_OUTPUT = {"openpi": "norm_stats.json", "lerobot": "stats.json"}


def quantile_name(q: float) -> str:
    """0.01 -> "q01", 0.5 -> "q50", 0.995 -> "q99.5", 0.001 -> "q00.1", 1e-7 -> "q00.00001"."""
    percent = round(q * 100, 10)  # 0.07 * 100 = 7.000000000000001; ten digits is finer than any use
    text = np.format_float_positional(percent, trim="-")
    whole, _, frac = text.partition(".")
    return f"q{int(whole):02d}" + (f".{frac}" if frac else "")


def check_quantile_names(levels) -> None:
    """Two levels that print the same name would overwrite each other in the output file."""
    names: dict[str, float] = {}
    for q in levels:
        name = quantile_name(q)
        if name in names and names[name] != q:
            raise InputError(
                f"quantile levels {names[name]} and {q} both write the entry {name!r}; drop one of them"
            )
        names[name] = q


def _floats(values) -> list[float | None]:
    return [
        None if not math.isfinite(v) else float(v) for v in np.asarray(values, np.float64).tolist()
    ]


def openpi_payload(stats: Mapping[str, KeyStats], partial: bool = False) -> dict:
    norm = {}
    for key, s in stats.items():
        entry: dict = {"mean": _floats(s.mean), "std": _floats(s.std)}
        for q in OPENPI_REQUIRED:
            entry[quantile_name(q)] = _floats(s.quantiles[q]) if q in s.quantiles else None
        for q, values in s.quantiles.items():
            entry.setdefault(quantile_name(q), _floats(values))
        entry.update(min=_floats(s.min), max=_floats(s.max), count=[int(c) for c in s.count])
        norm[key] = entry
    payload: dict = {"norm_stats": norm}
    if partial:
        payload["partial"] = True
    return payload


def lerobot_payload(
    stats: Mapping[str, KeyStats], column_names: Mapping[str, str], partial: bool = False
) -> dict:
    payload: dict = {}
    for key, s in stats.items():
        entry = {
            "min": _floats(s.min),
            "max": _floats(s.max),
            "mean": _floats(s.mean),
            "std": _floats(s.std),
            "count": [int(s.count.max(initial=0))],
        }
        for q, values in sorted(s.quantiles.items()):
            entry[quantile_name(q)] = _floats(values)
        payload[column_names.get(key, key)] = entry
    if partial:
        payload["partial"] = True
    return payload


def write_stats(
    path: str | Path,
    stats: Mapping[str, KeyStats],
    fmt: str,
    column_names: Mapping[str, str],
    partial: bool = False,
) -> Path:
    if fmt not in FORMATS:
        raise InputError(f"output format {fmt!r} is unknown; use one of {', '.join(FORMATS)}")
    for s in stats.values():
        check_quantile_names(s.quantiles)
    payload = (
        openpi_payload(stats, partial)
        if fmt == "openpi"
        else lerobot_payload(stats, column_names, partial)
    )
    return write_json_atomic(path, payload, indent=2 if fmt == "openpi" else 4)


def read_norm_stats(path: str | Path) -> dict[str, dict[str, np.ndarray | None]]:
    """Load an openpi `norm_stats.json` the way openpi does: per key mean, std, q01, q99 arrays."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"{path} is not a readable norm_stats.json ({exc})") from exc
    if "norm_stats" not in data:
        raise DataError(f"{path} has no 'norm_stats' entry; is it an openpi norm_stats.json?")
    out = {}
    for key, entry in data["norm_stats"].items():
        out[key] = {
            name: None if entry.get(name) is None else np.asarray(entry[name], np.float64)
            for name in ("mean", "std", "q01", "q99")
        }
    return out
