"""The host (numpy) kernel gives the XLA kernel's bits: every field of the pass state and every
block sum, on adversarial batches, for pass 1 (moments + top digit) and a later select pass."""

from __future__ import annotations

import numpy as np
import pytest

from accelkit.stats.core.moments import BLOCK_ROWS
from accelkit.stats.kernel import device as passes
from accelkit.stats.kernel import host as host_passes
from accelkit.stats.kernel.state import PassSpec, init


def adversarial_floats(rng, rows: int) -> np.ndarray:
    tiny = np.finfo(np.float32).tiny
    columns = [
        1e4 + 0.01 * rng.standard_normal(rows),  # |mean| >> std: the sums' low bits matter
        rng.standard_cauchy(rows),
        rng.standard_normal(rows) * np.exp(rng.uniform(-80, 80, rows)),  # denormals to 1e34
        rng.choice([-0.0, 0.0, tiny / 8, -tiny / 8, 1.0], rows),  # signed zeros, denormals
        np.where(rng.random(rows) < 0.5, 3e38, -3e38),  # near float32's max
        np.full(rows, -2.5),  # a point mass
        np.full(rows, -0.0),  # -0.0 - 0.0 is -0.0: a sum that starts from 0.0 turns it to +0.0
    ]
    x = np.stack(columns, 1).astype(np.float32)
    x[rng.random(rows) < 0.03, 1] = np.nan
    x[rng.random(rows) < 0.01, 2] = np.inf
    x[rng.random(rows) < 0.01, 2] = -np.inf
    return x


def run_both(spec, state, x, weight):
    """(host state, host blocks) and (device state merged on the host, device blocks)."""
    import jax

    host_state, host_blocks = host_passes.update(host_passes.own(state), x, weight, spec)
    mesh = passes.make_mesh(jax.devices("cpu")[:1])
    with jax.enable_x64(True):
        placed = passes.replicate_per_device(state, mesh)
        new, blocks, _ = passes.sharded_update(placed, x, weight, spec=spec, mesh=mesh)
        device_state = passes.gather_and_merge(new)
        device_blocks = None if blocks is None else tuple(np.asarray(b) for b in blocks)
    return (host_state, host_blocks), (device_state, device_blocks)


def assert_same_bits(host, device):
    (hs, hb), (ds, db) = host, device
    for field in ("count", "min_key", "max_key"):
        np.testing.assert_array_equal(getattr(hs.extremes, field), getattr(ds.extremes, field))
    np.testing.assert_array_equal(hs.counts, ds.counts)
    np.testing.assert_array_equal(hs.nonfinite, ds.nonfinite)
    assert (hb is None) == (db is None)
    if hb is not None:
        for h, d in zip(hb, db, strict=True):
            assert h.dtype == np.float64 and h.shape == d.shape
            assert h.tobytes() == d.tobytes()  # bits, signed zeros included


@pytest.mark.parametrize("weights", ["ones", "zeros_and_ones", "multiplicities"])
def test_pass_one_equals_the_xla_kernel_bit_for_bit(rng, weights):
    rows = 8 * BLOCK_ROWS
    x = adversarial_floats(rng, rows)
    weight = {
        "ones": np.ones(rows, np.int32),
        "zeros_and_ones": (rng.random(rows) < 0.8).astype(np.int32),
        "multiplicities": rng.integers(0, 6, rows).astype(np.int32),
    }[weights]
    weight[-100:] = 0  # a padded tail, as the batcher leaves it
    spec = PassSpec(x.shape[1], 1, 0, 16, True)
    center = np.array([1e4, 0.0, 1.0, 0.0, -1.0, -2.5, 0.0], np.float32)
    state = init(spec, np.zeros((spec.dim, 1), np.uint64), center)
    host, device = run_both(spec, state, x, weight)
    assert_same_bits(host, device)
    assert host[0].nonfinite.sum() > 0 and host[0].counts.sum() == host[0].extremes.count.sum()


def test_a_select_pass_equals_the_xla_kernel(rng):
    """Pass 2: only values under each target's 16-bit prefix count, at their low 16 bits."""
    rows = 4 * BLOCK_ROWS
    x = adversarial_floats(rng, rows)
    weight = rng.integers(0, 3, rows).astype(np.int32)
    import jax

    from accelkit.stats.core.sort_keys import float_keys

    keys = np.asarray(jax.jit(float_keys)(np.where(np.isfinite(x), x, np.float32(0))))
    # two real prefixes per dimension (the 10th and 90th percentile keys' high bits) and a pad
    high = keys >> np.uint32(16)
    prefixes = np.stack(
        [
            np.quantile(high, 0.1, axis=0, method="lower"),
            np.quantile(high, 0.9, axis=0, method="higher"),
        ],
        1,
    ).astype(np.uint32)
    same = prefixes[:, 0] == prefixes[:, 1]
    prefixes[same, 1] = 0xFFFFFFFF  # distinct per dimension: a pad no key has
    spec = PassSpec(x.shape[1], 2, 16, 16, False)
    state = init(spec, prefixes, np.zeros(spec.dim, np.float32))
    host, device = run_both(spec, state, x, weight)
    assert_same_bits(host, device)
    assert host[0].counts.sum() > 0


def test_integer_columns_equal_the_xla_kernel(rng):
    rows = 4 * BLOCK_ROWS
    x = np.stack(
        [
            rng.integers(-(2**62), 2**62, rows),
            (1 << 40) + rng.integers(0, 3, rows),  # above 2**24 and 2**53's float rounding
            rng.integers(0, 10, rows),
        ],
        1,
    ).astype(np.int64)
    weight = rng.integers(0, 3, rows).astype(np.int32)
    spec = PassSpec(3, 1, 0, 16, True, integer=True)
    state = init(spec, np.zeros((3, 1), np.uint64), np.array([0.0, 2.0**40, 5.0], np.float32))
    assert_same_bits(*run_both(spec, state, x, weight))


def test_a_cpu_run_never_starts_jax(tmp_path):
    """`accelkit stats --platform cpu` computes on the host kernel without importing JAX (a child
    process: this one has JAX loaded), and its numbers equal a run on JAX's CPU device."""
    import json
    import subprocess
    import sys

    import jax

    from accelkit.stats.engine.driver import compute_stats
    from accelkit.stats.formats.sources import open_source
    from accelkit.stats.formats.synthetic import write_sample_dataset

    root = write_sample_dataset(tmp_path / "data", episodes=4, frames_per_episode=300, dim=3)
    out = tmp_path / "stats.json"
    child = (
        "import atexit, sys; from accelkit.cli import main\n"
        "atexit.register(lambda: print('jax imported:', 'jax' in sys.modules, 'host kernel:',"
        " bool(sys.modules['accelkit.stats.kernel.host']._kernels)))\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, "stats", str(root), "-o", str(out), "--platform", "cpu",
         "--no-progress", "--format", "lerobot"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "jax imported: False host kernel: True" in done.stdout
    written = json.loads(out.read_text())
    on_jax = compute_stats(open_source(root), devices=jax.devices("cpu")[:1]).stats["actions"]
    np.testing.assert_array_equal(np.asarray(written["action"]["mean"]), on_jax.mean)
    np.testing.assert_array_equal(np.asarray(written["action"]["std"]), on_jax.std)


def test_the_warm_up_loads_the_loop_a_float32_run_calls(rng):
    """`warm_up` (the loop's start-up on a thread while the first files are read) must load the
    very function a run on float32 columns calls: afterwards the run loads nothing new."""
    from accelkit.stats.engine.driver import compute_stats
    from accelkit.stats.engine.runner import HOST

    host_passes.warm_up().join()
    loaded = dict(host_passes._kernels)
    batches = [{"a": rng.standard_normal((3000, 3)).astype(np.float32)} for _ in range(2)]
    result = compute_stats(lambda: iter(batches), devices=[HOST])
    assert False in loaded and host_passes._kernels == loaded
    every = np.concatenate([b["a"] for b in batches]).astype(np.float64)
    np.testing.assert_array_equal(result.stats["a"].min, every.min(axis=0))
    np.testing.assert_allclose(result.stats["a"].mean, every.mean(axis=0), rtol=1e-12)


def test_only_the_cli_freezes_the_collector(tmp_path):
    """`accelkit stats` (a process that is the run) moves what is alive once the loop is loaded to
    the collector's permanent generation; `compute_stats` called as a library never touches the
    caller's collector. Child processes: each starts with nothing frozen."""
    import subprocess
    import sys

    from accelkit.stats.formats.synthetic import write_sample_dataset

    root = write_sample_dataset(tmp_path / "data", episodes=3, frames_per_episode=200, dim=2)
    cli = (
        "import atexit, gc, sys; from accelkit.cli import main\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count()))\n"
        f"sys.exit(main(['stats', {str(root)!r}, '-o', {str(tmp_path / 'o.json')!r},"
        " '--platform', 'cpu', '--no-progress']))\n"
    )
    library = (
        "import gc\n"
        "from accelkit.stats.engine.driver import compute_stats\n"
        "from accelkit.stats.formats.sources import open_source\n"
        f"compute_stats(open_source({str(root)!r}), platform='cpu')\n"
        "from accelkit.stats.kernel import host as host_passes\n"
        "host_passes.warm_up().join()\n"
        "print('frozen', gc.get_freeze_count())\n"
    )
    counts = []
    for code in (cli, library):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
        )
        assert done.returncode == 0, done.stderr
        counts.append(int(done.stdout.split("frozen")[-1]))
    assert counts[0] > 10_000 and counts[1] == 0, counts


def test_the_cli_loads_the_loop_without_numbas_blas_probe(tmp_path):
    """numba's BLAS probe imports scipy.linalg (~0.2 CPU-s of every command); the command's own
    process answers it "no BLAS" while numba builds the loop, then puts numba's probe back: np.dot
    still compiles in that process, and a library caller's process keeps the probe. Child
    processes, each with an empty cache of kept loops (so numba builds it)."""
    import os
    import subprocess
    import sys

    code = (
        "import sys; from accelkit.stats.kernel import host as host_passes\n"
        "host_passes.warm_up(freeze={freeze}).join()\n"
        "print('scipy.linalg' in sys.modules)\n"
        "import numba, numpy as np\n"
        "print(numba.njit(lambda a: np.dot(a, a))(np.ones(3)))\n"
    )
    seen = []
    for freeze in (True, False):
        done = subprocess.run(
            [sys.executable, "-c", code.format(freeze=freeze)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**os.environ, "ACCELKIT_CACHE_DIR": str(tmp_path / str(freeze))},
        )
        assert done.returncode == 0, done.stderr
        seen.append(done.stdout.split())
    assert seen == [["False", "3.0"], ["True", "3.0"]]


def test_the_moments_shift_is_the_nanmedian_of_the_counted_values(rng):
    """The shift of the moments' sums (the first chunk's median per dimension) decides the last
    bits of every mean and std: its faster form must give np.nanmedian's numbers, bit for bit,
    with NaN, Inf, zero weights, integers and both of nanmedian's paths (under and over 600 rows)."""
    import warnings

    from accelkit.stats.engine.driver import _center_of
    from accelkit.stats.types import Column

    def nanmedian_form(column):
        values = np.where(
            np.isfinite(column.values) & (column.weight[:, None] > 0), column.values, np.nan
        )
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.nan_to_num(np.nanmedian(values, axis=0), nan=0.0).astype(np.float32)

    for trial in range(400):
        rows = int(rng.choice([1, 2, 5, 599, 600, 601, 4000]))
        if trial % 4 == 3:
            x = rng.integers(-(2**62), 2**62, (rows, 3))
        else:
            x = (rng.standard_normal((rows, 3)) * 10.0 ** rng.integers(-40, 38)).astype(np.float32)
            x[rng.random(x.shape) < 0.1 * (trial % 4)] = np.nan
            x[rng.random(x.shape) < 0.05 * (trial % 4)] = -np.inf
            x[:, 2] = np.nan if trial % 4 == 2 else x[:, 2]
        weight = (rng.integers(0, 3, rows) * (rng.random(rows) > 0.2)).astype(np.int32)
        column = Column(x, weight, np.arange(rows))
        assert _center_of(column).tobytes() == nanmedian_form(column).tobytes()
