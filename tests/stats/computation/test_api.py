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


def test_every_option_is_declared_once_in_the_model():
    """Each stats option is a `StatsSettings` field and nothing else: `compute` takes each as a
    keyword with the field's default, `accelkit stats` has one option per field (its help the
    field's description), the face's own options are how to run and render, and its body names
    no option (it hands what it read to `load_settings` whole)."""
    import ast
    import inspect

    import typer

    from accelkit.stats.cli import stats_command
    from accelkit.stats.settings import StatsSettings, engine_options

    fields = StatsSettings.model_fields
    parameters = inspect.signature(stats.compute).parameters
    assert set(parameters) - {"progress", "settings"} == set(fields)
    for name, field in fields.items():
        assert parameters[name].default == field.default, name
        assert parameters[name].annotation == field.annotation, name
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY or name == "dataset"

    app = typer.Typer(add_completion=False)
    app.command()(stats_command)
    options = {p.name: p for p in typer.main.get_command(app).params}
    own = {"config", "config_name", "no_progress", "as_json"}  # the face's: which job, rendering
    assert set(options) - own == set(fields)
    for name, field in fields.items():
        assert field.description, f"{name}: no help text"
        assert options[name].help == field.description, name
        assert options[name].default in (None, False), name  # not given: config/env/model decide
    # the face's body names no option: every option reaches the model whole, through `given`
    body = ast.parse(inspect.getsource(stats_command)).body[0]
    assert not {n.id for n in ast.walk(body) if isinstance(n, ast.Name)} & set(fields)

    read = {
        n.attr
        for n in ast.walk(ast.parse(inspect.getsource(engine_options)))
        if isinstance(n, ast.Attribute) and getattr(n.value, "id", "") == "settings"
    }
    assert read and read <= set(fields)
