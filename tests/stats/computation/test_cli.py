"""`accelkit stats` and `accelkit sample-dataset` end to end: real datasets, real files, exit codes,
one-line errors."""

import json

import numpy as np
import pytest

from accelkit.stats.formats.stats_files import sidecar_path
from accelkit.stats.formats.synthetic import write_sample_dataset
from tests.support.cli import envelope_of, run_cli


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_sample_dataset(
        tmp_path_factory.mktemp("cli") / "ds",
        episodes=6,
        frames_per_episode=200,
        dim=4,
        layout="v3.0",
        episodes_per_file=2,
    )


def test_stats_end_to_end_openpi(dataset, tmp_path, capsys):
    out_path = tmp_path / "assets" / "norm_stats.json"
    code, out, err = run_cli(
        ["stats", str(dataset), "--output", str(out_path), "--no-progress"], capsys
    )
    assert code == 0, err
    assert "exact (1 pass over the data)" in out and str(out_path) in out  # q01, q99: windows
    stats = json.loads(out_path.read_text())["norm_stats"]
    assert set(stats) == {"state", "actions"} and len(stats["state"]["q01"]) == 4


def test_stats_fast_alias_lerobot_format(dataset, tmp_path, capsys):
    out_path = tmp_path / "stats.json"
    code, out, _ = run_cli(
        [
            "stats",
            str(dataset),
            "--use-fast-stats",
            "--format",
            "lerobot",
            "-o",
            str(out_path),
            "--no-progress",
        ],
        capsys,
    )
    assert code == 0 and "fast (1 pass" in out and "rank error bound" in out
    assert set(json.loads(out_path.read_text())["action"]) >= {
        "q01",
        "q10",
        "q50",
        "q90",
        "q99",
        "count",
    }


def test_json_envelope_carries_the_fast_mode_rank_bound(dataset, tmp_path, capsys):
    """--json: the statistics in `result`, the run facts (the sidecar's) in `run`, the fast-mode
    rank error bound among them (it was in the printed table only)."""
    out_path = tmp_path / "fast.json"
    code, out, _ = run_cli(
        ["stats", str(dataset), "--fast", "--json", "-o", str(out_path), "--no-progress"], capsys
    )
    assert code == 0
    document = envelope_of(out)
    assert document["ok"] and document["command"] == "stats"
    assert document["result"]["stats"] == json.loads(out_path.read_text())
    run = document["run"]
    assert run == {**json.loads(sidecar_path(out_path).read_text()), **run}
    bounds = run["rank_error_bound"]
    assert set(bounds) == {"observation.state", "action"}
    assert all(0 < b < 0.01 for b in bounds.values())
    exact = tmp_path / "exact.json"
    code, out, _ = run_cli(["stats", str(dataset), "--json", "-o", str(exact)], capsys)
    assert code == 0 and "rank_error_bound" not in envelope_of(out)["run"]  # exact: none


def test_config_name_picks_an_entry_and_flags_override(dataset, tmp_path, capsys):
    config = tmp_path / "jobs.yaml"
    config.write_text(
        f"aloha:\n  dataset: {dataset}\n  keys: {{actions: action}}\n  action_horizon: 5\n  chunk_end: clamp\n"
        f"  output: {tmp_path / 'from_config.json'}\n  quantiles: [0.05, 0.95]\n"
    )
    code, _, err = run_cli(
        [
            "stats",
            "--config",
            str(config),
            "--config-name",
            "aloha",
            "--quantiles",
            "0.01,0.99",
            "--no-progress",
        ],
        capsys,
    )
    assert code == 0, err
    stats = json.loads((tmp_path / "from_config.json").read_text())["norm_stats"]
    assert (
        set(stats) == {"actions"}
        and stats["actions"]["q01"] is not None
        and "q05" not in stats["actions"]
    )
    code, _, err = run_cli(["stats", "--config", str(config), "--config-name", "nope"], capsys)
    assert code == 2 and err.strip().startswith("error:") and "no entry named 'nope'" in err


def test_time_budget_writes_partial_results(dataset, tmp_path, capsys):
    out_path = tmp_path / "partial.json"
    code, _out, err = run_cli(
        [
            "stats",
            str(dataset),
            "--max-time-minutes",
            "0.000001",
            "-o",
            str(out_path),
            "--no-progress",
        ],
        capsys,
    )
    assert code == 0, err
    payload = json.loads(out_path.read_text())
    assert set(payload) == {"norm_stats"} and "partial" in err
    facts = json.loads((tmp_path / "partial.run.json").read_text())
    assert facts["partial"] is True and facts["rows"] < 1200
    assert max(payload["norm_stats"]["state"]["count"]) < 1200


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["stats", "/no/such/dataset"], "does not exist"),
        (["stats", "{ds}", "--keys", "state=observation.joints"], "no column 'observation.joints'"),
        (["stats", "{ds}", "--keys", "oops"], "is not out=column"),
        (["stats", "{ds}", "--quantiles", "0.5,2"], "every level must lie in [0, 1]"),
        (["stats", "{ds}", "--format", "csv"], "format"),
        (["stats", "{ds}", "--platform", "metal"], "unknown platform 'metal'"),
        (["stats", "{ds}", "--max-frames", "0"], "--max-frames 0: must be positive"),
        (["stats", "{ds}", "--fill-empty", "nan"], "--fill-empty nan: must be a finite number"),
        (["stats", "{ds}", "--batch-size", "-4"], "--batch-size -4: must be positive"),
        (["stats", "{ds}", "--action-horizon", "0"], "--action-horizon 0: must be positive"),
        (
            ["stats", "{ds}", "--max-time-minutes", "nan"],
            "--max-time-minutes nan: must be positive",
        ),
        (["stats", "{ds}", "--seed", "-1"], "--seed -1: must be 0 or more"),
        (
            ["stats", "{ds}", "--keys", "a=action,a=observation.state"],
            "names the output key 'a' twice",
        ),
        (["stats", "{ds}", "--quantiles", "0.5,nan"], "every level must lie in [0, 1]"),
        (["stats", "{ds}", "--quantiles", "0.5,0.50000000000001"], "both write the entry 'q50'"),
        (["stats"], "no dataset given"),
        (["stats", "{ds}", "--no-such-flag"], "No such option"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(dataset, tmp_path, capsys, args, message):
    args = [a.replace("{ds}", str(dataset)) for a in args] + ["-o", str(tmp_path / "never.json")]
    code, _, err = run_cli(args, capsys)
    lines = [line for line in err.splitlines() if line.strip()]
    assert (
        code == 2 and len(lines) == 1 and lines[0].startswith("error:") and message in lines[0]
    ), err
    assert not (tmp_path / "never.json").exists()


def test_nonfinite_data_exit_2_then_skip(tmp_path, capsys):
    data = np.ones((50, 2), np.float32)
    data[10, 1] = np.nan
    np.savez(tmp_path / "d.npz", state=data)
    code, _, err = run_cli(
        ["stats", str(tmp_path / "d.npz"), "-o", str(tmp_path / "o.json"), "--keys", "state=state"],
        capsys,
    )
    assert code == 2 and "dimension 1 holds NaN or Inf" in err and "row 10" in err
    code, out, _ = run_cli(
        [
            "stats",
            str(tmp_path / "d.npz"),
            "-o",
            str(tmp_path / "o.json"),
            "--skip-nonfinite",
            "--no-progress",
            "--keys",
            "state=state",
        ],
        capsys,
    )
    assert code == 0 and "skipped 1 non-finite" in out
    assert json.loads((tmp_path / "o.json").read_text())["norm_stats"]["state"]["std"] == [0.0, 0.0]


def test_sample_dataset_command(tmp_path, capsys):
    code, _out, _ = run_cli(
        ["sample-dataset", str(tmp_path / "s"), "--episodes", "2", "--frames", "20"], capsys
    )
    assert code == 0 and (tmp_path / "s" / "meta" / "info.json").is_file()
    code, _, err = run_cli(["sample-dataset", str(tmp_path / "s")], capsys)
    assert code == 2 and "not empty" in err


@pytest.mark.parametrize(
    "args",
    [["--episodes", "-3"], ["--episodes", "0"], ["--frames", "1"], ["--dim", "0"],
     ["--layout", "v9"]],
)  # fmt: skip
@pytest.mark.parametrize("exist_ok", [False, True])
def test_sample_dataset_sizes_it_cannot_write_are_refused(tmp_path, capsys, args, exist_ok):
    """--episodes -3, --frames 1, --dim 0 were "internal error" (exit 1) and --episodes 0 wrote
    a dataset `accelkit stats` refuses; with --exist-ok on a kept dataset they passed unseen."""
    root = tmp_path / "s"
    if exist_ok:
        assert (
            run_cli(["sample-dataset", str(root), "--episodes", "2", "--frames", "20"], capsys)[0]
            == 0
        )
    code, _, err = run_cli(
        ["sample-dataset", str(root), *args] + (["--exist-ok"] if exist_ok else []), capsys
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert args[0].removeprefix("--") in err
    assert root.exists() is exist_ok


def test_sample_dataset_exist_ok_says_what_it_keeps(tmp_path, capsys):
    root = tmp_path / "s"
    assert (
        run_cli(["sample-dataset", str(root), "--episodes", "2", "--frames", "20"], capsys)[0] == 0
    )
    code, out, _ = run_cli(["sample-dataset", str(root), "--layout", "v3.0", "--exist-ok"], capsys)
    assert code == 0 and "(LeRobot v2.1, 2 episodes, " in out and "not rewritten" in out


@pytest.mark.parametrize(
    "damage", ["truncated file", "missing file", "broken metadata", "other columns"]
)
def test_sample_dataset_exist_ok_names_a_damaged_dataset(tmp_path, capsys, damage):
    """--exist-ok said "keeping the dataset already at s" of one `accelkit stats` cannot read
    (the README's first command then failed at its second step): it names what is wrong and
    leaves the folder as it is."""
    root = tmp_path / "s"
    args = ["sample-dataset", str(root), "--episodes", "2", "--frames", "20"]
    assert run_cli(args, capsys)[0] == 0
    code, out, _ = run_cli([*args, "--exist-ok"], capsys)
    assert code == 0 and "keeping" in out
    first = sorted((root / "data").rglob("*.parquet"))[0]
    if damage == "truncated file":
        first.write_bytes(first.read_bytes()[:100])
    elif damage == "missing file":
        first.unlink()
    elif damage == "other columns":  # a later file of the listed rows, none of the features
        import pyarrow as pa
        import pyarrow.parquet as pq

        later = sorted((root / "data").rglob("*.parquet"))[1]
        pq.write_table(pa.table({"x": range(pq.read_metadata(later).num_rows)}), later)
    else:
        (root / "meta" / "info.json").write_text("{")
    before = sorted((p.relative_to(root), p.stat().st_size) for p in root.rglob("*"))
    code, out, err = run_cli([*args, "--exist-ok"], capsys)
    assert code == 2 and "cannot be read" in err and "another folder" in err, err
    assert len(err.strip().splitlines()) == 1 and "keeping" not in out
    assert sorted((p.relative_to(root), p.stat().st_size) for p in root.rglob("*")) == before
    if damage == "other columns":  # and `accelkit stats` names the column (it said "0 rows …
        # the file changed while it was read, or its metadata is wrong")
        code, _, err = run_cli(["stats", str(root), "-o", str(tmp_path / "n.json")], capsys)
        assert code == 2 and "has no column 'observation.state'; columns: x" in err, err


def test_output_path_that_is_a_folder_is_exit_2(dataset, tmp_path, capsys):
    (tmp_path / "out").mkdir()
    code, _, err = run_cli(
        ["stats", str(dataset), "-o", str(tmp_path / "out"), "--no-progress"], capsys
    )
    assert code == 2 and "is a folder" in err
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize(
    ("flag", "fast"),
    [
        ("--use-fast-stats", True),
        ("--use-fast-stats=True", True),
        ("--use-fast-stats=true", True),
        ("--use-fast-stats=False", False),
        ("--no-use-fast-stats", False),
        ("--fast", True),
        ("--no-fast", False),
    ],
)
def test_openpi_fast_stats_spellings(dataset, tmp_path, capsys, flag, fast):
    """openpi's compute_norm_stats takes --use-fast-stats=True|False (tyro); every spelling works."""
    out_path = tmp_path / "norm.json"
    code, out, _ = run_cli(
        ["stats", str(dataset), flag, "-o", str(out_path), "--no-progress"], capsys
    )
    assert code == 0, out
    assert ("fast (1 pass" in out) is fast and ("rank error bound" in out) is fast


def test_openpi_fast_stats_bad_value(dataset, capsys):
    code, _, err = run_cli(["stats", str(dataset), "--use-fast-stats=maybe"], capsys)
    assert code == 2 and err.strip() == "error: --use-fast-stats takes True or False, not 'maybe'"


def test_bad_values_are_named_by_their_flag_or_variable(dataset, capsys, monkeypatch):
    code, _, err = run_cli(["stats", str(dataset), "--format", "bogus"], capsys)
    assert code == 2 and err.startswith("error: --format 'bogus': ") and "arguments" not in err
    monkeypatch.setenv("ACCELKIT_STATS_SEED", "abc")
    code, _, err = run_cli(["stats", str(dataset)], capsys)
    assert code == 2
    assert err.startswith("error: ACCELKIT_STATS_SEED 'abc': Input should be a valid integer")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--episodes", "1000000000", "--frames", "1000000000"], "--frames"),
        (["--dim", "100000000"], "--dim"),
        (["--episodes", "99999999999999999999999"], "--episodes"),
        (["--frames", "99999999999999999999999"], "--frames"),
        (["--episodes", "1000000000000000", "--frames", "2", "--dim", "1"], "on disk"),
    ],
)
def test_sample_dataset_too_big_is_refused_before_any_work(tmp_path, capsys, args, named):
    """A size no disk or memory holds was "internal error: MemoryError" (exit 1, after 23 s) or
    "ValueError: Maximum allowed dimension exceeded": one line naming the options, exit 2,
    nothing written."""
    root = tmp_path / "big"
    code, _, err = run_cli(["sample-dataset", str(root), *args], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "internal error" not in err and named in err, err
    assert list(tmp_path.iterdir()) == []


def test_sample_dataset_says_what_fits_in_memory_and_on_disk(tmp_path, capsys, monkeypatch):
    """The bounds: one episode in the memory available, the dataset in the free space of the
    disk it goes to; each refusal says what fits, and that fits."""
    from accelkit.stats.formats import synthetic

    monkeypatch.setattr(synthetic, "_available_memory", lambda: 64 << 20)
    root = tmp_path / "s"
    code, _, err = run_cli(["sample-dataset", str(root), "--frames", "1000000"], capsys)
    assert code == 2 and "one episode" in err and "64.0 MiB is available" in err, err
    most = int(err.split("up to --frames ")[1].split()[0].rstrip(")").replace(",", ""))
    assert 2 <= most < 1000000
    synthetic.check_room(root, 20, most, 14, "v2.1", "smooth")  # what it says fits, fits
    with pytest.raises(synthetic.InputError):
        synthetic.check_room(root, 20, most * 2, 14, "v2.1", "smooth")

    class Disk:  # 1 MiB free, files enough
        f_bavail, f_frsize, f_files, f_favail = 256, 4096, 1000, 1000

    monkeypatch.setattr(synthetic.os, "statvfs", lambda where: Disk)
    code, _, err = run_cli(["sample-dataset", str(root), "--episodes", "200"], capsys)
    assert code == 2 and "on disk" in err and "1.0 MiB free" in err and "--episodes" in err, err
    most = int(err.split("up to --episodes ")[1].split()[0].replace(",", ""))
    synthetic.check_room(root, most, 500, 14, "v2.1", "smooth")
    Disk.f_bavail = 1 << 30
    code, _, err = run_cli(["sample-dataset", str(root), "--episodes", "2000"], capsys)
    assert code == 2 and "room for 1,000 more files" in err and "--layout v3.0" in err, err
    assert list(tmp_path.iterdir()) == []


def test_sample_dataset_empty_path_is_refused(tmp_path, capsys, monkeypatch):
    """ "" was the working folder: `. already exists and is not empty`, or in an empty one a
    dataset written there."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["sample-dataset", "", "--episodes", "2", "--frames", "20"], capsys)
    assert code == 2 and err.strip() == (
        "error: the output folder is empty text; give a folder path"
    ), err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag", ["-o", "--output", "--plot"])
def test_stats_empty_output_is_refused(dataset, tmp_path, capsys, monkeypatch, flag):
    """-o "" wrote ./norm_stats.json (and --plot "" drew nothing), as if not given."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(["stats", str(dataset), flag, "", "--no-progress"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{'--plot' if flag == '--plot' else '--output'} '': is empty text" in err, err
    assert list(tmp_path.iterdir()) == []


def test_output_path_that_is_a_folder_is_refused_before_the_dataset_is_read(
    dataset, tmp_path, capsys, monkeypatch
):
    """The folder was refused only once the passes had run."""
    from accelkit.stats.computation import api

    def never(*args, **kwargs):
        raise AssertionError("the dataset was read")

    monkeypatch.setattr(api, "open_source", never)
    (tmp_path / "out").mkdir()
    code, _, err = run_cli(["stats", str(dataset), "-o", str(tmp_path / "out")], capsys)
    assert (
        code == 2
        and err.strip() == f"error: {tmp_path / 'out'} is a folder; give a file path to write to"
    )
    monkeypatch.chdir(tmp_path / "out")  # the default output, ./norm_stats.json, a folder
    (tmp_path / "out" / "norm_stats.json").mkdir()
    code, _, err = run_cli(["stats", str(dataset)], capsys)
    assert (
        code == 2
        and err.strip() == "error: norm_stats.json is a folder; give a file path to write to"
    )
