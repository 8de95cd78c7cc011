"""openpi's statistics after its transforms: DeltaActions on action chunks, a transform hook, and
per-step statistics, on LeRobot-written data, against a numpy implementation written apart from
the library's (it builds every frame's chunk explicitly, the way openpi's loader does)."""

import json
from pathlib import Path

import numpy as np
import pytest

from accelkit.stats.core.action_chunks import (
    ChunkTransform,
    DeltaActions,
    make_bool_mask,
    parse_mask,
)
from accelkit.stats.engine.driver import compute_stats
from accelkit.stats.formats import sources
from accelkit.stats.formats.sources import open_source
from accelkit.stats.formats.stats_files import per_timestep_path, read_norm_stats
from tests.stats.helpers import assert_matches_numpy
from tests.support.cli import envelope_of, run_cli

FIXTURES = Path(__file__).parents[1] / "fixtures"
LEVELS = [0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0]
KEYS = {"state": "observation.state", "actions": "action"}
MASK = make_bool_mask(2, -1, 1)  # delta on dims 0, 1 and 3; dim 2 absolute (a gripper)


def columns(root: Path):
    """state, actions and episode index of every row of a LeRobot dataset, in row order."""
    import pyarrow.parquet as pq

    files = sorted((root / "data").rglob("*.parquet"))
    tables = [pq.read_table(f) for f in files]
    state = np.concatenate([np.stack(t.column("observation.state").to_pylist()) for t in tables])
    actions = np.concatenate([np.stack(t.column("action").to_pylist()) for t in tables])
    episodes = np.concatenate([np.asarray(t.column("episode_index").to_pylist()) for t in tables])
    return state.astype(np.float32), actions.astype(np.float32), episodes


def reference_chunks(state, actions, episodes, horizon, end, mask=None):
    """Every frame's chunk, step by step: a[t + k] (the episode's last action past its end with
    clamp; left out with truncate), minus the frame's state on the masked dimensions."""
    per_step = [[] for _ in range(horizon)]
    for episode in np.unique(episodes):
        rows = np.flatnonzero(episodes == episode)
        for t in rows:
            for k in range(horizon):
                j = t + k
                if j > rows[-1]:
                    if end == "truncate":
                        continue
                    j = rows[-1]
                value = actions[j].copy()
                if mask is not None:
                    for d, delta in enumerate(mask):
                        if delta:
                            value[d] = np.float32(value[d] - state[t][d])
                per_step[k].append(value)
    return [np.asarray(rows, np.float32).reshape(-1, actions.shape[1]) for rows in per_step]


@pytest.mark.parametrize("layout", ["lerobot_v21", "lerobot_v30"])
@pytest.mark.parametrize("end", ["clamp", "truncate"])
def test_delta_actions_per_step_and_global_match_numpy(layout, end, monkeypatch, one_device):
    root = FIXTURES / layout
    monkeypatch.setattr(sources, "SPLIT_ROWS", 40)  # pieces and blocks cut inside every file
    spec = ChunkTransform(horizon=5, end=end, transforms=(DeltaActions(MASK),), per_timestep=True)
    stream = open_source(root, keys=KEYS, chunk_transform=spec)
    result = compute_stats(stream, quantiles=LEVELS, devices=one_device)
    state, actions, episodes = columns(root)
    steps = reference_chunks(state, actions, episodes, 5, end, MASK)
    assert_matches_numpy(result.stats["actions"], np.concatenate(steps), LEVELS)
    for k, rows in enumerate(steps):
        assert_matches_numpy(result.stats[f"actions@{k}"], rows, LEVELS)
    assert_matches_numpy(result.stats["state"], state, LEVELS)  # each frame once
    # the same bytes on eight devices and in another batch size
    again = compute_stats(
        open_source(root, keys=KEYS, chunk_transform=spec), quantiles=LEVELS, batch_size=64
    )
    for key, stats in result.stats.items():
        for name in ("mean", "std", "min", "max", "count"):
            np.testing.assert_array_equal(getattr(stats, name), getattr(again.stats[key], name))
        for q in LEVELS:
            np.testing.assert_array_equal(stats.quantiles[q], again.stats[key].quantiles[q])


def test_masks_read_as_openpi_reads_them():
    assert make_bool_mask(6, -1, 6, -1) == (True,) * 6 + (False,) + (True,) * 6 + (False,)
    assert parse_mask("6,-1,6,-1") == make_bool_mask(6, -1, 6, -1)
    assert parse_mask("true, False,1".replace("1", "true")) == (True, False, True)
    for bad in ("", "6,0", "six", "true,2"):
        with pytest.raises(Exception, match="--delta-actions"):
            parse_mask(bad)


def test_cli_writes_openpi_files_that_load_and_per_step_arrays(tmp_path, capsys):
    """`--delta-actions` with `--action-horizon`/`--chunk-end clamp` and `--per-timestep`: the
    global file as openpi's normalize.load reads it, and one beside it with [H][D] arrays."""
    root = FIXTURES / "lerobot_v30"
    out = tmp_path / "norm_stats.json"
    code, printed, err = run_cli(
        [
            *("stats", str(root), "--action-horizon", "4", "--chunk-end", "clamp"),
            *("--delta-actions", "2,-1,1", "--per-timestep", "-o", str(out), "--json"),
        ],
        capsys,
    )
    assert code == 0, err
    state, actions, episodes = columns(root)
    steps = reference_chunks(state, actions, episodes, 4, "clamp", MASK)
    loaded = read_norm_stats(out)
    flat = np.concatenate(steps).astype(np.float64)
    np.testing.assert_allclose(loaded["actions"]["mean"], flat.mean(axis=0), rtol=1e-9)
    np.testing.assert_array_equal(
        loaded["actions"]["q99"], np.quantile(np.concatenate(steps), np.float64(0.99), axis=0)
    )
    per_step = json.loads(per_timestep_path(out).read_text())["norm_stats"]["actions"]
    assert np.asarray(per_step["mean"]).shape == (4, actions.shape[1])
    for k, rows in enumerate(steps):
        np.testing.assert_array_equal(
            per_step["q01"][k], np.quantile(rows, np.float64(0.01), axis=0)
        )
    run = envelope_of(printed)["run"]
    assert run["actions_transform"] == {
        "horizon": 4,
        "chunk_end": "clamp",
        "transforms": ["DeltaActions(1101)"],
        "per_timestep": True,
    }
    assert run["per_timestep_output"] == per_timestep_path(out).name


def test_a_transform_hook_sees_openpi_shaped_batches(tmp_path, monkeypatch, capsys):
    """--transform module:callable gets {state [R,Ds], actions [R,H,Da], actions_is_pad [R,H]}
    and its output is what is counted; here: actions scaled and the gripper made binary."""
    (tmp_path / "my_transforms.py").write_text(
        "import numpy as np\n"
        "def scale(batch):\n"
        "    assert batch['actions'].ndim == 3 and batch['state'].ndim == 2\n"
        "    actions = batch['actions'] * np.float32(2)\n"
        "    actions[..., 2] = (actions[..., 2] > 0).astype(np.float32)\n"
        "    return {**batch, 'actions': actions}\n"
    )
    monkeypatch.chdir(tmp_path)
    root = FIXTURES / "lerobot_v21"
    out = tmp_path / "hook.json"
    code, _, err = run_cli(
        [
            *("stats", str(root), "--action-horizon", "3", "--chunk-end", "truncate"),
            *("--transform", "my_transforms:scale", "--quantiles", "0.01,0.5,0.99", "-o", str(out)),
        ],
        capsys,
    )
    assert code == 0, err
    state, actions, episodes = columns(root)
    rows = np.concatenate(reference_chunks(state, actions, episodes, 3, "truncate")) * np.float32(2)
    rows[:, 2] = (rows[:, 2] > 0).astype(np.float32)
    got = json.loads(out.read_text())["norm_stats"]["actions"]
    np.testing.assert_array_equal(got["q50"], np.quantile(rows, np.float64(0.5), axis=0))
    np.testing.assert_allclose(got["mean"], rows.astype(np.float64).mean(axis=0), rtol=1e-9)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--delta-actions", "2,x"], "--delta-actions"),
        (["--delta-actions", "9", "--action-horizon", "2"], "--delta-actions has 9 entries"),
        (["--transform", "nope"], "module:callable"),
        (["--transform", "no_such_module_x:f"], "cannot import"),
        (["--per-timestep", "--format", "lerobot"], "openpi"),
        (["--delta-actions", "1", "--per-episode"], "per-episode"),
        (["--delta-actions", "1", "--keys", "actions=action"], "state and actions"),
    ],
)
def test_bad_transform_options_are_one_line(args, needle, tmp_path, capsys):
    code, _, err = run_cli(
        ["stats", str(FIXTURES / "lerobot_v30"), *args, "-o", str(tmp_path / "x.json")], capsys
    )
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert needle in err
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize(
    ("code_text", "needle"),
    [
        ("def t(batch):\n    raise KeyError('state')\n", "raised KeyError: 'state'"),
        ("def t():\n    return {}\n", "raised TypeError"),  # the wrong signature
    ],
)
def test_a_transform_that_raises_is_the_inputs_error_in_one_line(
    code_text, needle, tmp_path, monkeypatch, capsys
):
    """The user's transform failing is exit 2 naming it, never an internal error (exit 1)."""
    module = f"failing_tx_{len(code_text)}"  # one module per case: imports are cached
    (tmp_path / f"{module}.py").write_text(code_text)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(
        [
            *("stats", str(FIXTURES / "lerobot_v30"), "--transform", f"{module}:t"),
            *("-o", str(tmp_path / "x.json")),
        ],
        capsys,
    )
    assert code == 2 and err.startswith(f"error: --transform {module}:t raised"), err
    assert needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "x.json").exists()
