"""`accelkit stats --plot PATH`: the run's distributions as a figure (PNG) or a self-contained page
(HTML), from the numbers the run wrote.

`plot_data` gathers, per key, the statistics exactly as the output file holds them, bars made from
the pass's own histogram (`histograms.bars`; no second read of the data), the flags of dimensions
that look broken, and with per-episode statistics every episode's means. The figure is drawn from
that document alone, and the document travels inside the figure: a PNG's `accelkit-stats` text
chunk, or the page's `<script type="application/json" id="accelkit-stats-data">`. `read_plot_data`
reads it back, which is how the tests check that the picture shows the JSON's numbers.
"""

from __future__ import annotations

import base64
import html
import io
import json
import logging
import math
from pathlib import Path

import numpy as np

from accelkit.errors import ConfigError
from accelkit.runtime import storage
from accelkit.runtime.files import atomic_open
from accelkit.stats.core import histograms
from accelkit.stats.core.quantiles import quantile_name

log = logging.getLogger(__name__)

MAX_PANELS = 32  # dimensions drawn per key (all of them are in the data and the page's table)
COLUMNS = 8  # panels per row
PNG_KEY = "accelkit-stats"
HTML_ID = "accelkit-stats-data"


def check_plot_path(path: str) -> Path:
    """The --plot target, checked before the run: a local .png or .html file, matplotlib present."""

    if storage.is_uri(path) and not str(path).startswith("file:"):
        raise ConfigError(f"--plot {path}: figures are written to a local file; give a local path")
    target = Path(str(path).removeprefix("file://")).expanduser()
    if target.suffix.lower() not in (".png", ".html"):
        raise ConfigError(f"--plot {path}: give a file name ending in .png or .html")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ConfigError(
            "--plot needs matplotlib; install it with: pip install 'accelkit[stats]'"
        ) from None
    return target


def _floats(values) -> list[float | None]:
    """As the statistics files write them: float64 values, null where not finite."""
    return [float(v) if math.isfinite(v) else None for v in np.asarray(values, np.float64).tolist()]


def plot_data(result, column_names: dict, source: str, max_panels: int = MAX_PANELS) -> dict:
    """The document a figure is drawn from (JSON-ready): per key its statistics, its first
    `max_panels` dimensions' bars, its flags; per-episode means when the run computed them."""

    features = {}
    for key, s in result.stats.items():
        levels = sorted(s.quantiles)
        shown = min(s.dim, max_panels)
        flags = histograms.flag_dimensions(s)
        bars = []
        for d in range(shown):
            if s.histogram is None or int(s.count[d]) == 0:
                bars.append(None)
                continue
            edges, counts = histograms.dimension_bars(s.histogram, d)
            coarse = float(s.histogram.coarse[d])
            bars.append({"edges": edges.tolist(), "counts": counts.tolist(), "coarse": coarse})
        features[key] = {
            "column": column_names.get(key, key),
            "dims": s.dim,
            "shown": shown,
            "count": [int(c) for c in np.asarray(s.count).tolist()],
            "mean": _floats(s.mean),
            "std": _floats(s.std),
            "min": _floats(s.min),
            "max": _floats(s.max),
            "quantiles": {quantile_name(q): _floats(s.quantiles[q]) for q in levels},
            "nonfinite": [int(c) for c in np.asarray(s.nonfinite).tolist()],
            "bars": bars,
            "flags": {str(d): reasons for d, reasons in flags.items()},
        }
    data = {
        "source": source,
        "mode": result.summary.mode,
        "rows": result.summary.rows,
        "partial": result.summary.partial,
        "features": features,
    }
    if result.episodes:
        data["episodes"] = {
            key: {
                "index": [int(e.index) for e in result.episodes],
                "mean": [_floats(e.stats[key].mean) for e in result.episodes],
            }
            for key in result.stats
            if all(key in e.stats for e in result.episodes)
        }
    return data


def warn_flags(data: dict) -> int:
    """One warning per key with flagged dimensions (the --json document's warnings); returns how
    many dimensions were flagged."""
    flagged = 0
    for key, feature in data["features"].items():
        if not feature["flags"]:
            continue
        flagged += len(feature["flags"])
        parts = [f"dim {d}: {', '.join(why)}" for d, why in feature["flags"].items()]
        log.warning("%s (%s) looks broken in %s", key, feature["column"], "; ".join(parts))
    return flagged


# --- drawing --------------------------------------------------------------------------------


def render_png(data: dict) -> bytes:
    """The figure as PNG bytes, with `data` in its text chunk."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sections = list(data["features"].items())
    columns = max(2, min(COLUMNS, max((f["shown"] for _, f in sections), default=1)))
    episodes = data.get("episodes") or {}
    heights = [0.6 + 1.7 * math.ceil(max(f["shown"], 1) / columns) for _, f in sections]
    heat_heights = [
        1.2 + min(6.0, 0.08 * len(e["index"])) for k, e in episodes.items() if k in data["features"]
    ]
    fig = plt.figure(
        figsize=(max(8.0, 2.1 * columns), sum(heights) + sum(heat_heights)), layout="constrained"
    )
    subfigs = fig.subfigures(
        len(heights) + len(heat_heights), 1, height_ratios=heights + heat_heights
    )
    subfigs = np.array(subfigs, dtype=object, ndmin=1)  # one SubFigure, or an array of them
    title = f"accelkit stats: {data['source']} ({data['mode']}, {data['rows']:,} rows"
    fig.suptitle(title + (", partial)" if data["partial"] else ")"), fontsize=11)
    for sub, (key, feature) in zip(subfigs, sections, strict=False):
        _draw_feature(sub, key, feature, columns)
    for sub, (key, heat) in zip(subfigs[len(sections) :], episodes.items(), strict=False):
        _draw_heat_map(sub, key, heat, data["features"][key])
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, metadata={PNG_KEY: json.dumps(data)})
    plt.close(fig)
    return buffer.getvalue()


def _draw_feature(sub, key: str, f: dict, columns: int) -> None:
    rows = math.ceil(max(f["shown"], 1) / columns)
    axes = np.atleast_1d(sub.subplots(rows, columns, squeeze=False)).ravel()
    note = f" — first {f['shown']} of {f['dims']} dims drawn" if f["shown"] < f["dims"] else ""
    flagged = len(f["flags"])
    sub.suptitle(
        f"{key} ({f['column']}): {f['dims']} dims{note}"
        + (f"; {flagged} flagged (red)" if flagged else ""),
        fontsize=10,
        x=0.01,
        ha="left",
    )
    names = list(f["quantiles"])
    outer = {names[0], names[-1]} if names else set()
    for d, ax in enumerate(axes):
        if d >= f["shown"]:
            ax.axis("off")
            continue
        ax.tick_params(labelsize=6, length=2)
        ax.set_yticks([])
        bars = f["bars"][d]
        why = f["flags"].get(str(d))
        if why:
            ax.set_facecolor("#fde4e4")
            for spine in ax.spines.values():
                spine.set_color("#c62828")
        ax.set_title(f"dim {d}", fontsize=7, pad=2, color="#c62828" if why else "black")
        if bars is None:
            ax.text(0.5, 0.5, "no finite values", ha="center", va="center", fontsize=7)
            continue
        edges, counts = np.asarray(bars["edges"]), np.asarray(bars["counts"])
        ax.stairs(counts, edges, fill=True, color="#90a4ae")
        if bars.get("coarse", 0) > 0.5:  # e.g. |mean| >> spread: few buckets span the range
            ax.text(
                0.98, 0.02, "histogram coarser\nthan the bars", transform=ax.transAxes,
                fontsize=5.5, ha="right", va="bottom", color="#455a64",
            )  # fmt: skip
        mean, std = f["mean"][d], f["std"][d]
        if mean is not None and std is not None:
            ax.axvspan(mean - std, mean + std, color="#1e88e5", alpha=0.15, lw=0)
            ax.axvline(mean, color="#1565c0", lw=1)
        for name in names:
            value = f["quantiles"][name][d]
            if value is not None:
                strong = name in outer
                ax.axvline(
                    value,
                    color="#e65100" if strong else "#ffb74d",
                    lw=0.9 if strong else 0.6,
                    ls="--",
                )
        low, high = f["min"][d], f["max"][d]
        if low is not None and high is not None and high > low:
            pad = 0.03 * (high - low)
            ax.set_xlim(low - pad, high + pad)
        if why:
            ax.text(
                0.02, 0.97, "\n".join(why), transform=ax.transAxes, fontsize=5.5,
                va="top", color="#b71c1c", wrap=True,
            )  # fmt: skip
    legend = [
        "bars: the run's histogram",
        "blue: mean ± std",
        f"dashed: {', '.join(names)}" + (f" ({names[0]}/{names[-1]} dark)" if names else ""),
    ]
    sub.text(0.99, 0.995, "   ".join(legend), ha="right", va="top", fontsize=7, color="#455a64")


def _draw_heat_map(sub, key: str, heat: dict, f: dict) -> None:
    """Episode x dimension means, colored by their distance from the global mean in global stds:
    an episode unlike the others is a row of strong color."""
    shown = f["shown"]
    means = np.array(
        [[np.nan if v is None else v for v in row[:shown]] for row in heat["mean"]], np.float64
    )
    mean = np.array([np.nan if v is None else v for v in f["mean"][:shown]], np.float64)
    std = np.array([np.nan if v is None else v for v in f["std"][:shown]], np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(std > 0, (means - mean) / std, 0.0)
    ax = sub.subplots()
    limit = max(1.0, float(np.nanmax(np.abs(z), initial=0.0)))
    image = ax.imshow(
        z, aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit, interpolation="nearest"
    )
    ax.set_xlabel("dimension", fontsize=8)
    ax.set_ylabel("episode", fontsize=8)
    index = heat["index"]
    ticks = np.linspace(0, len(index) - 1, min(len(index), 10)).round().astype(int)
    ax.set_yticks(ticks, [str(index[t]) for t in ticks], fontsize=6)
    ax.tick_params(axis="x", labelsize=6)
    ax.set_title(f"{key}: per-episode means, (episode mean − mean) / std", fontsize=9, loc="left")
    sub.colorbar(image, ax=ax, shrink=0.9).ax.tick_params(labelsize=6)


def render_html(data: dict, png: bytes) -> str:
    """A page with everything inside: the figure (base64), the numbers as tables, the data."""
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>accelkit stats: {html.escape(data['source'])}</title>",
        "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse;"
        "font-size:13px;margin-bottom:1.5em}td,th{border:1px solid #ccc;padding:2px 6px;"
        "text-align:right}td.flag{text-align:left;color:#b71c1c}tr.flagged{background:#fde4e4}"
        "img{max-width:100%}</style></head><body>",
        f"<h1>accelkit stats: {html.escape(data['source'])}</h1>",
        f"<p>{html.escape(data['mode'])} mode, {data['rows']:,} rows"
        + (" (partial: the time budget ran out)" if data["partial"] else "")
        + "</p>",
        f'<img alt="distributions per dimension" src="data:image/png;base64,'
        f'{base64.b64encode(png).decode("ascii")}">',
    ]
    for key, f in data["features"].items():
        names = list(f["quantiles"])
        parts.append(f"<h2>{html.escape(key)} ({html.escape(f['column'])})</h2><table>")
        header = ["dim", "count", "mean", "std", "min", "max", *names, "looks broken"]
        parts.append("<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
        for d in range(f["dims"]):
            why = f["flags"].get(str(d), [])
            cells = [f["count"][d], f["mean"][d], f["std"][d], f["min"][d], f["max"][d]]
            cells += [f["quantiles"][n][d] for n in names]
            row = "".join(f"<td>{_cell(v)}</td>" for v in cells)
            parts.append(
                f"<tr{' class=flagged' if why else ''}><td>{d}</td>{row}"
                f'<td class="flag">{html.escape("; ".join(why))}</td></tr>'
            )
        parts.append("</table>")
    text = json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    parts.append(f'<script type="application/json" id="{HTML_ID}">{text}</script>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _cell(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.6g}"


def write_plot(path: Path, data: dict) -> Path:
    """Draw `data` and write it to `path` (.png or .html), atomically."""

    png = render_png(data)
    if path.suffix.lower() == ".html":
        with atomic_open(path, "w") as handle:
            handle.write(render_html(data, png))
    else:
        with atomic_open(path, "wb") as handle:
            handle.write(png)
    return path


def read_plot_data(path: str | Path) -> dict:
    """The document a figure written by `write_plot` was drawn from."""
    path = Path(path)
    if path.suffix.lower() == ".html":
        import re

        text = path.read_text(encoding="utf-8")
        match = re.search(
            rf'<script type="application/json" id="{HTML_ID}">(.*?)</script>', text, re.S
        )
        if match is None:
            raise ValueError(f"{path} holds no accelkit stats data")
        return json.loads(match.group(1))
    from PIL import Image

    with Image.open(path) as image:
        # Pillow types what open answers as an ImageFile; a PNG's (this one's) has .text
        return json.loads(image.text[PNG_KEY])  # pyright: ignore[reportAttributeAccessIssue]
