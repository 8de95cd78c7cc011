"""What `accelkit stats` prints after a run: the run's facts and each key's statistics as
tables (`--json` prints the result's document instead). Called by `stats/cli/__init__.py`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

    from accelkit.runtime.storage import ObjectPath


def _format_count(n: float) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e6 else f"{n:,.0f}"


def print_report(result, output: Path | ObjectPath, fmt: str, source_name: str) -> None:
    import numpy as np
    from rich.text import Text

    from accelkit.runtime.tables import Col, print_table, stdout_console
    from accelkit.stats.core.quantiles import quantile_name
    from accelkit.stats.formats.stats_files import sidecar_path

    console = stdout_console()
    s = result.summary
    run: list[list[str | Text]] = [
        ["mode", f"{s.mode} ({s.passes} pass{'es' if s.passes != 1 else ''} over the data)"],
        [
            "devices",
            f"{s.platform}: {len(s.devices)} ({', '.join(s.devices[:4])}{' …' if len(s.devices) > 4 else ''})",
        ],
        [
            "batch size",
            f"{s.batch_size:,} rows ({s.compiles} kernel shape{'s' if s.compiles != 1 else ''} compiled or loaded from cache)",
        ],
        ["rows", f"{s.rows:,}"],
        [
            "time",
            f"{s.seconds:.2f} s, {_format_count(s.rows_per_second)} rows/s end to end (passes: {', '.join(f'{t:.2f} s' for t in s.pass_seconds)})",
        ],
    ]
    memory = f"{s.peak_rss_bytes / 2**20:,.0f} MiB host RSS"
    if s.peak_device_bytes is not None:
        memory += f", {s.peak_device_bytes / 2**20:,.0f} MiB device"
    run.append(["peak memory", memory])
    if s.partial:
        run.append(
            [Text("partial", style="yellow"), "time budget ran out; results cover the rows above"]
        )
    print_table(
        f"accelkit stats: {source_name}",
        [Col("what", numeric=False), Col("value", numeric=False)],
        run,
        console=console,
        show_header=False,
    )
    for key, stats in result.stats.items():
        levels = sorted(stats.quantiles)
        names = ["mean", "std", "min", "max", *(quantile_name(q) for q in levels)]
        shown = min(stats.dim, 16)
        rows = []
        for d in range(shown):
            cells = [
                stats.mean[d],
                stats.std[d],
                stats.min[d],
                stats.max[d],
                *(stats.quantiles[q][d] for q in levels),
            ]
            rows.append([str(d), *(f"{float(v):.5g}" for v in cells)])
        print_table(
            f"{key}: {stats.dim} dims, count {int(stats.count.max()):,}",
            [Col("dim", numeric=True, key=True), *(Col(n, numeric=True) for n in names)],
            rows,
            console=console,
            caption=f"{stats.dim - shown} more dimensions in {output}"
            if stats.dim > shown
            else None,
        )
        if stats.rank_error_bound is not None:
            worst = max(float(np.max(b)) for b in stats.rank_error_bound.values())
            console.print(
                f"  fast-mode rank error bound for {key}: {worst:.2e} of the rows (exact mode: 0)"
            )
        if int(stats.nonfinite.sum()):
            console.print(
                f"  skipped {int(stats.nonfinite.sum()):,} non-finite values in {key} (per dimension: {stats.nonfinite.tolist()})"
            )
    console.print(
        f"wrote {output} ({fmt}{', partial' if s.partial else ''}); run facts in {output.parent / sidecar_path(output.name).name}",
        soft_wrap=True,
    )
