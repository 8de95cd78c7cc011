"""The floor processes `limits_bench.py` measures accelkit's commands against: a whole process that
does only the part no implementation can skip.

    python -m benchmarks.machine.floors read DATASET [COLUMN ...]
        Read COLUMN (default observation.state and action) of every parquet file under DATASET/data
        into numpy float32 [rows, dim] arrays with pyarrow (its threads on), and nothing else.
    python -m benchmarks.machine.floors read-lean DATASET [COLUMN ...]
        The same without pyarrow's pre-buffering of column chunks (its default is on; accelkit
        reads local files without it: a cheaper read, so a stricter floor).
    python -m benchmarks.machine.floors model TENSORS.npy IMAGES [BATCH [MODEL]]
        Load the embedding model the way `accelkit images embed` does (same ONNX file, same
        session options) and run it on IMAGES ready 224x224 tensors in batches of BATCH (default
        32), cycling through the [K, 3, 224, 224] tensors in TENSORS.npy: no decoding, no resizing.
        MODEL (default efficientnet-lite0, the FP32 model) names another packaged model
        (efficientnet-lite0-int8: the int8 model alone).
    python -m benchmarks.machine.floors model-spin TENSORS.npy IMAGES [BATCH [MODEL]]
        The same with ONNX Runtime's default session options: its pool threads spin between ops
        (accelkit turns spinning off; this shows the floor did not get slower by it).

Each prints one JSON line (what it did), so the benchmark can check the work was the same.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def read(dataset: str, columns: list[str], pre_buffer: bool = True) -> dict:
    import numpy as np
    import pyarrow.parquet as pq

    rows = 0
    total = 0.0
    for path in sorted(Path(dataset, "data").rglob("*.parquet")):
        parquet = pq.ParquetFile(path, pre_buffer=pre_buffer)
        table = parquet.read(columns=columns, use_threads=True)  # no dataset layer
        for name in columns:
            column = table.column(name).combine_chunks()
            values = np.asarray(column.flatten().to_numpy(zero_copy_only=False), np.float32)
            values = values.reshape(len(column), -1)
            total += float(values[:1].sum()) if len(values) else 0.0  # touch the result
        rows += table.num_rows
    return {"floor": "read" if pre_buffer else "read-lean", "rows": rows, "columns": columns}


def model(tensors: str, images: int, batch: int, name: str | None, spin: bool = False) -> dict:
    import numpy as np

    from accelkit.images.embedding.models import make_backend
    from accelkit.images.settings.config import ServiceConfig

    ready = np.load(tensors, mmap_mode="r")
    config = ServiceConfig.from_env(env={"ACCELKIT_MODEL_NAME": name} if name else {}).model
    backend = make_backend(config)
    if spin:  # the same file with ORT's default options
        import onnxruntime

        backend.session = onnxruntime.InferenceSession(
            str(backend.path), providers=backend.session.get_providers()
        )
    done = 0
    while done < images:
        n = min(batch, images - done)
        index = np.arange(done, done + n) % len(ready)
        backend.embed(np.ascontiguousarray(ready[index]))
        done += n
    floor = "model-spin" if spin else "model"
    return {"floor": floor, "images": done, "batch": batch, "model": config.name}


USAGE = "give read|read-lean DATASET [COLUMN ...] or model|model-spin TENSORS.npy IMAGES [BATCH [MODEL]]"


def _count(name: str, text: str) -> int:
    """A whole number greater than 0, or the house's one line naming the argument (no argparse
    here: a floor imports only what it needs, its start is part of what it measures)."""
    if not text.isdigit() or int(text) < 1:
        print(f"error: {name} {text!r}: give a whole number greater than 0", file=sys.stderr)
        raise SystemExit(2)
    return int(text)


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(argv) >= 2 and argv[0] in ("read", "read-lean"):
        report = read(argv[1], argv[2:] or ["observation.state", "action"], argv[0] == "read")
    elif len(argv) in (3, 4, 5) and argv[0] in ("model", "model-spin"):
        images = _count("IMAGES", argv[2])
        batch = _count("BATCH", argv[3]) if len(argv) >= 4 else 32
        name = argv[4] if len(argv) == 5 else None
        report = model(argv[1], images, batch, name, argv[0] == "model-spin")
    else:
        print(f"error: {USAGE} (see --help)", file=sys.stderr)
        return 2
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
