"""Rewrite src/accelkit/images/embedding/int8_ranges.json: the min/max of every activation of the
FP32 EfficientNet-Lite0 over the calibration images (`int8.CALIBRATION`), preprocessed as
`accelkit images embed` does on default settings. Needs the images and test extras.

    python3 tools/int8_ranges.py            # writes the file
    python3 tools/int8_ranges.py --check    # exit 1 if the shipped file differs from a fresh run
"""

from __future__ import annotations

import json
import sys


def fresh() -> dict:
    import numpy as np

    from accelkit.images.embedding import int8, models
    from accelkit.images.embedding.preprocess import make_preprocessor
    from accelkit.images.settings.config import PreprocessConfig

    settings = PreprocessConfig()
    preprocessor = make_preprocessor(settings.engine, **settings.preprocessor_kwargs())
    tensors = np.asarray(preprocessor.preprocess_batch(int8.calibration_images()), np.float32)
    return {
        "calibration": int8.CALIBRATION,
        "images": len(tensors),
        "method": "MinMax (onnxruntime's calibrator on the quant_pre_process'ed FP32 export)",
        "ranges": int8.calibration_ranges(models.cached_onnx_path(), tensors),
    }


def main(argv: list[str]) -> int:
    from accelkit.images.embedding import int8
    from accelkit.runtime.files import atomic_open

    table = fresh()
    if "--check" in argv:
        same = json.loads(int8.RANGES_FILE.read_text()) == table
        print("same" if same else f"{int8.RANGES_FILE} differs from a fresh calibration")
        return 0 if same else 1
    with atomic_open(int8.RANGES_FILE, "w", output=False) as handle:
        json.dump(table, handle, indent=1)
        handle.write("\n")
    print(f"wrote {int8.RANGES_FILE}: {len(table['ranges'])} tensors from {table['images']} images")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
