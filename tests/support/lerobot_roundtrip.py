"""Run inside a venv that has LeRobot (made by hand as tests/stats/fixtures/make_lerobot_fixtures.py's
docstring says; tests/stats/fixtures/make_lerobot_edit_fixtures.py runs it): what LeRobot itself
does to a dataset, reported as JSON on stdout. Never touches the network (HF_HUB_OFFLINE).

    python lerobot_roundtrip.py load ROOT
        LeRobotDataset(root=ROOT): frames, episodes, and the statistics LeRobot loaded
    python lerobot_roundtrip.py delete ROOT OUT EPISODE [EPISODE ...]
        lerobot.datasets.dataset_tools.delete_episodes into OUT (LeRobot re-aggregates stats.json)
    python lerobot_roundtrip.py merge OUT ROOT ROOT [ROOT ...]
        lerobot.datasets.dataset_tools.merge_datasets into OUT
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"


def load(root: Path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset(f"local/{root.name}", root=root)


def summary(dataset) -> dict:
    item = dataset[len(dataset) - 1]  # reads a frame through LeRobot's own loader
    stats = {
        feature: {k: _plain(v) for k, v in entry.items()}
        for feature, entry in (dataset.meta.stats or {}).items()
    }
    return {
        "frames": len(dataset),
        "episodes": dataset.meta.total_episodes,
        "last_frame_keys": sorted(item),
        "stats": stats,
        "version": str(dataset.meta.info.get("codebase_version")),
    }


def _plain(value):
    import numpy as np

    try:
        return np.asarray(value, np.float64).reshape(-1).tolist()
    except (TypeError, ValueError):
        return str(value)


def main(argv: list[str]) -> dict:
    action = argv[0]
    if action == "load":
        return summary(load(Path(argv[1])))
    from lerobot.datasets import dataset_tools

    if action == "delete":
        root, out = Path(argv[1]), Path(argv[2])
        episodes = [int(e) for e in argv[3:]]
        result = dataset_tools.delete_episodes(
            load(root), episode_indices=episodes, output_dir=out, repo_id=f"local/{out.name}"
        )
        return summary(result)
    if action == "merge":
        out = Path(argv[1])
        datasets = [load(Path(p)) for p in argv[2:]]
        result = dataset_tools.merge_datasets(
            datasets, output_repo_id=f"local/{out.name}", output_dir=out
        )
        return summary(result)
    raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
