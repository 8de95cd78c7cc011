"""What a person reads: rich tables, matplotlib figures and the markdown report."""

from __future__ import annotations

import math
from pathlib import Path

from accelkit.bench.harness import Result, Timing
from accelkit.runtime.files import atomic_open
from accelkit.runtime.tables import Col, print_table, stdout_console


def fmt_s(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds >= 1:
        return f"{seconds:.3f}"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} m"
    return f"{seconds * 1e6:.1f} µ"


def fmt_num(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if x == 0 or 1e-3 <= abs(x) < 1e5:
        return f"{x:.5g}"
    return f"{x:.3e}"


TIMING_COLUMNS = (
    "operation",
    "backend",
    "device",
    "size",
    "first call s",
    "median s",
    "min s",
    "IQR s",
    "n",
)


def timing_row(t: Timing) -> tuple[str, ...]:
    name = t.name if t.synchronized else f"{t.name} (UNSYNCED)"
    return (
        name,
        t.backend,
        t.device,
        "-" if t.size is None else str(t.size),
        fmt_s(t.first_s),
        fmt_s(t.median_s),
        fmt_s(t.min_s),
        fmt_s(t.iqr_s),
        str(len(t.times_s)),
    )


def check_row(c) -> tuple[str, ...]:
    return (
        c.name,
        fmt_num(c.value),
        fmt_num(c.expected),
        fmt_num(c.tolerance),
        "ok" if c.passed else "FAIL",
        c.detail,
    )


def print_result(result: Result, console=None) -> None:
    """Timings, checks and facts of one result as rich tables (times in s, ms = 'm', µs = 'µ')."""
    console = console or stdout_console()
    params = ", ".join(f"{k}={v}" for k, v in result.params.items())
    if result.timings:
        print_table(
            f"accelkit bench {result.experiment} — {params}",
            [
                Col(
                    col,
                    numeric=col not in ("operation", "backend", "device"),
                    key=col == "operation",
                )
                for col in TIMING_COLUMNS
            ],
            [list(timing_row(t)) for t in result.timings],
            console=console,
            caption="times in seconds; m = milliseconds, µ = microseconds",
        )
    if result.checks:
        print_table(
            f"{result.experiment}: correctness checks",
            [Col("check", key=True), "value", "expected", "tolerance", "result", "detail"],
            [list(check_row(c)) for c in result.checks],
            console=console,
            row_styles=[None if c.passed else "bold red" for c in result.checks],
        )
    if result.facts:
        print_table(
            f"{result.experiment}: facts",
            [Col("fact", numeric=False), Col("value", numeric=False)],
            [
                [k, fmt_num(v) if isinstance(v, int | float) else str(v)]
                for k, v in result.facts.items()
                if not (isinstance(v, str) and "\n" in v)  # a sharding picture: printed below
            ],
            console=console,
        )
        for k, v in result.facts.items():
            if isinstance(v, str) and "\n" in v:
                console.print(f"{k}:\n{v}", highlight=False, markup=False, soft_wrap=True)
    for note in result.notes:
        console.print(f"note: {note}", highlight=False, markup=False)


def _spans_decades(values) -> bool:
    """Log axes for data spanning two decades or more (array lengths); epochs and accuracies read linearly."""
    finite = [v for v in values if v is not None]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) >= 100


def plot_results(results: list[Result], path: str | Path) -> Path:
    """One panel per result: its series as lines, else median times as grouped bars (log axes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [r for r in results if r.series or r.timings]
    cols = min(2, max(1, len(panels)))
    rows = max(1, math.ceil(len(panels) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 4.2 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, result in zip(axes.flat, panels, strict=False):
        if result.series:
            for s in result.series:
                dashed = s.get("linestyle") == "dashed"  # optional: a curve drawn over another
                ax.plot(
                    s["x"],
                    s["y"],
                    marker="x" if dashed else "o",
                    linestyle="--" if dashed else "-",
                    label=s["label"],
                )
            ax.set_xlabel(result.series[0]["xlabel"])
            ax.set_ylabel(result.series[0]["ylabel"])
            if _spans_decades([x for s in result.series for x in s["x"]]):
                ax.set_xscale("log")
            if _spans_decades([y for s in result.series for y in s["y"]]):
                ax.set_yscale("log")
        else:
            timed = [t for t in result.timings if t.synchronized]
            names = list(dict.fromkeys(t.name for t in timed))
            backends = list(dict.fromkeys(f"{t.backend}@{t.device}" for t in timed))
            width = 0.8 / max(1, len(backends))
            for b_index, backend in enumerate(backends):
                xs, ys = [], []
                for n_index, name in enumerate(names):
                    match = [
                        t for t in timed if t.name == name and f"{t.backend}@{t.device}" == backend
                    ]
                    if match:
                        xs.append(n_index + b_index * width)
                        ys.append(match[0].median_s)
                ax.bar(xs, ys, width=width, label=backend)
            ax.set_xticks(
                [i + 0.4 - width / 2 for i in range(len(names))], names, rotation=20, ha="right"
            )
            ax.set_ylabel("median seconds (log)")
            ax.set_yscale("log")
        ax.set_title(f"bench {result.experiment}")
        ax.grid(True, alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    target = Path(path)
    with atomic_open(target, "wb") as handle:
        fig.savefig(handle, format="png", dpi=110)
    plt.close(fig)
    return target


def _md_table(header, rows) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += [
        "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in row) + " |"
        for row in rows
    ]
    return lines


def markdown_report(
    results: list[Result],
    env: dict,
    figure: str | None = None,
    title: str = "accelkit bench report",
    quick: bool = False,
) -> str:
    """The report: environment, then per experiment its timings, checks, facts and notes."""
    versions = ", ".join(f"{k} {v}" for k, v in env.get("versions", {}).items() if v)
    lines = [
        f"# {title}",
        "",
        f"Generated {env.get('time_utc')} on {env.get('platform')} ({env.get('machine')}), "
        f"{env.get('cpu_count')} CPUs, load average {env.get('load_average')}; Python {env.get('python')}; {versions}.",
        f"JAX devices: {', '.join(env.get('jax_devices', [])) or '-'}; torch CUDA: {env.get('torch_cuda') or 'none'}; "
        f"threads: {env.get('threads')}.",
        "",
        *(
            [
                "**Quick run** (`bench all --quick`): tiny sizes, a smoke test of every experiment;"
                " these times are not measurements — run `accelkit bench all` for those.",
                "",
            ]
            if quick
            else []
        ),
        "Times are seconds (`m` = milliseconds, `µ` = microseconds). *first call* includes tracing and "
        "compilation; *median*, *min* and *IQR* are over synchronized steady-state repeats. Rows marked "
        "UNSYNCED stop the clock before the work is done — shown only to explain published numbers.",
        "",
        "| experiment | checks |",
        "|---|---|",
    ]
    lines += [
        f"| {r.experiment} | {sum(c.passed for c in r.checks)}/{len(r.checks)} passed |"
        for r in results
    ]
    lines.append("")
    if figure:
        lines += [f"![timings]({figure})", ""]
    for r in results:
        lines += [
            f"## {r.experiment}",
            "",
            "Parameters: " + ", ".join(f"`{k}={v}`" for k, v in r.params.items()),
            "",
        ]
        if r.timings:
            lines += [*_md_table(TIMING_COLUMNS, [timing_row(t) for t in r.timings]), ""]
        if r.checks:
            lines += [
                *_md_table(
                    ("check", "value", "expected", "tolerance", "result", "detail"),
                    [check_row(c) for c in r.checks],
                ),
                "",
            ]
        plain = {k: v for k, v in r.facts.items() if not (isinstance(v, str) and "\n" in v)}
        if plain:
            lines += [
                *_md_table(
                    ("fact", "value"),
                    [
                        (k, fmt_num(v) if isinstance(v, int | float) else v)
                        for k, v in plain.items()
                    ],
                ),
                "",
            ]
        for k, v in r.facts.items():
            if isinstance(v, str) and "\n" in v:
                lines += [f"{k}:", "", "```", v.rstrip(), "```", ""]
        lines += [f"- {n}" for n in r.notes]
        if r.notes:
            lines.append("")
    return "\n".join(lines)
