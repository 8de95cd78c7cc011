"""`accelkit stats diff A B`: parse, call `accelkit.stats.diff`, render the table of statistics
that differ by more than the tolerance (and why, with --dataset), or the `--json` envelope; exit 3
when some do (docs/cli.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from accelkit.errors import CheckFailed
from accelkit.stats.settings import parse_keys

WHAT = (
    "an openpi norm_stats.json, a LeRobot stats.json, or a dataset folder or repo id (owner/name,"
    " found as LeRobot finds it), which means its meta/stats.json (v2.1 without one: its"
    " episodes_stats.jsonl aggregated as LeRobot does when loading it)"
)


def diff_command(
    a: Annotated[str, typer.Argument(help=f"A: {WHAT}.")],
    b: Annotated[str, typer.Argument(help="B: the same kinds as A.")],
    dataset: Annotated[
        str | None,
        typer.Option(
            "--dataset",
            help="The LeRobot dataset (folder or repo id) both files describe: recompute each"
            " differing number from it and name the cause where one gives both numbers back.",
        ),
    ] = None,
    keys: Annotated[
        str | None,
        typer.Option(
            "--keys",
            help="norm_stats.json keys and their columns where the file's sidecar does not say:"
            " state=col,actions=col (default state=observation.state,actions=action).",
        ),
    ] = None,
    tolerance: Annotated[
        float | None,
        typer.Option(
            "--tolerance",
            help="Largest difference allowed, in stds (mean, std) or ranges (min, max,"
            " quantiles), the smaller of the two files'; default 1e-3.",
        ),
    ] = None,
    action_horizon: Annotated[
        int | None,
        typer.Option(
            "--action-horizon",
            help="With --dataset: the action horizon a norm_stats.json without run facts was"
            " computed with (openpi's model.action_horizon).",
        ),
    ] = None,
    chunk_end: Annotated[
        str | None,
        typer.Option(
            "--chunk-end", help="With --action-horizon: truncate or clamp (default: both)."
        ),
    ] = None,
    delta_actions: Annotated[
        str | None,
        typer.Option(
            "--delta-actions",
            help="With --dataset: openpi's DeltaActions mask (6,-1,6,-1) of an openpi file"
            " without run facts (default: found from its means).",
        ),
    ] = None,
    openpi_batch_size: Annotated[
        int,
        typer.Option(
            "--openpi-batch-size",
            help="With --dataset: the batch size openpi's compute_norm_stats.py ran with (its"
            " config's batch_size; it drops the last partial batch).",
        ),
    ] = 32,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="Hide the progress bar.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print every difference as JSON on stdout.")
    ] = False,
) -> None:
    """How far two statistics files are apart, per key and dimension (in stds and ranges), and
    with --dataset why. Exit 0: all within --tolerance; 3: some are not; 2: bad input."""
    from accelkit.stats.diffing.api import diff

    report = diff(
        a,
        b,
        dataset=dataset,
        keys=parse_keys(keys),
        tolerance=tolerance,
        action_horizon=action_horizon,
        chunk_end=chunk_end,
        delta_actions=delta_actions,
        openpi_batch_size=openpi_batch_size,
        progress=not no_progress,
    )
    render(report, as_json)
    if not report.ok:
        raise CheckFailed(f"{report.verdict()}: A {a}, B {b}")


def _worst(row: dict) -> str:
    """The key and its worst statistic, and how many of its dimensions differ."""
    n = len(row["dimensions"])
    return f"{row['key']} {row['worst']}" + (f" ({n} dims)" if n > 1 else "")


def _number(value) -> str:
    return "-" if value is None else f"{value:.5g}"


def render(report, as_json: bool) -> None:
    """The --json envelope, or both files, the table, the causes' legend and the verdict."""
    if as_json:
        from accelkit.runtime.json_output import print_json

        print_json(report.document(), ok=report.ok)
        return
    from accelkit.runtime.tables import Col, print_table, stdout_console
    from accelkit.stats.core.tolerance import format_error
    from accelkit.stats.diffing.causes import DIFF_CAUSE_HELP, DIFF_CAUSES

    console = stdout_console()
    for name, side in (("A", report.a), ("B", report.b)):
        console.print(f"{name}: {side.path} ({side.read})", markup=False, highlight=False)
    rows = report.summary()
    if rows:
        print_table(
            f"statistics that differ by more than {report.tolerance:g}",
            [
                Col("worst difference", key=True),
                Col("A", numeric=True),
                Col("B", numeric=True),
                Col("difference", numeric=True, short="diff."),
                Col("cause"),
            ],
            [
                [
                    _worst(r),
                    _number(r["a"]),
                    _number(r["b"]),
                    format_error(r["error"] if r["error"] is not None else float("inf"), r["unit"]),
                    r["cause"] or "-",
                ]
                for r in rows
            ],
            console=console,
        )
        used = " ".join(r["cause"] for r in rows)
        for key, name in DIFF_CAUSES.items():
            if name.split(" (")[0] in used or (key == "delta" and "delta actions" in used):
                console.print(DIFF_CAUSE_HELP[key], markup=False, highlight=False)
    c = report.comparison
    for label, keys in (("only in A", c.only_in_a), ("only in B", c.only_in_b)):
        if keys:
            console.print(
                f"{label} (not compared): {', '.join(keys)}", markup=False, highlight=False
            )
    for line in [*c.not_compared, *report.notes]:
        console.print(f"not compared: {line}" if line in c.not_compared else line, markup=False)
    console.print(report.verdict(), markup=False, highlight=False)
