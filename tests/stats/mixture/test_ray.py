"""Mixtures on a real Ray cluster (tests/support/ray_cluster.py, started by conftest): each member's
passes run as Ray tasks over its files, and the union and the weighted mixture equal the local
run's bit for bit, on LeRobot v2.1 and v3.0 datasets and a parquet folder with other column names,
for several task counts."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from accelkit.stats.formats.sources import open_source
from accelkit.stats.formats.synthetic import write_sample_dataset
from accelkit.stats.mixture.engine import compute_mixture_stats
from tests.support.groups import SERVERS
from tests.support.stats import LEVELS, assert_bit_identical

pytestmark = [pytest.mark.xdist_group(SERVERS), pytest.mark.slow]


@pytest.fixture(scope="module")
def members(tmp_path_factory) -> list[tuple[Path, dict | None]]:
    """A v2.1 and a v3.0 dataset of many 256-row blocks cut at odd places, and a plain parquet
    folder whose columns are `obs` and `act` (a third layout, other names, 3 files)."""
    root = tmp_path_factory.mktemp("mixture-cluster")
    v21 = write_sample_dataset(
        root / "v21", episodes=7, frames_per_episode=430, dim=5, layout="v2.1", seed=3
    )
    v30 = write_sample_dataset(
        root / "v30", episodes=5, frames_per_episode=611, dim=5, layout="v3.0", seed=4,
        episodes_per_file=2,
    )  # fmt: skip
    plain = root / "plain"
    plain.mkdir()
    rng = np.random.default_rng(5)
    for i, rows in enumerate((700, 301, 999)):
        state = np.round(rng.standard_normal((rows, 5)) * 8).astype(np.float32) / 8  # ties
        action = (1 + rng.standard_normal((rows, 5))).astype(np.float32)
        table = pa.table(
            {
                "obs": pa.FixedSizeListArray.from_arrays(pa.array(state.reshape(-1)), 5),
                "act": pa.FixedSizeListArray.from_arrays(pa.array(action.reshape(-1)), 5),
            }
        )
        pq.write_table(table, plain / f"part_{i}.parquet")
    return [(v21, None), (v30, None), (plain, {"state": "obs", "actions": "act"})]


def opened(members):
    return [open_source(path, keys=keys) for path, keys in members]


TAILS = [0.01, 0.99]
WEIGHTS = ["0.5", "0.3", "0.2"]


@pytest.mark.parametrize(
    "weights, fast, levels",
    [
        (None, False, LEVELS),
        (WEIGHTS, False, LEVELS),
        (None, True, LEVELS),
        (None, False, TAILS),
        (WEIGHTS, False, TAILS),
    ],
    ids=["union", "weighted", "fast-union", "union-tails", "weighted-tails"],
)
def test_mixture_on_ray_equals_local_bit_for_bit(ray_cluster, members, weights, fast, levels):
    """Tail levels: the local run finds them in pass 1 (windows, across members), the Ray run by
    the radix passes; the same bits either way."""
    local = compute_mixture_stats(opened(members), quantiles=levels, weights=weights, fast=fast)
    if levels == TAILS:
        assert local.summary.passes == 1
    for tasks in (1, 4):
        remote = compute_mixture_stats(
            opened(members),
            quantiles=levels,
            weights=weights,
            fast=fast,
            ray=ray_cluster.address,
            ray_tasks=tasks,
        )
        assert_bit_identical(local, remote)
        assert len(remote.summary.cluster["members"]) == 3


def test_the_command_line_writes_the_same_file_on_ray(ray_cluster, members, tmp_path, capsys):
    from tests.support.cli import run_cli

    datasets = [str(path) for path, _ in members]
    keys = ["state=observation.state,actions=action"] * 2 + ["state=obs,actions=act"]
    written = {}
    for name, extra in (("local", []), ("ray", ["--ray", ray_cluster.address, "--ray-tasks", "3"])):
        output = tmp_path / name / "norm_stats.json"
        code, _, err = run_cli(
            ["stats", *datasets, *(a for k in keys for a in ("--keys", k)),
             "--weights", "2,1,1", "-o", str(output), "--no-progress", *extra],
            capsys,
        )  # fmt: skip
        assert code == 0, err
        written[name] = output.read_bytes()
    assert written["local"] == written["ray"]
