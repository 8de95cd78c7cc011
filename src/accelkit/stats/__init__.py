"""`accelkit stats`: exact normalization statistics of robot datasets (openpi `norm_stats.json`,
LeRobot `stats.json` and per-episode statistics), streaming, bounded memory, any device count.

The public API, loaded on first use (importing this package stays cheap):

    from accelkit.stats import compute_stats, open_source, write_stats
    result = compute_stats(open_source("path/to/lerobot_dataset"), quantiles=[0.01, 0.99])
    write_stats("norm_stats.json", result.stats, "openpi", {})
"""

from __future__ import annotations

from accelkit.runtime.output import lazy_exports

_EXPORTS = {
    "compute_stats": "accelkit.stats.compute",
    "open_source": "accelkit.stats.sources",
    "write_stats": "accelkit.stats.formats",
    "read_norm_stats": "accelkit.stats.formats",
    "write_sample_dataset": "accelkit.stats.sample",
    "episode_stats": "accelkit.stats.episodes",
    "Column": "accelkit.stats.types",
    "Stream": "accelkit.stats.types",
    "BatchStream": "accelkit.stats.types",
    "KeyStats": "accelkit.stats.types",
    "RunSummary": "accelkit.stats.types",
    "StatsResult": "accelkit.stats.types",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
