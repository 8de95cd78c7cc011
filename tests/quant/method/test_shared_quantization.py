"""`quant eval` quantizes once per method and weight bits: the W4A4 row is the W4A8 model's
layers with 4-bit activations (`with_abits`). That is only right if it equals what `quantize`
builds for W4A4 — checked here buffer for buffer and output for output."""

import copy

import pytest
import torch
from torch import nn

from accelkit.quant.config import QuantConfig
from accelkit.quant.evaluation.sweep import with_abits
from accelkit.quant.method.convert import quantize
from accelkit.quant.method.layers import QuantLinear


def block():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 128)).eval()


def data():
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(4, 16, 128, generator=g) for _ in range(3)]
    for x in xs:
        x[..., 5] *= 20.0  # an outlier channel, as transformer activations have
    return xs


@pytest.mark.parametrize(
    ("method", "fields"),
    [
        ("rtn", {}),
        ("smoothquant", {}),
        ("duquant", {"permutation": True}),
        (
            "duquant",
            {"permutation": False, "weight_format": "progressive", "weight_group_size": 64},
        ),
    ],
)
def test_w4a4_from_w4a8_equals_quantizing_w4a4(method, fields):
    common = dict(method=method, block_size=32, rotation_steps=16, **fields)
    fp32 = block()
    a8 = quantize(copy.deepcopy(fp32), QuantConfig(wbits=4, abits=8, **common), data())
    a4 = quantize(copy.deepcopy(fp32), QuantConfig(wbits=4, abits=4, **common), data())
    shared = with_abits(a8, 4)
    for mine, theirs in zip(shared.modules(), a4.modules(), strict=True):
        if isinstance(theirs, QuantLinear):
            assert mine.spec == theirs.spec
            for (name, buf), (_, ref) in zip(
                mine.named_buffers(), theirs.named_buffers(), strict=True
            ):
                assert torch.equal(buf, ref), name
    x = torch.randn(2, 8, 128)
    with torch.no_grad():
        assert torch.equal(shared(x), a4(x))
        assert not torch.equal(shared(x), a8(x))  # the activation bits did change
    # static activation ranges depend on the bits: refused, not silently wrong
    static = quantize(
        copy.deepcopy(fp32),
        QuantConfig(wbits=4, abits=8, act_granularity="per-tensor-static", **common),
        data(),
    )
    with pytest.raises(ValueError, match="per-token dynamic"):
        with_abits(static, 4)


def test_quantizations_sharing_calibration_equal_their_own_and_record_inputs_once(monkeypatch):
    """Every row of `quant eval` shares one `SharedCalibration`: the layer inputs are recorded
    once for all methods and weight bits, each transform fitted once per method (rotations do
    not depend on the bits) — and each model is buffer for buffer what quantizing alone gives,
    W4 and W8 weights, a16 (weight-only) rows too."""
    from accelkit.quant.method import calibrate, convert, transforms

    fp32 = block()
    alone = {}
    settings = [("rtn", 4, 8), ("duquant", 4, 8), ("duquant", 8, 8), ("smoothquant", 8, 16)]
    for method, w, a in settings:
        cfg = QuantConfig(method=method, wbits=w, abits=a, block_size=32, rotation_steps=16)
        alone[(method, w, a)] = (cfg, quantize(copy.deepcopy(fp32), cfg, data()))
    calls = {"collect": 0, "fit": 0}

    def counted(name, real):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(calibrate, "collect_inputs", counted("collect", calibrate.collect_inputs))
    monkeypatch.setattr(convert, "fit_transform", counted("fit", transforms.fit_transform))
    shared = calibrate.SharedCalibration()
    for cfg, theirs in alone.values():
        mine = quantize(copy.deepcopy(fp32), cfg, data(), shared=shared)
        for a, b in zip(mine.buffers(), theirs.buffers(), strict=True):
            assert torch.equal(a, b)
    assert calls == {"collect": 1, "fit": 2 * 3}  # 2 layers × (rtn, duquant, smoothquant)
