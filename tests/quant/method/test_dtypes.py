"""bf16 and fp16 models quantize and run: outputs in the model's dtype, close to the FP32 path.

QuantLinear computes in float32 (transform, activation grid, GEMM) and returns the input's dtype;
calibration statistics are taken in float32 from the low-precision activations. So the quantized
bf16/fp16 model must agree with the quantized FP32 model up to the dtype's own rounding of the
layers around it, and its error against the unquantized model of the same dtype must be the FP32
path's error, not more.
"""

import copy

import pytest
import torch

from accelkit.quant.config import QuantConfig
from accelkit.quant.method.convert import quantize
from accelkit.quant.method.layers import QuantLinear
from tests.support.quant_blocks import Block


def data(n=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randn(4, 16, 128, generator=g)
        x[..., 7] *= 12.0
        out.append(x)
    return out


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("method", ["rtn", "duquant"])
@pytest.mark.parametrize("weight_format", ["plain", "progressive"])
def test_low_precision_models_quantize_and_match_the_fp32_path(dtype, method, weight_format):
    torch.manual_seed(0)
    fp32 = Block(128, 256).eval()
    cfg = QuantConfig(
        method=method,
        wbits=4,
        abits=8,
        block_size=32,
        rotation_steps=16,
        weight_format=weight_format,
        weight_group_size=32 if weight_format == "progressive" else None,
    )
    q32 = quantize(copy.deepcopy(fp32), cfg, data())
    low = copy.deepcopy(fp32).to(dtype)
    qlow = quantize(copy.deepcopy(low), cfg, [x.to(dtype) for x in data()])
    assert isinstance(qlow.up, QuantLinear) and isinstance(qlow.down, QuantLinear)
    x = data(1, seed=5)[0]
    with torch.no_grad():
        ref32, ref_low = fp32(x), low(x.to(dtype))
        got32, got_low = q32(x), qlow(x.to(dtype))
    assert got_low.dtype == dtype and torch.isfinite(got_low).all()
    eps = torch.finfo(dtype).eps
    err32, err_low = rel(got32, ref32), rel(got_low, ref_low)
    # its quantization error is the FP32 path's (measured: within 4 % of it, bf16 and fp16)
    assert err_low < 1.1 * err32 + eps, (err_low, err32)
    # and it is close to the quantized FP32 model: calibration on low-precision activations picks
    # slightly different scales and rotations, so they differ by about one quantization error
    assert rel(got_low, got32) < 1.5 * err32 + eps, (rel(got_low, got32), err32)
    with torch.no_grad():  # compiled too: one graph, the same outputs
        torch._dynamo.reset()
        compiled = torch.compile(qlow, backend="aot_eager", fullgraph=True)
        assert rel(compiled(x.to(dtype)), got_low) < 4 * eps
