"""The int8 EfficientNet-Lite0's frontier: for each choice of layers kept float, its
neighbours against the FP32 model's and its speed against the FP32 model, in one run.

Every recipe is built as `accelkit.images.embedding.int8.build_int8` builds the shipped one (the
FP32 export, the shipped calibration ranges, U8S8 QDQ per-channel), with other `float_nodes`.
Quality, against the FP32 model's vectors of the same preprocessed images (L2-normalized, as
accelkit stores them), brute force:
    set A   the 25 shipped photos x 12 versions (original, mirror, centre crop 80 %, two random
            crops 50-70 %, brightness 0.8 and 1.25, contrast 0.7, JPEG q30, greyscale, rotated
            90 degrees, the retrieval test's altered copy) = 300 images
    set B   limits_bench.py's photos (random crops of the shipped photos, 400-900 px, q90)
recall@10 = the share of each image's 10 nearest others both models agree on; the altered-copy
test of tests/images/embedding/test_pipeline.py (each copy's nearest original is its own; the
smallest margin). Speed: the model alone in one process on ready 224x224 batches of 32,
interleaved rounds, each recipe's time against FP32's in the same round.

    python -m benchmarks.research.images_int8                  # ~10 min on 2 busy cores
    python -m benchmarks.research.images_int8 --docs-only      # rewrite the docs section from the JSON

Writes benchmarks/results/images_int8.json and the `images-int8` block
of docs/images.md.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import (
    REPO,
    ArgumentParser,
    checked,
    existing_file,
    log,
    positive,
    work_dir,
    write_results,
)
from benchmarks.docs.blocks import Table, rewrite

OUT = REPO / "benchmarks" / "results" / "images_int8.json"
DOCS = REPO / "docs" / "images.md"
HEAD = ("/ReduceMean", "/_fc/Gemm")


def blocks(upto: int) -> list[str]:
    return [rf"^/_blocks\.{i}/" for i in range(upto + 1)]


# name: (what stays float, regexes of node names of the FP32 graph kept float besides HEAD)
RECIPES = {
    "all int8": ("the pooling and classifier only", []),
    "stem float": ("the stem conv", [r"^/_conv_stem/"]),
    "stem + block 0 float (shipped)": ("the stem and block 0", [r"^/_conv_stem/", *blocks(0)]),
    "stem + blocks 0-1 float": ("the stem and blocks 0-1", [r"^/_conv_stem/", *blocks(1)]),
    "stem + blocks 0-3 float": ("the stem and blocks 0-3", [r"^/_conv_stem/", *blocks(3)]),
    "stem + blocks 0-7 float": ("the stem and blocks 0-7", [r"^/_conv_stem/", *blocks(7)]),
}


def versions(photo, rng) -> list:
    """Set A's 12 versions of one photo."""
    import numpy as np
    from PIL import Image, ImageEnhance, ImageOps

    from accelkit.images.testing import altered

    image = Image.fromarray(photo)
    w, h = image.size
    out = [photo, np.ascontiguousarray(photo[:, ::-1])]
    out.append(image.crop((int(w * 0.1), int(h * 0.1), int(w * 0.9), int(h * 0.9))))
    for _ in range(2):
        f = rng.uniform(0.5, 0.7)
        cw, ch = int(w * f), int(h * f)
        x, y = rng.integers(0, w - cw + 1), rng.integers(0, h - ch + 1)
        out.append(image.crop((x, y, x + cw, y + ch)))
    out.append(ImageEnhance.Brightness(image).enhance(0.8))
    out.append(ImageEnhance.Brightness(image).enhance(1.25))
    out.append(ImageEnhance.Contrast(image).enhance(0.7))
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=30)
    out.append(buffer.getvalue())
    out.append(ImageOps.grayscale(image).convert("RGB"))
    out.append(image.rotate(90, expand=True))
    out.append(altered(photo))
    return [np.asarray(x) if isinstance(x, Image.Image) else x for x in out]


def image_sets(photo_count: int, data_dir: Path) -> dict:
    import numpy as np

    from accelkit.images.embedding.preprocess import make_preprocessor
    from accelkit.images.settings.config import PreprocessConfig
    from accelkit.images.testing import photos
    from benchmarks.common import ensure_photos

    settings = PreprocessConfig()
    preprocessor = make_preprocessor(config=settings)

    def ready(items):
        return np.asarray(preprocessor.preprocess_batch(items), np.float32)

    shipped = photos()
    rng = np.random.default_rng(1)
    set_a = [v for name in sorted(shipped) for v in versions(shipped[name], rng)]
    folder = ensure_photos(data_dir, photo_count) / "jpg"
    set_b = [f.read_bytes() for f in sorted(folder.glob("*.jpg"))]
    return {"A": ready(set_a), "B": ready(set_b)}


def session(path: Path):
    from accelkit.images.embedding.models import _onnx_session

    return _onnx_session(path, "benchmark")  # accelkit's own session options


def embed(model, tensors, batch: int = 32):
    import numpy as np

    out = np.concatenate(
        [
            model.run(["embedding"], {"pixels": tensors[i : i + batch]})[0]
            for i in range(0, len(tensors), batch)
        ]
    ).astype(np.float64)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def quality(reference, candidate, altered_pairs: bool) -> dict:
    import numpy as np

    def nearest(v):
        similarity = v @ v.T
        np.fill_diagonal(similarity, -np.inf)
        return np.argsort(-similarity, axis=1, kind="stable")[:, :10]

    shared = [
        len(set(a) & set(b)) / 10
        for a, b in zip(nearest(reference), nearest(candidate), strict=True)
    ]
    cosine = np.sum(reference * candidate, axis=1)
    result = {
        "recall_at_10": float(np.mean(shared)),
        "cosine_min": float(cosine.min()),
        "cosine_median": float(np.median(cosine)),
    }
    if altered_pairs:  # set A: version 0 is the photo, version 11 its altered copy
        originals, copies = candidate[0::12], candidate[11::12]
        similarity = copies @ originals.T
        result["altered_wrong"] = int(
            (similarity.argmax(axis=1) != np.arange(len(originals))).sum()
        )
        own = np.diag(similarity).copy()
        np.fill_diagonal(similarity, -1)
        result["altered_min_margin"] = float((own - similarity.max(axis=1)).min())
    return result


def speed(paths: dict[str, Path], rounds: int, tensors) -> dict:
    """Each model alone on batches of 32, 3 batches a round, rounds interleaved (the first
    rotating); per round each recipe's time against FP32's."""
    import numpy as np

    batch = np.ascontiguousarray(tensors[:32])
    sessions = {name: session(path) for name, path in paths.items()}
    for model in sessions.values():
        model.run(["embedding"], {"pixels": batch})
    names = list(sessions)
    times: dict[str, list[float]] = {n: [] for n in names}
    loads = []
    for r in range(rounds):
        loads.append(round(os.getloadavg()[0], 2))
        for name in names[r % len(names) :] + names[: r % len(names)]:
            started = time.perf_counter()
            for _ in range(3):
                sessions[name].run(["embedding"], {"pixels": batch})
            times[name].append(time.perf_counter() - started)
    result = {}
    for name in names:
        ratios = [f / t for f, t in zip(times["fp32"], times[name], strict=True)]
        result[name] = {
            "img_s_median": 96 / statistics.median(times[name]),
            "ratio_per_round": ratios,
            "ratio_median": statistics.median(ratios),
        }
    return {"models": result, "load_per_round": loads}


def run(args) -> dict:
    import onnx

    from accelkit.images.embedding import int8, models

    fp32 = models.cached_onnx_path()
    # the ops quant_pre_process leaves (it folds the SAME-padding subgraphs into the convs)
    nodes = [
        n.name for n in onnx.load(str(fp32)).graph.node if n.op_type in ("Conv", "Clip", "Add")
    ]
    log("preprocessing the image sets")
    sets = image_sets(args.photos, args.data_dir)
    reference = {name: embed(session(fp32), tensors) for name, tensors in sets.items()}
    report = {"recipes": {}, "photos_set_b": len(sets["B"]), "images_set_a": len(sets["A"])}
    paths = {"fp32": fp32}
    with tempfile.TemporaryDirectory(prefix="images_int8") as scratch:
        for name, (floating, patterns) in RECIPES.items():
            float_nodes = (*[n for n in nodes if any(re.search(p, n) for p in patterns)], *HEAD)
            if name.endswith("(shipped)"):
                assert set(float_nodes) == set(int8.FLOAT_NODES), float_nodes
            log(f"{name}: building ({len(float_nodes)} nodes float)")
            path = int8.build_int8(
                fp32, Path(scratch) / f"{len(paths)}.onnx", float_nodes=float_nodes
            )
            model = session(path)
            report["recipes"][name] = {
                "float": floating,
                "float_nodes": len(float_nodes),
                "set_a": quality(reference["A"], embed(model, sets["A"]), True),
                "set_b": quality(reference["B"], embed(model, sets["B"]), False),
            }
            log(f"{name}: {json.dumps(report['recipes'][name])}")
            paths[name] = path
        log("speed, the model alone")
        report["speed"] = speed(paths, args.rounds, sets["B"])
    return report


def render(report: dict) -> str:
    env = report["environment"]
    source = env.get("accelkit_source", {})
    speed = report["speed"]
    loads = speed["load_per_round"]
    lines = [
        "### The int8 model's frontier (`benchmarks/research/images_int8.py`)",
        "",
        f"Generated from `benchmarks/results/images_int8.json`, written {env['time_utc']} (commit"
        f" `{(source.get('commit') or '?')[:7]}`{', uncommitted changes' if source.get('dirty') else ''}),"
        f" on {env['cpu_count']} CPUs ({env['cpu_model']}; int8 instructions:"
        f" {', '.join(report['cpu_int8_features']) or 'none'}), load {min(loads):.1f}–{max(loads):.1f}."
        f" recall@10 and cosine against the FP32 model's vectors of the same images: set A ="
        f" {report['images_set_a']} versions of the 25 shipped photos, set B = the"
        f" {report['photos_set_b']} photos of `limits_bench.py`. Altered copies: the retrieval"
        f" test's 25 (first / smallest margin; FP32 needs > 0.05). Model alone = its speed"
        f" against the FP32 model's in the same process, batches of 32,"
        f" {len(loads)} interleaved rounds (median, range).",
        "",
        "| recipe | recall@10 A | recall@10 B | cosine min A / B | altered copies first, margin | model alone vs FP32 |",
        "|---|---:|---:|---|---|---|",
    ]
    for name, r in report["recipes"].items():
        a, b = r["set_a"], r["set_b"]
        s = speed["models"][name]
        lines.append(
            f"| {name} | {a['recall_at_10']:.3f} | {b['recall_at_10']:.3f} | "
            f"{a['cosine_min']:.3f} / {b['cosine_min']:.3f} | "
            f"{25 - a['altered_wrong']}/25, {a['altered_min_margin']:.3f} | "
            f"**{s['ratio_median']:.2f}×** ({min(s['ratio_per_round']):.2f}–{max(s['ratio_per_round']):.2f}) |"
        )
    if report.get("relabelled"):
        lines += ["", f"Note: {report['relabelled']}."]
    lines += [""]
    return "\n".join(lines)


TABLES = {"images-int8": Table(OUT, render)}  # for the docs engine


def write_docs(report: dict) -> None:
    rewrite(DOCS, "images-int8", render(report))


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--photos", type=positive(), default=400, help="set B: limits_bench's photos"
    )
    parser.add_argument("--rounds", type=positive(), default=8, help="speed rounds")
    parser.add_argument("--data-dir", type=work_dir, default=Path("/tmp/accelkit_bench_data"))
    parser.add_argument("--docs-only", action="store_true", help="rewrite the docs from the JSON")
    args = parser.parse_args(argv)
    if args.docs_only:
        write_docs(json.loads(checked("--docs-only", existing_file, OUT).read_text()))
        return 0
    from accelkit.images.embedding.int8 import cpu_int8_features
    from accelkit.runtime.environment import record

    args.data_dir.mkdir(parents=True, exist_ok=True)
    report = {
        "environment": record(("numpy", "onnxruntime", "onnx")),
        "cpu_int8_features": cpu_int8_features(),
        **run(args),
    }
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    write_results(OUT, report, newline=False)
    write_docs(report)
    log(f"wrote {OUT} and {DOCS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
