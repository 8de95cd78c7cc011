"""accelkit quant: RTN / SmoothQuant / DuQuant quantization of nn.Linear layers, pure under torch.compile.

The public names load lazily (PEP 562), so `accelkit.quant.cli` — imported by `accelkit --help` —
does not import torch.
"""

from importlib import import_module

_WHERE = {
    "QuantConfig": "config",
    "QuantReport": "apply",
    "load_config": "config",
    "quantize": "apply",
    "quantize_with_report": "apply",
    "LayerSpec": "layers",
    "QuantLinear": "layers",
    "load_quantized": "storage",
    "save_quantized": "storage",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(import_module(f"accelkit.quant.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'accelkit.quant' has no attribute {name!r}")
