"""The one rule `stats check` and `stats diff` both measure by (docs/stats.md, "Tolerance"), and
the pieces both use (units, `exact_values`, `format_error`, `sortable`), so neither imports the
other.

A number is compared in its unit — mean and std in stds, min, max and the quantiles in ranges
(max − min), counts in frames (`stats/checking/compare.py` takes the unit from the exact statistics,
`stats/diffing/compare.py` the smaller of the two files'). Then:

* **off** (`fails`): its error exceeds `--tolerance` (default `TOLERANCE`, 1e-3): an error of
  1e-3 std or range moves every normalized input by about that much, a quarter of bfloat16's
  resolution near 1 (2⁻⁸ ≈ 0.0039), below what a bf16 policy can see;
* **given back** (`reproduces`): a recomputation (a cause's arithmetic, other frames, an average)
  lands within `REPRODUCED` (1e-6) of the unit of the stored number — counts exactly — and only
  then is its cause named. 1e-6 admits JSON's rounding, and float32 storage of a number within
  ~16 units of 0 (2⁻²⁴ ≈ 6e-8 of its value); at the default tolerance it is a thousand times
  inside it, so the exact statistics never "give back" a number that is off. It does not scale
  with `--tolerance`: a looser tolerance is not a looser confirmation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from accelkit.errors import ConfigError

TOLERANCE = 1e-3
REPRODUCED = 1e-6
MOMENTS = ("mean", "std")  # measured in stds
UNITS = {"mean": "std", "std": "std", "count": "frames"}  # the rest: "range"


def given(tolerance: float | None) -> float:
    """`--tolerance` as given (None: `TOLERANCE`); not a positive number is a user error."""
    tolerance = TOLERANCE if tolerance is None else tolerance
    if not (tolerance > 0 and math.isfinite(tolerance)):
        raise ConfigError(f"--tolerance must be a positive number, not {tolerance}")
    return tolerance


def errors(stored, truth, unit) -> np.ndarray:
    """|stored − truth| in `unit` (arrays), inf where either is not a finite number."""
    stored, truth = np.asarray(stored, np.float64), np.asarray(truth, np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        out = np.abs(stored - truth) / unit
    return np.where(np.isfinite(out), out, math.inf)


def fails(error, tolerance: float, stat: str = ""):
    """Whether an error (in its unit) is off; a count's (in frames) is at any frame."""
    return np.asarray(error) > (0 if stat == "count" else tolerance)


def reproduces(value, stored, unit: float, stat: str = "") -> bool:
    """Whether a recomputed `value` gives the stored number back: within `REPRODUCED` of the
    unit, a count exactly."""
    if value is None or stored is None:
        return False
    value, stored = float(value), float(stored)
    if not (math.isfinite(value) and math.isfinite(stored)):
        return False
    if stat == "count":
        return value == stored
    return abs(value - stored) <= REPRODUCED * unit


def sortable(value: float) -> float:
    """An error as a sort key: not a finite number sorts above every finite one."""
    return 1e300 if not math.isfinite(value) else float(value)


def format_error(error: float, unit: str) -> str:
    """An error in its unit as the tables print it ("-" when not a finite number)."""
    if not math.isfinite(error):
        return "-"
    if unit == "frames":
        return f"{error:,.0f} frames"
    sign = "σ" if unit == "std" else " range"
    return f"{error:.3g}{sign}"


COUNTS = "count per dimension"  # the exact count of each dimension's finite values (no file's key)


def counts(values: np.ndarray, width: int) -> np.ndarray | None:
    """A stored count as one number per dimension of a `width`-wide feature: LeRobot writes one
    ([n], broadcast), accelkit's openpi file one per dimension; None for any other number of values
    (a wrong count, compared like any other statistic of the wrong size)."""
    if values.size == width:
        return values
    if values.size == 1:
        return np.full(width, values[0])
    return None


def exact_values(stats, names: Mapping[float, str]) -> dict[str, np.ndarray]:
    """Every statistic of a `KeyStats` (numeric feature) or `CameraStats` (camera) as float64
    arrays, quantiles under LeRobot's names (q01, …); count as frames [1], and under `COUNTS` the
    count of each dimension."""
    count = stats.count
    frames = int(np.max(count, initial=0)) if np.ndim(count) else int(count)
    out = {
        "mean": np.asarray(stats.mean, np.float64).reshape(-1),
        "std": np.asarray(stats.std, np.float64).reshape(-1),
        "min": np.asarray(stats.min, np.float64).reshape(-1),
        "max": np.asarray(stats.max, np.float64).reshape(-1),
        "count": np.asarray([frames], np.float64),
        COUNTS: np.asarray(count, np.float64).reshape(-1),
    }
    for q, values in stats.quantiles.items():
        if float(q) in names:
            out[names[float(q)]] = np.asarray(values, np.float64).reshape(-1)
    return out
