"""The CPU kernel choice (kernels.py): exact kernels only, the fastest by injected measurements
(no test times anything it asserts on), cached per machine under the user cache dir; every kernel
bit-identical after save -> load and one graph under torch.compile(fullgraph=True)."""

import json

import pytest
import torch
from torch import nn

from accelkit.errors import ConfigError
from accelkit.quant import kernels
from accelkit.quant.config import QuantConfig
from accelkit.quant.convert import quantize
from accelkit.quant.layers import QuantLinear
from accelkit.quant.storage import load_quantized, save_quantized


def test_choose_takes_the_least_relative_time_over_both_row_counts():
    seconds = {"onednn": [1.0, 10.0], "fbgemm": [0.5, 30.0], "float": [0.1, 1.0]}
    # onednn: 2 + 1 = 3; fbgemm: 1 + 3 = 4; float is the baseline, never chosen over an integer one
    assert kernels.choose(seconds, ["onednn", "fbgemm", "float"]) == "onednn"
    assert kernels.choose(seconds, ["fbgemm", "float"]) == "fbgemm"  # onednn not exact here
    assert kernels.choose(seconds, ["float"]) == "float"
    assert kernels.choose({"float": [1.0, 1.0]}, ["onednn", "float"]) == "float"  # not measured


def test_the_table_measures_each_shape_once_and_caches_it(tmp_path, monkeypatch):
    calls = []

    def measure(n, m):
        calls.append((n, m))
        return {"onednn": [2.0, 2.0], "fbgemm": [1.0, 1.0], "float": [3.0, 3.0]}

    monkeypatch.setattr(kernels, "eligible", lambda *_a, **_k: ["onednn", "fbgemm", "float"])
    monkeypatch.delenv(kernels.ENV_KERNEL, raising=False)
    path = tmp_path / "kernels.json"
    first = kernels.KernelTable(path, measure)
    assert first.pick(64, 32, 8, 100) == "fbgemm"
    assert first.pick(64, 32, 8, 100) == "fbgemm" and calls == [(64, 32)]
    stored = json.loads(path.read_text())
    (machine,) = stored["machines"].values()
    assert machine["key"] == kernels.machine_key() and "64x32" in machine["shapes"]

    def never(n, m):
        raise AssertionError("measured again")

    assert kernels.KernelTable(path, never).pick(64, 32, 8, 100) == "fbgemm"  # another process
    # another thread count is another machine: measured anew
    other = kernels.KernelTable(path, measure)
    other.key = {**other.key, "threads": other.key["threads"] + 7}
    assert other.pick(64, 32, 8, 100) == "fbgemm" and calls == [(64, 32), (64, 32)]
    assert len(json.loads(path.read_text())["machines"]) == 2


def test_measuring_is_a_phase_of_its_own_not_calibration(tmp_path, monkeypatch):
    """The kernels are measured while a model is quantized: that time is reported as "kernel
    choice" and taken out of the phase it happened in, so the phases still add up."""
    import time

    from accelkit.quant.speed import Phases

    def measure(n, m):
        time.sleep(0.2)
        return {"onednn": [1.0, 1.0], "fbgemm": [2.0, 2.0], "float": [3.0, 3.0]}

    monkeypatch.setattr(kernels, "eligible", lambda *_a, **_k: ["onednn", "fbgemm", "float"])
    monkeypatch.delenv(kernels.ENV_KERNEL, raising=False)
    phases, table = Phases(), kernels.KernelTable(tmp_path / "kernels.json", measure)
    table.phases = phases
    started = time.perf_counter()
    with phases("calibration"):
        time.sleep(0.1)
        assert table.pick(64, 32, 8, 100) == "onednn"
        assert table.pick(64, 32, 8, 100) == "onednn"  # measured once
    total = time.perf_counter() - started
    assert 0.2 <= phases.seconds["kernel choice"] < total
    assert 0.1 <= phases.seconds["calibration"] < total - 0.2
    assert sum(phases.seconds.values()) == pytest.approx(total, abs=0.01)


def test_the_cache_lives_in_the_user_cache_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCELKIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert kernels.cache_path() == tmp_path / "accelkit" / kernels.CACHE_FILE
    monkeypatch.setenv("ACCELKIT_CACHE_DIR", str(tmp_path / "mine"))
    assert kernels.cache_path() == tmp_path / "mine" / kernels.CACHE_FILE


def test_a_forced_kernel_is_used_only_where_exact(monkeypatch, tmp_path):
    table = kernels.KernelTable(tmp_path / "k.json", lambda n, m: {})
    monkeypatch.setattr(kernels, "exact", lambda kernel, qmax, wmax: wmax <= 64)
    monkeypatch.setenv(kernels.ENV_KERNEL, "fbgemm")
    assert table.pick(64, 32, 8, 64) == "fbgemm"
    assert table.pick(64, 32, 8, 119) == "float"  # would saturate: the float path
    monkeypatch.setenv(kernels.ENV_KERNEL, "gpu")
    with pytest.raises(ConfigError, match="ACCELKIT_QUANT_KERNEL"):
        table.pick(64, 32, 8, 64)


def test_eligibility_follows_the_saturation_bound(monkeypatch):
    # a pre-VNNI CPU: full-range pairs saturate, |b| <= 64 or 7-bit codes do not
    monkeypatch.setattr(kernels, "exact", lambda k, qmax, wmax: qmax * 2 * wmax <= 32767)
    assert kernels.eligible(8, 127) == ["float"]
    assert kernels.eligible(8, 64) == ["onednn", "fbgemm", "float"]
    assert kernels.eligible(7, 119) == ["onednn", "fbgemm", "float"]
    assert kernels.eligible(8, 64, only="fbgemm") == ["fbgemm", "float"]


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 96), nn.GELU(), nn.Linear(96, 64)).eval()


@pytest.mark.parametrize("kernel", ["onednn", "fbgemm", "float"])
@pytest.mark.parametrize("weights", ["progressive", "plain", "int8"])
def test_every_kernel_is_bit_identical_after_save_and_load_and_one_graph(
    kernel, weights, monkeypatch, tmp_path
):
    from torch._dynamo.utils import counters

    monkeypatch.setenv(kernels.ENV_KERNEL, kernel)
    gen = torch.Generator().manual_seed(1)
    calib = [torch.randn(16, 128, generator=gen) for _ in range(4)]
    fmt = {
        "progressive": {"weight_group_size": 32},
        "plain": {"weight_format": "plain"},
        "int8": {"wbits": 8},  # 8-bit layers of the progressive family: symmetric int8
    }[weights]
    model = quantize(net(), QuantConfig(method="duquant", block_size=32, **fmt), calib)
    layers = [m for m in model.modules() if isinstance(m, QuantLinear)]
    assert {m.spec.weight_format for m in layers} == {weights}
    wmax = max(int(m.weight_int8.abs().max()) for m in layers)
    expect = kernel if kernel == "float" or kernels.exact(kernel, 255, wmax) else "float"
    assert {m.kernel for m in layers} == {expect}
    x = torch.randn(3, 5, 128, generator=gen)
    x[0, 0, 7] = 25.0
    with torch.no_grad():
        y = model(x)
        loaded = load_quantized(save_quantized(model, tmp_path / "m.safetensors"), net)
        assert {m.kernel for m in loaded.modules() if isinstance(m, QuantLinear)} == {expect}
        assert torch.equal(loaded(x), y)
        # against the FP32 model: quantized, but close
        ref = net()(x)
        assert float(nn.functional.cosine_similarity(y, ref, dim=-1).min()) > 0.98
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(model, fullgraph=True, dynamic=False)
        assert torch.allclose(compiled(x), y, rtol=1e-5, atol=1e-5)
        compiled(x + 1)
    assert counters["stats"]["unique_graphs"] == 1 and not counters["graph_break"]
