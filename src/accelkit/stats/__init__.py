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

if TYPE_CHECKING:  # the public names, listed once (runtime/exports.py reads them)
    from accelkit.stats.checking.api import (
        CheckReport as CheckReport,
    )
    from accelkit.stats.checking.api import (
        FixResult as FixResult,
    )
    from accelkit.stats.checking.api import (
        check as check,
    )
    from accelkit.stats.checking.api import (
        fix as fix,
    )
    from accelkit.stats.computation.api import ComputeResult as ComputeResult
    from accelkit.stats.computation.api import compute as compute
    from accelkit.stats.core.episodes import episode_stats as episode_stats
    from accelkit.stats.diffing.api import DiffReport as DiffReport
    from accelkit.stats.diffing.api import diff as diff
    from accelkit.stats.engine.driver import compute_stats as compute_stats
    from accelkit.stats.formats.sources import open_source as open_source
    from accelkit.stats.formats.stats_files import (
        read_norm_stats as read_norm_stats,
    )
    from accelkit.stats.formats.stats_files import (
        write_stats as write_stats,
    )
    from accelkit.stats.formats.synthetic import write_sample_dataset as write_sample_dataset
    from accelkit.stats.settings import StatsSettings as StatsSettings
    from accelkit.stats.types import (
        BatchStream as BatchStream,
    )
    from accelkit.stats.types import (
        Column as Column,
    )
    from accelkit.stats.types import (
        KeyStats as KeyStats,
    )
    from accelkit.stats.types import (
        RunSummary as RunSummary,
    )
    from accelkit.stats.types import (
        StatsResult as StatsResult,
    )
    from accelkit.stats.types import (
        Stream as Stream,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__)
