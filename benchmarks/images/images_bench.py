"""Benchmark `accelkit images` preprocessing and embedding against baselines measured in the same run.

Workloads (same inputs for every method)
  square_512   --n RGB arrays of 512x512 (real photos resized) -> 224x224, normalized, float32 NCHW
  mixed_real   real photos of many sizes (scikit-image, scikit-learn and crops) -> 224x224
  jpeg_512     the square_512 images as JPEG bytes (q90): decode + preprocess
Methods
  accelkit     JAXImagePreprocessor (PIL-exact antialiased bilinear on the JAX device, bucketed shapes;
               decoding of bytes in its thread pool), reducing_gap=None (PIL-equal output)
  accelkit_reducing_gap3  the default: photos > 6x the target per side are box-reduced on the host first
  pil_numpy    PIL Image.resize(BILINEAR) per image, numpy normalize, stack (decode: PIL)
  cv2_area     OpenCV INTER_AREA + numpy normalize (not PIL-equal; decode: cv2.imdecode)
  cv2_linear   OpenCV INTER_LINEAR + numpy normalize (not antialiased; decode: cv2.imdecode)
  accelkit_reduced_jpeg_decode / pil_draft_numpy   (jpeg_512 only) reduced-size JPEG decoding
               (DCT scaling) then the resize: accelkit's default, against PIL's own `draft`
Quality: max and mean |difference| in uint8 levels against PIL for each method.
End to end: ImageEmbeddingPipeline.embed on the JPEG bytes vs the model alone (ONNX Runtime on
already-preprocessed batches of the same size): the ratio shows how much of decode + preprocessing
is hidden behind inference.

Timing: one warm-up per method (compilation), then --rounds rounds; each round times every method
of a workload once, in turn, so a change in the machine's load hits all methods alike. Rates are
medians over rounds; each ratio is taken within a round and reported as median, min and max.

    python -m benchmarks.images.images_bench            # about 2-3 minutes on 2 cores
    python -m benchmarks.images.images_bench --quick    # smoke run
"""

from __future__ import annotations

import argparse
import io

import numpy as np

from benchmarks.common import REPO, ArgumentParser, out_file, positive

SCHEMA = "accelkit.images_bench/1"
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)
TARGETS = {"preprocess_vs_pil_numpy": 2.0, "end_to_end_vs_model_only": 0.8}


def real_photos() -> list[np.ndarray]:
    """The sample photos (accelkit.images.testing: scikit-image's and scikit-learn's, with crops)."""
    from accelkit.images.testing import photos

    return list(photos().values())


def pil_numpy(images, size=(224, 224)):
    from PIL import Image

    out = np.empty((len(images), 3, *size), np.float32)
    for i, a in enumerate(images):
        r = np.asarray(Image.fromarray(a).resize(size[::-1], Image.Resampling.BILINEAR), np.float32)
        out[i] = ((r * (1 / 255.0) - MEAN) / STD).transpose(2, 0, 1)
    return out


def pil_draft_numpy(blobs, size=(224, 224)):
    """PIL's own reduced-size JPEG decoding (`draft`: DCT scaling to the smallest size ≥ the target),
    then resize + normalize: the fair baseline for accelkit's reduced decode."""
    from PIL import Image

    out = np.empty((len(blobs), 3, *size), np.float32)
    for i, b in enumerate(blobs):
        image = Image.open(io.BytesIO(b))
        image.draft("RGB", size[::-1])
        r = np.asarray(
            image.convert("RGB").resize(size[::-1], Image.Resampling.BILINEAR), np.float32
        )
        out[i] = ((r * (1 / 255.0) - MEAN) / STD).transpose(2, 0, 1)
    return out


def pil_decode(blobs):
    from PIL import Image

    return [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b in blobs]


def cv2_method(interpolation):
    import cv2

    def run(images, size=(224, 224)):
        out = np.empty((len(images), 3, *size), np.float32)
        for i, a in enumerate(images):
            r = cv2.resize(a, size[::-1], interpolation=interpolation).astype(np.float32)
            out[i] = ((r * (1 / 255.0) - MEAN) / STD).transpose(2, 0, 1)
        return out

    return run


def cv2_decode(blobs):
    import cv2

    return [
        cv2.cvtColor(cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        for b in blobs
    ]


def to_levels(batch):
    return (np.asarray(batch, np.float64).transpose(0, 2, 3, 1) * STD + MEAN) * 255.0


def main() -> None:
    parser = ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=positive(), default=64, help="images in the 512x512 workloads")
    parser.add_argument("--rounds", type=positive(), default=9)
    parser.add_argument("--e2e-images", type=positive(), default=128)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=out_file, default=None)
    args = parser.parse_args()
    if args.quick:
        args.n, args.rounds, args.e2e_images = 16, 2, 32
    out_path = args.out or REPO / "benchmarks" / "results" / (
        "images_bench_quick.json" if args.quick else "images_bench.json"
    )

    import cv2
    from PIL import Image

    from accelkit.images import ImageEmbeddingPipeline, ServiceConfig
    from accelkit.images.embedding.preprocess import JAXImagePreprocessor
    from accelkit.runtime.environment import record
    from accelkit.runtime.timing import interleaved

    photos = real_photos()
    square = [
        np.asarray(
            Image.fromarray(photos[i % len(photos)]).resize((512, 512), Image.Resampling.BILINEAR)
        )
        for i in range(args.n)
    ]
    blobs = []
    for a in square:
        buffer = io.BytesIO()
        Image.fromarray(a).save(buffer, format="JPEG", quality=90)
        blobs.append(buffer.getvalue())
    mixed = photos

    # reducing_gap=None: PIL-equal output (no host box reduction of big photos) for the main comparison.
    pre = JAXImagePreprocessor(
        cache_compiled=False, batch_size=32, fast_jpeg_downscale=False, reducing_gap=None
    )
    gap = JAXImagePreprocessor(
        cache_compiled=False, batch_size=32, fast_jpeg_downscale=False, reducing_gap=3.0
    )
    methods = {
        "accelkit": lambda ims: np.asarray(pre.preprocess_batch(ims)),
        "accelkit_reducing_gap3": lambda ims: np.asarray(gap.preprocess_batch(ims)),
        "pil_numpy": pil_numpy,
        "cv2_area": cv2_method(cv2.INTER_AREA),
        "cv2_linear": cv2_method(cv2.INTER_LINEAR),
    }
    decoders = {
        "accelkit": None,
        "accelkit_reducing_gap3": None,
        "pil_numpy": pil_decode,
        "cv2_area": cv2_decode,
        "cv2_linear": cv2_decode,
    }
    workloads = {"square_512": square, "mixed_real": mixed}
    results: dict = {"workloads": {}, "round_ratios": {}}
    for wname, images in workloads.items():
        reference = [
            np.asarray(Image.fromarray(a).resize((224, 224), Image.Resampling.BILINEAR))
            for a in images
        ]
        entry = {
            "images": len(images),
            "sizes": sorted({a.shape[:2] for a in images})[:40],
            "methods": {},
        }
        timed = interleaved(
            {name: (lambda fn=fn, images=images: fn(images)) for name, fn in methods.items()},
            args.rounds,
        )
        for name, seconds in timed.medians().items():
            diff = np.abs(to_levels(timed.outputs[name]) - np.stack(reference))
            entry["methods"][name] = {
                "first_run_s": timed.first[name],
                "max_level_diff_vs_pil": float(diff.max()),
                "mean_level_diff_vs_pil": float(diff.mean()),
                "images_per_s": len(images) / seconds,
            }
        entry["compile_count"] = pre.compile_count
        results["workloads"][wname] = entry
        results["round_ratios"][f"{wname}_accelkit_vs_pil_numpy"] = timed.ratio(
            "accelkit", "pil_numpy"
        )
    # decode + preprocess from JPEG bytes
    fast = JAXImagePreprocessor(cache_compiled=False, batch_size=32, fast_jpeg_downscale=True)
    runs = {}
    for name, fn in methods.items():
        decode = decoders[name]
        runs[name] = (
            (lambda fn=fn: fn(blobs))
            if decode is None
            else (lambda fn=fn, decode=decode: fn(decode(blobs)))
        )
    runs["accelkit_reduced_jpeg_decode"] = lambda: fast.preprocess_batch(blobs)
    runs["pil_draft_numpy"] = lambda: pil_draft_numpy(blobs)
    # quality against full-size PIL decode + PIL resize (reduced decodes are not PIL-equal)
    reference = np.stack(
        [
            np.asarray(
                Image.open(io.BytesIO(b))
                .convert("RGB")
                .resize((224, 224), Image.Resampling.BILINEAR)
            )
            for b in blobs
        ]
    )
    timed = interleaved(runs, args.rounds)
    diffs = {name: np.abs(to_levels(out) - reference) for name, out in timed.outputs.items()}
    results["workloads"]["jpeg_512"] = {
        "images": len(blobs),
        "methods": {
            name: {
                "images_per_s": len(blobs) / seconds,
                "max_level_diff_vs_pil": float(diffs[name].max()),
                "mean_level_diff_vs_pil": float(diffs[name].mean()),
            }
            for name, seconds in timed.medians().items()
        },
    }
    for ours, baseline in (
        ("accelkit", "pil_numpy"),
        ("accelkit_reduced_jpeg_decode", "pil_numpy"),
        ("accelkit_reduced_jpeg_decode", "pil_draft_numpy"),
    ):
        label = ours.replace("_jpeg_decode", "")
        results["round_ratios"][f"jpeg_512_{label}_vs_{baseline}"] = timed.ratio(ours, baseline)

    # end to end vs model only
    config = ServiceConfig.from_env(env={}, preprocess={"cache_compiled": False, "batch_size": 32})
    e2e_blobs = (blobs * (args.e2e_images // len(blobs) + 1))[: args.e2e_images]
    with ImageEmbeddingPipeline(config) as pipeline:
        batches = [
            np.asarray(pipeline.preprocessor.preprocess_batch(e2e_blobs[i : i + 32]))
            for i in range(0, len(e2e_blobs), 32)
        ]
        pipeline.embed(e2e_blobs[:32])
        pipeline.backend.embed(batches[0])
        timed = interleaved(
            {
                "model": lambda: [pipeline.backend.embed(b) for b in batches],
                "e2e": lambda: pipeline.embed(e2e_blobs),
            },
            max(2, args.rounds // 2),
            warmup=False,
        )
        assert not timed.outputs["e2e"].failures
        model_rate = len(e2e_blobs) / timed.medians()["model"]
        e2e_rate = len(e2e_blobs) / timed.medians()["e2e"]
    results["round_ratios"]["end_to_end_vs_model_only"] = timed.ratio("e2e", "model")
    results["end_to_end"] = {
        "images": len(e2e_blobs),
        "model_only_images_per_s": model_rate,
        "end_to_end_images_per_s": e2e_rate,
        "ratio": e2e_rate / model_rate,
    }

    # headline ratios: medians of the per-round ratios (min and max under round_ratios)
    results["ratios"] = {name: r["median"] for name, r in results["round_ratios"].items()}
    results["targets"] = TARGETS
    payload = {
        "schema": SCHEMA,
        "environment": {**record(("numpy", "jax", "jaxlib", "pillow")), "device": str(pre.device)},
        "quick": args.quick,
        **results,
    }
    from accelkit.runtime.files import write_json_atomic

    write_json_atomic(out_path, payload, trailing_newline=True)
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"accelkit images benchmark ({out_path.name})")
    for col in ("workload", "method", "images/s", "max |Δ| vs PIL"):
        table.add_column(col)
    for wname, entry in results["workloads"].items():
        for name, m in entry["methods"].items():
            table.add_row(
                wname,
                name,
                f"{m['images_per_s']:.0f}",
                f"{m.get('max_level_diff_vs_pil', float('nan')):.2f}",
            )
    e = results["end_to_end"]
    table.add_row(
        "end_to_end",
        "model only / pipeline",
        f"{e['model_only_images_per_s']:.0f} / {e['end_to_end_images_per_s']:.0f}",
        "",
    )
    Console().print(table)
    Console().print(
        {
            k: f"{r['median']:.2f} (rounds {r['min']:.2f}-{r['max']:.2f})"
            for k, r in results["round_ratios"].items()
        }
    )


if __name__ == "__main__":
    main()
