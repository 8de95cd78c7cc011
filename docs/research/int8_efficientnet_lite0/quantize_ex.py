"""Mixed precision: u8s8 MinMax QDQ (per-channel), float head, plus node groups kept float.

    nice -n 19 python3 quantize_ex.py NAME REGEX [REGEX ...]   (node names of models/fp32_pre.onnx)
"""
import re
import sys
import time

import onnx
from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

from common import MODELS
from quantize import Reader, calibration_tensors, ops

name, patterns = sys.argv[1], sys.argv[2:]
nodes = [n.name for n in onnx.load(str(MODELS / "fp32_pre.onnx")).graph.node]
exclude = ["/ReduceMean", "/_fc/Gemm"] + [n for n in nodes if any(re.search(p, n) for p in patterns)]
t = time.perf_counter()
quantize_static(str(MODELS / "fp32_pre.onnx"), str(MODELS / f"{name}.onnx"), Reader(calibration_tensors()),
                quant_format=QuantFormat.QDQ, per_channel=True, activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
                nodes_to_exclude=exclude)
print(name, len(exclude), "excluded", round(time.perf_counter() - t, 1), "s", ops(MODELS / f"{name}.onnx"))
