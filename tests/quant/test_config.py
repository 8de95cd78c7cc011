"""quant/config.py: QuantConfig's values (its loading is tested in tests/runtime/test_config.py
and tests/quant/test_apply_storage.py)."""

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
