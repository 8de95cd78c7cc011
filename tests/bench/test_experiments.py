"""Each experiment at a tiny size: its own correctness checks pass, plus what it must show."""

import numpy as np
import pytest

from accelkit.bench.harness import Protocol

TINY = Protocol(repeats=2, warmup=0)


def _failed(result):
    return [(c.name, c.value, c.detail) for c in result.checks if not c.passed]


def test_xla_all_backends_both_dtypes():
    from accelkit.bench.experiments import xla

    for dtype in ("float64", "float32"):
        result = xla.run(xla.MODES, matrix_size=48, dtype=dtype, protocol=TINY)
        assert result.passed, _failed(result)
        assert {t.backend for t in result.timings} == set(xla.MODES)
        assert {t.name for t in result.timings} == {"generate", "mean+sum", "product", "inverse"}


def test_chain_counts_cse_and_agrees_across_backends():
    from accelkit.bench.experiments import chain

    result = chain.run(["numpy", "jax", "jax-jit", "pytorch"], matrix_size=32, protocol=TINY)
    assert result.passed, _failed(result)
    assert result.facts["jit(f) compiled matmuls"] == 10
    assert result.facts["jit(f_distinct) compiled matmuls"] == 50
    # the .at[].set section: five ways, the same array, the donated jit in place
    at_set = [t for t in result.timings if "writes:" in t.name]
    assert {t.backend for t in at_set} == {"numpy", "pytorch", "jax", "jax-jit"} and len(
        at_set
    ) == 5
    assert len([c for c in result.checks if c.name.startswith(".at[].set section")]) == 5
    # the function itself: f(x) = 2 g(x) up to rounding, and g is 10 products
    x, _ = chain.inputs(16)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(chain.f(x64), 2 * np.linalg.matrix_power(x64, 11), rtol=1e-12)


def test_at_set_checks_fail_on_a_wrong_result(monkeypatch):
    """The equality checks compare with NumPy's result: a backend writing elsewhere fails."""
    import jax

    from accelkit.bench.experiments import chain
    from accelkit.bench.harness import Result

    result = Result("chain", {})
    real_fori = jax.lax.fori_loop
    # jit's loop now skips its last write: both jit rows must fail, the others pass
    monkeypatch.setattr(
        jax.lax, "fori_loop", lambda lo, hi, body, init: real_fori(lo, hi - 1, body, init)
    )
    chain.at_set(result, 500, TINY, writes=10)
    failed = {c.name for c in result.checks if not c.passed}
    assert failed == {
        ".at[].set section, jax-jit: x.at[i].set(v), jit (one copy of x) = NumPy result",
        ".at[].set section, jax-jit: x.at[i].set(v), jit, x donated = NumPy result",
    }


def test_count_matmuls_reads_dots_and_gemm_calls():
    from accelkit.bench.experiments.chain import count_matmuls

    text = (
        "%a = f32[4,4] dot(%p, %q)\n%b = f32[4,4]{1,0} dot(%a, %q), lhs_contracting_dims={1}\n"
        '%c = custom-call(%a), custom_call_target="__cublas$gemm"\n%d = f32[4] add(%x, %y)'
    )
    assert count_matmuls(text) == 3


def test_jit_blocked_and_unblocked_rows():
    from accelkit.bench.experiments import jit

    result = jit.run(scale=0.0002, sizes=(10_000, 1_000_000), protocol=TINY)
    assert result.passed, _failed(result)
    unsynced = [t for t in result.timings if not t.synchronized]
    assert len(unsynced) == 2 and all(t.device == "cpu" for t in unsynced)
    assert result.series and result.series[0]["x"] == [10_000, 1_000_000]
    assert jit.loops_for(10_000_000, 1.0) == 10


def test_scipy_optimum_matches_closed_form_and_recompiles_per_shape():
    from accelkit.bench.experiments import scipy_opt

    result = scipy_opt.run(scipy_opt.MODES, array_length=400, protocol=TINY)
    assert result.passed, _failed(result)
    assert result.facts["jax: traces for shapes (2,),(3,),(4,) then again"] == 3
    # the closed form is a true minimum: the objective grows in every direction around it
    a, b = scipy_opt.make_data(400)
    best = scipy_opt.exact_optimum(a, b)
    at = scipy_opt.rmse_with_calibration(best, a, b)
    for step in ([1e-3, 0], [-1e-3, 0], [0, 1e-2], [0, -1e-2]):
        assert scipy_opt.rmse_with_calibration(best + np.array(step), a, b) > at


def test_autograd_value_at_3_and_agreement():
    from accelkit.bench.experiments import autograd

    assert pytest.approx(-0.23116, abs=1e-5) == autograd.GRAD_AT_3
    result = autograd.run(autograd.MODES, points=50, loops=2, protocol=TINY)
    assert result.passed, _failed(result)
    names = {t.name for t in result.timings}
    assert {
        "per-element backward ×2",
        "vectorized backward ×2",
        "vmap(grad) ×2",
        "jit(vmap(grad)) ×2",
    } <= names


def test_mnist5k_and_idx_loaders(tmp_path):
    import gzip

    from accelkit.bench.experiments import mnist
    from accelkit.errors import DataError

    data = mnist.load_data("mnist5k")
    assert data.x_train.shape == (4000, 28, 28) and data.x_test.shape == (1000, 28, 28)
    assert (
        np.bincount(data.y_test).tolist() == [100] * 10
    )  # stratified: 500 per class, 20 % to test
    # IDX: write the standard four files from the same images and read them back
    raw = np.loadtxt(mnist.mnist5k_path(), delimiter=",", dtype=np.float32, max_rows=30)
    images, labels = raw[:, :-1].reshape(-1, 28, 28).astype(np.uint8), raw[:, -1].astype(np.uint8)

    def idx(array, path):
        header = bytes([0, 0, 8, array.ndim]) + b"".join(
            int(d).to_bytes(4, "big") for d in array.shape
        )
        with gzip.open(path, "wb") as handle:
            handle.write(header + array.tobytes())

    idx(images[:20], tmp_path / "train-images-idx3-ubyte.gz")
    idx(labels[:20], tmp_path / "train-labels-idx1-ubyte.gz")
    idx(images[20:], tmp_path / "t10k-images-idx3-ubyte.gz")
    idx(labels[20:], tmp_path / "t10k-labels-idx1-ubyte.gz")
    loaded = mnist.load_data(str(tmp_path))
    assert loaded.name == "idx" and loaded.x_train.shape == (20, 28, 28)
    np.testing.assert_array_equal(loaded.y_test, labels[20:])
    (tmp_path / "t10k-labels-idx1-ubyte.gz").write_bytes(
        gzip.compress(b"\x00\x00\x08\x01\x00\x00\x00\x09ab")
    )
    with pytest.raises(DataError, match="truncated"):
        mnist.load_data(str(tmp_path))


def test_mnist_same_model_same_batches_tiny():
    from accelkit.bench.experiments import mnist

    data = mnist.load_data("mnist5k", limit=256)
    result = mnist.run(mnist.MODES, data, epochs=2, batch_size=64)
    assert result.passed, _failed(result)
    assert result.facts["parameters (pytorch)"] == result.facts["parameters (flax)"] == 1_199_882
    # one DataLoader pipeline: both collates see the same labels in the same order
    torch_batches = [
        y.numpy()
        for _, y in mnist.make_loader(data.x_train, data.y_train, 64, mnist.torch_collate, 0)
    ]
    jax_batches = [
        np.asarray(y)
        for _, y in mnist.make_loader(data.x_train, data.y_train, 64, mnist.jax_collate, 0)
    ]
    assert all(np.array_equal(a, b) for a, b in zip(torch_batches, jax_batches, strict=True))


def test_mnist_flags_validation_batches_momentum_and_dry_run():
    import torch

    from accelkit.bench.experiments import mnist

    data = mnist.load_data("digits", limit=200)
    runs = {}
    for key, momentum, eval_batch in (("a", 0.9, None), ("b", 0.9, 37), ("c", 0.0, None)):
        torch.manual_seed(0)
        net = mnist.torch_model(data.side)
        plan = mnist.Schedule(1, 32, 0.02, 0, momentum=momentum, eval_batch_size=eval_batch)
        runs[key] = mnist.train_torch(net, data, plan)
    # validation in batches of 37 (the last one short) predicts exactly what one batch does
    assert runs["a"][0]["accuracy"] == runs["b"][0]["accuracy"]
    assert runs["a"][0]["validated"] == runs["b"][0]["validated"] == len(data.y_test)
    assert runs["a"][0]["loss"] == runs["b"][0]["loss"]
    assert runs["a"][0]["loss"] != runs["c"][0]["loss"]  # momentum reaches the optimizer
    result = mnist.run(
        mnist.MODES, data, epochs=5, batch_size=32, lr=0.05, eval_batch_size=20, dry_run=True
    )
    assert result.passed, _failed(result)
    assert result.params["epochs"] == 1 and result.params["lr"] == 0.05
    names = [c.name for c in result.checks]
    assert "flax: dry run, one training step and one validation batch" in names
    assert all("accuracy ≥" not in n and "fell below" not in n for n in names)


@pytest.mark.slow
def test_mnist_digits_reaches_98_percent_in_both_frameworks():
    from accelkit.bench.experiments import mnist

    data = mnist.load_data("digits")
    result = mnist.run(
        mnist.MODES,
        data,
        epochs=mnist.DEFAULT_EPOCHS["digits"],
        batch_size=mnist.DEFAULT_BATCH["digits"],
        target=98.0,
    )
    assert result.passed, _failed(result)
    assert (
        result.facts["pytorch: final test accuracy %"] >= 98.0
        and result.facts["flax: final test accuracy %"] >= 98.0
    )


def test_parallel_runs_on_8_devices_in_a_child_process():
    import jax

    from accelkit.bench.experiments import parallel

    before = len(jax.devices())
    result = parallel.run_in_subprocess(devices=8, protocol=TINY)
    assert result.passed, _failed(result)
    assert "CPU 7" in result.facts["visualize_array_sharding, 64×64 over mesh (x, y)"]
    assert result.facts["all-reduce ops XLA inserted in the data-parallel step"] >= 1
    assert {t.name for t in result.timings} >= {
        "pmap + psum",
        "shard_map + psum",
        "jit on a sharded array",
    }
    assert len(jax.devices()) == before  # the parent process is untouched
    env = parallel.child_env(4)
    assert env["XLA_FLAGS"].count("device_count") == 1 and env["XLA_FLAGS"].endswith("=4")
