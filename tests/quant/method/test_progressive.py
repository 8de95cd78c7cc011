"""Progressive group quantization (QServe's W4A8): int4 groups with integer scales over per-channel
int8. The rebuilt int8 weights equal the two-level dequantization exactly; layer outputs match a
float64 reference computed from the stored codes; storage ≤ 0.2× FP32; one compiled graph."""

import json

import numpy as np
import pytest
import torch
from torch import nn

from accelkit.errors import ConfigError
from accelkit.quant.config import QuantConfig
from accelkit.quant.method import quantizers as qz
from accelkit.quant.method.convert import quantize
from accelkit.quant.method.layers import QuantLinear
from accelkit.quant.method.storage import load_quantized, save_quantized

# one xdist worker runs this module (pyproject: --dist loadgroup), so
# each of its quantized models is made once
pytestmark = pytest.mark.xdist_group("quant-progressive")


def adversarial_weights(m=48, n=256, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(m, n, generator=g, dtype=torch.float64) * 0.05
    w[0] = 0.0  # a dead row
    w[1] = w[1].abs() + 0.3  # every group strictly positive
    w[2] = -(w[2].abs() + 0.3)  # every group strictly negative
    w[3, 17] = 40.0  # one huge value: its row's int8 scale is set by it
    w[4, :128] = 1e-9  # a group of near-zeros beside a normal group
    w[5] = torch.linspace(-1, 1, n, dtype=torch.float64)  # groups spanning the full int8 range
    w[6, ::2], w[6, 1::2] = 0.7, -0.7  # the widest possible group range
    return w


@pytest.mark.parametrize("group", [16, 64, 128])
def test_two_levels_rebuild_exact_int8_within_the_protective_range(group):
    w = adversarial_weights()
    q, s1, s2, z = qz.progressive_quantize(w, group)
    assert q.dtype == s2.dtype == z.dtype == torch.uint8
    assert int(q.max()) <= 15 and int(s2.min()) >= 1 and int(s2.max()) <= 16 and int(z.max()) <= 15
    # independent numpy float64/int64 reference of both levels
    wn, s1n = w.numpy(), s1.numpy()
    w8 = np.clip(np.round(wn / s1n), -119, 119)
    qn = q.numpy().reshape(w.shape[0], -1, group).astype(np.int64)
    rebuilt = (qn - z.numpy()[..., None]) * s2.numpy()[..., None].astype(np.int64)
    rebuilt = rebuilt.reshape(w.shape)
    got = qz.progressive_int8(q, s2, z)
    assert got.dtype == torch.int8 and np.array_equal(got.numpy().astype(np.int64), rebuilt)
    assert np.abs(rebuilt).max() <= 127
    # level 2 is at least as close to level 1, per group, as the plain integer grid
    # s₂ = ⌈range / 15⌉, z = round(−lo / s₂) (computed here in numpy)
    w8g = w8.reshape(w.shape[0], -1, group)
    lo, hi = np.minimum(w8g.min(-1), 0), np.maximum(w8g.max(-1), 0)
    base = np.maximum(np.ceil((hi - lo) / 15), 1)
    zb = np.clip(np.round(-lo / base), 0, 15)
    plain = (np.clip(np.round(w8g / base[..., None]) + zb[..., None], 0, 15) - zb[..., None]) * (
        base[..., None]
    )
    ours = rebuilt.reshape(w8g.shape)
    assert np.all(((ours - w8g) ** 2).sum(-1) <= ((plain - w8g) ** 2).sum(-1) + 1e-9)
    assert np.all(np.abs(plain - w8g) <= base[..., None] / 2 + 1e-9)  # the grid it improves on
    deq = qz.progressive_dequantize(q, s1, s2, z).numpy()
    np.testing.assert_allclose(deq, rebuilt * s1n, rtol=0, atol=1e-12)
    assert not deq[0].any()  # the dead row stays zero


def _level2_float64(w8: np.ndarray, group: int):
    """Level 2 of `progressive_quantize` in numpy float64, from level 1's int8 values: per group
    the (s₂, z) of least squared error among s₂ ∈ ⌈(hi − lo)/15⌉ ± 1, z ∈ round(−lo/s₂) ± 1."""
    g = w8.reshape(w8.shape[0], -1, group)
    lo, hi = np.minimum(g.min(-1), 0.0), np.maximum(g.max(-1), 0.0)
    base = np.ceil((hi - lo) / 15)
    best = np.full(lo.shape, np.inf)
    s2, zero = np.ones_like(lo), np.zeros_like(lo)
    for step in (-1.0, 0.0, 1.0):
        scale = np.clip(base + step, 1, 16)
        for shift in (-1.0, 0.0, 1.0):
            z = np.clip(np.round(-lo / scale) + shift, 0, 15)
            q = np.clip(np.round(g / scale[..., None]) + z[..., None], 0, 15)
            err = (((q - z[..., None]) * scale[..., None] - g) ** 2).sum(-1)
            better = err < best
            best, s2, zero = (
                np.where(better, err, best),
                np.where(better, scale, s2),
                np.where(better, z, zero),
            )
    q = np.clip(np.round(g / s2[..., None]) + zero[..., None], 0, 15)
    return q.reshape(w8.shape), s2, zero


@pytest.mark.parametrize("group", [32, 64])
def test_level_two_in_float32_equals_float64_bit_for_bit(group):
    """Level 2 runs in float32 (integers, exact there): its codes, s₂ and z equal a float64
    computation, on weights of many magnitudes, outlier columns, zero rows and clip ratios."""
    g = torch.Generator().manual_seed(3)
    for i, clip in enumerate((1.0, 0.9, 0.55)):
        w = torch.randn(48, 256, generator=g, dtype=torch.float64)
        w *= 10 ** torch.empty(48, 1, dtype=torch.float64).uniform_(-3, 2, generator=g)
        w[:, :: 7 + i] *= 40.0
        w[5] = 0.0
        q, s1, s2, zero = qz.progressive_quantize(w, group, clip)
        w8 = torch.clamp(torch.round(w / s1), -119, 119).numpy()
        rq, rs2, rzero = _level2_float64(w8, group)
        np.testing.assert_array_equal(q.numpy(), rq)
        np.testing.assert_array_equal(s2.numpy(), rs2)
        np.testing.assert_array_equal(zero.numpy(), rzero)


def test_progressive_error_between_per_channel_and_plain_groups():
    """On trained-like weights (heavy-tailed rows), groups help: progressive W4 is far better than
    per-channel W4 and close to plain 4-bit groups of the same size."""
    g = torch.Generator().manual_seed(3)
    w = torch.randn(256, 512, generator=g, dtype=torch.float64)
    w *= torch.exp(torch.randn(256, 512, generator=g, dtype=torch.float64))  # heavy tails
    x = torch.randn(512, 512, generator=g, dtype=torch.float64)
    ref = x @ w.T

    def err(deq):
        return float((x @ deq.T - ref).norm() / ref.norm())

    per_channel = err(qz.fake_quant_weight(w, 4, None))
    plain = err(qz.fake_quant_weight(w, 4, 64))
    progressive = err(qz.progressive_dequantize(*qz.progressive_quantize(w, 64)))
    assert progressive < 0.75 * per_channel, (progressive, per_channel)
    assert progressive < 1.3 * plain, (progressive, plain)


def make_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 64)).eval()


def batches(n=4, seed=1):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randn(6, 12, 128, generator=g)
        x[..., 5] *= 15.0
        out.append(x)
    return out


@pytest.fixture(scope="module", params=["rtn", "duquant", "duquant-fused-blocks"])
def progressive_model(request):
    cfg = QuantConfig(
        method=request.param.split("-")[0],
        permutation=not request.param.endswith("fused-blocks"),
        wbits=4,
        abits=8,
        weight_format="progressive",
        weight_group_size=64,
        block_size=32,
        rotation_steps=16,
    )
    return quantize(make_net(), cfg, batches())


def test_layer_output_matches_a_float64_reference_from_the_stored_codes(progressive_model):
    layer = progressive_model[0]
    assert isinstance(layer, QuantLinear) and layer.spec.progressive
    assert layer.spec.integer_matmul  # runs as one int8 GEMM wherever the per-channel path does
    x = batches(1, seed=9)[0]
    with torch.no_grad():
        got = layer(x).double()
    # reference: the layer's own transform, per-token activation grid, weights from stored codes
    spec = layer.spec
    with torch.no_grad():
        xt = layer.transform_input(x.double())
    lo = xt.amin(-1, keepdim=True).clamp(max=0) * spec.act_clip
    hi = xt.amax(-1, keepdim=True).clamp(min=0) * spec.act_clip
    scale = ((hi - lo) / 255).clamp(min=qz.SCALE_FLOOR)
    zero = torch.round(-lo / scale).clamp(0, 255)
    xq = (torch.clamp(torch.round(xt / scale) + zero, 0, 255) - zero) * scale
    codes = qz.unpack_int4(layer.qweight).long()
    groups = layer.w_gscale.shape[1]
    w8 = (codes.reshape(codes.shape[0], groups, -1) - layer.w_gzero.long()[..., None]) * (
        layer.w_gscale.long()[..., None]
    )
    w = w8.reshape(codes.shape).double() * layer.w_scale.double()
    ref = xq @ w.T + layer.bias.double()
    err = (got - ref).abs().max() / ref.abs().max()
    assert err < 1e-5, float(err)
    if layer.integer_gemm:  # the derived int8 buffer is exactly level 1
        assert torch.equal(layer.weight_int8.long(), w8.reshape(codes.shape))


def test_save_load_bit_identical_and_at_most_a_fifth_of_fp32(progressive_model, tmp_path):
    path = save_quantized(progressive_model, tmp_path / "p.safetensors")
    loaded = load_quantized(path, make_net)
    x = batches(1, seed=5)[0]
    with torch.no_grad():
        assert torch.equal(progressive_model(x), loaded(x))
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        stored = sum(
            f.get_tensor(k).numel() * f.get_tensor(k).element_size()
            for k in f.keys()  # noqa: SIM118 - a safetensors handle
            if k.startswith("quant/") and not k.endswith("bias") and "steps" not in k
        )
        specs = json.loads(f.metadata()["layers"])
    weights = sum(m.weight.numel() for m in make_net() if isinstance(m, nn.Linear))
    smoothing = 4 * (128 + 256)  # DuQuant's per-input-channel vectors, float32
    assert stored <= 0.2 * 4 * weights + smoothing, stored / (4 * weights)
    assert {s["weight_format"] for s in specs.values()} == {"progressive"}


def test_one_compiled_graph_across_batch_sizes(progressive_model):
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(progressive_model, backend=counter, fullgraph=True)
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for i in range(6):
            x = torch.randn(2 + i, 12, 128, generator=g)
            torch._dynamo.mark_dynamic(x, 0)
            assert torch.allclose(compiled(x), progressive_model(x), atol=1e-5, rtol=0)
    assert counter.frame_count == 1


def test_bad_progressive_settings_are_one_line_errors():
    with pytest.raises(ConfigError, match="weight_format"):
        QuantConfig(weight_format="groups")
    net = make_net()
    cfg = QuantConfig(method="rtn", weight_format="progressive", weight_group_size=48)
    with pytest.raises(ConfigError, match="not divisible by weight_group_size 48"):
        quantize(net, cfg.model_copy(update={"indivisible": "error"}), batches())
    # 8-bit layers stay plain; 4-bit ones go progressive with the default groups of 64
    cfg = QuantConfig(method="rtn", weight_format="progressive", layer_wbits={"2": 8})
    model = quantize(make_net(), cfg, batches())
    assert model[0].spec.progressive and model[0].spec.group_size == 64
    assert not model[2].spec.progressive and model[2].spec.wbits == 8


def test_the_default_is_progressive_64_without_permutation_and_per_channel_where_64_does_not_divide():
    cfg = QuantConfig()
    assert (cfg.method, cfg.permutation, cfg.weight_format) == ("duquant", False, "progressive")
    assert cfg.layer_weights("a", 384) == (4, 64, "progressive")
    assert cfg.layer_weights("a", 100) == (4, None, "plain")  # per output channel, not float
    net = nn.Sequential(nn.Linear(100, 128), nn.ReLU(), nn.Linear(128, 32))
    model = quantize(net, QuantConfig(method="rtn"), [torch.randn(8, 100)])
    assert not model[0].spec.progressive and model[0].spec.group_size is None
    assert model[2].spec.progressive and model[2].spec.group_size == 64
