"""`bench train` at CI size: four frameworks, one start, lockstep BatchNorm state, FLOPs,
checkpoint resume in a fresh process, multi-device eval; and checks that can fail."""

import numpy as np
import pytest

from accelkit.bench.harness import Protocol

# one xdist worker runs this module (pyproject: --dist loadgroup), so the training fixture runs once
pytestmark = pytest.mark.xdist_group("bench-train")
TINY = Protocol(repeats=2, warmup=0)
# 1990 samples: 398 test rows, not a multiple of 8, so the multi-device eval pads and masks
CI = dict(samples=1990, epochs=3, batch_size=64)


def _failed(result):
    return [(c.name, c.value, c.detail) for c in result.checks if not c.passed]


def _train_ci():
    from accelkit.bench.experiments import train

    return train.run(train.MODES, train.Setup(**CI), devices=8, protocol=TINY, threads=2)


@pytest.fixture(scope="module")
def trained():
    """Trained in a spawned process: orbax/tensorstore and keras set up process-wide state (they
    closed pytest's own output streams when run inside the test process)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(_train_ci).result()


def _check(result, prefix):
    found = [c for c in result.checks if c.name.startswith(prefix)]
    assert found, f"no check starts with {prefix!r}"
    return found


def test_all_four_frameworks_train_with_checks_passing(trained):
    from accelkit.bench.experiments import train

    assert trained.passed, _failed(trained)
    epochs = {t.backend: t for t in trained.timings if t.name == "train epoch"}
    assert set(epochs) == set(train.MODES)
    assert epochs["flax"].compile_s is not None and epochs["flax"].compile_s > 0
    for mode in train.MODES:
        assert trained.facts[f"{mode}: final test accuracy %"] > 60  # chance is 50 %
        for prefix in ("identical start", "lockstep losses", "BatchNorm running"):
            if mode != "pytorch":
                _check(trained, f"{mode}: {prefix}")
    labels = [s["label"] for s in trained.series]
    assert labels[:4] == list(train.MODES) and all(len(s["y"]) == 3 for s in trained.series[:4])


def test_checkpoint_resume_is_bit_equal_in_both_frameworks(trained):
    for mode in ("pytorch", "flax"):
        (check,) = _check(trained, f"{mode}: resumed in a fresh process")
        assert check.passed and check.value == 0.0 and check.tolerance == 0.0
        steps = 2 * (trained.params["train"] // 64)  # epochs 2 and 3 after the checkpoint
        assert f"{steps} steps" in check.name
    resumed = [s for s in trained.series if "resumed" in s["label"]]
    assert [s["x"] for s in resumed] == [[2, 3], [2, 3]]


def test_multi_device_eval_equals_single_device(trained):
    assert "child process sees 8 CPU devices" in {c.name for c in trained.checks if c.passed}
    accuracies = {k: v for k, v in trained.facts.items() if k.startswith("eval accuracy %")}
    assert len(accuracies) == 3 and len(set(accuracies.values())) == 1
    for name in ("pmap + pmean", "jit on a batch-sharded array"):
        assert all(c.passed for c in _check(trained, name))
    # the multi-device eval of the final Flax state agrees with the accuracy training reported
    assert accuracies["eval accuracy %, single device (jit)"] == pytest.approx(
        trained.facts["flax: final test accuracy %"]
    )
    devices = {t.device for t in trained.timings if t.name in ("pmap + pmean",)}
    assert devices == {"8×cpu"}


def test_flops_match_the_analytic_count(trained):
    from accelkit.bench.experiments.train.flops import dense_flops

    want = sum(dense_flops(64))
    assert want == 2 * 64 * (100 * 300 + 300 * 200 + 200 * 100 + 100 * 1)
    assert trained.facts["flops per forward, pytorch (matmuls)"] == want
    bias = 64 * (300 + 200 + 100 + 1)
    assert trained.facts["flops per forward, flax (XLA: all ops)"] > want + bias
    table = trained.facts["flax tabulate (batch 64, eval mode)"]
    assert "vjp_flops" in table and "batch_stats" in table and "\x1b[" not in table
    assert f"{2 * 64 * 100 * 300 + 64 * 300}" in table  # dense0: matmul + bias add


def test_lockstep_variance_check_fails_without_bessel():
    """The variance check is exact: PyTorch's own statistics (no correction) must fail it."""
    from accelkit.bench.experiments.train.checks import lockstep_checks
    from accelkit.bench.harness import Result

    rng = np.random.default_rng(0)
    var = 1 + rng.random(50)
    torch_side = {"losses": [0.7, 0.6], "mean": rng.random(50), "var": var}
    result = Result("train", {})
    lockstep_checks(result, "same", dict(torch_side), torch_side, batch=64)
    assert [c.passed for c in result.checks] == [True, True, False]
    # Flax's variance derived from the relation passes
    decay = 0.9**2
    flax_var = decay + (var - decay) * 63 / 64
    result = Result("train", {})
    lockstep_checks(result, "flax", {**torch_side, "var": flax_var}, torch_side, batch=64)
    assert result.passed, _failed(result)


def test_torch_resume_depends_on_the_saved_rng_state(tmp_path):
    """Resuming reproduces the run only with everything saved: a wrong RNG state (other dropout
    masks) gives other losses, so the bit-equality check can fail."""
    import torch

    from accelkit.bench.experiments import train
    from accelkit.bench.experiments.train.checkpoints import torch_resume, torch_save
    from accelkit.bench.experiments.train.data import make_data
    from accelkit.bench.experiments.train.loops import torch_run
    from accelkit.bench.experiments.train.models import torch_model

    setup = train.Setup(samples=700, epochs=2, batch_size=64, checkpoint_epoch=1)
    data = make_data(setup.samples, setup.seed)
    torch.manual_seed(0)
    net = torch_model(setup.dropout)

    def save(epoch, net, opt):
        if epoch == 0:
            torch_save(tmp_path / "ck.pt", epoch, net, opt)

    full, _ = torch_run(net, setup, data, range(2), on_epoch=save)
    again = torch_resume(tmp_path / "ck.pt", setup, data)
    assert again[0]["losses"] == full[1]["losses"]
    saved = torch.load(tmp_path / "ck.pt", weights_only=True)
    saved["rng"] = torch.Generator().manual_seed(123).get_state()
    torch.save(saved, tmp_path / "ck.pt")
    other = torch_resume(tmp_path / "ck.pt", setup, data)
    assert other[0]["losses"] != full[1]["losses"]


def test_one_loader_same_batches_every_epoch_order():
    from accelkit.bench.experiments.train.data import epoch_batches, loader, make_data

    x, y, _, _ = make_data(400, 0)
    assert x.shape == (320, 100) and set(np.unique(y)) == {0.0, 1.0}
    np.testing.assert_allclose(x.mean(0), 0, atol=1e-5)
    batches = loader(x, y, 64, 0)
    first = [b[1].copy() for b in epoch_batches(batches, 0, 1)]
    other = [b[1].copy() for b in epoch_batches(batches, 0, 2)]
    again = [b[1].copy() for b in epoch_batches(loader(x, y, 64, 0), 0, 1)]
    assert len(first) == 5 and all(len(b) == 64 for b in first)  # drop_last: full batches
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))
