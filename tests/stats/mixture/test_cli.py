"""`accelkit stats DS1 DS2 … [--weights …]` and `accelkit.stats.compute([...])` on real files:
LeRobot-written v2.1 and v3.0 datasets and a plain parquet folder whose columns have other names,
against numpy on the frames read with pyarrow; LeRobot's format; `--write-into` a dataset that
LeRobot's `merge_datasets` made; one-line refusals; a terminal that is never silent and stops with
one line."""

import json
import shutil
import signal
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import accelkit.stats as stats
from tests.support.cli import envelope_of, run_cli
from tests.support.stats import assert_exact_where_numpy_is, exact_reference
from tests.support.terminal import (
    accelkit,
    assert_interrupted,
    assert_never_silent,
    run_in_terminal,
)

# one xdist worker runs this module (pyproject: --dist loadgroup), so its datasets are made once
pytestmark = pytest.mark.xdist_group("mixture-cli")

FIXTURES = Path(__file__).parents[1] / "fixtures"
LEVELS = [0.0, 0.01, 0.1, 0.5, 0.9, 0.99, 1.0]


def frames(root: Path, column: str) -> np.ndarray:
    """A column of every data file under root (in path order), read with pyarrow."""
    files = (
        sorted((root / "data").rglob("*.parquet"))
        if (root / "data").is_dir()
        else sorted(root.glob("*.parquet"))
    )
    parts = [np.array(pq.read_table(f, columns=[column]).column(0).to_pylist()) for f in files]
    values = np.concatenate(parts)
    if values.dtype == np.float64:  # the stored float32 values, through Python floats
        values = values.astype(np.float32)
    return values.reshape(len(values), -1)


@pytest.fixture(scope="module")
def renamed(tmp_path_factory) -> Path:
    """A plain parquet folder (no LeRobot metadata) of 100 frames whose columns are `obs` and
    `act`: the v3.0 fixture's first frames, the state doubled and shifted (a third distribution,
    with ties to the others at its repeated rows)."""
    folder = tmp_path_factory.mktemp("renamed") / "plain"
    folder.mkdir()
    state = frames(FIXTURES / "lerobot_v30", "observation.state")[:100].astype(np.float32)
    action = frames(FIXTURES / "lerobot_v30", "action")[:100].astype(np.float32)
    state = 2 * state + 1
    state[::10] = state[0]  # a point mass
    for i, rows in enumerate((slice(0, 37), slice(37, 100))):
        table = pa.table(
            {
                "obs": pa.FixedSizeListArray.from_arrays(pa.array(state[rows].reshape(-1)), 6),
                "act": pa.FixedSizeListArray.from_arrays(pa.array(action[rows].reshape(-1)), 4),
            }
        )
        pq.write_table(table, folder / f"part_{i}.parquet")
    return folder


def members(renamed: Path) -> tuple[list[str], list[dict], dict]:
    datasets = [str(FIXTURES / "lerobot_v21"), str(FIXTURES / "lerobot_v30"), str(renamed)]
    keys = [{"state": "observation.state", "actions": "action"}] * 2 + [
        {"state": "obs", "actions": "act"}
    ]
    parts = {
        "state": [frames(Path(d), k["state"]) for d, k in zip(datasets, keys, strict=True)],
        "actions": [frames(Path(d), k["actions"]) for d, k in zip(datasets, keys, strict=True)],
    }
    return datasets, keys, parts


@pytest.mark.parametrize("weights", [None, ["0.5", "0.3", "0.2"]], ids=["union", "weighted"])
def test_both_layouts_and_renamed_keys_equal_numpy(renamed, tmp_path, weights):
    datasets, keys, parts = members(renamed)
    done = stats.compute(
        datasets,
        keys=keys,
        weights=weights,
        quantiles=LEVELS,
        output=tmp_path / "norm_stats.json",
    )
    written = done.written["norm_stats"]
    for key, values in parts.items():
        got = done.result.stats[key]
        if weights is None:
            expected = np.quantile(np.concatenate(values), LEVELS, axis=0)
        else:
            exact = [Fraction(w) for w in weights]
            expected = exact_reference(values, exact, LEVELS)
            got_all = np.stack([got.quantiles[q] for q in LEVELS])
            assert_exact_where_numpy_is(got_all, values, exact, LEVELS)
        for j, q in enumerate(LEVELS):
            np.testing.assert_array_equal(got.quantiles[q], expected[j])
        np.testing.assert_array_equal(got.min, np.concatenate(values).min(0))
        assert written[key]["q01"] == [float(v) for v in got.quantiles[0.01]]
        whole = np.concatenate(values).astype(np.float64)
        if weights is None:
            mean, std = whole.mean(0), whole.std(0)
        else:
            w = np.concatenate(
                [np.full(len(v), float(e) / len(v)) for e, v in zip(exact, values, strict=True)]
            )
            mean = np.average(whole, axis=0, weights=w)
            std = np.sqrt(np.average((whole - mean) ** 2, axis=0, weights=w))
        np.testing.assert_allclose(got.mean, mean, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got.std, std, rtol=1e-9, atol=1e-12)
    mixture = done.run["mixture"]
    assert mixture["kind"] == ("union" if weights is None else "weighted")
    assert [m["keys"]["state"] for m in mixture["members"]] == ["observation.state"] * 2 + ["obs"]
    assert [m["frames"] for m in mixture["members"]] == [216, 216, 100]


def test_the_command_line_reads_repeated_keys_and_weights(renamed, tmp_path, capsys):
    datasets, _, parts = members(renamed)
    out = tmp_path / "norm_stats.json"
    code, printed, err = run_cli(
        [
            "stats",
            *datasets,
            *("--keys", "state=observation.state,actions=action"),
            *("--keys", "state=observation.state,actions=action"),
            *("--keys", "state=obs,actions=act"),
            *("--weights", "1/2,0.3,0.2", "-o", str(out), "--json", "--no-progress"),
        ],
        capsys,
    )
    assert code == 0, err
    document = envelope_of(printed)
    expected = exact_reference(
        parts["actions"], [Fraction(1, 2), Fraction(3, 10), Fraction(1, 5)], [0.01, 0.99]
    )
    assert document["result"]["stats"]["norm_stats"]["actions"]["q99"] == [
        float(v) for v in expected[1]
    ]
    assert document["run"]["mixture"]["members"][2]["weight"] == "0.2"


def test_lerobot_format_of_two_layouts_is_keyed_by_column_names(tmp_path, capsys):
    out = tmp_path / "stats.json"
    code, _, err = run_cli(
        ["stats", str(FIXTURES / "lerobot_v21"), str(FIXTURES / "lerobot_v30"),
         "--format", "lerobot", "-o", str(out), "--no-progress"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    written = json.loads(out.read_text())
    assert set(written) == {"observation.state", "action"}
    assert written["action"]["count"] == [432]
    state = frames(FIXTURES / "lerobot_v30", "observation.state")
    twice = np.concatenate([state, state])
    assert written["observation.state"]["q50"] == [
        float(v) for v in np.quantile(twice, [0.5], axis=0)[0]
    ]


def test_write_into_a_merged_dataset_replaces_its_averaged_numbers(tmp_path, capsys):
    """lerobot_v30_merged is LeRobot 0.4.4's merge_datasets([lerobot_v30, lerobot_v30_deleted]):
    its meta/stats.json holds averaged quantiles and float32 moments. Written into from its two
    members, it holds the exact statistics of its own frames, equal to a run on it alone, and
    `stats check` finds nothing wrong in it."""
    root = Path(shutil.copytree(FIXTURES / "lerobot_v30_merged", tmp_path / "merged"))
    before = stats.check(root)
    assert [f for f in before.findings if f.file == "meta/stats.json" and f.fails]
    code, _, err = run_cli(
        ["stats", str(FIXTURES / "lerobot_v30"), str(FIXTURES / "lerobot_v30_deleted"),
         "--format", "lerobot", "--write-into", str(root), "--no-progress"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    written = json.loads((root / "meta" / "stats.json").read_text())
    alone = stats.compute(root, format="lerobot", images="none", output=tmp_path / "alone.json")
    for feature, entry in alone.written.items():
        for name, value in entry.items():
            if name in ("mean", "std"):
                np.testing.assert_allclose(written[feature][name], value, rtol=1e-12, atol=1e-9)
            else:
                assert written[feature][name] == value, (feature, name)
    after = stats.check(root)
    assert not [f for f in after.findings if f.file == "meta/stats.json" and f.fails]
    run = json.loads((root / "meta" / "stats.run.json").read_text())["mixture"]
    assert set(run["from_merged_dataset"]) == {"episode_index", "index", "task_index"}
    assert list((root / "meta" / ".accelkit-backup").iterdir())  # the old files kept


def test_write_into_what_is_not_their_merge_is_one_line(tmp_path, capsys):
    root = Path(shutil.copytree(FIXTURES / "lerobot_v30_merged", tmp_path / "merged"))
    kept = (root / "meta" / "stats.json").read_bytes()
    code, _, err = run_cli(
        ["stats", str(FIXTURES / "lerobot_v30_deleted"), str(FIXTURES / "lerobot_v30"),
         "--format", "lerobot", "--write-into", str(root), "--no-progress"],
        capsys,
    )  # fmt: skip
    assert code == 2
    line = err.strip().splitlines()[-1]
    assert "is not the merge of these datasets" in line and "first different at episode" in line
    assert (root / "meta" / "stats.json").read_bytes() == kept


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--per-episode", "--format", "lerobot"], "--per-episode with several datasets"),
        (["--max-frames", "10"], "--max-frames with several datasets"),
        (["--max-time-minutes", "1"], "--max-time-minutes with several datasets"),
        (["--format", "lerobot", "--images", "sample"], "--images sample with several datasets"),
        (["--weights", "1"], "1 value(s) for 2 datasets"),
        (["--weights", "1,0"], "not positive"),
        (["--fast", "--weights", "1,2"], "drop --fast or --weights"),
        (["--keys", "state=observation.state", "--keys", "a=b", "--keys", "c=d"], "given 3 times for 2 datasets"),
        (["--keys", "state=observation.state", "--keys", "actions=action"], "same output keys"),
        (["--keys", "state=observation.state", "--keys", "state=action"], "holds 6 float32 values per row in LeRobot v2.1"),
        (["--format", "lerobot", "--write-into", "x", "--weights", "1,2"], "drop --weights"),
    ],
)  # fmt: skip
def test_what_a_mixture_cannot_do_is_one_line(extra, message, tmp_path, capsys):
    output = [] if "--write-into" in extra else ["-o", str(tmp_path / "out.json")]
    code, _, err = run_cli(
        ["stats", str(FIXTURES / "lerobot_v21"), str(FIXTURES / "lerobot_v30"), *extra,
         *output, "--no-progress"],
        capsys,
    )  # fmt: skip
    assert code == 2, err
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and message in lines[0], err
    assert not (tmp_path / "out.json").exists()


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    """Two 500k-frame datasets (v3.0 and v2.1): long enough passes to signal in."""
    folder = tmp_path_factory.mktemp("mixture-terminal")
    for name, layout in (("a", "v3.0"), ("b", "v2.1")):
        subprocess.run(
            [*accelkit("-q", "sample-dataset", str(folder / name)),
             *("--episodes", "100", "--frames", "5000", "--layout", layout)],
            check=True,
            timeout=600,
        )  # fmt: skip
    return folder


def test_a_mixture_is_never_silent(large):
    run = run_in_terminal(
        accelkit("stats", str(large / "a"), str(large / "b"), "--format", "lerobot",
                 "-o", str(large / "out" / "stats.json"))
    )  # fmt: skip
    assert run.code == 0, run.output[-3000:]
    assert "dataset 2/2" in run.output
    assert_never_silent(run)


@pytest.mark.parametrize(
    "when, signum",
    [("pass 1 (moments, top digit), dataset 2/2", signal.SIGINT), ("pass 2", signal.SIGTERM)],
)
def test_a_mixture_stops_with_one_line_and_writes_nothing(large, when, signum):
    out = large / "stopped" / "stats.json"
    run = run_in_terminal(
        accelkit("stats", str(large / "a"), str(large / "b"), "--weights", "0.7,0.3",
                 "--format", "lerobot", "-o", str(out)),
        signal_when=lambda text, seconds: when in text,
        signum=signum,
        timeout=600,
    )  # fmt: skip
    assert_interrupted(run, signum)
    assert not out.exists()
    assert not out.parent.exists() or not any(out.parent.iterdir())
