"""The CPU kernel choice (kernels.py): exact kernels only, the fastest by injected measurements
(no test times anything it asserts on), cached per machine under the user cache dir; every kernel
bit-identical after save -> load and one graph under torch.compile(fullgraph=True)."""

import json

import numpy as np
import pytest
import torch
from torch import nn

from accelkit.errors import ConfigError
from accelkit.quant.config import QuantConfig
from accelkit.quant.method import kernels
from accelkit.quant.method.convert import quantize
from accelkit.quant.method.layers import QuantLinear
from accelkit.quant.method.storage import load_quantized, save_quantized
from tests.support.require import not_applicable


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


class FakeClock:
    """A clock that moves only when told: the phases are checked to the exact second."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_measuring_is_a_phase_of_its_own_not_calibration(tmp_path, monkeypatch):
    """The kernels are measured while a model is quantized: that time is reported as "kernel
    choice" and taken out of the phase it happened in, so the phases still add up."""
    from accelkit.quant.evaluation.speed import Phases

    clock = FakeClock()

    def measure(n, m):
        clock.now += 0.2  # measuring takes 0.2 s on the fake clock
        return {"onednn": [1.0, 1.0], "fbgemm": [2.0, 2.0], "float": [3.0, 3.0]}

    monkeypatch.setattr(kernels, "eligible", lambda *_a, **_k: ["onednn", "fbgemm", "float"])
    monkeypatch.delenv(kernels.ENV_KERNEL, raising=False)
    phases, table = Phases(clock=clock), kernels.KernelTable(tmp_path / "kernels.json", measure)
    table.phases = phases
    started = clock()
    with phases("calibration"):
        clock.now += 0.1
        assert table.pick(64, 32, 8, 100) == "onednn"
        assert table.pick(64, 32, 8, 100) == "onednn"  # measured once
        clock.now += 0.05
    total = clock() - started
    assert phases.seconds["kernel choice"] == pytest.approx(0.2, abs=1e-12)
    assert phases.seconds["calibration"] == pytest.approx(0.15, abs=1e-12)
    assert sum(phases.seconds.values()) == pytest.approx(total, abs=1e-12)


def test_the_cache_lives_in_the_user_cache_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCELKIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert kernels.cache_path() == tmp_path / "accelkit" / kernels.CACHE_FILE
    monkeypatch.setenv("ACCELKIT_CACHE_DIR", str(tmp_path / "mine"))
    assert kernels.cache_path() == tmp_path / "mine" / kernels.CACHE_FILE


def test_a_forced_kernel_is_used_only_where_exact(monkeypatch, tmp_path):
    table = kernels.KernelTable(tmp_path / "k.json", lambda n, m: {})
    monkeypatch.setattr(kernels, "exact", lambda kernel, qmax, wmax, k=256: wmax <= 64)
    monkeypatch.setenv(kernels.ENV_KERNEL, "fbgemm")
    assert table.pick(64, 32, 8, 64) == "fbgemm"
    assert table.pick(64, 32, 8, 119) == "float"  # would saturate: the float path
    monkeypatch.setenv(kernels.ENV_KERNEL, "gpu")
    with pytest.raises(ConfigError, match="ACCELKIT_QUANT_KERNEL"):
        table.pick(64, 32, 8, 64)


def test_eligibility_follows_the_saturation_bound(monkeypatch):
    # a pre-VNNI CPU: full-range pairs saturate, |b| <= 64 or 7-bit codes do not
    monkeypatch.setattr(kernels, "exact", lambda kern, qmax, wmax, k=256: qmax * 2 * wmax <= 32767)
    assert kernels.eligible(8, 127) == ["float"]
    assert kernels.eligible(8, 64) == ["onednn", "fbgemm", "float"]
    assert kernels.eligible(7, 119) == ["onednn", "fbgemm", "float"]
    assert kernels.eligible(8, 64, only="fbgemm") == ["fbgemm", "float"]


def cpu_has_vnni() -> bool:
    with open("/proc/cpuinfo", encoding="utf-8") as handle:
        flags = next(line for line in handle if line.startswith("flags")).split()
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & set(flags))


def integer_kernel_exact_here(kernel: str, layer: QuantLinear) -> bool:
    """The analytic answer: VNNI/AMX dot products never saturate (without them u8·s8 pairs do
    above |b| = 64 at 8 bits); fbgemm returns float32 sums, exact while K·255·max|b| ≤ 2^24."""
    if kernel == "float":
        return True
    wmax = int(layer.weight_int8.abs().max())
    if not cpu_has_vnni() and 255 * 2 * wmax > 32767:
        return False
    return kernel != "fbgemm" or layer.in_features * 255 * wmax <= 2**24


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
    # independent of the code under test: what the CPU flags and the analytic bounds allow
    expect = [kernel if integer_kernel_exact_here(kernel, m) else "float" for m in layers]
    assert [m.kernel for m in layers] == expect
    x = torch.randn(3, 5, 128, generator=gen)
    x[0, 0, 7] = 25.0
    with torch.no_grad():
        y = model(x)
        loaded = load_quantized(save_quantized(model, tmp_path / "m.safetensors"), net)
        assert [m.kernel for m in loaded.modules() if isinstance(m, QuantLinear)] == expect
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


def adversarial(k: int, seed: int = 0):
    """Full-range 8-bit codes (t, k) against int8 weights ±127 (m, k) with per-token zero points,
    as numpy int64, the first row and column at the largest |sum| (255 · 127 · k)."""
    g = np.random.default_rng(seed)
    q = np.where(g.random((33, k)) < 0.5, 0, 255).astype(np.int64)
    q[0] = 255
    q[1] = g.integers(0, 256, k)
    w = np.where(g.random((40, k)) < 0.5, -127, 127).astype(np.int64)
    w[0] = 127
    w[1] = g.integers(-127, 128, k)
    z = g.integers(0, 256, (33, 1)).astype(np.int64)
    z[0] = 0
    return q, w, z


def int8_layer(k: int, w: np.ndarray) -> QuantLinear:
    """A symmetric-int8 QuantLinear (|b| up to 127, the progressive family's range) with weights
    `w`: its kernel is chosen by `refresh_derived` as in a real model."""
    from accelkit.quant.method.layers import LayerSpec

    spec = LayerSpec(
        in_features=k, out_features=w.shape[0], bias=False, wbits=8, abits=8, group_size=None,
        act_granularity="per-token-dynamic", act_clip=1.0, smooth=False, block=None,
        permutation=False, weight_format="int8",
    )  # fmt: skip
    layer = QuantLinear(spec)
    with torch.no_grad():
        layer.qweight.copy_(torch.tensor(w, dtype=torch.int8))
    layer.refresh_derived()
    return layer


@pytest.mark.parametrize("k", [256, 1024, 3072])
@pytest.mark.parametrize("kernel", ["onednn", "fbgemm"])
def test_a_layer_runs_an_integer_kernel_only_where_its_sums_equal_int64(kernel, k, monkeypatch):
    """fbgemm returns float32 sums: above 2^24 they are rounded (at K = 1024 off by 1–2, at
    3072 by 2–8). A layer forced to a kernel gets it only where its sums are exact at the
    layer's own K, checked against numpy's int64 product on adversarial full-range codes."""
    monkeypatch.setenv(kernels.ENV_KERNEL, kernel)
    q, w, z = adversarial(k)
    reference = (q - z) @ w.T  # numpy int64: the independent reference
    layer = int8_layer(k, w)
    if layer.kernel != "float":
        assert layer.kernel == kernel
        got = kernels.integer_sums(
            layer.kernel, torch.tensor(q, dtype=torch.float32), layer.weight_int8,
            layer.weight_rowsum, torch.tensor(z, dtype=torch.float32), 8,
        )  # fmt: skip
        diff = np.abs(got.to(torch.int64).numpy() - reference).max()
        assert diff == 0, f"{kernel} at K={k}: off by up to {diff}"
    # the claim itself, per K: exact only where numpy agrees
    if kernels.exact(kernel, 255, 127, k):
        b = torch.tensor(w, dtype=torch.int8)
        got = kernels.integer_sums(
            kernel, torch.tensor(q, dtype=torch.float32), b, b.sum(1, dtype=torch.int32),
            torch.tensor(z, dtype=torch.float32), 8,
        )  # fmt: skip
        kernels.forget(b)
        assert np.array_equal(got.to(torch.int64).numpy(), reference)
    # the analytic bound: fbgemm's float32 sums are never trusted above 2^24
    if kernel == "fbgemm" and 255 * 127 * k > 2**24:
        assert layer.kernel == "float" and not kernels.exact(kernel, 255, 127, k)


def test_every_exact_integer_kernel_gives_the_same_layer_outputs(monkeypatch):
    """Exact integer sums are the same integers on every exact kernel, so the layer's outputs
    are bit for bit the same whichever one runs it (what load may switch between)."""
    k = 512  # 255 · 127 · 512 < 2^24: fbgemm exact too
    _, w, _ = adversarial(k, seed=3)
    x = torch.randn(7, k, generator=torch.Generator().manual_seed(4))
    x[0, 3] = 40.0
    outputs = {}
    for kernel in ("onednn", "fbgemm"):
        monkeypatch.setenv(kernels.ENV_KERNEL, kernel)
        layer = int8_layer(k, w)
        if layer.kernel == kernel:
            with torch.no_grad():
                outputs[kernel] = layer(x)
    if len(outputs) < 2:
        not_applicable("only one integer kernel is exact on this CPU")
    assert torch.equal(outputs["onednn"], outputs["fbgemm"])


def _machine() -> str:
    return kernels._key_text(kernels.machine_key())


def _uneven() -> str:
    times = {"onednn": [1e-4], "fbgemm": [1e-4, 2e-4], "float": [3e-4, 3e-4]}
    shapes = {"128x96": times, "96x64": times}
    return json.dumps(
        {"version": 1, "machines": {_machine(): {"key": {}, "rows": [32, 512], "shapes": shapes}}}
    )


MALFORMED = {
    "a list": lambda: "[]",
    "null": lambda: "null",
    "a string": lambda: '"fast"',
    "no machines": lambda: '{"version": 1}',
    "machines a list": lambda: '{"version": 1, "machines": []}',
    "a string for a machine": lambda: json.dumps({"version": 1, "machines": {_machine(): "x"}}),
    "a string for shapes": lambda: json.dumps(
        {"version": 1, "machines": {_machine(): {"key": {}, "rows": [32, 512], "shapes": "x"}}}
    ),
    "uneven lists": _uneven,
    "words for times": lambda: _uneven().replace("0.0001", '"fast"'),
    "truncated": lambda: '{"version": 1, "machi',
}


@pytest.mark.parametrize("shape", list(MALFORMED))
def test_a_malformed_kernel_cache_is_read_as_empty_rewritten_and_named_once(
    shape, tmp_path, monkeypatch, caplog
):
    """quantize, save and load through the API with `quant_kernels.json` of a wrong shape: they
    run, one warning names the file, and the file is rewritten in the right shape."""
    monkeypatch.setenv("ACCELKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(kernels.ENV_KERNEL, raising=False)
    monkeypatch.setattr(kernels, "_TABLE", [])  # a new process's table
    path = tmp_path / "cache" / kernels.CACHE_FILE
    path.parent.mkdir()
    path.write_text(MALFORMED[shape](), encoding="utf-8")
    calib = [torch.randn(16, 128, generator=torch.Generator().manual_seed(1))] * 2
    with caplog.at_level("WARNING"):
        model = quantize(net(), QuantConfig(method="rtn", weight_format="plain"), calib)
        monkeypatch.setattr(kernels, "_TABLE", [])  # load in another process
        loaded = load_quantized(save_quantized(model, tmp_path / "m.safetensors"), net)
    named = [r for r in caplog.records if str(path) in r.getMessage()]
    assert len(named) == 1, caplog.text
    kinds = {m.kernel for m in loaded.modules() if isinstance(m, QuantLinear)}
    assert kinds <= set(kernels.KERNELS)
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["version"] == kernels.CACHE_VERSION and isinstance(data["machines"], dict)
    for machine in data["machines"].values():
        for times in machine["shapes"].values():
            assert len({len(v) for v in times.values()}) == 1
