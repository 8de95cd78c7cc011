"""Build the int8 variants from accelkit's FP32 EfficientNet-Lite0 ONNX file.

    nice -n 19 python3 quantize.py [variant ...]
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter

from common import MODELS, fp32_path, preprocess

import numpy as np
import onnx
from onnxruntime.quantization import (
    CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quant_pre_process,
    quantize_dynamic, quantize_static,
)


def calibration_tensors() -> np.ndarray:
    """The 25 shipped photos (accelkit.images.samples.photos(): 18 photos + 7 crops) and their
    mirror images, preprocessed by accelkit's default preprocessor: 50 tensors."""
    from accelkit.images.samples import photos

    p = photos()
    images = [p[n] for n in sorted(p)]
    images += [np.ascontiguousarray(a[:, ::-1]) for a in images]
    if os.environ.get("CALIB_MORE"):  # + two centre-ish crops and a darker copy of each photo: 125
        base = images[:25]
        images += [np.ascontiguousarray(a[a.shape[0] // 8:-(a.shape[0] // 8), a.shape[1] // 8:-(a.shape[1] // 8)]) for a in base]
        images += [np.ascontiguousarray(a[: a.shape[0] * 2 // 3, a.shape[1] // 3 :]) for a in base]
        images += [(a * 0.8).astype(np.uint8) for a in base]
    return preprocess(images)


class Reader(CalibrationDataReader):
    def __init__(self, tensors, batch=10):
        self.batches = [tensors[i:i + batch] for i in range(0, len(tensors), batch)]
        self.i = 0

    def get_next(self):
        if self.i >= len(self.batches):
            return None
        self.i += 1
        return {"pixels": self.batches[self.i - 1]}

    def rewind(self):
        self.i = 0


VARIANTS = {
    # name: (activation_type, weight_type, calibrate_method, extra_options)
    "s8s8_minmax": (QuantType.QInt8, QuantType.QInt8, CalibrationMethod.MinMax, {}),
    "u8s8_minmax": (QuantType.QUInt8, QuantType.QInt8, CalibrationMethod.MinMax, {}),
    "s8s8_entropy": (QuantType.QInt8, QuantType.QInt8, CalibrationMethod.Entropy, {}),
    "u8s8_entropy": (QuantType.QUInt8, QuantType.QInt8, CalibrationMethod.Entropy, {}),
    "s8s8_pct": (QuantType.QInt8, QuantType.QInt8, CalibrationMethod.Percentile,
                 {"CalibPercentile": 99.999}),
    "u8s8_pct": (QuantType.QUInt8, QuantType.QInt8, CalibrationMethod.Percentile,
                 {"CalibPercentile": 99.999}),
}


def ops(path) -> dict:
    return dict(Counter(n.op_type for n in onnx.load(str(path)).graph.node))


def main(names):
    MODELS.mkdir(exist_ok=True)
    src = fp32_path()
    pre = MODELS / "fp32_pre.onnx"
    report = {"fp32": str(src), "fp32_ops": ops(src)}
    if not pre.exists():
        t = time.perf_counter()
        quant_pre_process(str(src), str(pre))  # symbolic shape inference + ORT basic opt (folds the SAME-pad subgraphs)
        report["pre_s"] = time.perf_counter() - t
    report["pre_ops"] = ops(pre)
    tensors = calibration_tensors()
    report["calibration_tensors"] = list(tensors.shape)
    for name in names or [*VARIANTS, "dynamic"]:
        out = MODELS / f"{name}.onnx"
        t = time.perf_counter()
        try:
            if name == "dynamic":
                quantize_dynamic(str(pre), str(out), per_channel=True, weight_type=QuantType.QInt8)
            elif name == "dynamic_u8":
                quantize_dynamic(str(pre), str(out), per_channel=True, weight_type=QuantType.QUInt8)
            else:
                base, fh = (name[:-3], True) if name.endswith("_fh") else (name, False)
                act, w, method, extra = VARIANTS[base]
                # _fh: float head: the pooling (the embedding) and the classifier stay float, so
                # the embedding output is not itself rounded to 8 bits
                exclude = ["/ReduceMean", "/_fc/Gemm"] if fh else None
                quantize_static(
                    str(pre), str(out), Reader(tensors), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=act, weight_type=w,
                    calibrate_method=method, extra_options=extra, nodes_to_exclude=exclude,
                )
            report[name] = {"s": round(time.perf_counter() - t, 1), "ops": ops(out),
                            "bytes": out.stat().st_size}
        except Exception as exc:  # record what failed
            report[name] = {"error": repr(exc)[:500]}
        print(name, json.dumps(report[name]), flush=True)
    (MODELS / f"quantize_report_{'_'.join(names) or 'all'}.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k.endswith("ops")}))


if __name__ == "__main__":
    main(sys.argv[1:])
