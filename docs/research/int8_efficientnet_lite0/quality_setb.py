"""Set B: the whole-process benchmark's 400 JPEGs (random crops of the shipped photos, 400-900 px,
q90) as `accelkit images embed` wrote them with the FP32 model and with the int8 file (chosen via
ACCELKIT_MODEL_ONNX_PATH): cosine per image and recall@10 (self excluded)."""
import json
import sys

import numpy as np

from quality import recall_at_k, recall_mixed

a = np.load("results/embed/fp32.npy"); b = np.load(f"results/embed/{sys.argv[1]}.npy")
import os; names = lambda p: [os.path.basename(l) for l in open(p).read().split()]
assert names("results/embed/fp32.inputs.txt") == names(f"results/embed/{sys.argv[1]}.inputs.txt")
cos = np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
r = {"n": len(a), "cos_min": round(float(cos.min()), 4), "cos_p01": round(float(np.quantile(cos, .01)), 4),
     "cos_median": round(float(np.median(cos)), 4), "recall@10": round(recall_at_k(a, b), 4),
     "recall@10_int8_query_fp32_db": round(recall_mixed(a, b), 4), "recall@1": round(recall_at_k(a, b, 1), 4)}
print(sys.argv[1], json.dumps(r))
