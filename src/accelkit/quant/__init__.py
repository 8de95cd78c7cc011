"""accelkit quant: RTN / SmoothQuant / DuQuant quantization of nn.Linear layers, pure under torch.compile.

The public API, loaded on first use (so `accelkit.quant.cli`, imported by `accelkit --help`, does
not import torch):

    from accelkit.quant import apply, evaluate              # what `accelkit quant eval|apply` run
    result = evaluate("minilm", methods=["fp32", "duquant"], bits=["w4a8"], pairs=32)
    apply("minilm", "minilm_w4a8.safetensors")

    from accelkit.quant import QuantConfig, quantize, save_quantized, load_quantized  # any model
"""

from __future__ import annotations

from accelkit.runtime.output import lazy_exports

_EXPORTS = {
    "evaluate": "accelkit.quant.api",
    "apply": "accelkit.quant.api",
    "EvalResult": "accelkit.quant.api",
    "ApplyResult": "accelkit.quant.api",
    "EvalRow": "accelkit.quant.sweep",
    "QuantConfig": "accelkit.quant.config",
    "load_config": "accelkit.quant.config",
    "QuantReport": "accelkit.quant.convert",
    "quantize": "accelkit.quant.convert",
    "quantize_with_report": "accelkit.quant.convert",
    "LayerSpec": "accelkit.quant.layers",
    "QuantLinear": "accelkit.quant.layers",
    "load_quantized": "accelkit.quant.storage",
    "save_quantized": "accelkit.quant.storage",
    "model_factory": "accelkit.quant.models",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
