"""`accelkit stats --ray` on a real Ray cluster on 127.0.0.1 (head + worker node, see conftest):
results equal to the local run bit for bit, on LeRobot v2.1 and v3.0 datasets, local and on S3
(moto), with sampling, action chunks and fast mode; a killed worker's task retried; a bad file's
one-line error."""

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from accelkit.cli import main
from accelkit.errors import DataError
from accelkit.stats.core.action_chunks import ChunkTransform, DeltaActions
from accelkit.stats.engine import ray_runner as cluster
from accelkit.stats.engine.driver import compute_stats
from accelkit.stats.formats.sources import open_source
from accelkit.stats.formats.synthetic import write_sample_dataset
from tests.support.groups import SERVERS
from tests.support.stats import LEVELS, assert_bit_identical

pytestmark = [pytest.mark.xdist_group(SERVERS), pytest.mark.slow]

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """Datasets whose rows are many 256-row blocks, cut by files at odd places (v2.1: one file per
    episode; v3.0: two episodes per file)."""
    root = tmp_path_factory.mktemp("cluster")
    return {
        layout: write_sample_dataset(
            root / layout,
            episodes=9,
            frames_per_episode=430,
            dim=5,
            layout=layout,
            seed=7,
            **({"episodes_per_file": 2} if layout == "v3.0" else {}),
        )
        for layout in ("v2.1", "v3.0")
    }


@pytest.mark.parametrize("layout", ["v2.1", "v3.0"])
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"max_frames": 1500, "action_horizon": 10},
        {"fast": True},
        {
            "max_frames": 1500,
            "chunk_transform": ChunkTransform(
                horizon=6,
                end="clamp",
                transforms=(DeltaActions((True, False, True)),),
                per_timestep=True,
            ),
        },
    ],
    ids=["exact", "sample+chunks", "fast", "sample+delta-actions+per-step"],
)
def test_ray_equals_local_bit_for_bit(ray_cluster, datasets, layout, options, monkeypatch):
    """Also through a deeper tree of merge tasks (fan-in 2: 5 results -> 3 -> 2 -> 1), so the
    blocks that straddle groups are summed by merge tasks at several levels."""
    opened = {
        k: options[k] for k in ("max_frames", "action_horizon", "chunk_transform") if k in options
    }
    local = compute_stats(
        open_source(datasets[layout], **opened), quantiles=LEVELS, fast=options.get("fast", False)
    )
    for tasks, fanin in ((2, 8), (5, 2)):
        monkeypatch.setattr(cluster, "MERGE_FANIN", fanin)
        remote = compute_stats(
            open_source(datasets[layout], **opened),
            quantiles=LEVELS,
            fast=options.get("fast", False),
            ray=ray_cluster.address,
            ray_tasks=tasks,
        )
        assert_bit_identical(local, remote)
        assert len(remote.summary.devices) == tasks


def test_fast_mode_with_float32_denormals_across_groups(ray_cluster, tmp_path):
    """XLA's CPU reads float32 denormals as 0, the host loop does not: a block that straddles two
    groups must be summed by the kind of kernel the tasks used (fast mode: XLA), or the moments
    of a mostly-zero feature with denormals differ from the local run's."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = write_sample_dataset(
        tmp_path / "tiny", episodes=7, frames_per_episode=300, dim=3, layout="v2.1", seed=3
    )
    for path in sorted((root / "data").rglob("*.parquet")):
        table = pq.read_table(path)
        name = "observation.state"
        column = table.column(name).combine_chunks()
        values = np.array(column.to_pylist(), np.float32)
        values[:, 0] = np.where(np.arange(len(values)) % 7 == 0, np.float32(1e-40), 0.0)
        replaced = pa.array(values.tolist(), type=column.type)
        table = table.set_column(table.schema.get_field_index(name), name, replaced)
        pq.write_table(table, path)
    local = compute_stats(open_source(root), quantiles=LEVELS, fast=True)
    remote = compute_stats(
        open_source(root), quantiles=LEVELS, fast=True, ray=ray_cluster.address, ray_tasks=5
    )
    assert_bit_identical(local, remote)


@pytest.mark.parametrize("version", ["lerobot_v21", "lerobot_v30"])
def test_lerobot_fixtures_through_s3_on_the_cluster(ray_cluster, s3_env, version, tmp_path, capsys):
    """LeRobot-written datasets read from S3 by the workers: the CLI's file equals the local one."""
    uri = s3_env.upload(FIXTURES / version, "accelkit-ray", version)
    written = {}
    for name, dataset, extra in (
        ("local", str(FIXTURES / version), []),
        ("ray", uri, ["--ray", ray_cluster.address, "--ray-tasks", "3"]),
    ):
        output = tmp_path / name / "stats.json"
        with pytest.raises(SystemExit) as done:
            main(
                [
                    "stats",
                    dataset,
                    "--format",
                    "lerobot",
                    "-o",
                    str(output),
                    "--no-progress",
                    *extra,
                ]
            )
        assert done.value.code == 0, capsys.readouterr().err
        written[name] = output.read_bytes()
    assert written["ray"] == written["local"]
    facts = json.loads((tmp_path / "ray" / "stats.run.json").read_text())
    assert facts["ray"] == ray_cluster.address and facts["devices"] == 3


def test_bad_file_fails_the_run_with_the_local_error(ray_cluster, datasets, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(datasets["v2.1"], broken)
    victim = sorted((broken / "data").rglob("*.parquet"))[4]
    victim.write_bytes(
        victim.read_bytes()[: victim.stat().st_size // 2] + b"PAR1"
    )  # same length? no: a torn file
    errors = []
    for ray in (None, ray_cluster.address):
        with pytest.raises(DataError) as failed:
            compute_stats(open_source(broken, trust_files=True), ray=ray, ray_tasks=3)
        errors.append(str(failed.value))
    assert errors[0] == errors[1] and str(victim) in errors[0] and "\n" not in errors[1]


def test_killed_worker_is_retried_and_the_result_stays_exact(ray_cluster, tmp_path):
    dataset = write_sample_dataset(
        tmp_path / "big",
        episodes=4,
        frames_per_episode=60_000,
        dim=8,
        layout="v3.0",
        seed=1,
        episodes_per_file=1,
    )
    local = compute_stats(open_source(dataset), quantiles=LEVELS)
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = compute_stats(
                open_source(dataset), quantiles=LEVELS, ray=ray_cluster.address, ray_tasks=4
            )
        except Exception as exc:  # reported by the assertion below
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    killed = None
    while thread.is_alive() and killed is None:
        running = ray_cluster.worker_processes("run_group")
        if running:
            killed = running[0].pid
            running[0].kill()
        time.sleep(0.01)
    thread.join(timeout=300)
    assert killed is not None, "no task was seen running"
    assert "error" not in outcome, outcome.get("error")
    assert_bit_identical(local, outcome["result"])


def test_a_spent_time_budget_stops_the_run_with_one_clear_line(ray_cluster, datasets):
    """--max-time-minutes on Ray with the budget spent at once: the run stops — with the one
    line when no task had finished, or with a result marked partial that covers only the tasks
    that had (a loaded driver reaches its first check after some finished: a trial saw 1,615
    rows covered)."""
    total = compute_stats(open_source(datasets["v2.1"])).summary.rows
    try:
        result = compute_stats(
            open_source(datasets["v2.1"]),
            ray=ray_cluster.address,
            ray_tasks=3,
            max_time_minutes=1e-9,
        )
    except DataError as exc:
        assert "time budget ran out before any Ray task finished" in str(exc)
        assert "\n" not in str(exc)
    else:  # partial: only whole tasks' rows; every task done before the check: all of them
        rows = result.summary.rows
        assert (0 < rows < total) if result.summary.partial else rows == total


def test_a_task_error_is_named_for_what_it_was():
    """Our own errors come back as raised; another exception a task raised was not retried
    (retry_exceptions is off) and says so; a lost worker was retried first; a worker that cannot
    import our code names the module and the install."""
    import ray.exceptions

    from accelkit.errors import DataError, DeviceError
    from accelkit.stats.engine.ray_runner import MAX_RETRIES, _user_error

    ours = DataError("episode 3 spans a.parquet and b.parquet; …")
    raised = ray.exceptions.RayTaskError("run_group", "Traceback …", ours)
    assert _user_error(raised) is ours
    bug = ray.exceptions.RayTaskError("merge_results", "Traceback …", KeyError("kept"))
    message = str(_user_error(bug))
    assert isinstance(_user_error(bug), DeviceError)
    assert message.startswith("a Ray task raised KeyError: 'kept'") and "retries" not in message
    lost = str(_user_error(ray.exceptions.WorkerCrashedError()))
    assert f"failed after {MAX_RETRIES} retries (WorkerCrashedError" in lost
    # a node whose Python lacks accelkit (or has another version): what to install, where
    stale = ray.exceptions.RaySystemError("System error: No module named 'accelkit.stats'")
    message = str(_user_error(stale))
    assert "workers cannot import 'accelkit.stats'" in message and "stats extra" in message
