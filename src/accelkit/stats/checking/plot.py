"""`accelkit stats check --plot PATH`: each feature's worst error per dimension as a PNG."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from accelkit.errors import DataError
from accelkit.runtime.files import atomic_open
from accelkit.stats.checking.compare import Report


def draw(report: Report, path: Path) -> Path:
    """Each feature's worst error per dimension (over its statistics), global file and
    per-episode files apart, on a log axis with the tolerance drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, dict[str, np.ndarray]] = {}
    for f in report.findings:
        if not f.errors or f.unit == "frames":
            continue
        errors = np.asarray(f.errors, np.float64)
        per = series.setdefault(f.feature, {})
        label = f.file if f.episode is None else f"{f.file} (worst episode)"
        current = per.get(label)
        per[label] = (
            errors
            if current is None or current.shape != errors.shape
            else np.maximum(current, errors)
        )
    features = sorted(series)
    if not features:
        raise DataError("nothing was compared, so there is no error to draw; drop --plot")
    cols = min(3, len(features))
    rows = math.ceil(len(features) / cols)
    figure, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.2 * rows), squeeze=False)
    floor = report.tolerance * 1e-6
    for ax, feature in zip(axes.flat, features, strict=False):
        for label, errors in sorted(series[feature].items()):
            shown = np.clip(np.where(np.isfinite(errors), errors, np.nan), floor, None)
            ax.plot(np.arange(len(errors)), shown, marker="o", linestyle="-", label=label)
        ax.axhline(report.tolerance, color="red", linestyle="--", label="tolerance")
        ax.set_yscale("log")
        ax.set_title(feature, fontsize=10)
        ax.set_xlabel("dimension")
        ax.set_ylabel("worst error (std or range)")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(features) :]:
        ax.axis("off")
    figure.suptitle(f"stored statistics vs exact: {report.dataset}", fontsize=11)
    figure.tight_layout()
    with atomic_open(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=90)
    plt.close(figure)
    return path
