"""`accelkit quant eval --report DIR`: which layers lose fidelity, as a table and a figure.

The per-layer numbers come from the evaluation run itself: `LayerErrors` puts forward hooks on
every `nn.Linear` of the FP32 model during its reference pass (each layer's output on the real,
unpadded tokens of the evaluation texts is spilled to a temporary folder, one file per batch and
layer, so memory holds one layer's output at a time), then on the same layers of each quantized
model during its evaluation pass, where the output is compared with the stored FP32 one. A
layer's relative error is ‖y_q − y‖ / ‖y‖ over all those tokens (float64 sums): y_q is the layer's
output inside the quantized model (errors of earlier layers included), y inside the FP32 model.
No extra forward pass is run.

The folder holds `report.json` (every number), `report.md` and `report.png`, both made from the
JSON only. It is written whole or not at all (built beside DIR, then renamed); an existing DIR
must be empty or hold a previous report (only report.json/.md/.png, the JSON marked as ours),
which is then replaced.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from accelkit.errors import InputError
from accelkit.runtime.files import staged_folder

SCHEMA = "accelkit.quant.report/1"
FILES = ("report.json", "report.md", "report.png")
TOP_LAYERS = 20
METRIC = (
    "‖y_q − y‖ / ‖y‖ of each Linear layer's output over the real (unpadded) tokens of the"
    " evaluation texts: y_q inside the quantized model, y inside the FP32 model (errors of"
    " earlier layers included), captured by forward hooks during the evaluation passes"
    " (no extra pass)"
)


class LayerErrors:
    """Per-Linear relative error of each quantized model against FP32, from hooks on the
    evaluation passes (`run_eval(layers=…)`); FP32 outputs are spilled to `folder`."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.names: list[str] = []
        self.ref_sq: dict[str, float] = {}
        self.err_sq: dict[str, dict[str, float]] = {}  # label -> layer -> Σ (y_q − y)²
        self.batches = 0

    @staticmethod
    def _watch(model, names: list[str], on_output) -> tuple[list, dict]:
        """Hooks: the model's attention mask per batch, and `on_output(batch, name, call, rows)`
        for every call of each named layer, with its output's real-token rows."""
        state = {"batch": -1, "mask": None, "calls": {}}

        def before(_module, args, kwargs):
            state["batch"] += 1
            state["calls"] = {}
            mask = kwargs.get("attention_mask")
            if mask is None and len(args) > 1:
                mask = args[1]
            state["mask"] = None if mask is None else mask.bool()

        def layer_hook(name):
            def hook(_module, _inputs, output):
                call = state["calls"].get(name, 0)
                state["calls"][name] = call + 1
                out, mask = output.detach(), state["mask"]
                if mask is not None and out.dim() == 3 and tuple(out.shape[:2]) == mask.shape:
                    out = out[mask.to(out.device)]
                else:
                    out = out.reshape(-1, out.shape[-1])
                on_output(state["batch"], name, call, out.float().cpu().numpy())

            return hook

        handles = [model.register_forward_pre_hook(before, with_kwargs=True)]
        for name in names:
            handles.append(model.get_submodule(name).register_forward_hook(layer_hook(name)))
        return handles, state

    def _file(self, batch: int, name: str, call: int) -> Path:
        index = self.names.index(name)
        return self.folder / f"b{batch}-l{index}-c{call}.npy"

    @contextmanager
    def reference(self, model) -> Iterator[None]:
        """Watch the FP32 model's reference pass: store each layer's output, sum ‖y‖²."""
        from accelkit.quant.method.layers import linear_layers

        self.names = list(linear_layers(model))  # Linear, and Conv1D as the Linear it is
        self.ref_sq = dict.fromkeys(self.names, 0.0)

        def store(batch, name, call, rows):
            self.ref_sq[name] += float(np.square(rows.astype(np.float64)).sum())
            np.save(self._file(batch, name, call), rows)

        handles, state = self._watch(model, self.names, store)
        try:
            yield
        finally:
            for h in handles:
                h.remove()
        self.batches = state["batch"] + 1

    @contextmanager
    def compare(self, label: str, model) -> Iterator[None]:
        """Watch a quantized model's evaluation pass: Σ (y_q − y)² per layer against FP32."""
        sums = self.err_sq[label] = dict.fromkeys(self.names, 0.0)

        def compare(batch, name, call, rows):
            path = self._file(batch, name, call)
            if not path.is_file():
                raise RuntimeError(f"{label}: {name} ran in batch {batch} but not under FP32")
            diff = rows.astype(np.float64) - np.load(path).astype(np.float64)
            sums[name] += float(np.square(diff).sum())

        handles, state = self._watch(model, self.names, compare)
        try:
            yield
        finally:
            for h in handles:
                h.remove()
        if state["batch"] + 1 != self.batches:
            raise RuntimeError(
                f"{label}: {state['batch'] + 1} evaluation batches, FP32 had {self.batches}"
            )

    def result(self) -> list[dict]:
        """Every layer in model order: index, name and relative error per label."""
        return [
            {
                "index": i,
                "name": name,
                "relative_error": {
                    label: (
                        float(np.sqrt(sums[name] / self.ref_sq[name]))
                        if self.ref_sq[name] > 0
                        else None
                    )
                    for label, sums in self.err_sq.items()
                },
            }
            for i, name in enumerate(self.names)
        ]


# ---------------------------------------------------------------------------------------------
# the folder


def check_folder(path: str | os.PathLike) -> Path:
    """`--report DIR` before the run: absent, empty or a previous report (then replaced)."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise InputError(f"--report {path}: a file is in the way; give a folder path")
    if target.is_dir() and any(target.iterdir()) and not is_previous_report(target):
        raise InputError(
            f"--report {path}: the folder is not empty and holds no previous report; give a new"
            " or empty folder (a previous report folder is replaced)"
        )
    return target


def is_previous_report(folder: Path) -> bool:
    names = {p.name for p in folder.iterdir()}
    if not names <= set(FILES) or "report.json" not in names:
        return False
    try:
        return json.loads((folder / "report.json").read_text("utf-8")).get("schema") == SCHEMA
    except (OSError, ValueError, AttributeError):
        return False


def write_report(path: str | os.PathLike, report: dict) -> Path:
    """report.json, report.md and report.png into `path`, written whole or not at all."""
    target = check_folder(path)
    text = json.dumps(report, indent=2, allow_nan=False)
    aside = None
    try:
        with staged_folder(target) as staging:
            (staging / "report.json").write_text(text + "\n", encoding="utf-8")
            (staging / "report.md").write_text(markdown(report), encoding="utf-8")
            plot(report, staging / "report.png")
            if target.is_dir() and any(target.iterdir()):  # a previous report: moved aside
                aside = target.with_name(f".{target.name}.{os.getpid()}.old")
                os.rename(target, aside)
    except BaseException:
        if aside is not None and not target.exists():  # the new one never arrived: put it back
            os.rename(aside, target)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    return target


# ---------------------------------------------------------------------------------------------
# the document


def label(row: dict) -> str:
    return row.get("label") or f"{row['method']}/{row['bits']}"


def build(document: dict, layers: LayerErrors | None) -> dict:
    """The report's numbers: `quant eval`'s document, the chosen settings and every layer."""
    advice = document.get("recommendation") or {"per_bits": [], "text": ""}
    chosen = [f"{p['method']}/{p['bits']}" for p in advice["per_bits"]]
    return {
        "schema": SCHEMA,
        **document,
        "chosen": chosen,
        "metric": METRIC,
        "extra_passes": 0,
        "layers": layers.result() if layers else [],
    }


def _worst(layer: dict) -> float:
    return max((v for v in layer["relative_error"].values() if v is not None), default=-1.0)


# the kinds of model judged as language models (next-token agreement, perplexity ratio, hidden-
# state cosine): causal LMs, and PaliGemma at the text positions of its image + prompt inputs
LM_KINDS = ("causal-lm", "vision-language")


def fidelity_columns(kind: str) -> list[tuple[str, str, str]]:
    if kind in LM_KINDS:
        return [
            ("next-token agree", "top1_agreement", ".3f"),
            ("ppl ratio", "perplexity_ratio", ".4f"),
            ("mean cos", "mean_cosine", ".4f"),  # of the last hidden states
        ]
    return [
        ("mean cos", "mean_cosine", ".4f"),
        ("min cos", "min_cosine", ".4f"),
        ("top-1 agree", "top1_agreement", ".3f"),
    ]


REL_FORMAT = ".4f"


def cell(text: str) -> str:
    """Text for a Markdown table cell: `|` and backslashes escaped, line breaks as spaces."""
    return " ".join(str(text).replace("\\", "\\\\").replace("|", "\\|").split())


def _fmt(value, spec: str | None) -> str:
    if value is None:
        return "-"
    return str(value) if spec is None else format(value, spec)


# the timing part of `quant eval`'s table and of report.md: per kind of timing measured, the
# setting's median ms, FP32's median ms in the same interleaved rounds and their quotient
# (`speed.TIMING`), the quotient computed here from the two times shown beside it
TIMINGS = (("eager", "eager"), ("compiled", "compiled"), ("1 text", "compiled_one"))
TIME_FORMAT = ".2f"
RATIO_FORMAT = ".2f"


def time_ratio(row: dict, kind: str) -> float | None:
    """A row's time over FP32's in the same rounds, for `kind` (eager, compiled, compiled_one):
    the quotient of the two medians it carries; None when either was not measured. The table,
    report.md and the recommendation all read ratios here, never a stored one."""
    ms, base = row.get(f"{kind}_ms"), row.get(f"{kind}_fp32_ms")
    return ms / base if ms is not None and base else None


def timing_kinds(rows: list[dict]) -> list[tuple[str, str]]:
    """(title, kind) of each timing that any row measured against FP32, in table order."""
    return [(t, k) for t, k in TIMINGS if any(time_ratio(r, k) is not None for r in rows)]


def timing_header(kinds: list[tuple[str, str]]) -> list[str]:
    return [h for t, _ in kinds for h in (f"{t} ms", f"{t} FP32 ms", f"{t} × FP32")]


def timing_cells(row: dict, kinds: list[tuple[str, str]]) -> list[str]:
    """Per kind: the row's ms, FP32's ms in the same rounds and the quotient of those two."""
    cells = []
    for _, kind in kinds:
        ratio = time_ratio(row, kind)
        if ratio is None:  # a ratio only beside both of its times
            cells += [_fmt(row.get(f"{kind}_ms"), TIME_FORMAT), "-", "-"]
        else:
            ms, base = row[f"{kind}_ms"], row[f"{kind}_fp32_ms"]
            cells += [_fmt(ms, TIME_FORMAT), _fmt(base, TIME_FORMAT), format(ratio, RATIO_FORMAT)]
    return cells


def markdown(report: dict) -> str:
    rows, chosen = report["rows"], set(report["chosen"])
    columns = [("method", "method", None), ("bits", "bits", None)]
    columns += fidelity_columns(report["kind"])
    columns.append(("layers MB", "quant_layers_mb", ".2f"))
    kinds = timing_kinds(rows)
    pad = f" of ≤ {report['max_length']} tokens" if report.get("max_length") else ""
    lines = [
        f"# Quantization report — {cell(report['model'])}",
        "",
        f"{report['kind']}, {report['dtype']}; {report['texts']} evaluation texts{pad};"
        " fidelity against the unquantized model. The chosen setting per bit width is in bold.",
        "",
    ]
    advice = report.get("recommendation") or {"per_bits": []}
    for pick in advice["per_bits"]:
        group = [r for r in rows if r["bits"] == pick["bits"] and r["method"] != "fp32"]
        rule = (
            "the only quantized setting at these bits in this run"
            if len(group) == 1
            else "of the settings within 0.01 top-1 agreement and 0.002 mean cosine (perplexity"
            " ratio) of the best at these bits, the fastest measured, else the most faithful"
        )
        lines.append(f"**Chosen for {pick['bits']}: {pick['method']}** — {pick['why']}; {rule}.")
    lines += ["", "## Fidelity", ""]
    titles = [t for t, _, _ in columns] + timing_header(kinds)
    lines.append("| " + " | ".join(titles) + " |")
    lines.append(
        "|"
        + "|".join("---" if s is None else "---:" for _, _, s in columns)
        + "|---:" * (len(titles) - len(columns))
        + "|"
    )
    for r in rows:
        bold = label(r) in chosen
        cells = [cell(_fmt(r.get(key), spec)) for _, key, spec in columns]
        cells += timing_cells(r, kinds)
        if bold:
            cells = [f"**{c}**" for c in cells]
        lines.append("| " + " | ".join(cells) + " |")
    labels = [label(r) for r in rows if r["method"] != "fp32"]
    layers = sorted(report["layers"], key=_worst, reverse=True)
    if layers and labels:
        shown = layers[:TOP_LAYERS]
        lines += [
            "",
            f"## Per-layer relative error (worst {len(shown)} of {len(layers)};"
            " all in report.json)",
            "",
            f"{METRIC}; sorted by the largest error of any setting.",
            "",
            "| # | layer | "
            + " | ".join(f"**{lb}**" if lb in chosen else lb for lb in labels)
            + " |",
            "|---:|---|" + "---:|" * len(labels),
        ]
        for layer in shown:
            values = [_fmt(layer["relative_error"].get(lb), REL_FORMAT) for lb in labels]
            lines.append(
                f"| {layer['index']} | {cell(layer['name'])} | " + " | ".join(values) + " |"
            )
    lines += ["", "![per-layer relative error and fidelity per setting](report.png)", ""]
    return "\n".join(lines)


def plot(report: dict, path: str | os.PathLike) -> None:
    """Left: each setting's per-layer relative error over layer index (chosen: thick, ★). Right:
    each setting's mean cosine (causal LMs: next-token agreement) as bars (chosen: hatched, ★),
    in the same colours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, chosen, layers = report["rows"], set(report["chosen"]), report["layers"]
    labels = [label(r) for r in rows if r["method"] != "fp32"]
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(12, 4.2), gridspec_kw={"width_ratios": [2.2, 1]}
    )
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {lb: palette[i % len(palette)] for i, lb in enumerate(labels)}
    for lb in labels:
        xs = [layer["index"] for layer in layers]
        ys = [layer["relative_error"].get(lb) for layer in layers]
        ys = [np.nan if y is None else y for y in ys]
        star = lb in chosen
        left.plot(
            xs,
            ys,
            marker="D" if star else "o",
            markersize=4 if star else 3,
            linewidth=3.0 if star else 1.0,
            alpha=1.0 if star else 0.7,
            color=colors[lb],
            label=f"{lb} ★ chosen" if star else lb,
            zorder=3 if star else 2,
        )
    left.set_xlabel("Linear layer (model order; names in report.json)")
    left.set_ylabel("relative error ‖y_q − y‖ / ‖y‖")
    left.set_title("per-layer relative error vs FP32")
    if labels and layers:
        left.legend(fontsize=8)
    left.grid(alpha=0.3)

    key, name = (
        ("top1_agreement", "next-token top-1 agreement")
        if report["kind"] in LM_KINDS
        else ("mean_cosine", "mean cosine to FP32")
    )
    bar_rows = [r for r in rows if r.get(key) is not None]
    values = [r[key] for r in bar_rows]
    bars = right.bar(
        range(len(bar_rows)), values, color=[colors.get(label(r), "tab:gray") for r in bar_rows]
    )
    for bar, r, v in zip(bars, bar_rows, values, strict=True):
        if label(r) in chosen:
            bar.set_hatch("//")
            bar.set_edgecolor("black")
            bar.set_linewidth(1.5)
        right.annotate(
            f"{v:.4f}", (bar.get_x() + bar.get_width() / 2, v), ha="center", va="bottom",
            fontsize=7,
        )  # fmt: skip
    right.set_xticks(range(len(bar_rows)))
    right.set_xticklabels(
        [label(r) + (" ★" if label(r) in chosen else "") for r in bar_rows],
        rotation=30,
        ha="right",
        fontsize=8,
    )
    if values:
        low = min(values)
        right.set_ylim(max(0.0, low - 0.15 * (1.0 - low) - 1e-4), 1.0 + 0.1 * (1.0 - low) + 1e-4)
    right.set_title(f"{name}\n(★ chosen: hatched bar, thick line)")
    right.grid(axis="y", alpha=0.3)
    fig.suptitle(f"accelkit quant eval — {report['model']}, {report['texts']} texts")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
