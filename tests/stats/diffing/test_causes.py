"""`stats diff --dataset` names a cause only where recomputing on the dataset gives both numbers
back, the rule `stats check` follows.

The references are the tools' own numbers: LeRobot 0.4.4's `meta/stats.json` of the fixtures
(reproduced here bit for bit by LeRobot's arithmetic as `stats/upstream/lerobot.py` writes it out),
openpi's own `norm_stats.json` of `lerobot_v30/` (`fixtures/openpi_v30/`, written by openpi's
RunningStats: `make_openpi_fixtures.py`; reproduced bit for bit by `stats/upstream/openpi.py`), and
numpy float64 over the frames read here with pyarrow."""

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import accelkit.stats as stats
from accelkit.stats.diffing.recompute import Recomputer
from accelkit.stats.formats import lerobot
from accelkit.stats.formats.stats_files import read_stats_json
from accelkit.stats.upstream import openpi as openpi_rules
from tests.support.cli import envelope_of, run_cli

FIXTURES = Path(__file__).parents[1] / "fixtures"
LEVELS = [0.01, 0.1, 0.5, 0.9, 0.99]
UNKNOWN = "no known cause"


def frames(root: Path, column: str) -> tuple[np.ndarray, np.ndarray]:
    """(values, episode index) of every frame in the dataset's file order, read with pyarrow."""
    tables = [pq.read_table(p) for p in sorted((root / "data").rglob("*.parquet"))]
    values = np.concatenate([np.asarray(t.column(column).to_pylist()) for t in tables])
    episodes = np.concatenate([t.column("episode_index").to_numpy() for t in tables])
    return values.reshape(len(episodes), -1), episodes


def causes_of(report) -> dict[tuple[str, str, int], str]:
    return {
        (d.key, d.stat, dim): d.causes[dim]
        for d in report.comparison.differences
        for dim in d.failing
    }


def our_file(tmp_path: Path, root: Path, *args: str, name: str = "norm_stats.json") -> Path:
    out = tmp_path / name
    done = stats.compute(root, output=out, **dict(zip(args[::2], args[1::2], strict=True)))
    return done.output


@pytest.mark.parametrize("name", ["lerobot_v30", "lerobot_v30_gripper"])
def test_lerobots_recorded_stats_json_is_its_per_episode_arithmetic_folded(name):
    """Every number of a LeRobot 0.4.4-written meta/stats.json, bit for bit: its per-episode
    statistics (float32 moments, 5000-bin quantiles) aggregated after every episode."""
    root = FIXTURES / name
    numeric = set(lerobot.numeric_features(root))
    recompute = Recomputer(
        root,
        LEVELS,
        state="observation.state",
        actions="action",
        numeric=numeric,
        columns=numeric,
    )
    stored = read_stats_json(root / "meta" / "stats.json")
    found = recompute.lerobot(numeric, LEVELS)
    for column in numeric:
        variants = [v for rule, _, v in found[column] if rule == "lerobot-0.4"]
        entry = stored[column]
        if column == "timestamp":
            # LeRobot counted Python floats (frame_index / fps), the file holds their float32:
            # moments agree to 1e-6 of the range, a quantile near a bin's edge to one bin
            unit = entry["max"] - entry["min"]
            assert any(
                all(
                    np.all(
                        np.abs(v[s].reshape(-1) - entry[s])
                        <= unit * (2e-4 if s[0] == "q" else 1e-6)
                    )
                    for s in entry
                )
                for v in variants
            )
            continue
        assert any(
            all(np.array_equal(np.asarray(v[s], float).reshape(-1), entry[s]) for s in entry)
            for v in variants
        ), column


def openpi_episodes(root: Path):
    state, episodes = frames(root, "observation.state")
    action, _ = frames(root, "action")
    starts = np.flatnonzero(np.r_[True, episodes[1:] != episodes[:-1]])
    for lo, hi in zip(starts, [*starts[1:], len(episodes)], strict=True):
        yield state[lo:hi].astype(np.float32), action[lo:hi].astype(np.float32)


def test_openpi_rules_give_openpis_own_norm_stats_back_bit_for_bit():
    stored = json.loads((FIXTURES / "openpi_v30" / "norm_stats.json").read_text())["norm_stats"]
    running = {k: openpi_rules.RunningStats() for k in ("state", "actions")}
    for batch in openpi_rules.batches(
        openpi_episodes(FIXTURES / "lerobot_v30"),
        horizon=10,
        batch_size=32,
        frames=216,
        mask=(True, True, False, False),
    ):
        assert batch["state"].shape == (32, 6) and batch["actions"].shape == (32, 10, 4)
        for key, rs in running.items():
            rs.update(batch[key])
    assert running["state"].count == 192  # 6 batches of 32: the last 24 frames dropped
    for key, rs in running.items():
        ours = rs.statistics()
        for stat in ("mean", "std", "q01", "q99"):
            np.testing.assert_array_equal(
                ours[stat], np.asarray(stored[key][stat]), err_msg=f"{key} {stat}"
            )


def test_openpis_own_file_vs_lerobots_is_explained_everywhere(capsys):
    """openpi's norm_stats.json (10-step chunks, DeltaActions on 2 of 4 action dimensions,
    batches of 32) against LeRobot 0.4.4's stats.json of the same frames: every differing number
    of both files is given back, and the causes are the ones the two tools' code implies."""
    report = stats.diff(
        FIXTURES / "openpi_v30" / "norm_stats.json",
        FIXTURES / "lerobot_v30",
        dataset=FIXTURES / "lerobot_v30",
        action_horizon=10,
    )
    found = causes_of(report)
    assert found and UNKNOWN not in " ".join(found.values()), found
    for (key, stat, dim), cause in found.items():
        if key == "actions" and stat != "std":
            assert "action chunks vs frames" in cause, (key, stat, dim, cause)
            assert "delta actions in A only" not in cause or dim < 2, (stat, dim, cause)
        if stat.startswith("q"):
            assert "mean of per-episode quantiles (B)" in cause or "binned quantiles (A)" in cause
    assert "delta actions in A only" in found[("actions", "mean", 0)]
    assert "delta actions" not in found.get(("actions", "mean", 3), "")
    assert found[("actions", "std", 2)] == "float32 moments (A); float32 moments (B)"
    assert found[("state", "mean", 3)] == "other frames"  # openpi dropped the last 24 frames
    detail = next(d for d in report.comparison.differences if (d.key, d.stat) == ("state", "mean"))
    assert (
        "openpi's RunningStats of frames, batches of 32: the first 192 of 216 frames"
        in detail.details[3]
    )
    # the mask openpi used, given: the same causes
    given = stats.diff(
        FIXTURES / "openpi_v30" / "norm_stats.json",
        FIXTURES / "lerobot_v30",
        dataset=FIXTURES / "lerobot_v30",
        action_horizon=10,
        delta_actions="2,-2",
    )
    assert causes_of(given) == found
    # without the horizon (an openpi file records none): unknown, and the note says what to give
    code, out, _ = run_cli(
        [
            "stats",
            "diff",
            str(FIXTURES / "openpi_v30" / "norm_stats.json"),
            str(FIXTURES / "lerobot_v30"),
            "--dataset",
            str(FIXTURES / "lerobot_v30"),
            "--json",
            "--no-progress",
        ],
        capsys,
    )
    result = envelope_of(out)["result"]
    assert code == 3 and any(r["cause"] == UNKNOWN for r in result["summary"])
    assert any("--action-horizon" in n for n in result["notes"])


def test_our_exact_file_vs_lerobots_names_only_lerobots_arithmetic(tmp_path):
    ours = our_file(tmp_path, FIXTURES / "lerobot_v30")
    report = stats.diff(ours, FIXTURES / "lerobot_v30", dataset=FIXTURES / "lerobot_v30")
    found = causes_of(report)
    assert set(found.values()) == {
        "float32 moments (B)",
        "binned quantiles (B); mean of per-episode quantiles (B)",
    }, set(found.values())
    assert found[("actions", "std", 2)] == "float32 moments (B)"
    detail = next(d for d in report.comparison.differences if (d.key, d.stat) == ("actions", "std"))
    assert detail.details[2] == (
        "A: exact statistics of every frame; B: LeRobot 0.4's per-episode statistics (float32),"
        " aggregated"
    )


@pytest.mark.parametrize("end", ["clamp", "truncate"])
@pytest.mark.parametrize("sidecar", [True, False])
def test_chunks_and_delta_actions_from_the_run_facts_or_the_count(tmp_path, end, sidecar):
    """Our openpi file of 10-step chunks with DeltaActions(2, -2) against our file of frames:
    the chunks are found from the sidecar, or without it from the count (clamp: 216 · 10;
    truncate: Σ min(10, L − t)), the delta dimension by dimension."""
    root = FIXTURES / "lerobot_v30"
    chunked = our_file(
        tmp_path,
        root,
        "action_horizon",
        10,
        "chunk_end",
        end,
        "delta_actions",
        "2,-2",
        name="chunks.json",
    )
    if not sidecar:
        (tmp_path / "chunks.run.json").unlink()
    plain = our_file(tmp_path, root, name="frames.json")
    report = stats.diff(chunked, plain, dataset=root)
    found = causes_of(report)
    assert found and {k for k, _, _ in found} == {"actions"}  # the state is the same in both
    for (_, stat, dim), cause in found.items():
        assert cause.startswith("action chunks vs frames"), cause
        if stat == "mean":
            assert ("delta actions in A only" in cause) == (dim < 2), (dim, cause)
    assert ("actions", "count", 0) in found and ("actions", "mean", 0) in found


def shortened_v21(folder: Path, episodes: int) -> Path:
    """lerobot_v21 as it was after its first `episodes` episodes: a dataset that grew since."""
    root = Path(shutil.copytree(FIXTURES / "lerobot_v21", folder / "short"))
    lines = (root / "meta" / "episodes.jsonl").read_text().splitlines()
    kept = [json.loads(line) for line in lines[:episodes]]
    for name in ("episodes.jsonl", "episodes_stats.jsonl"):
        path = root / "meta" / name
        path.write_text("\n".join(path.read_text().splitlines()[:episodes]) + "\n")
    for line in lines[episodes:]:
        index = json.loads(line)["episode_index"]
        (root / "data" / "chunk-000" / f"episode_{index:06d}.parquet").unlink()
    info = json.loads((root / "meta" / "info.json").read_text())
    info.update(total_episodes=episodes, total_frames=sum(e["length"] for e in kept))
    info["splits"] = {"train": f"0:{episodes}"}
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=4))
    return root


def test_a_file_of_fewer_episodes_is_other_frames(tmp_path):
    old = our_file(
        tmp_path, shortened_v21(tmp_path, 5), "format", "lerobot", "images", "none", name="old.json"
    )
    new = our_file(tmp_path, FIXTURES / "lerobot_v21", "format", "lerobot", name="new.json")
    # the old file holds numpy float64 over the first 146 frames (5 of 7 episodes)
    state, _ = frames(FIXTURES / "lerobot_v21", "observation.state")
    written = json.loads(old.read_text())["observation.state"]
    np.testing.assert_allclose(written["mean"], state[:146].astype(np.float64).mean(0), rtol=1e-12)
    report = stats.diff(old, new, dataset=FIXTURES / "lerobot_v21")
    found = causes_of(report)
    assert found and set(found.values()) == {"other frames"}, set(found.values())
    detail = report.comparison.differences[0].details
    assert any("the first 5 of 7 episodes (146 of 216 frames)" in t for t in detail.values())


def test_a_number_nothing_gives_back_is_no_known_cause(tmp_path):
    ours = our_file(tmp_path, FIXTURES / "lerobot_v30")
    moved = json.loads(ours.read_text())
    moved["norm_stats"]["state"]["mean"][0] += 0.5 * moved["norm_stats"]["state"]["std"][0]
    other = tmp_path / "moved.json"
    other.write_text(json.dumps(moved))
    report = stats.diff(ours, other, dataset=FIXTURES / "lerobot_v30")
    assert causes_of(report) == {("state", "mean", 0): UNKNOWN}
    detail = report.comparison.differences[0]
    assert detail.details[0].endswith("B: no recomputation gives it back")


def test_lerobot_03_and_04_on_the_same_frames(tmp_path):
    """v2.1 (LeRobot 0.3.3's per-episode numpy float32, aggregated when loaded) against v3.0
    (LeRobot 0.4.4's stats.json) of the same frames: both tools' arithmetic, recomputed."""
    report = stats.diff(
        FIXTURES / "lerobot_v21", FIXTURES / "lerobot_v30", dataset=FIXTURES / "lerobot_v30"
    )
    found = causes_of(report)
    assert found and UNKNOWN not in " ".join(found.values()), found
    assert found[("action", "std", 2)] == "float32 moments (B)"  # 0.3's np.std is right there


def test_cameras_are_compared_and_not_recomputed(tmp_path):
    root = FIXTURES / "lerobot_v30_cameras"
    stored = json.loads((root / "meta" / "stats.json").read_text())
    camera = next(k for k in stored if k.startswith("observation.images"))
    stored[camera]["mean"][0][0][0] += 0.1
    edited = tmp_path / "stats.json"
    edited.write_text(json.dumps(stored))
    report = stats.diff(root, edited, dataset=root)
    (diff,) = [d for d in report.comparison.differences if d.failing]
    assert diff.key == camera and diff.causes[0] == UNKNOWN
    assert diff.details[0] == f"not recomputed: {camera} is not a numeric column of {root}"


def test_repo_ids_name_the_files_and_the_dataset(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_LEROBOT_HOME", str(tmp_path / "home"))
    shutil.copytree(FIXTURES / "lerobot_v30", tmp_path / "home" / "lerobot" / "fixture")
    monkeypatch.chdir(tmp_path)
    ours = our_file(tmp_path, FIXTURES / "lerobot_v30")
    by_name = stats.diff(ours, "lerobot/fixture", dataset="lerobot/fixture")
    by_path = stats.diff(ours, FIXTURES / "lerobot_v30", dataset=FIXTURES / "lerobot_v30")
    assert causes_of(by_name) == causes_of(by_path)
    assert by_name.dataset == tmp_path / "home" / "lerobot" / "fixture"


def test_a_sampled_file_is_other_frames_from_its_run_facts(tmp_path):
    root = FIXTURES / "lerobot_v30"
    sampled = our_file(tmp_path, root, "max_frames", 100, "seed", 3, name="sampled.json")
    every = our_file(tmp_path, root, name="every.json")
    report = stats.diff(sampled, every, dataset=root)
    found = causes_of(report)
    assert found and set(found.values()) == {"other frames"}, set(found.values())
    details = {t for d in report.comparison.differences for t in d.details.values()}
    assert all("a sample of 100 of 216 frames (seed 3)" in t for t in details), details
