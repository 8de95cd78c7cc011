"""Quality of int8 variants against FP32 on images preprocessed once by accelkit's default
preprocessor (equivalent to the pipeline: tests/images/test_pipeline.py checks preprocess-then-
model == pipeline to 1e-5), embeddings L2-normalized as accelkit does.

Set A: the 25 shipped photos x 12 versions (original, mirror, centre crop 80 %, two random crops
50-70 %, brightness 0.8 / 1.25, contrast 0.7, JPEG q30, greyscale, rotate 90, the test's altered
copy) = 300 images.
    nice -n 19 python3 quality.py variant ...
"""
from __future__ import annotations

import io
import json
import sys
import time

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

from common import MODELS, altered, fp32_path, preprocess, session


def l2(v):
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def jpeg(img, q):
    b = io.BytesIO(); img.save(b, format="JPEG", quality=q); return b.getvalue()


def versions(arr, rng):
    img = Image.fromarray(arr)
    w, h = img.size
    out = [arr, np.ascontiguousarray(arr[:, ::-1])]
    out.append(img.crop((int(w * .1), int(h * .1), int(w * .9), int(h * .9))))
    for _ in range(2):
        f = rng.uniform(.5, .7); cw, ch = int(w * f), int(h * f)
        x, y = rng.integers(0, w - cw + 1), rng.integers(0, h - ch + 1)
        out.append(img.crop((x, y, x + cw, y + ch)))
    out.append(ImageEnhance.Brightness(img).enhance(.8))
    out.append(ImageEnhance.Brightness(img).enhance(1.25))
    out.append(ImageEnhance.Contrast(img).enhance(.7))
    out.append(jpeg(img, 30))
    out.append(ImageOps.grayscale(img).convert("RGB"))
    out.append(img.rotate(90, expand=True))
    out.append(altered(arr))
    return [np.asarray(x) if isinstance(x, Image.Image) else x for x in out]


def embed(sess, x, batch=32):
    return l2(np.concatenate([sess.run(["embedding"], {"pixels": x[i:i + batch]})[0]
                              for i in range(0, len(x), batch)]))


def topk(e, k, exclude_self=True):
    s = e @ e.T
    if exclude_self:
        np.fill_diagonal(s, -np.inf)
    return np.argsort(-s, axis=1)[:, :k]


def recall_at_k(ref, test, k=10):
    a, b = topk(ref, k), topk(test, k)
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a, b)]))


def recall_mixed(ref, test, k=10):
    """int8 queries against the FP32 database vs FP32 queries against it (self excluded)."""
    s_ref, s_mix = ref @ ref.T, test @ ref.T
    np.fill_diagonal(s_ref, -np.inf); np.fill_diagonal(s_mix, -np.inf)
    a, b = np.argsort(-s_ref, 1)[:, :k], np.argsort(-s_mix, 1)[:, :k]
    return float(np.mean([len(set(x) & set(y)) / k for x, y in zip(a, b)]))


def altered_test(orig, copies):
    sim = copies @ orig.T
    first = sim.argmax(1)
    wrong = int((first != np.arange(len(orig))).sum())
    diag = np.diag(sim).copy()
    np.fill_diagonal(sim, -1)
    return wrong, float((diag - sim.max(1)).min())


def main(variants):
    from accelkit.images.samples import photos

    t0 = time.perf_counter()
    p = photos(); names = sorted(p)
    rng = np.random.default_rng(1)
    items = []
    for n in names:
        items += versions(p[n], rng)
    x = preprocess(items)
    per = len(items) // len(names)
    orig_idx = np.arange(len(names)) * per
    alt_idx = orig_idx + per - 1
    print(f"set A: {len(items)} images ({per} versions x {len(names)}), preprocessed in "
          f"{time.perf_counter() - t0:.0f} s", flush=True)
    ref = embed(session(fp32_path()), x)
    res = {"n_images": len(items)}
    w, m = altered_test(ref[orig_idx], ref[alt_idx])
    res["fp32"] = {"altered_wrong": w, "altered_min_margin": round(m, 4)}
    print("fp32", res["fp32"], flush=True)
    for v in variants:
        if v == "ref_bf16_input":  # FP32 model, input rounded to bfloat16: a rounding-only change
            import ml_dtypes
            e = embed(session(fp32_path()), x.astype(ml_dtypes.bfloat16).astype(np.float32))
        elif v == "ref_noise_half_level":  # FP32 model, +-0.5 uint8 level of uniform noise on the input
            noise = np.random.default_rng(2).uniform(-.5, .5, x.shape).astype(np.float32) / 255
            e = embed(session(fp32_path()), x + noise / np.array([.229, .224, .225], np.float32)[:, None, None])
        else:
            e = embed(session(MODELS / f"{v}.onnx"), x)
        cos = np.sum(e * ref, 1)
        w, m = altered_test(e[orig_idx], e[alt_idx])
        r = {"cos_min": round(float(cos.min()), 4), "cos_p01": round(float(np.quantile(cos, .01)), 4),
             "cos_median": round(float(np.median(cos)), 4), "cos_mean": round(float(cos.mean()), 4),
             "recall@10": round(recall_at_k(ref, e), 4),
             "recall@10_int8_query_fp32_db": round(recall_mixed(ref, e), 4),
             "recall@1": round(recall_at_k(ref, e, 1), 4),
             "altered_wrong": w, "altered_min_margin": round(m, 4),
             "worst": names[int(np.argmin(cos)) // per] + f"#{int(np.argmin(cos)) % per}"}
        res[v] = r
        print(v, json.dumps(r), flush=True)
    open(f"results/quality_{time.strftime('%H%M%S')}.json", "w").write(json.dumps(res, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
