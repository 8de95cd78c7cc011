"""How close to the FP32 vectors recall@10 ≥ 0.99 needs them on `limits_bench.py`'s 2,000 photos:
FP32 against FP32 perturbed by less than any int8 model perturbs it, beside
the int8 model and int8 recipes with more of the head kept float.

The 2,000 photos are random crops of the 25 shipped photos (80 of each), so each photo's ten
nearest others are crops of the same photo, and the 10th and 11th are close: the share of photos
whose two are within 1e-3 cosine is printed. Perturbations of the FP32 model's vectors:
    summation order   ORT's graph optimizations off (other kernels, other float rounding)
    bfloat16 input    the preprocessed input rounded to bfloat16 (what `preprocess.dtype:
                      bfloat16` gives the model), ~3 significant digits per input value
recall@10 and cosine as `images_int8.quality` computes them, against the FP32 model's vectors of
the same preprocessed photos (the host engine, the default settings).

    python -m benchmarks.research.images_int8_noise        # ~10 min on 2 busy cores

Writes benchmarks/results/images_int8_noise.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchmarks.common import (
    REPO,
    ArgumentParser,
    ensure_photos,
    log,
    positive,
    work_dir,
    write_results,
)
from benchmarks.research.images_int8 import embed, quality

OUT = REPO / "benchmarks" / "results" / "images_int8_noise.json"
HEAD = ("/_conv_head/Conv", "/_swish_1/Clip")
BLOCK_15 = tuple(
    f"/_blocks.15/{n}"
    for n in (
        "_expand_conv/Conv",
        "_swish/Clip",
        "_depthwise_conv/Conv",
        "_swish_1/Clip",
        "_project_conv/Conv",
    )
)


def session(path: Path, optimize: bool = True):
    import onnxruntime as ort

    options = ort.SessionOptions()
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run(args) -> dict:
    import ml_dtypes
    import numpy as np

    from accelkit.images.embedding import int8, models
    from accelkit.images.embedding.preprocess import make_preprocessor

    folder = ensure_photos(args.data_dir, args.photos) / "jpg"
    log(f"preprocessing {args.photos} photos")
    files = sorted(folder.glob("*.jpg"))
    tensors = np.asarray(make_preprocessor().preprocess_batch([str(f) for f in files]), np.float32)
    fp32 = models.cached_onnx_path()
    reference = embed(session(fp32), tensors)
    similarity = reference @ reference.T
    np.fill_diagonal(similarity, -np.inf)
    top = -np.sort(-similarity, axis=1)[:, :11]
    gap = top[:, 9] - top[:, 10]
    result = {
        "photos": len(files),
        "gap_10th_11th": {
            "median": float(np.median(gap)),
            "p10": float(np.percentile(gap, 10)),
            "share_below_1e-3": float(np.mean(gap < 1e-3)),
        },
        "against_fp32": {},
    }
    found = result["against_fp32"]

    def add(name, vectors):
        found[name] = quality(reference, vectors, False)
        log(f"{name}: {found[name]}")

    add("FP32, summation order (ORT optimizations off)", embed(session(fp32, False), tensors))
    rounded = tensors.astype(ml_dtypes.bfloat16).astype(np.float32)
    add("FP32, input rounded to bfloat16", embed(session(fp32), rounded))
    add("int8 (shipped)", embed(session(models.cached_int8_path()), tensors))
    with tempfile.TemporaryDirectory(prefix="int8-noise-") as scratch:
        for name, nodes in (
            ("int8, head conv float too", int8.FLOAT_NODES + HEAD),
            ("int8, head conv and block 15 float too", int8.FLOAT_NODES + HEAD + BLOCK_15),
        ):
            path = int8.build_int8(fp32, Path(scratch) / "int8.onnx", float_nodes=nodes)
            add(name, embed(session(path), tensors))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--photos", type=positive(), default=2000)
    parser.add_argument("--data-dir", type=work_dir, default=Path("/tmp/accelkit_bench_data"))
    args = parser.parse_args(argv)
    from accelkit.runtime.environment import record

    report = {"environment": record(("numpy", "onnxruntime", "onnx")), **run(args)}
    write_results(OUT, report, newline=False)
    log(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
