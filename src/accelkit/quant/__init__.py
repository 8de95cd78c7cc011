"""accelkit quant: RTN / SmoothQuant / DuQuant quantization of nn.Linear layers, pure under torch.compile.

The public API, loaded on first use (so `accelkit.quant.cli`, imported by `accelkit --help`, does
not import torch):

    from accelkit.quant import apply, evaluate              # what `accelkit quant eval|apply` run
    result = evaluate("minilm", methods=["fp32", "duquant"], bits=["w4a8"], pairs=32)
    apply("minilm", "minilm_w4a8.safetensors")

    from accelkit.quant import QuantConfig, quantize, save_quantized, load_quantized  # any model
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.runtime.exports import lazy_exports

_EXPORTS = {
    "evaluate": "accelkit.quant.api",
    "apply": "accelkit.quant.api",
    "EvalResult": "accelkit.quant.api",
    "ApplyResult": "accelkit.quant.api",
    "EvalRow": "accelkit.quant.evaluation.sweep",
    "QuantConfig": "accelkit.quant.config",
    "load_config": "accelkit.quant.config",
    "QuantReport": "accelkit.quant.method.convert",
    "quantize": "accelkit.quant.method.convert",
    "quantize_with_report": "accelkit.quant.method.convert",
    "LayerSpec": "accelkit.quant.method.layers",
    "QuantLinear": "accelkit.quant.method.layers",
    "load_quantized": "accelkit.quant.method.storage",
    "save_quantized": "accelkit.quant.method.storage",
    "model_factory": "accelkit.quant.models",
}
if TYPE_CHECKING:  # the same names, for help(), dir(), pyright and editors
    from accelkit.quant.api import ApplyResult, EvalResult, apply, evaluate
    from accelkit.quant.config import QuantConfig, load_config
    from accelkit.quant.evaluation.sweep import EvalRow
    from accelkit.quant.method.convert import QuantReport, quantize, quantize_with_report
    from accelkit.quant.method.layers import LayerSpec, QuantLinear
    from accelkit.quant.method.storage import load_quantized, save_quantized
    from accelkit.quant.models import model_factory

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
