"""Every GPU path of accelkit in one call, each against its CPU reference in the same run.

    python -m benchmarks.machine.gpu_check [--out benchmarks/results/gpu_check.json] [--rows 4000000]

Parts (each recorded as ok / failed / skipped with the reason; one failing part never stops the rest):
  devices   what JAX and PyTorch see (`accelkit devices`), and the platform accelkit would choose
  stats     exact statistics of --rows x 32 float32 on the JAX GPU vs numpy float64 (quantiles must be
            bit-equal to numpy.quantile) and rows/s on GPU vs CPU
  images    JAXImagePreprocessor on the GPU: max |difference| to PIL in uint8 levels, images/s vs CPU
            and vs PIL + numpy, compile count
  quant     benchmarks/quant/quant_cuda_graphs.py (torch.compile reduce-overhead, 100 calls holding outputs)
  bench     `accelkit bench xla` with JAX and PyTorch on the GPU (synchronized timings, checks)

On a machine where neither JAX nor PyTorch has a GPU it writes nothing and exits 3. JAX needs its
CUDA plugin (`pip install "jax[cuda12]"`); without it the JAX parts are skipped and say so.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

from benchmarks.common import (
    REPO,
    ArgumentParser,
    module_command,
    out_file,
    positive,
    repo_env,
)


def jax_gpu():
    try:
        import jax

        return jax.devices("gpu")
    except RuntimeError:  # JAX raises RuntimeError for a platform it cannot start
        return []


def torch_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def timed(fn, rounds: int = 3) -> float:
    """Median seconds of `rounds` synchronized calls after a first (compiling) one."""
    from accelkit.runtime.timing import Protocol, measure

    timing, _ = measure("gpu_check", "", fn, Protocol(repeats=rounds, warmup=0))
    return timing.median_s


def part_devices() -> dict:
    from accelkit.runtime.devices import describe_devices

    return describe_devices()


def part_stats(rows: int, platform: str = "gpu") -> dict:
    import jax

    from accelkit.stats.engine.driver import compute_stats

    if platform == "gpu" and not jax_gpu():
        return {"status": "skipped", "why": "JAX has no GPU (install jax[cuda12])"}
    rng = np.random.default_rng(0)
    data = rng.standard_normal((rows, 32), dtype=np.float32)
    data[:, 0] = data[:, 0] * 0.01 + 1000.0  # |mean| >> std
    data[:, 1] = np.round(data[:, 1])  # ties
    batches = [{"x": data[i : i + 500_000]} for i in range(0, rows, 500_000)]
    levels = [0.01, 0.5, 0.99]

    def run(platform):
        return compute_stats(batches, quantiles=levels, platform=platform)

    gpu, cpu = run(platform), run("cpu")
    want = np.quantile(data.astype(np.float64), levels, axis=0)
    got = np.stack([gpu.stats["x"].quantiles[q] for q in levels])
    exact = bool(np.array_equal(got, want)) and all(
        np.array_equal(gpu.stats["x"].quantiles[q], cpu.stats["x"].quantiles[q]) for q in levels
    )
    return {
        "status": "ok" if exact else "failed",
        "rows": rows,
        "device": str(jax.devices(platform)[0]),
        "quantiles_equal_numpy": bool(np.array_equal(got, want)),
        "gpu_equals_cpu": bool(
            all(
                np.array_equal(gpu.stats["x"].quantiles[q], cpu.stats["x"].quantiles[q])
                for q in levels
            )
        ),
        "std_max_rel_err": float(
            np.max(
                np.abs(gpu.stats["x"].std - data.astype(np.float64).std(axis=0))
                / data.astype(np.float64).std(axis=0)
            )
        ),
        "gpu_rows_per_s": rows / timed(lambda: run(platform)),
        "cpu_rows_per_s": rows / timed(lambda: run("cpu")),
    }


def part_images(platform: str = "gpu") -> dict:
    from PIL import Image

    from accelkit.images.embedding.preprocess import JAXImagePreprocessor

    if platform == "gpu" and not jax_gpu():
        return {"status": "skipped", "why": "JAX has no GPU (install jax[cuda12])"}
    rng = np.random.default_rng(1)
    sizes = [(512, 512), (480, 640), (1080, 1920), (333, 517), (224, 224), (100, 3000)]
    images = [rng.integers(0, 256, (*sizes[i % len(sizes)], 3), dtype=np.uint8) for i in range(64)]
    gpu = JAXImagePreprocessor(
        platform=platform,
        cache_compiled=False,
        batch_size=32,
        reducing_gap=None,
        data_format="NHWC",
    )
    cpu = JAXImagePreprocessor(
        platform="cpu",
        cache_compiled=False,
        batch_size=32,
        reducing_gap=None,
        data_format="NHWC",
    )
    mean, std = np.array(gpu.mean), np.array(gpu.std)
    out = np.asarray(gpu.preprocess_batch(images), np.float64)
    levels = (out * std + mean) * 255.0
    reference = np.stack(
        [
            np.asarray(Image.fromarray(a).resize((224, 224), Image.Resampling.BILINEAR))
            for a in images
        ]
    )
    worst = float(np.abs(levels - reference).max())

    def pil_numpy():
        return np.stack(
            [
                (
                    np.asarray(
                        Image.fromarray(a).resize((224, 224), Image.Resampling.BILINEAR), np.float32
                    )
                    / 255.0
                    - mean
                )
                / std
                for a in images
            ]
        )

    return {
        "status": "ok"
        if worst <= 1.0
        else "failed",  # the bound: within 1 uint8 level of PIL
        "device": str(gpu.device),
        "max_level_diff_vs_pil": worst,
        "compile_count": gpu.compile_count,
        "gpu_images_per_s": len(images) / timed(lambda: np.asarray(gpu.preprocess_batch(images))),
        "cpu_images_per_s": len(images) / timed(lambda: np.asarray(cpu.preprocess_batch(images))),
        "pil_numpy_images_per_s": len(images) / timed(pil_numpy),
    }


def part_quant(out_dir: Path) -> dict:
    if not torch_cuda():
        return {"status": "skipped", "why": "PyTorch has no CUDA GPU"}
    target = out_dir / "quant_cuda_graphs.json"
    done = subprocess.run(
        module_command("benchmarks.quant.quant_cuda_graphs", "--out", str(target)),
        env=repo_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    result = {
        "status": "ok" if done.returncode == 0 else "failed",
        "returncode": done.returncode,
        "tail": (done.stdout + done.stderr)[-2000:],
    }
    if target.exists():
        result["report"] = json.loads(target.read_text())
    return result


def part_bench(out_dir: Path) -> dict:
    modes = ",".join(m for m, ok in (("jax", bool(jax_gpu())), ("pytorch", torch_cuda())) if ok)
    target = out_dir / "bench_xla_gpu.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "accelkit",
            "bench",
            "xla",
            modes,
            "--matrix-size",
            "5000",
            "--dtype",
            "float32",
            "--output",
            str(target),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    result = {
        "status": "ok" if done.returncode == 0 else "failed",
        "modes": modes,
        "returncode": done.returncode,
        "tail": (done.stdout + done.stderr)[-2000:],
    }
    if target.exists():
        result["report"] = json.loads(target.read_text())
    return result


def main() -> int:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=out_file, default=REPO / "benchmarks" / "results" / "gpu_check.json"
    )
    parser.add_argument("--rows", type=positive(), default=4_000_000)
    args = parser.parse_args()
    if not jax_gpu() and not torch_cuda():
        print("gpu_check: neither JAX nor PyTorch sees a GPU here; nothing was run.")
        return 3
    parts = {
        "devices": part_devices,
        "stats": lambda: part_stats(args.rows),
        "images": part_images,
        "quant": lambda: part_quant(args.out.parent),
        "bench": lambda: part_bench(args.out.parent),
    }
    report: dict = {"when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "parts": {}}
    for name, run in parts.items():
        start = time.perf_counter()
        try:
            report["parts"][name] = run()
        except Exception as exc:  # one part failing must not hide the others
            report["parts"][name] = {
                "status": "failed",
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-3000:],
            }
        report["parts"][name]["seconds"] = time.perf_counter() - start
        print(f"gpu_check: {name}: {report['parts'][name].get('status', 'ok')}", flush=True)
    from accelkit.runtime.files import write_json_atomic

    write_json_atomic(args.out, report, trailing_newline=True)
    print(f"wrote {args.out}")
    return (
        0
        if all(p.get("status", "ok") in ("ok", "skipped") for p in report["parts"].values())
        else 1
    )


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main())
