"""What the tests of `images import-model` share: the sample photos' names, cosine in float64, and
a refused import's message."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.support.cli import run_cli

NAMES = ["chelsea", "coffee", "rocket", "astronaut", "china", "camera"]


def cosine(a, b) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def refused(capsys, source: str, output: str) -> str:
    code, _, err = run_cli(["images", "import-model", source, "--output", output], capsys)
    lines = err.strip().splitlines()  # a status line ("importing …") may come first
    errors = [line for line in lines if line.startswith("error: ")]
    assert code == 2 and len(errors) == 1 and lines[-1] == errors[0], (code, err)
    assert not any(p.name.startswith((".out", "out")) for p in Path(output).parent.iterdir())
    return errors[0]
