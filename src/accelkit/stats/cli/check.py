"""`accelkit stats check`: parse, call `accelkit.stats.check` (and `fix` with --fix), render the
table of stored statistics off by more than the tolerance, or the `--json` envelope; exit 3 when
some are off (docs/cli.md)."""

from __future__ import annotations

from typing import Annotated

import typer

from accelkit.errors import CheckFailed
from accelkit.stats.settings import parse_keys


def check_command(
    dataset: Annotated[
        str,
        typer.Argument(
            help="LeRobot dataset folder (v2.1 or v3.0), or repo id (owner/name) as LeRobot finds it."
        ),
    ],
    stats_files: Annotated[
        list[str] | None,
        typer.Option(
            "--stats",
            help="Also an openpi norm_stats.json to compare (repeat for several); its keys map to"
            " columns by --keys (default state=observation.state,actions=action).",
        ),
    ] = None,
    keys: Annotated[
        str | None,
        typer.Option(
            "--keys", help="norm_stats.json keys and their columns: state=col,actions=col"
        ),
    ] = None,
    action_horizon: Annotated[
        int | None,
        typer.Option(
            "--action-horizon",
            help="norm_stats.json of H-step action chunks (default: what its sidecar records).",
        ),
    ] = None,
    chunk_end: Annotated[
        str | None,
        typer.Option("--chunk-end", help="With --action-horizon: truncate (default) or clamp."),
    ] = None,
    tolerance: Annotated[
        float | None,
        typer.Option(
            "--tolerance",
            help="Largest error allowed, in stds (mean, std) or ranges (min, max, quantiles);"
            " default 1e-3, a quarter of bfloat16's step near 1 (docs/stats.md).",
        ),
    ] = None,
    images: Annotated[
        str | None,
        typer.Option(
            "--images",
            help="Camera statistics: none (default: named, not compared), sample (LeRobot's frame"
            " sample, as it stores them) or all (every frame).",
        ),
    ] = None,
    plot: Annotated[
        str | None,
        typer.Option("--plot", help="Draw each feature's error per dimension: PATH.png."),
    ] = None,
    fix_: Annotated[
        bool,
        typer.Option(
            "--fix",
            help="Write the exact statistics in place (stats.json, per-episode files, the"
            " --stats files), atomically; the old files are kept under meta/.accelkit-backup/.",
        ),
    ] = False,
    no_progress: Annotated[
        bool, typer.Option("--no-progress", help="Hide the progress bar.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print every finding as JSON on stdout.")
    ] = False,
) -> None:
    """How far the statistics stored in a dataset (and norm_stats.json files) are from the exact
    ones, and why. Exit 0: all within --tolerance; 3: some are not; 2: bad input."""
    from accelkit.stats.checking.api import check, fix

    report = check(
        dataset,
        stats_files=stats_files or [],
        keys=parse_keys(keys),
        action_horizon=action_horizon,
        chunk_end=chunk_end,
        tolerance=tolerance,
        images=images or "none",
        plot=plot,
        progress=not no_progress,
    )
    if fix_ and not report.ok:
        fix(report)
    render(report, as_json)
    if not report.ok and not report.fixed:
        raise CheckFailed(
            f"{report.verdict()} in {report.dataset}; `accelkit stats check {dataset} --fix` writes"
            " the exact ones"
        )


def render(report, as_json: bool) -> None:
    """The --json envelope, or the table, the causes' legend, the worst error per file and the
    verdict."""
    from accelkit.stats.core.tolerance import format_error

    rows = report.summary()
    fixed, plot_path = report.fixed, report.plot
    if as_json:
        from accelkit.runtime.json_output import print_json

        print_json(
            report.document(),
            ok=report.ok or bool(fixed),
        )
        return
    from accelkit.runtime.tables import Col, print_table, stdout_console
    from accelkit.stats.checking.causes import legend

    if rows:
        table = [
            [
                r["file"],
                r["feature"],
                r["statistic"] or "-",
                _numbers(r),
                r["worst"] + (f" ep. {r['worst_episode']}" if r["episodes"] else ""),
                format_error(r["error"], r["unit"]),
                r["cause"],
                str(len(r["episodes"])) if r["episodes"] else "",
            ]
            for r in rows
        ]
        print_table(
            f"stored numbers off by more than {report.tolerance:g}",
            [
                Col("stored in", key=True),
                Col("feature"),
                Col("statistic", short="stat."),
                Col("n (dims)", numeric=False),
                Col("worst"),
                Col("error", numeric=True),
                Col("cause"),
                Col("episodes", numeric=True, short="ep."),
            ],
            table,
        )
        console = stdout_console()
        for line in legend(r["cause"] for r in rows):  # wrapped at the terminal's width
            console.print(line, markup=False, highlight=False)
    worst = report.worst_by_file()
    for file, item in worst.items():
        print(
            f"{file}: worst {item['statistic']} of {item['feature']}:"
            f" {item['cause'] or format_error(item['error'], item['unit'])}"
        )
    for note in report.not_checked:
        print(f"not checked: {note}")
    print(report.verdict())
    if fixed:
        print(f"fixed: wrote {', '.join(fixed.written)}")
        if fixed.backups:
            print(f"previous files kept in {', '.join(fixed.backups)}")
    if plot_path is not None:
        print(f"drew the errors in {plot_path}")


def _numbers(row: dict) -> str:
    """How many numbers a row holds and in which dimensions: "12 (0, 2, 5)"; "" for a whole entry."""
    if not row["numbers"]:
        return ""
    dims = row["dimensions"]
    shown = ", ".join(str(d) for d in dims[:6]) + (", …" if len(dims) > 6 else "")
    return f"{row['numbers']} ({shown})"
