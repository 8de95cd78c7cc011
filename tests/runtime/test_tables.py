"""Tables that fit: at 80 and 120 columns no table cuts a number, a unit or a file name
(`runtime.tables.fitting_table`), checked on the shared helper and on each capability's real
output (stats, bench, quant, devices; images in tests/images/cli/test_table_widths.py)."""

from __future__ import annotations

import json
import re

import pytest
from rich.console import Console

from accelkit.runtime.tables import Col, fitting_table
from tests.support.cli import run_cli
from tests.support.tables import WIDTHS, assert_whole


def render(title, columns, rows, width, **kwargs) -> str:
    console = Console(width=width, color_system=None, record=True, file=_Null())
    for part in fitting_table(title, columns, rows, width=width, **kwargs):
        console.print(part)
    return console.export_text()


class _Null:
    def write(self, text):
        return len(text)

    def flush(self):
        pass


LONG_NAME = "shapes/circle_red_with_a_name_longer_than_most_0001.png"


@pytest.mark.parametrize("width", WIDTHS)
def test_helper_keeps_numbers_units_and_file_names_whole(width):
    columns = ["rank", "source", "id", "score", "median s", "throughput", "metadata"]
    rows = [
        [1, LONG_NAME, 449238498234123, "0.98765", "10.55 ms", "3.1 GB/s", '{"color": "red"}'],
        [2, "shapes/square_blue_0002.png", 7, "0.5", "1.2 µ", "12 GB/s", "{}"],
    ]
    text = render("top 2 in a collection for a query", columns, rows, width)
    assert_whole(text, width, [c for row in rows for c in row])


@pytest.mark.parametrize("width", WIDTHS)
def test_wide_numeric_tables_abbreviate_then_split(width):
    names = [f"statistic number {i}" for i in range(12)]
    columns = [
        Col("dim", numeric=True, key=True),
        *(Col(n, numeric=True, short=f"s{i}") for i, n in enumerate(names)),
    ]
    rows = [
        [str(d), *(f"{-1.2345e-05 * (d + 1) * (i + 1):.5g}" for i in range(12))] for d in range(4)
    ]
    text = render("wide", columns, rows, width)
    assert_whole(text, width, [c for row in rows for c in row])
    assert "s0 = statistic number 0" in text  # short headers come with their legend
    if width == 80:
        assert "(1/3)" in text  # and split into parts that repeat the key column


def test_too_narrow_falls_back_to_one_table_per_row():
    rows = [["a_file_name_that_is_long.png", "0.123456789", "12.5 ms"]]
    text = render("t", ["source", "score", "time"], rows, 44)
    assert "(1/1)" in text
    assert_whole(text, 44, rows[0])


def test_cells_are_plain_text_not_markup():
    text = render("t", ["name"], [["[bold]x[/bold] [red]"]], 80)
    assert "[bold]x[/bold] [red]" in text


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from accelkit.stats.formats.synthetic import write_sample_dataset

    return write_sample_dataset(
        tmp_path_factory.mktemp("tables") / "a_dataset_folder_with_a_long_name",
        episodes=3,
        frames_per_episode=80,
        dim=5,
        layout="v2.1",
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_stats_tables_fit(dataset, tmp_path, capsys, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    out = tmp_path / "stats.json"
    code, printed, err = run_cli(
        ["stats", str(dataset), "--format", "lerobot", "-o", str(out), "--no-progress"], capsys
    )
    assert code == 0, err
    written = json.loads(out.read_text())
    cells = []
    for entry in written.values():
        for name in ("mean", "std", "min", "max", "q01", "q10", "q50", "q90", "q99"):
            cells += [f"{float(v):.5g}" for v in entry[name]]
    assert_whole(printed, width, cells)


@pytest.mark.parametrize("width", WIDTHS)
def test_bench_tables_fit(tmp_path, capsys, monkeypatch, width):
    from accelkit.bench.harness import Result
    from accelkit.bench.render import check_row, timing_row

    monkeypatch.setenv("COLUMNS", str(width))
    out = tmp_path / "xla.json"
    code, printed, err = run_cli(
        ["bench", "xla", "numpy,pytorch", "--matrix-size", "40", "--repeats", "3",
         "--threads", "1", "--output", str(out)],
        capsys,
    )  # fmt: skip
    assert code == 0, err
    result = Result.from_json(json.loads(out.read_text())["results"][0])
    cells = [c for t in result.timings for c in timing_row(t)]
    cells += [c for c in (cell for ch in result.checks for cell in check_row(ch)[:5]) if c != "-"]
    assert cells and "m = milliseconds" in printed
    assert_whole(printed, width, cells)


@pytest.mark.parametrize("width", WIDTHS)
def test_quant_eval_table_fits(tmp_path, capsys, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    out = tmp_path / "eval.json"
    code, printed, err = run_cli(
        ["quant", "eval", "--methods", "fp32,rtn", "--bits", "w4a8", "--pairs", "2",
         "--no-latency", "--output", str(out)],
        capsys,
    )  # fmt: skip
    assert code in (0, None), err
    rows = json.loads(out.read_text())["rows"]
    cells = []
    for r in rows:
        cells += [r["label"], f"{r['mean_cosine']:.4f}", f"{r['min_cosine']:.4f}"]
        cells += [f"{r['top1_agreement']:.3f}", f"{r['quant_layers_mb']:.2f}"]
        kernels = r["kernels"] or {}
        cells += [f"{k}×{n}" if len(kernels) > 1 else k for k, n in kernels.items()]
    assert_whole(printed, width, cells)


@pytest.mark.parametrize("width", WIDTHS)
def test_devices_table_fits(capsys, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    code, printed, err = run_cli(["devices"], capsys)
    assert code in (0, None), err
    code, document, _ = run_cli(["devices", "--json"], capsys)
    info = json.loads(document)["result"]
    assert_whole(printed, width, [info["torch"].get("version", ""), info["jax"].get("version", "")])


@pytest.mark.parametrize("width", WIDTHS)
def test_a_path_wider_than_its_column_breaks_after_a_slash(width):
    path = "/data/" + "/".join(f"folder_number_{i}" for i in range(8)) + "/" + LONG_NAME
    text = render("inserted", ["input", "id"], [[path, 449238498234123]], width)
    assert_whole(text, width, [LONG_NAME.rsplit("/", 1)[1], "449238498234123"])
    joined = re.sub(r"[│┃\s]|449238498234123", "", text)
    assert path in joined  # every character kept, in order


def test_stats_in_a_real_terminal_of_80_columns(dataset, tmp_path):
    """On a terminal (a pty) the width is the terminal's: every table line fits 80 columns and
    every number of the statistics file shows whole."""
    from tests.support.terminal import accelkit, run_in_terminal

    out = tmp_path / "stats.json"
    run = run_in_terminal(
        accelkit("stats", str(dataset), "--format", "lerobot", "-o", str(out), "--no-progress"),
        columns=80,
        timeout=600,
    )
    assert run.code == 0, run.output[-3000:]
    written = json.loads(out.read_text())
    cells = [
        f"{float(v):.5g}"
        for entry in written.values()
        for name in ("mean", "q99")
        for v in entry[name]
    ]
    assert_whole(run.output, 80, cells)
