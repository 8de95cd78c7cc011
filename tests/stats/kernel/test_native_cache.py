"""The host loop's machine code kept between processes (`stats/kernel/native_cache.py`): linked without
numba, it computes what numba's own build computes, bit for bit; a damaged or foreign file is
never run; a command whose loop is kept does not import numba."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from accelkit.stats.kernel import host as host_passes
from accelkit.stats.kernel import native_cache as native_kernel
from accelkit.stats.kernel import windows
from accelkit.stats.kernel.state import PassSpec, init


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / native_kernel.FOLDER


def run(function, x, weight, integer, levels=(0.0, 0.01, 0.5, 0.99)):
    """Every output of a pass with small windows (they narrow both ways) in batches."""
    dim = x.shape[1]
    spec = PassSpec(dim, 1, 0, 16, True, integer=integer)
    near = windows.start(levels, dim, integer, total_rows=40)
    state = host_passes.own(init(spec, np.zeros((dim, 1)), np.zeros(dim, np.float32), near))
    sums = [
        host_passes._update(state, x[a : a + 1024], weight[a : a + 1024], spec, function)[1]
        for a in range(0, len(x), 1024)
    ]
    kept = [windows.contents(near, d, u) for d in range(dim) for u in range(len(near.levels))]
    return state, sums, kept


@pytest.mark.parametrize("integer", [False, True])
def test_kept_code_computes_what_numbas_build_computes(rng, cache, integer):
    first = host_passes._native(integer)  # numba's build, then kept
    assert len(list(cache.glob("*.o"))) == 1
    name = native_kernel.key(
        "int64" if integer else "float32",
        [host_passes.Path(host_passes.__file__).parent / f for f in ("host.py", "host_loop.py")],
    )
    kept, _ = native_kernel.load(name, host_passes.PROTOTYPE)
    n = 8192
    if integer:
        x = np.stack([rng.integers(-(2**62), 2**62, n), rng.integers(0, 3, n)], 1)
    else:
        x = np.stack([rng.standard_cauchy(n), (rng.random(n) > 0.4)], 1).astype(np.float32)
        x[::11, 0] = np.nan
    weight = rng.integers(0, 3, n)
    a, b = run(first, x, weight, integer), run(kept, x, weight, integer)
    for one, two in zip(a[0], b[0], strict=True):  # the state, windows included
        if isinstance(one, np.ndarray):
            assert one.tobytes() == two.tobytes()
    for (s1, s2), (t1, t2) in zip(a[1], b[1], strict=True):
        assert s1.tobytes() == t1.tobytes() and s2.tobytes() == t2.tobytes()
    for (k1, w1), (k2, w2) in zip(a[2], b[2], strict=True):
        assert k1.tobytes() == k2.tobytes() and w1.tobytes() == w2.tobytes()


def test_a_damaged_or_foreign_object_is_not_run(cache):
    host_passes._native(False)
    (code,) = cache.glob("*.o")
    name = code.stem
    assert native_kernel.load(name, host_passes.PROTOTYPE) is not None
    data = bytearray(code.read_bytes())
    data[len(data) // 2] ^= 0xFF
    code.write_bytes(bytes(data))
    assert native_kernel.load(name, host_passes.PROTOTYPE) is None  # its SHA-256 differs
    # a file that links but computes something else: its probe digest is not numba's
    host_passes._native(False)  # kept again
    meta = cache / f"{name}.json"
    meta.write_text(meta.read_text().replace('"probe": "', '"probe": "0'))
    function, probe = native_kernel.load(name, host_passes.PROTOTYPE)
    assert host_passes._probe(function, False) != probe  # so `_native` builds it with numba
    assert host_passes._native(False) is not None


def test_a_command_whose_loop_is_kept_does_not_import_numba(tmp_path):
    from accelkit.stats.formats.synthetic import write_sample_dataset

    root = write_sample_dataset(tmp_path / "data", episodes=3, frames_per_episode=200, dim=2)
    child = (
        "import atexit, sys; from accelkit.cli import main\n"
        "atexit.register(lambda: print('numba imported:', 'numba' in sys.modules))\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {**__import__("os").environ, "ACCELKIT_CACHE_DIR": str(tmp_path / "cache")}
    seen = []
    for _ in range(2):  # the first run builds and keeps it, the second links it
        done = subprocess.run(
            [sys.executable, "-c", child, "stats", str(root), "-o", str(tmp_path / "o.json"),
             "--no-progress"],
            capture_output=True, text=True, timeout=600, check=False, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        seen.append(done.stdout.split("numba imported:")[-1].strip())
    assert seen == ["True", "False"]


def test_numba_works_after_the_kept_loop_is_linked(cache, tmp_path):
    """Linking the kept loop gives some symbols an address process-wide; numba compiled after it
    in the same process must still reach its real runtime (allocations, raising) and the
    interpreter's C API. A child process whose loop is kept, then numba at work."""
    import os

    host_passes._native(False)  # kept in `cache`
    child = (
        "import sys, numpy as np\n"
        "from accelkit.stats.kernel import host as host_passes\n"
        "host_passes.kernel(False)\n"
        "assert 'numba' not in sys.modules\n"
        "import numba\n"
        "@numba.njit\n"
        "def f(n):\n"
        "    if n < 0:\n"
        "        raise ValueError('negative')\n"
        "    return np.zeros(n).sum() + n\n"
        "print(f(3))\n"
        "try:\n"
        "    f(-1)\n"
        "except ValueError as exc:\n"
        "    print('raised', exc)\n"
    )
    env = {**os.environ, "ACCELKIT_CACHE_DIR": str(cache.parent)}
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3.0", "raised", "negative"]
