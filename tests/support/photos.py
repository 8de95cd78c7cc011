"""Photos for the images tests and benchmarks: encoded in a format, and altered copies (the
retrieval tests' near-duplicates)."""

from __future__ import annotations

import io

import numpy as np


def encode(array: np.ndarray, fmt: str, **kwargs) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format=fmt, **kwargs)
    return buffer.getvalue()
