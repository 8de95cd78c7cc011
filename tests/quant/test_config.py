"""quant/config.py: QuantConfig's values (its loading is tested in tests/runtime/test_config.py
and tests/quant/method/test_apply_storage.py)."""

import pytest

from accelkit.errors import ConfigError
from accelkit.quant.config import VALID_BITS, QuantConfig, check_bits


def test_check_bits():
    for bad in (1, 9, 32, 0, True, 4.0):
        with pytest.raises(ConfigError, match=r"2\.\.8, or 16"):
            check_bits(bad, "wbits")
    assert all(check_bits(b, "abits") == b for b in VALID_BITS)


def test_group_size_message_names_the_per_channel_choice():
    with pytest.raises(ConfigError, match="--group-size 0"):
        QuantConfig(weight_group_size=1)


def test_auto_block_keeps_the_transform_within_a_twelfth_of_the_gemm():
    """block_size "auto" (the default): per layer the largest power of two ≤ out/12 in 32..128
    that divides the input width — the transform's n·b multiply-adds ≤ the GEMM's n·m / 12."""
    from accelkit.quant.config import QuantConfig

    cfg = QuantConfig()
    assert cfg.block_size == "auto"
    shapes = {(384, 384): 32, (384, 1536): 128, (1536, 384): 32, (4096, 1024): 64,
              (2048, 2048): 128, (96, 2048): 32, (64, 40): 32}  # fmt: skip
    for (n, m), block in shapes.items():
        assert cfg.layer_block(n, m) == block, (n, m)
        assert n % block == 0 and (block == 32 or block * 12 <= m)
    assert QuantConfig(block_size=64).layer_block(384, 384) == 64  # an explicit size wins
    assert (
        QuantConfig(block_size="64").block_size == 64
        and QuantConfig(block_size="AUTO").block_size == "auto"
    )


def test_duquant_layers_get_their_own_block():
    import torch
    from torch import nn

    from accelkit.quant.config import QuantConfig
    from accelkit.quant.method.convert import quantize

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(128, 1536), nn.GELU(), nn.Linear(1536, 128)).eval()
    q = quantize(net, QuantConfig(), [torch.randn(16, 128) for _ in range(3)])
    assert [q[0].spec.block, q[2].spec.block] == [128, 32]
