"""Pure cores against numpy float64 references, on adversarial inputs too."""

import numpy as np
import pytest
import torch

from accelkit.quant.method import quantizers as qz
from accelkit.quant.method.transforms import (
    block_base,
    blockwise,
    fit_transform,
    greedy_rotation,
    quiet_channels,
    rotation_from_steps,
    smooth_scales,
    zigzag_permutation,
)


def np_fake_quant_rows(x, bits, clip=1.0):
    """Independent float64 reference: asymmetric per-row grid including 0."""
    qmax = 2**bits - 1
    lo = np.minimum(x.min(axis=1, keepdims=True) * clip, 0.0)
    hi = np.maximum(x.max(axis=1, keepdims=True) * clip, 0.0)
    scale = np.maximum((hi - lo) / qmax, 1e-8)
    zero = np.clip(np.round(-lo / scale), 0, qmax)
    q = np.clip(np.round(x / scale) + zero, 0, qmax)
    return (q - zero) * scale


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_weight_fake_quant_matches_numpy(bits):
    rng = np.random.default_rng(bits)
    w = rng.standard_normal((17, 64))
    w[3] *= 100.0  # a row with a huge range
    w[5] = 0.0  # a constant row
    w[7] = np.abs(w[7])  # an all-positive row
    got = qz.fake_quant_weight(torch.from_numpy(w), bits, None, 0.9).numpy()
    np.testing.assert_allclose(got, np_fake_quant_rows(w, bits, 0.9), rtol=0, atol=1e-12)
    got_g = qz.fake_quant_weight(torch.from_numpy(w), bits, 16, 1.0).numpy()
    ref_g = np_fake_quant_rows(w.reshape(17 * 4, 16), bits).reshape(17, 64)
    np.testing.assert_allclose(got_g, ref_g, rtol=0, atol=1e-12)
    # error bound: half a step per element (no clipping)
    q, scale, zero = qz.quantize_weight(torch.from_numpy(w), bits, None)
    assert int(q.max()) <= 2**bits - 1
    err = np.abs(qz.dequantize_weight(q, scale, zero).numpy() - w)
    assert np.all(err <= scale.numpy() / 2 + 1e-12)


def test_per_token_activation_quant_matches_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 9, 48))
    x[0, 2, 5] = 500.0
    x[1, 4] = 0.0
    got = qz.fake_quant_per_token(torch.from_numpy(x), 8, 0.9).numpy()
    ref = np_fake_quant_rows(x.reshape(-1, 48), 8, 0.9).reshape(x.shape)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)
    assert np.all(got[1, 4] == 0.0)


def test_static_activation_quant():
    x = torch.linspace(-3, 5, 101, dtype=torch.float64)
    scale, zero = qz.asym_params(
        torch.tensor(-3.0, dtype=torch.float64), torch.tensor(5.0, dtype=torch.float64), 8
    )
    got = qz.fake_quant_static(x, scale, zero, 8)
    assert float((got - x).abs().max()) <= float(scale) / 2 + 1e-12
    assert float(
        qz.fake_quant_static(torch.tensor([100.0], dtype=torch.float64), scale, zero, 8)
    ) == pytest.approx((255 - float(zero)) * float(scale))


def test_clip_search_is_per_row_optimum():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((8, 32))
    w[:, 0] *= 20
    x = rng.standard_normal((200, 32))
    grid = (1.0, 0.9, 0.8, 0.7, 0.6)
    best = qz.search_weight_clip(torch.from_numpy(w), torch.from_numpy(x), 3, None, grid).numpy()
    for i in range(8):
        errs = [np.sum((x @ (w[i] - np_fake_quant_rows(w[i : i + 1], 3, r)[0])) ** 2) for r in grid]
        assert best[i] == grid[int(np.argmin(errs))]


@pytest.mark.parametrize("kind", ["grouped", "progressive", "int8"])
@pytest.mark.parametrize("elements", [qz.CLIP_SEARCH_ELEMENTS, 3 * 64 * 5])
@pytest.mark.parametrize("calibration_rows", [300, 40])
def test_clip_search_in_batches_is_each_rows_best_ratio(
    kind, elements, calibration_rows, monkeypatch
):
    """The grid's ratios run as stacked copies of the rows, in batches (here also 3 rows at a time,
    the last batch short), the error through xᵀx or, with fewer calibration rows than input
    channels, through x: each row's ratio is still the first of the grid with its least error,
    each ratio's ŵ made by the quantizer alone with a scalar clip and the error in numpy."""
    monkeypatch.setattr(qz, "CLIP_SEARCH_ELEMENTS", elements)
    rng = np.random.default_rng(7)
    w = rng.standard_normal((10, 64))
    w[:, 3] *= 15  # an outlier column: clipping pays on some rows and not on others
    w[4] = w[5]  # equal rows choose alike
    x = rng.standard_normal((calibration_rows, 64))
    grid = (1.0, 0.95, 0.85, 0.7, 0.5)
    wt = torch.from_numpy(w)

    def rebuilt(ratio: float) -> np.ndarray:
        if kind == "progressive":
            return qz.progressive_dequantize(*qz.progressive_quantize(wt, 16, ratio)).numpy()
        if kind == "int8":
            q, scale = qz.int8_quantize(wt, ratio)
            return (q.to(torch.float64) * scale).numpy()
        return qz.fake_quant_weight(wt, 3, 16, ratio).numpy()

    errors = np.stack([((x @ (w - rebuilt(r)).T) ** 2).sum(axis=0) for r in grid])
    best = qz.search_weight_clip(
        wt, torch.from_numpy(x), 3, 16, grid, progressive=kind == "progressive", int8=kind == "int8"
    ).numpy()
    assert best.tolist() == [grid[i] for i in errors.argmin(axis=0)]
    assert best[4] == best[5]


def test_int4_pack_round_trip_and_layout():
    codes = torch.randint(
        0, 16, (5, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(0)
    )
    packed = qz.pack_int4(codes)
    assert packed.shape == (5, 32) and packed.dtype == torch.uint8
    assert torch.equal(qz.unpack_int4(packed), codes)
    assert int(packed[0, 0]) == int(codes[0, 0]) + 16 * int(codes[0, 1])
    with pytest.raises(ValueError):
        qz.pack_int4(torch.full((2, 2), 16, dtype=torch.uint8))


# ---- transforms ----


def outlier_acts(t=256, n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, n, dtype=torch.float64, generator=g)
    x[:, 7] *= 60.0
    x[:, 130] *= 25.0
    x[:, 131] += 10.0
    return x, torch.randn(96, n, dtype=torch.float64, generator=g)


def test_base_block_is_orthogonal_with_constant_first_row():
    b = block_base(32, seed=3)
    assert torch.allclose(b @ b.T, torch.eye(32, dtype=torch.float64), atol=1e-13)
    assert torch.allclose(b[0], torch.full((32,), 32**-0.5, dtype=torch.float64), atol=1e-14)


@pytest.mark.parametrize("method", ["rtn", "smoothquant", "duquant"])
def test_equivalence_before_quantization(method):
    x, w = outlier_acts()
    t = fit_transform(x, w, method=method, alpha=0.6, block=64, steps=48, permutation=True)
    ref = x @ w.T
    got = t.activations(x) @ t.weight(w).T
    assert float((got - ref).abs().max() / ref.abs().max()) < 1e-10
    r = t.orthogonal_matrix(256)
    assert torch.allclose(r @ r.T, torch.eye(256, dtype=torch.float64), atol=1e-12)


def test_rotation_is_rebuilt_exactly_from_steps():
    x, w = outlier_acts()
    t = fit_transform(x, w, method="duquant", alpha=0.6, block=64, steps=48, permutation=True)
    base = block_base(64, 0)
    assert torch.equal(rotation_from_steps(base, t.steps1), t.rot1)
    assert torch.equal(rotation_from_steps(base, t.steps2), t.rot2)


def test_greedy_rotation_spreads_the_outlier_channel():
    x, _ = outlier_acts()
    base = block_base(64, 0)
    steps = greedy_rotation(x, base, 32)
    # block 0 holds channel 7 (60x): the first step must pick that channel, not a row index
    assert int(steps[0, 0]) == 7
    rot = rotation_from_steps(base, steps)
    z = blockwise(x, rot)
    for k in range(4):
        before = x[:, 64 * k : 64 * (k + 1)]
        after = z[:, 64 * k : 64 * (k + 1)]
        assert float(after.max() - after.min()) <= float(before.max() - before.min()) + 1e-12
    assert float(z.abs().amax() / z.abs().mean()) < 0.5 * float(x.abs().amax() / x.abs().mean())


def test_zigzag_is_a_permutation_and_balances_block_maxima():
    g = torch.Generator().manual_seed(0)
    cmax = torch.rand(256, generator=g, dtype=torch.float64)
    cmax[:8] = torch.tensor(
        [100.0, 90, 80, 70, 60, 50, 40, 30], dtype=torch.float64
    )  # all outliers in block 0
    perm = zigzag_permutation(cmax, 64)
    assert sorted(perm.tolist()) == list(range(256))
    before = cmax.reshape(4, 64)
    after = cmax[perm].reshape(4, 64)
    # snake order: blocks get 100/30, 90/40, 80/50, 70/60 -> equal sums of the top two
    top2 = after.topk(2, dim=1).values.sum(1)
    assert torch.allclose(top2, torch.full((4,), 130.0, dtype=torch.float64))
    assert float(after.sum(1).std()) < float(before.sum(1).std())


def test_smooth_scales_formula():
    a = torch.tensor([4.0, 1.0, 9.0, 2.0], dtype=torch.float64)
    w = torch.tensor([1.0, 2.0, 0.0, 8.0], dtype=torch.float64)
    s = smooth_scales(a, w, 0.5)
    np.testing.assert_allclose(s.numpy(), [2.0, 0.5**0.5, 3.0 / 1e-5**0.5, 0.5])


def test_quiet_channels_take_the_median_scale_not_a_tiny_one():
    a = torch.tensor([4.0, 0.0, 9.0, 1e-4, 2.0], dtype=torch.float64)
    w = torch.ones(5, dtype=torch.float64)
    assert quiet_channels(a).tolist() == [1, 3]  # dead, and far below 5 % of the median (3.0)
    s = smooth_scales(a, w, 0.5)
    live = torch.tensor([4.0, 9.0, 2.0]) ** 0.5
    np.testing.assert_allclose(
        s.numpy(), [2.0, float(live.median()), 3.0, float(live.median()), 2**0.5]
    )
    np.testing.assert_array_equal(smooth_scales(torch.zeros(3), torch.ones(3), 0.6).numpy(), 1.0)


@pytest.mark.parametrize("permutation", [True, False])  # False: one fused product per block
@pytest.mark.parametrize("blocks", [4, 5])  # 4 blocks: one dense n×n product; 5: block products
def test_quantlinear_input_transform_every_form_matches_float64(blocks, permutation):
    from accelkit.quant.method.layers import LayerSpec, QuantLinear

    gen = torch.Generator().manual_seed(blocks)
    n, b = 16 * blocks, 16
    x = torch.randn(64, n, dtype=torch.float64, generator=gen)
    x[:, 3] *= 40.0  # an outlier channel, so rotations and the permutation are non-trivial
    w = torch.randn(24, n, dtype=torch.float64, generator=gen)
    t = fit_transform(x, w, method="duquant", alpha=0.6, block=b, steps=8, permutation=permutation)
    assert (t.steps1 >= 0).any()  # some rotation step kept: the test is not of an identity
    spec = LayerSpec(
        in_features=n,
        out_features=24,
        bias=False,
        wbits=16,
        abits=16,
        group_size=None,
        act_granularity="per-token-dynamic",
        act_clip=1.0,
        smooth=True,
        block=b,
        permutation=permutation,
        rotation_steps=8,
    )
    layer = QuantLinear(spec)
    layer.load_from_float(w, None, t, x, clip=1.0, act_range=None)
    assert spec.dense_transform == (permutation and blocks <= 4)
    assert spec.fused_blocks == (not permutation)
    ref = t.activations(x)  # float64, the transform as fitted
    got = layer.transform_input(x.to(torch.float32)).to(torch.float64)
    assert float((got - ref).abs().max() / ref.abs().max()) < 1e-5
    # and the layer computes x·Wᵀ (no quantization at 16 bits)
    out = layer(x.to(torch.float32)).to(torch.float64)
    assert float((out - x @ w.T).abs().max() / (x @ w.T).abs().max()) < 1e-5


@pytest.mark.parametrize(
    ("wbits", "abits", "in_features", "granularity", "group_size"),
    [
        (4, 8, 96, "per-token-dynamic", None),
        (4, 8, 96, "per-tensor-static", None),
        (7, 8, 33, "per-token-dynamic", None),
        (3, 4, 50, "per-token-dynamic", None),
    ],
)
@pytest.mark.parametrize("kernel", ["onednn", "fbgemm", "float"])
def test_every_kernel_equals_the_dequantized_product_in_float64(
    kernel, wbits, abits, in_features, granularity, group_size, monkeypatch
):
    """Each CPU kernel (forced by ACCELKIT_QUANT_KERNEL) computes exactly
    dequant(quant(x))·dequant(W)ᵀ: checked against float64 arithmetic on the same codes, on tokens
    with an outlier, a constant token and an all-zero token. A kernel that is not exact on this
    CPU for the layer's values is not used (the layer takes the float path, checked too)."""
    from accelkit.quant.method import kernels
    from accelkit.quant.method.layers import LayerSpec, QuantLinear

    monkeypatch.setenv(kernels.ENV_KERNEL, kernel)
    gen = torch.Generator().manual_seed(wbits * 100 + in_features)
    out_features = 40
    x = torch.randn(3, 7, in_features, generator=gen)
    x[0, 0, 5] = 60.0  # outlier
    x[1, 2] = 0.75  # constant token: range widened to include 0
    x[2, 3] = 0.0  # all-zero token: scale at its floor
    w = torch.randn(out_features, in_features, dtype=torch.float64, generator=gen)
    bias = torch.randn(out_features, dtype=torch.float64, generator=gen)
    codes, w_scale, w_zero = qz.quantize_weight(w, wbits, group_size)
    rows = x.reshape(-1, in_features)
    if granularity == "per-tensor-static":
        x_scale, x_zero = qz.asym_params(
            rows.min().reshape(1) * 0.9, rows.max().reshape(1) * 0.9, abits
        )
    else:
        x_scale, x_zero = qz.per_token_params(rows, abits, 0.9)
    x_hat = qz.dequantize_asym(qz.quantize_asym(rows, x_scale, x_zero, abits), x_scale, x_zero).to(
        torch.float64
    )
    want = x_hat @ qz.dequantize_weight(codes, w_scale, w_zero).T
    spec = LayerSpec(
        in_features=in_features,
        out_features=out_features,
        bias=True,
        wbits=wbits,
        abits=abits,
        group_size=group_size,
        act_granularity=granularity,
        act_clip=0.9,
        smooth=False,
        block=None,
        permutation=False,
    )
    assert spec.integer_matmul
    assert not LayerSpec(
        **{**spec.to_dict(), "group_size": 16}
    ).integer_matmul  # groups: the float path
    layer = QuantLinear(spec)
    with torch.no_grad():
        layer.qweight.copy_(qz.pack_int4(codes) if spec.packed else codes)
        layer.w_scale.copy_(w_scale.float())
        layer.w_zero.copy_(w_zero.float())
        layer.bias.copy_(bias.float())
        if granularity == "per-tensor-static":
            layer.act_scale.copy_(x_scale)
            layer.act_zero.copy_(x_zero)
    layer.refresh_derived()  # buffers written by hand: recompute what derives from them
    wmax = int(layer.weight_int8.abs().max())
    usable = kernel == "float" or kernels.exact(kernel, 2**abits - 1, wmax)
    assert layer.kernel == (kernel if usable else "float")
    y = layer(x)
    assert y.shape == (3, 7, out_features)
    reference = (want + bias).reshape(3, 7, out_features)
    assert float((y.double() - reference).abs().max() / reference.abs().max()) < 2e-6


def test_a_kernel_that_is_not_exact_is_never_used(monkeypatch):
    """Without an exact int8 GEMM (no VNNI: pairs saturate) a layer keeps the float path, with the
    same results; the exactness check itself catches a saturating kernel."""
    from accelkit.quant.method import kernels
    from accelkit.quant.method.layers import LayerSpec, QuantLinear

    def saturating(codes, weight):  # what a pre-VNNI u8·s8 kernel does with large pairs
        q = codes.to(torch.int64)
        w = weight.to(torch.int64)
        pairs = q[:, None, 0::2] * w[None, :, 0::2] + q[:, None, 1::2] * w[None, :, 1::2]
        return pairs.clamp(-32768, 32767).sum(-1).to(torch.float32)

    kernels.exact.cache_clear()
    monkeypatch.setattr(kernels, "fbgemm_mm", saturating)
    try:
        assert not kernels.exact("fbgemm", 255, 127)  # 255·127·2 > 32767: caught
        assert kernels.exact("fbgemm", 255, 64)  # |b| ≤ 64 cannot saturate
        assert kernels.exact("fbgemm", 127, 127)  # nor can 7-bit activations
    finally:
        kernels.exact.cache_clear()
    monkeypatch.undo()

    gen = torch.Generator().manual_seed(3)
    spec = LayerSpec(
        in_features=64,
        out_features=9,
        bias=False,
        wbits=4,
        abits=8,
        group_size=None,
        act_granularity="per-token-dynamic",
        act_clip=1.0,
        smooth=False,
        block=None,
        permutation=False,
    )
    codes = torch.randint(0, 16, (9, 64), dtype=torch.uint8, generator=gen)
    x = torch.randn(5, 64, generator=gen)
    outputs = {}
    for exact in (True, False):
        monkeypatch.setattr(kernels, "exact", lambda *_, exact=exact: exact)
        layer = QuantLinear(spec)
        with torch.no_grad():
            layer.qweight.copy_(qz.pack_int4(codes))
            layer.w_scale.fill_(0.01)
            layer.w_zero.fill_(7.0)
        layer.refresh_derived()
        assert (layer.kernel != "float") is exact
        monkeypatch.undo()
        if exact and not kernels.exact(layer.kernel, 255, 15):
            continue  # this CPU cannot run it correctly; only the fallback is checked
        outputs[exact] = layer(x)
    x_hat = qz.fake_quant_per_token(x.double(), 8, 1.0)
    want = (
        x_hat
        @ qz.dequantize_weight(
            codes,
            torch.full((9, 1), 0.01, dtype=torch.float64),
            torch.full((9, 1), 7.0, dtype=torch.float64),
        ).T
    )
    for got in outputs.values():
        assert float((got.double() - want).abs().max() / want.abs().max()) < 2e-6


def test_int8_weights_are_symmetric_per_channel_and_rebuilt_in_float64():
    """8-bit layers of the progressive family: q = clamp(round(w / s), ±127), s = clip·max|w|/127
    per output channel, against numpy float64; the layer computes quant(x)·(q·s)ᵀ."""
    from accelkit.quant.method.layers import LayerSpec, QuantLinear
    from accelkit.quant.method.transforms import Transform

    gen = torch.Generator().manual_seed(8)
    w = torch.randn(24, 64, dtype=torch.float64, generator=gen)
    w[3] *= 40  # one loud row: its own scale
    q, scale = qz.int8_quantize(w, 0.9)
    wn = w.numpy()
    s_np = 0.9 * np.abs(wn).max(axis=1, keepdims=True) / 127
    q_np = np.clip(np.round(wn / s_np), -127, 127)
    assert q.dtype == torch.int8 and np.array_equal(q.numpy(), q_np)
    assert np.allclose(scale.numpy(), s_np, rtol=1e-15)
    spec = LayerSpec(
        in_features=64, out_features=24, bias=False, wbits=8, abits=8, group_size=None,
        act_granularity="per-token-dynamic", act_clip=1.0, smooth=False, block=None,
        permutation=False, weight_format="int8",
    )  # fmt: skip
    layer = QuantLinear(spec)
    x = torch.randn(6, 64, generator=gen)
    layer.load_from_float(w, None, Transform(), x.double(), 0.9, None)
    want = qz.fake_quant_per_token(x.double(), 8, 1.0).numpy() @ (q_np * s_np).T
    got = layer(x).double().numpy()
    assert np.abs(got - want).max() / np.abs(want).max() < 2e-6
