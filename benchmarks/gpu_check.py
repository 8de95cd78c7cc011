"""The old name of `python -m benchmarks.machine.gpu_check`, kept because device-check
instructions name `python benchmarks/gpu_check.py`: runs the module with the same arguments (the
repository put on the child's PYTHONPATH; no sys.path edit here)."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    repo = str(Path(__file__).resolve().parents[1])
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (repo, os.environ.get("PYTHONPATH")) if p)
    argv = [sys.executable, "-m", "benchmarks.machine.gpu_check", *sys.argv[1:]]
    os.execv(sys.executable, argv)
