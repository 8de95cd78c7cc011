"""Model alone: ONNX Runtime sessions on ready [32,3,224,224] batches (accelkit's batch size), same
process, interleaved rounds (the order rotates each round), one warm-up apart.

    nice -n 19 python3 bench_model.py ROUNDS BATCHES_PER_ROUND spec ...
spec = name[:key=value,...] with name a file in models/ (fp32 = accelkit's cached FP32 file) and
keys threads=N, level=basic|extended|all, denormal=1, spin=0.
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort

from common import MODELS, fp32_path, loadavg, session

LEVELS = {"basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
          "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
          "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL}


def make(spec):
    name, _, opts = spec.partition(":")
    kv = dict(p.split("=") for p in opts.split(",") if p)
    path = fp32_path() if name == "fp32" else MODELS / f"{name}.onnx"
    extra = {}
    if kv.get("spin") == "0":
        extra["session.intra_op.allow_spinning"] = "0"
    return session(path, threads=int(kv["threads"]) if "threads" in kv else None,
                   level=LEVELS[kv["level"]] if "level" in kv else None,
                   denormal=kv.get("denormal") == "1", extra=extra)


def main(rounds, per_round, specs, batch=32):
    rng = np.random.default_rng(0)
    # ready tensors: the content does not change the time; normalized-image-like values
    ready = np.load("models/ready64.npy") if __import__("os").path.exists("models/ready64.npy") else None
    if ready is None:
        from common import preprocess
        from accelkit.images.samples import photos
        p = photos(); names = sorted(p)
        imgs = [p[n] for n in names] + [np.ascontiguousarray(p[n][::-1]) for n in names]
        imgs += [np.ascontiguousarray(p[n][:, ::-1]) for n in names[:14]]
        ready = preprocess(imgs)
        np.save("models/ready64.npy", ready)
    batches = [np.ascontiguousarray(ready[i:i + batch]) for i in (0, 32)]
    sessions = {s: make(s) for s in specs}
    for s, sess in sessions.items():  # warm-up
        sess.run(["embedding"], {"pixels": batches[0]})
    rates = {s: [] for s in specs}
    loads = []
    for r in range(rounds):
        loads.append(loadavg())
        order = specs[r % len(specs):] + specs[:r % len(specs)]
        for s in order:
            t = time.perf_counter()
            for k in range(per_round):
                sessions[s].run(["embedding"], {"pixels": batches[k % 2]})
            rates[s].append(per_round * batch / (time.perf_counter() - t))
    base = specs[0]
    out = {"batch": batch, "rounds": rounds, "images_per_round": per_round * batch,
           "load_1min_per_round": loads, "results": {}}
    for s in specs:
        ratio = [a / b for a, b in zip(rates[s], rates[base])]
        out["results"][s] = {"median_img_s": round(statistics.median(rates[s]), 1),
                             "rounds_img_s": [round(x, 1) for x in rates[s]],
                             f"ratio_vs_{base}_median": round(statistics.median(ratio), 3),
                             "ratio_rounds": [round(x, 2) for x in ratio]}
        print(f"{s:40s} {statistics.median(rates[s]):7.1f} img/s  x{statistics.median(ratio):.2f} "
              f"({min(ratio):.2f}-{max(ratio):.2f})", flush=True)
    print("load", loads)
    return out


if __name__ == "__main__":
    rounds, per = int(sys.argv[1]), int(sys.argv[2])
    res = main(rounds, per, sys.argv[3:])
    stamp = time.strftime("%H%M%S")
    open(f"results/model_{stamp}.json", "w").write(json.dumps(res, indent=1))
