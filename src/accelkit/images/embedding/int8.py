"""The int8 EfficientNet-Lite0 (`model.name: efficientnet-lite0-int8`): ONNX Runtime static QDQ
quantization of the packaged FP32 export, uint8 activations and per-channel int8 weights (U8S8,
the layout ORT's x86 kernels fuse end to end: QLinearConv, QLinearAdd), with the layers the
embedding is most sensitive to kept float (`FLOAT_NODES`).

Calibration ships with the package: `int8_ranges.json` holds the min/max of every activation of
the FP32 model over the calibration images (`CALIBRATION`, made by `calibration_ranges` from the
photos of `accelkit.images.testing`, which need the test extra: `tools/int8_ranges.py` rewrites
the file). Building the int8 file on a user's machine therefore needs only the images extra and
reads no image: the FP32 export, `quant_pre_process` (folds the SAME-padding subgraphs into the
convs) and `quantize_static` on those ranges. The file is cached beside the FP32 export, keyed by
the weights, both recipes, the ranges and the onnxruntime version, and written atomically (a temp
file in the folder, renamed); the same inputs give the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from accelkit.errors import ConfigError, require

INT8_MODEL_NAME = "efficientnet-lite0-int8"
QUANT_RECIPE = "v1-qdq-u8s8-per-channel-minmax"  # part of the cache key and the record
RANGES_FILE = Path(__file__).with_name("int8_ranges.json")
# kept float: the stem conv (the input is not rounded to 8 bits: the largest single error, about
# half a grey level) and block 0 (its depthwise conv at 112x112 moves the embedding most: the
# worst cosine to FP32 goes from 0.88 to 0.98), the pooling (the stored vector is not rounded
# either) and the classifier. Block 0 float was as fast as the stem alone float in two of three
# interleaved runs (the float part ends in 16 channels instead of 32; one run at load 15-19 had
# it slower); each further block float costs speed: docs/images.md, "The int8 model"
FLOAT_NODES = (
    "/_conv_stem/Conv",
    "/_blocks.0/_depthwise_conv/Conv",
    "/_blocks.0/_swish/Clip",
    "/_blocks.0/_project_conv/Conv",
    "/ReduceMean",
    "/_fc/Gemm",
)
CALIBRATION = "the 25 photos of accelkit.images.testing and their mirror images"


def is_int8(config) -> bool:
    """Whether a `ModelConfig` asks for the packaged int8 model (its name, no file of its own)."""
    return (
        config.backend == "onnxruntime"
        and config.onnx_path is None
        and config.name == INT8_MODEL_NAME
    )


def _ort_version() -> str:
    import onnxruntime

    return ".".join(onnxruntime.__version__.split(".")[:2])


def recipe() -> str:
    """What makes the int8 file besides the FP32 export: the recipe, the float nodes, the ranges
    (their bytes) and the onnxruntime version (its quantizer writes the file)."""
    ranges = hashlib.sha256(RANGES_FILE.read_bytes()).hexdigest()[:16]
    return f"{QUANT_RECIPE}:{','.join(FLOAT_NODES)}:{ranges}:onnxruntime-{_ort_version()}"


def int8_weights(fp32_weights: str) -> str:
    """16 hex digits naming the int8 model's weights (recorded as `image_tower.weights`), from
    the FP32 export's (`models.image_weights` of the default model) and `recipe()`."""
    return hashlib.sha256(f"{fp32_weights}:{recipe()}".encode()).hexdigest()[:16]


def _quantize_static():
    import inspect

    quantization = require("onnxruntime.quantization", "images")
    if "calibration_cache_path" not in inspect.signature(quantization.quantize_static).parameters:
        raise ConfigError(
            f"model {INT8_MODEL_NAME!r} needs an onnxruntime whose quantize_static takes"
            f" calibration_cache_path (installed: {_ort_version()}); upgrade onnxruntime, or set"
            " model.name: efficientnet-lite0"
        )
    return quantization


def build_int8(
    fp32: str | os.PathLike,
    target: str | os.PathLike,
    ranges: dict | None = None,
    float_nodes: tuple[str, ...] = FLOAT_NODES,
) -> Path:
    """Quantize the FP32 export `fp32` into `target` with `ranges` ({tensor: [[min], [max]]}, default
    the shipped table) and `float_nodes` kept float, atomically: everything is written in a temp folder beside `target`, and
    the finished file renamed onto it."""
    import numpy as np

    quantization = _quantize_static()
    from onnxruntime.quantization.calibrate import TensorsData, save_tensors_data

    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    table = ranges if ranges is not None else load_ranges()
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".int8-") as scratch:
        pre, cache, out = (Path(scratch) / n for n in ("pre.onnx", "ranges.json", "int8.onnx"))
        quantization.quant_pre_process(str(fp32), str(pre))
        save_tensors_data(
            TensorsData(
                quantization.CalibrationMethod.MinMax,
                {
                    name: tuple(np.asarray(bound, np.float32) for bound in bounds)
                    for name, bounds in table.items()
                },
            ),
            cache,
        )
        try:
            quantization.quantize_static(
                str(pre),
                str(out),
                None,
                quant_format=quantization.QuantFormat.QDQ,
                per_channel=True,
                activation_type=quantization.QuantType.QUInt8,
                weight_type=quantization.QuantType.QInt8,
                calibrate_method=quantization.CalibrationMethod.MinMax,
                nodes_to_exclude=list(float_nodes),
                calibration_cache_path=str(cache),
            )
        except KeyError as exc:  # a tensor the table has no range for: another export
            raise ConfigError(
                f"{RANGES_FILE}: no calibration range for tensor {exc} of {fp32}: the FP32 export"
                " differs from the one the ranges were made on; rerun tools/int8_ranges.py"
            ) from exc
        os.replace(out, target)
    return target


def load_ranges() -> dict[str, list[list[float]]]:
    return json.loads(RANGES_FILE.read_text())["ranges"]


def calibration_images() -> list:
    """`CALIBRATION`: the shipped test photos (needs the test extra) and their mirror images."""
    import numpy as np

    from accelkit.images.testing import photos

    shipped = photos()
    images = [shipped[name] for name in sorted(shipped)]
    return images + [np.ascontiguousarray(image[:, ::-1]) for image in images]


def calibration_ranges(
    fp32: str | os.PathLike, tensors, input_name: str = "pixels", batch: int = 10
) -> dict[str, list[list[float]]]:
    """{tensor: [[min], [max]]} of every activation ORT quantizes, over `tensors` ([N, 3, H, W]
    float32, preprocessed as the pipeline does), with ORT's own MinMax calibrator on the
    pre-processed FP32 graph: what `quantize_static` would compute from these inputs."""
    import numpy as np

    quantization = require("onnxruntime.quantization", "images")
    from onnxruntime.quantization.calibrate import create_calibrator

    class Reader(quantization.CalibrationDataReader):
        def __init__(self):
            self.batches = iter(
                [{input_name: tensors[i : i + batch]} for i in range(0, len(tensors), batch)]
            )

        def get_next(self):
            return next(self.batches, None)

    with tempfile.TemporaryDirectory(prefix="accelkit-int8-") as scratch:
        pre = Path(scratch) / "pre.onnx"
        quantization.quant_pre_process(str(fp32), str(pre))
        calibrator = create_calibrator(
            pre,
            augmented_model_path=str(Path(scratch) / "augmented.onnx"),
            calibrate_method=quantization.CalibrationMethod.MinMax,
        )
        calibrator.collect_data(Reader())
        data = calibrator.compute_data()
        del calibrator
    # each bound as ORT holds it (a float32 array of one value), written as a list of floats:
    # JSON keeps a float32 exactly
    return {
        name: [np.asarray(bound, np.float32).reshape(-1).tolist() for bound in value.range_value]
        for name, value in sorted(data.data.items())
    }


def cpu_int8_features() -> list[str]:
    """The int8 dot-product instructions this x86 CPU has (`avx512_vnni`, `avx_vnni`,
    `amx_int8`), from /proc/cpuinfo; [] elsewhere."""
    try:
        flags = next(
            line.split(":", 1)[1].split()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("flags")
        )
    except (OSError, StopIteration):
        return []
    return [f for f in ("avx512_vnni", "avx_vnni", "amx_int8") if f in flags]
