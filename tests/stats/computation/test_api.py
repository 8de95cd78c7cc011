"""The library API the command line calls (`accelkit.stats.compute`, `check`, `fix`): the same
results as the commands, as objects; the command's `--json` result is the object's `document()`."""

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import accelkit.stats as stats
from accelkit.errors import ConfigError
from tests.support.cli import run_cli

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_the_api_is_exported_lazily_and_names_are_functions():
    for name in ("compute", "check", "fix"):
        assert callable(getattr(stats, name)) and name in stats.__all__
    assert {"ComputeResult", "CheckReport", "FixResult"} <= set(stats.__all__)


def test_compute_returns_what_it_wrote_and_what_the_command_prints(tmp_path, capsys):
    root = FIXTURES / "lerobot_v30"
    done = stats.compute(root, output=tmp_path / "a" / "norm_stats.json")
    written = json.loads((tmp_path / "a" / "norm_stats.json").read_text())
    assert done.written == written and done.output == tmp_path / "a" / "norm_stats.json"
    action = np.concatenate(
        [
            np.asarray(pq.read_table(p, columns=["action"]).column("action").to_pylist())
            for p in sorted((root / "data").rglob("*.parquet"))
        ]
    ).astype(np.float32)
    np.testing.assert_array_equal(
        done.result.stats["actions"].quantiles[0.99],
        np.quantile(action, np.asarray([0.99]), axis=0)[0],
    )
    code, out, err = run_cli(
        ["stats", str(root), "-o", str(tmp_path / "b" / "norm_stats.json"), "--json", "--no-progress"],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)["result"]
    assert doc["stats"] == done.document()["stats"] and doc["format"] == "openpi"


def test_compute_names_a_bad_option():
    with pytest.raises(ConfigError, match="max-frames 0: must be positive"):
        stats.compute(FIXTURES / "lerobot_v30", max_frames=0)


def test_check_then_fix_as_objects_equal_the_command(tmp_path, capsys):
    root = Path(shutil.copytree(FIXTURES / "lerobot_v30", tmp_path / "ds"))
    report = stats.check(root)
    assert isinstance(report, stats.CheckReport) and not report.ok
    assert report.verdict() == "435 of 1,368 stored numbers off by more than 0.001"
    code, out, _ = run_cli(["stats", "check", str(root), "--json", "--no-progress"], capsys)
    assert code == 3 and json.loads(out)["result"] == json.loads(json.dumps(report.document()))
    fixed = stats.fix(report)
    assert fixed.written == [str(root / "meta" / "stats.json")] and len(fixed.backups) == 1
    assert report.fixed is fixed and stats.check(root).ok


def test_no_room_shadows_an_exported_name():
    """A subpackage named like an exported function (`stats/compute/`, `stats/check/`) would
    replace it on the package once imported; the rooms are named so none does."""
    import importlib
    import pkgutil

    for module in pkgutil.walk_packages(stats.__path__, "accelkit.stats."):
        importlib.import_module(module.name)
    for name in stats.__all__:
        assert not isinstance(getattr(stats, name), type(stats)), name
    assert callable(stats.compute) and callable(stats.check) and callable(stats.diff)


def test_every_result_object_writes_its_json_by_document():
    """One JSON method name on every stats result (docs/architecture.md: `.document()`); some
    once said `.as_dict()`."""
    import importlib
    import inspect
    import pkgutil

    seen = 0
    for module in pkgutil.walk_packages(stats.__path__, "accelkit.stats."):
        for _, cls in inspect.getmembers(importlib.import_module(module.name), inspect.isclass):
            if cls.__module__.startswith("accelkit.stats"):
                assert not hasattr(cls, "as_dict") and not hasattr(cls, "to_dict"), cls
                seen += hasattr(cls, "document")
    assert seen >= 6  # ComputeResult, CheckReport, FixResult, DiffReport, Finding, Difference


def test_fix_needs_the_report_check_returned():
    with pytest.raises(ConfigError, match=r"stats\.check\(\) returned"):
        stats.fix(stats.CheckReport(dataset="x", tolerance=1e-3))


def test_every_option_is_one_list_checked_four_ways():
    """Each stats option is a `StatsSettings` field; `compute` takes each as a keyword with the
    field's default (so help() and editors show them), the command line hands each to
    `load_settings` from one typer parameter, and `engine_options` reads only fields."""
    import ast
    import inspect

    from accelkit.stats.cli import stats_command
    from accelkit.stats.settings import StatsSettings, engine_options

    fields = StatsSettings.model_fields
    parameters = inspect.signature(stats.compute).parameters
    assert set(parameters) - {"progress", "settings"} == set(fields)
    for name, field in fields.items():
        assert parameters[name].default == field.default, name
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY or name == "dataset"

    face = ast.parse(inspect.getsource(stats_command))
    call = next(
        node
        for node in ast.walk(face)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "load_settings"
    )
    given = {k.arg: k.value for k in call.keywords}
    assert set(given) - {"yaml_path", "section", "env_prefix"} == set(fields)
    used = {n.id for k in call.keywords for n in ast.walk(k.value) if isinstance(n, ast.Name)}
    options = set(inspect.signature(stats_command).parameters)
    assert options - used == {"no_progress", "as_json"}  # the face's own: how to render

    read = {
        n.attr
        for n in ast.walk(ast.parse(inspect.getsource(engine_options)))
        if isinstance(n, ast.Attribute) and getattr(n.value, "id", "") == "settings"
    }
    assert read and read <= set(fields)
