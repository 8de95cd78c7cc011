"""`quant apply --output` under the crash harness (benchmarks/reliability/faults.py): a rerun after a kill must
write the clean run's bytes, so the same model saved twice must be the same bytes."""

import json

from accelkit.quant.config import QuantConfig
from accelkit.quant.method.convert import quantize
from accelkit.quant.method.storage import save_quantized
from tests.support.quant_blocks import SMALL, batches, make_net


def test_the_same_model_is_saved_as_the_same_bytes(tmp_path):
    """safetensors writes its header from a hash map: the order of its keys (`__metadata__`'s
    `format` and `layers`, the tensors) changed from save to save, so `quant apply` run twice on
    the same model and data wrote different bytes (6 orders in 20 saves here)."""
    cfg = QuantConfig(method="rtn", wbits=4, abits=8, weight_group_size=None, **SMALL)
    model = quantize(make_net(), cfg, batches())
    saved = {save_quantized(model, tmp_path / f"q{i}.safetensors").read_bytes() for i in range(12)}
    assert len(saved) == 1
    data = saved.pop()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    assert list(header) == sorted(header)  # read back independently: keys in sorted order
    metadata = list(header["__metadata__"])
    assert metadata == sorted(metadata) and {"format", "layers", "kernels"} <= set(metadata)
