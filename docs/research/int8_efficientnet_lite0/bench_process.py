"""Whole processes, as benchmarks/limits_bench.py measures `images embed` (same photo recipe, same
floor), with the int8 file chosen through accelkit's own model config (ACCELKIT_MODEL_ONNX_PATH,
ACCELKIT_MODEL_NAME): accelkit FP32 / accelkit int8 / floor FP32 / floor int8, interleaved
rounds (order rotating), one warm-up each. accelkit runs from the snapshot in snap/.

    nice -n 19 python3 bench_process.py PHOTOS ROUNDS INT8_NAME
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import MODELS, loadavg  # noqa: E402


def ensure_photos(count: int, seed: int = 0) -> Path:
    """limits_bench.ensure_photos: random crops of the sample photos, longer side 400-900, q90."""
    import numpy as np
    from PIL import Image

    from accelkit.images.samples import photos

    folder = HERE / "data" / f"photos_{count}_s{seed}"
    if (folder / "done").is_file():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "jpg").mkdir(parents=True)
    rng = np.random.default_rng(seed)
    sources = list(photos().values())
    for i in range(count):
        image = sources[i % len(sources)]
        h, w = image.shape[:2]
        ch, cw = rng.integers(h // 2, h + 1), rng.integers(w // 2, w + 1)
        y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
        crop = Image.fromarray(image[y : y + ch, x : x + cw])
        scale = rng.integers(400, 901) / max(crop.size)
        crop = crop.resize((max(1, round(crop.width * scale)), max(1, round(crop.height * scale))))
        crop.save(folder / "jpg" / f"{i:06d}.jpg", quality=90)
    (folder / "done").write_text("ok")
    return folder


def ensure_tensors(photos: Path, count: int = 256) -> Path:
    import numpy as np
    from PIL import Image

    path = HERE / "data" / f"tensors_{count}.npy"
    if path.is_file():
        return path
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    files = sorted((photos / "jpg").glob("*.jpg"))[:count]
    ready = np.stack([((np.asarray(Image.open(f).convert("RGB").resize((224, 224)), np.float32)
                        / 255 - mean) / std).transpose(2, 0, 1) for f in files]).astype(np.float32)
    np.save(path, ready)
    return path


def run_process(command, env):
    with tempfile.TemporaryFile() as out:
        load = loadavg()
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            out.seek(0)
            raise SystemExit(f"{command} failed:\n{out.read().decode(errors='replace')[-2000:]}")
    return {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "peak_rss_mib": round(usage.ru_maxrss / 1024), "load": load}


def main(count, nrounds, int8):
    photos = ensure_photos(count)
    tensors = ensure_tensors(photos)
    out = HERE / "results" / "embed"
    out.mkdir(parents=True, exist_ok=True)
    base = {**os.environ, "PYTHONPATH": str(HERE / "snap")}
    base.pop("ACCELKIT_MODEL_ONNX_PATH", None)
    env8 = {**base, "ACCELKIT_MODEL_ONNX_PATH": str(MODELS / f"{int8}.onnx"),
            "ACCELKIT_MODEL_NAME": "efficientnet-lite0-int8"}
    py = sys.executable
    floor = str(HERE / "snap" / "floors.py")
    commands = {
        "accelkit_fp32": ([py, "-m", "accelkit", "images", "embed", str(photos / "jpg"), "-o",
                           str(out / "fp32.npy"), "--no-progress"], base),
        "accelkit_int8": ([py, "-m", "accelkit", "images", "embed", str(photos / "jpg"), "-o",
                           str(out / f"{int8}.npy"), "--no-progress"], env8),
        "floor_fp32": ([py, floor, "model", str(tensors), str(count), "32"], base),
        "floor_int8": ([py, floor, "model", str(tensors), str(count), "32"], env8),
    }
    names = list(commands)
    calls = {n: [] for n in names}
    for n in names:
        print("warm-up", n, run_process(*commands[n]), flush=True)
    for r in range(nrounds):
        for n in names[r % 4:] + names[:r % 4]:
            calls[n].append(run_process(*commands[n]))
        print("round", r, {n: calls[n][-1]["wall_s"] for n in names}, "load", loadavg(), flush=True)
    walls = {n: [c["wall_s"] for c in calls[n]] for n in names}
    ratio = lambda a, b: [y / x for x, y in zip(walls[a], walls[b])]  # b's time / a's time = a's speed vs b
    summary = {
        "photos": count, "rounds": nrounds, "int8": int8, "calls": calls,
        "median_wall_s": {n: statistics.median(w) for n, w in walls.items()},
        "img_s": {n: round(count / statistics.median(w), 1) for n, w in walls.items()},
        "median_cpu_s": {n: statistics.median(c["cpu_s"] for c in calls[n]) for n in names},
    }
    for a, b in [("accelkit_fp32", "floor_fp32"), ("accelkit_int8", "floor_fp32"),
                 ("accelkit_int8", "floor_int8"), ("floor_int8", "floor_fp32"),
                 ("accelkit_int8", "accelkit_fp32")]:
        rs = ratio(a, b)
        summary[f"{a}_vs_{b}"] = {"median": round(statistics.median(rs), 3),
                                   "rounds": [round(x, 2) for x in rs]}
        print(f"{a} vs {b}: {statistics.median(rs):.3f}x ({', '.join(f'{x:.2f}' for x in rs)})")
    print(json.dumps(summary["img_s"]), json.dumps(summary["median_cpu_s"]))
    (HERE / "results" / f"process_{time.strftime('%H%M%S')}.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
