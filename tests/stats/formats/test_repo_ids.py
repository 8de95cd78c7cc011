"""Datasets named by repo id, found where LeRobot keeps them (stats/formats/repo_ids.py): LeRobot 0.4's
`$HF_LEROBOT_HOME/owner/name` (snapshot_download with local_dir) and LeRobot 0.6's
`$HF_LEROBOT_HOME/hub/datasets--owner--name/snapshots/<refs/v3.0>/`, both built here in a temp
home; HF_LEROBOT_HOME's default follows HF_HOME as huggingface_hub defines it. A repo id is
checked as the hub checks it before it becomes a path."""

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from accelkit.errors import InputError
from accelkit.stats.formats import repo_ids
from tests.support.cli import run_cli

FIXTURES = Path(__file__).parents[1] / "fixtures"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty HF_LEROBOT_HOME and a working folder holding nothing of it."""
    for name in ("HF_LEROBOT_HOME", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "cache" / "lerobot-home"
    root.mkdir(parents=True)
    monkeypatch.setenv("HF_LEROBOT_HOME", str(root))
    work = tmp_path / "w1" / "work"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    return root


def hub_snapshot(home: Path, repo_id: str, source: Path, commit: str = COMMIT) -> Path:
    """The layout huggingface_hub's snapshot_download(cache_dir=home / "hub") leaves: blobs named
    by their hash, the snapshot's files symlinks to them, refs/v3.0 naming the commit."""
    owner, name = repo_id.split("/")
    cache = home / "hub" / f"datasets--{owner}--{name}"
    snapshot = cache / "snapshots" / commit
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        data = path.read_bytes()
        blob = cache / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / path.relative_to(source)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (cache / "refs").mkdir(parents=True)
    (cache / "refs" / "v3.0").write_text(commit)
    return snapshot


def stats_json(args, capsys) -> dict:
    code, out, err = run_cli(["stats", *args, "--json", "--no-progress"], capsys)
    assert code == 0, err
    return json.loads(out)["result"]


def test_hf_lerobot_home_defaults_as_lerobot_and_huggingface_hub_define_it(tmp_path, monkeypatch):
    for name in ("HF_LEROBOT_HOME", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert repo_ids.lerobot_home() == tmp_path / ".cache" / "huggingface" / "lerobot"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert repo_ids.lerobot_home() == tmp_path / "xdg" / "huggingface" / "lerobot"
    monkeypatch.setenv("SOMEWHERE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HOME", "$SOMEWHERE")  # huggingface_hub expands variables in HF_HOME
    assert repo_ids.lerobot_home() == tmp_path / "hf" / "lerobot"
    monkeypatch.setenv("HF_LEROBOT_HOME", "~/robots")
    assert repo_ids.lerobot_home() == tmp_path / "robots"


def test_lerobot_04_layout_resolves_for_stats_and_check(home, capsys, tmp_path):
    shutil.copytree(FIXTURES / "lerobot_v30", home / "lerobot" / "fixture")
    by_name = stats_json(["lerobot/fixture", "-o", str(tmp_path / "a.json")], capsys)
    by_path = stats_json([str(FIXTURES / "lerobot_v30"), "-o", str(tmp_path / "b.json")], capsys)
    assert by_name["stats"] == by_path["stats"]
    code, out, err = run_cli(
        ["stats", "check", "lerobot/fixture", "--json", "--no-progress"], capsys
    )
    assert code == 3, err
    assert json.loads(out)["result"]["dataset"] == str(home / "lerobot" / "fixture")


def test_hf_home_alone_places_the_home_under_it(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("HF_LEROBOT_HOME", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.chdir(tmp_path)
    shutil.copytree(FIXTURES / "lerobot_v21", tmp_path / "hf" / "lerobot" / "me" / "v21")
    got = stats_json(["me/v21", "-o", str(tmp_path / "out.json")], capsys)
    assert got["stats"]["norm_stats"]["state"]["count"] == [216] * 6


def test_lerobot_06_hub_cache_snapshot_resolves(home, capsys, tmp_path):
    snapshot = hub_snapshot(home, "lerobot/fixture", FIXTURES / "lerobot_v30")
    assert repo_ids.resolve("lerobot/fixture") == str(snapshot)
    by_name = stats_json(["lerobot/fixture", "-o", str(tmp_path / "a.json")], capsys)
    by_path = stats_json([str(FIXTURES / "lerobot_v30"), "-o", str(tmp_path / "b.json")], capsys)
    assert by_name["stats"] == by_path["stats"]


def test_the_root_folder_comes_before_the_hub_cache_and_a_path_before_both(home):
    hub_snapshot(home, "lerobot/fixture", FIXTURES / "lerobot_v30")
    shutil.copytree(FIXTURES / "lerobot_v21", home / "lerobot" / "fixture")
    assert repo_ids.resolve("lerobot/fixture") == str(home / "lerobot" / "fixture")
    local = Path("lerobot") / "fixture"  # a folder of that name here is what the user means
    local.mkdir(parents=True)
    assert repo_ids.resolve("lerobot/fixture") == "lerobot/fixture"


def test_a_root_folder_without_a_dataset_falls_through_to_the_hub_cache(home):
    (home / "lerobot" / "fixture").mkdir(parents=True)  # an interrupted download
    snapshot = hub_snapshot(home, "lerobot/fixture", FIXTURES / "lerobot_v30")
    assert repo_ids.resolve("lerobot/fixture") == str(snapshot)


def test_not_found_is_one_line_naming_both_places_and_the_download(home, capsys):
    code, _, err = run_cli(["stats", "lerobot/nothing", "--no-progress"], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: ")
    assert str(home / "lerobot" / "nothing") in err
    assert str(home / "hub" / "datasets--lerobot--nothing" / "snapshots") in err
    assert "LeRobotDataset('lerobot/nothing')" in err
    for args in (
        ["stats", "check", "lerobot/nothing"],
        ["stats", "diff", "lerobot/nothing", "x/y"],
    ):
        code, _, err = run_cli([*args, "--no-progress"], capsys)
        assert code == 2 and "LeRobotDataset('lerobot/nothing')" in err, err


def test_a_snapshot_the_refs_do_not_name_is_not_used(home):
    hub_snapshot(home, "lerobot/fixture", FIXTURES / "lerobot_v30")
    (home / "hub" / "datasets--lerobot--fixture" / "refs" / "v3.0").unlink()
    (home / "hub" / "datasets--lerobot--fixture" / "refs" / "main").write_text(COMMIT)
    with pytest.raises(InputError, match=r"refs/v3\.0"):  # LeRobot reads revision v3.0 only
        repo_ids.resolve("lerobot/fixture")


def test_a_damaged_ref_cannot_lead_out_of_the_cache(home, tmp_path):
    hub_snapshot(home, "lerobot/fixture", FIXTURES / "lerobot_v30")
    outside = tmp_path / "outside"
    shutil.copytree(FIXTURES / "lerobot_v30", outside)
    ref = home / "hub" / "datasets--lerobot--fixture" / "refs" / "v3.0"
    ref.write_text(os.path.relpath(outside, ref.parent.parent / "snapshots"))
    with pytest.raises(InputError, match="40-digit commit"):
        repo_ids.resolve("lerobot/fixture")


INVALID = [
    "../outside",
    "owner/..",
    "owner/.hidden",
    "owner/name-",
    "-owner/name",
    "own--er/name",
    "owner/na..me",
    "owner/name.git",
    "owner/na me",
    "owner/na$me",
    "ownér/name",
    "owner/" + "n" * 97,
]
VALID = ["lerobot/pusht", "a/b", "_x/y_", "Foo-BAR_foo.bar123/x.y-z_1", "owner/" + "n" * 96]


@pytest.mark.parametrize("repo_id", INVALID + VALID)
def test_repo_ids_are_validated_as_the_hub_validates_them(repo_id):
    hub = pytest.importorskip("huggingface_hub.utils")
    try:
        hub.validate_repo_id(repo_id)
        valid = True
    except hub.HFValidationError:
        valid = False
    assert valid == (repo_id in VALID)
    assert (repo_ids.repo_id_problem(repo_id) is None) == valid


@pytest.mark.parametrize("repo_id", INVALID)
def test_an_invalid_repo_id_never_becomes_a_path(home, repo_id, capsys):
    """Whatever the home holds where the name would lead (here: a dataset beside the home)."""
    shutil.copytree(FIXTURES / "lerobot_v30", home.parent / "outside")
    shutil.copytree(FIXTURES / "lerobot_v30", home / "hub" / "x")
    code, _, err = run_cli(["stats", "--no-progress", "--", repo_id], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "not a valid repo id" in err


def test_paths_and_uris_are_never_taken_for_repo_ids(home):
    for text in ("/abs/path", "./rel/x", "~/x", "s3://bucket/key", "a/b/c", "single"):
        assert repo_ids.resolve(text) == text
