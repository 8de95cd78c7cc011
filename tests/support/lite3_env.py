"""A Python whose `milvus_lite` is Milvus Lite 3, beside this environment's 2.x: a venv made
once in `.venv-lite3/` beside the checkout, with milvus-lite 3 (the `images-lite3` extra's range,
read from pyproject.toml) and faiss-cpu installed into it without dependencies, and a `.pth` file
adding this environment's site folders after its own, so all else is shared and nothing of this
environment is touched. Used by tests/images/store/test_engines.py and
benchmarks/images/lite_engines.py."""

from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

from tests.support.require import absent

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-lite3"


def lite3_requirements() -> list[str]:
    """milvus-lite as the `images-lite3` extra pins it, and the one package of its own it needs
    that `accelkit[images]` lacks (its others, grpcio, numpy and pyarrow, are shared)."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    lite = next(r for r in extras["images-lite3"] if r.startswith("milvus-lite"))
    return [lite, "faiss-cpu>=1.7.4,<2"]


def lite3_python() -> Path:
    """The Python of `.venv-lite3/`, made (or remade, when the requirements or this environment
    changed) on first use."""
    python = VENV / "bin" / "python"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    packages = VENV / "lib" / version / "site-packages"
    outer = [p for p in (*site.getsitepackages(), sysconfig.get_path("purelib")) if p]
    stamp = VENV / "accelkit-made-for"
    wanted = "\n".join([sys.executable, *lite3_requirements(), *outer])
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    subprocess.run(
        [sys.executable, "-m", "venv", "--clear", "--without-pip", str(VENV)],
        check=True,
        timeout=120,
    )
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "-q", "--no-deps"),
            *("--target", str(packages), *lite3_requirements()),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode:
        absent("milvus-lite 3", f"pip could not install it: {done.stderr.strip()[-400:]}")
    lines = [f"import site; site.addsitedir({p!r})" for p in dict.fromkeys(outer)]
    (packages / "zz_accelkit_outer.pth").write_text("\n".join(lines) + "\n")
    stamp.write_text(wanted)
    return python
