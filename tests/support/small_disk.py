"""A small file system for full-disk tests: a tmpfs the test mounts (needs root), unmounted at the
end. Where it cannot be mounted the test is absent (skips locally, fails under .ci/run)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.support.require import absent


@contextlib.contextmanager
def small_disk(folder: Path, size_kib: int = 64) -> Iterator[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        absent("a small file system", "mounting a tmpfs needs root")
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(folder)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if result.returncode:
        absent("a small file system", f"mount -t tmpfs failed: {result.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


def fill(folder: Path, leave_bytes: int = 0) -> None:
    """Fill `folder`'s file system until at most `leave_bytes` are free."""
    chunk = b"\0" * 4096
    with open(folder / "filler", "wb") as handle:
        while os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize > leave_bytes:
            try:
                handle.write(chunk)
                handle.flush()
            except OSError:
                break
