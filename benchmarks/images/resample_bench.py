"""Preprocessing throughput with `preprocess.resample` bicubic against bilinear, same run, at the
default model's size (224x224, stretch), on both engines; and the settings `import-model` writes
(bicubic, reducing_gap 0, fast_jpeg_downscale false) against the defaults on JPEG files.

Workloads (the same inputs for every method)
  square_512   --n RGB arrays of 512x512 (real photos resized)
  mixed_real   the sample photos of many sizes (scikit-image, scikit-learn, crops)
  jpeg_512     the square_512 images as JPEG bytes (q90): decode + preprocess
  jpeg_2048    --n / 4 photos of 2048x1536 as JPEG bytes (q90): where the host speed-ups act
Methods
  host_bilinear / host_bicubic   the host engine (PIL in the decode threads), default speed-ups
  jax_bilinear / jax_bicubic     the JAX engine (device passes; here the CPU), default speed-ups
  host_bicubic_exact             the host engine with import-model's settings: bicubic, no
                                 reduce first, full JPEG decode (the processor's pixels exactly)

Timing: one warm-up per method, then --rounds rounds; each round runs every method of a workload
once, in turn, so load hits all alike. Rates are medians over rounds; each ratio (to the bilinear
method of the same engine and workload) is taken within a round: median, min, max.

    python -m benchmarks.images.resample_bench          # about a minute on 2 cores
    python -m benchmarks.images.resample_bench --docs   # rewrite docs/images.md's block from the JSON
"""

from __future__ import annotations

import io
import json
import os
import sys
import time

import numpy as np

from benchmarks.common import (
    REPO,
    ArgumentParser,
    checked,
    existing_file,
    out_file,
    positive,
    write_results,
)
from benchmarks.docs.blocks import Table, rewrite

RESULT = REPO / "benchmarks" / "results" / "resample_bench.json"
DOC = REPO / "docs" / "images.md"
SCHEMA = "accelkit.resample_bench/1"
EXACT = {"resample": "bicubic", "reducing_gap": None, "fast_jpeg_downscale": False}
METHODS = {
    "host_bilinear": ("host", {"resample": "bilinear"}),
    "host_bicubic": ("host", {"resample": "bicubic"}),
    "jax_bilinear": ("jax", {"resample": "bilinear"}),
    "jax_bicubic": ("jax", {"resample": "bicubic"}),
    "host_bicubic_exact": ("host", EXACT),
}
BASELINE = {"host_bicubic": "host_bilinear", "jax_bicubic": "jax_bilinear",
            "host_bicubic_exact": "host_bilinear"}  # fmt: skip


def workloads(n: int) -> dict[str, list]:
    from PIL import Image

    from accelkit.images.testing import photos

    real = list(photos().values())
    square = [np.asarray(Image.fromarray(real[i % len(real)]).resize((512, 512))) for i in range(n)]
    jpegs = []
    for image in square:
        buffer = io.BytesIO()
        Image.fromarray(image).save(buffer, "JPEG", quality=90)
        jpegs.append(buffer.getvalue())
    large = []
    for i in range(max(1, n // 4)):
        image = Image.fromarray(real[i % len(real)]).resize((2048, 1536), Image.Resampling.BICUBIC)
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=90)
        large.append(buffer.getvalue())
    return {"square_512": square, "mixed_real": real, "jpeg_512": jpegs, "jpeg_2048": large}


def measure(n: int, rounds: int) -> dict:
    from accelkit.images.embedding.preprocess import make_preprocessor

    data = workloads(n)
    engines = {
        name: make_preprocessor(engine, image_size=224, batch_size=32, cache_compiled=False, **kw)
        for name, (engine, kw) in METHODS.items()
    }
    results = {}
    for workload, inputs in data.items():
        names = [m for m in METHODS if m != "host_bicubic_exact" or workload.startswith("jpeg")]
        for name in names:  # warm-up: JAX compiles its shapes
            np.asarray(engines[name].preprocess_batch(inputs))
        seconds = {name: [] for name in names}
        for _ in range(rounds):
            for name in names:
                started = time.perf_counter()
                np.asarray(engines[name].preprocess_batch(inputs))
                seconds[name].append(time.perf_counter() - started)
        rows = {}
        for name in names:
            times = np.asarray(seconds[name])
            row = {"images_per_s": round(len(inputs) / float(np.median(times)), 1)}
            if name in BASELINE:
                ratio = np.asarray(seconds[BASELINE[name]]) / times  # > 1: faster than bilinear
                row["rate_vs_" + BASELINE[name]] = {
                    "median": round(float(np.median(ratio)), 3),
                    "min": round(float(ratio.min()), 3),
                    "max": round(float(ratio.max()), 3),
                }
            rows[name] = row
        results[workload] = {"images": len(inputs), "methods": rows}
    for engine in engines.values():
        engine.close()
    return results


def table(doc: dict) -> str:
    load = ", ".join(f"{v:.2f}" for v in doc["loadavg"])
    lines = [
        f"Measured {doc['date']} ({doc['cpus']} CPUs, load average {load}; {doc['rounds']}"
        " interleaved rounds, medians; 224×224 stretch). Rate: images/s; ratio: the bicubic"
        " method's rate over the bilinear one of the same engine, per round (median, min–max).",
        "",
        "| workload | method | images/s | vs bilinear |",
        "|---|---|---:|---:|",
    ]
    for workload, block in doc["results"].items():
        for name, row in block["methods"].items():
            ratio = next((v for k, v in row.items() if k.startswith("rate_vs_")), None)
            shown = (
                f"{ratio['median']:.2f} ({ratio['min']:.2f}–{ratio['max']:.2f})" if ratio else ""
            )
            lines.append(f"| {workload} | {name} | {row['images_per_s']:,.1f} | {shown} |")
    return "\n".join(lines)


TABLES = {"resample-speed": Table(RESULT, table)}  # for the docs engine


def main() -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=positive(), default=64)
    parser.add_argument("--rounds", type=positive(), default=7)
    parser.add_argument("--docs", action="store_true", help="only rewrite the docs block")
    parser.add_argument("--out", default=RESULT)
    args = parser.parse_args()
    # --docs reads --out; a run writes it
    args.out = checked("--out", existing_file if args.docs else out_file, args.out)
    if not args.docs:
        before = os.getloadavg()
        results = measure(args.n, args.rounds)
        doc = {
            "schema": SCHEMA,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cpus": os.cpu_count(),
            "loadavg": [round(v, 2) for v in (*before, *os.getloadavg())[::3]],
            "rounds": args.rounds,
            "results": results,
        }
        write_results(args.out, doc, indent=1)
        print(table(doc))
    doc = json.loads(args.out.read_text())
    rewrite(DOC, "resample-speed", table(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
