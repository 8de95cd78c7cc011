"""`accelkit stats`: exact normalization statistics of robot datasets (openpi `norm_stats.json`,
LeRobot `stats.json` and per-episode statistics), streaming, bounded memory, any device count.

The library API — what the command line calls — loaded on first use (importing this package
stays cheap; docs/stats.md, "Python API"):

    import accelkit.stats as stats
    done = stats.compute("path/to/lerobot_dataset", output="norm_stats.json")   # ComputeResult
    report = stats.check("path/to/lerobot_dataset")                             # CheckReport
    if not report.ok:
        stats.fix(report)                                                       # FixResult
    differ = stats.diff("norm_stats.json", "path/to/lerobot_dataset", dataset="path/to/lerobot_dataset")

`compute_stats` is the engine below `compute`, for rows already in Python (any re-iterable of
dict batches, or a stream from `open_source`); `write_stats` writes its result in either format.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.runtime.exports import lazy_exports

_EXPORTS = {
    "compute": "accelkit.stats.computation.api",
    "ComputeResult": "accelkit.stats.computation.api",
    "check": "accelkit.stats.checking.api",
    "fix": "accelkit.stats.checking.api",
    "CheckReport": "accelkit.stats.checking.api",
    "diff": "accelkit.stats.diffing.api",
    "DiffReport": "accelkit.stats.diffing.api",
    "FixResult": "accelkit.stats.checking.api",
    "StatsSettings": "accelkit.stats.settings",
    "compute_stats": "accelkit.stats.engine.driver",
    "open_source": "accelkit.stats.formats.sources",
    "write_stats": "accelkit.stats.formats.stats_files",
    "read_norm_stats": "accelkit.stats.formats.stats_files",
    "write_sample_dataset": "accelkit.stats.formats.synthetic",
    "episode_stats": "accelkit.stats.core.episodes",
    "Column": "accelkit.stats.types",
    "Stream": "accelkit.stats.types",
    "BatchStream": "accelkit.stats.types",
    "KeyStats": "accelkit.stats.types",
    "RunSummary": "accelkit.stats.types",
    "StatsResult": "accelkit.stats.types",
}

if TYPE_CHECKING:  # the same names, for help(), dir(), pyright and editors
    from accelkit.stats.checking.api import CheckReport, FixResult, check, fix
    from accelkit.stats.computation.api import ComputeResult, compute
    from accelkit.stats.core.episodes import episode_stats
    from accelkit.stats.diffing.api import DiffReport, diff
    from accelkit.stats.engine.driver import compute_stats
    from accelkit.stats.formats.sources import open_source
    from accelkit.stats.formats.stats_files import read_norm_stats, write_stats
    from accelkit.stats.formats.synthetic import write_sample_dataset
    from accelkit.stats.settings import StatsSettings
    from accelkit.stats.types import BatchStream, Column, KeyStats, RunSummary, StatsResult, Stream

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
