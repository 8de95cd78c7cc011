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

if TYPE_CHECKING:  # the public names, listed once (runtime/exports.py reads them)
    from accelkit.quant.api import (
        ApplyResult as ApplyResult,
    )
    from accelkit.quant.api import (
        EvalResult as EvalResult,
    )
    from accelkit.quant.api import (
        apply as apply,
    )
    from accelkit.quant.api import (
        evaluate as evaluate,
    )
    from accelkit.quant.config import QuantConfig as QuantConfig
    from accelkit.quant.config import load_config as load_config
    from accelkit.quant.evaluation.sweep import EvalRow as EvalRow
    from accelkit.quant.method.convert import (
        QuantReport as QuantReport,
    )
    from accelkit.quant.method.convert import (
        quantize as quantize,
    )
    from accelkit.quant.method.convert import (
        quantize_with_report as quantize_with_report,
    )
    from accelkit.quant.method.layers import LayerSpec as LayerSpec
    from accelkit.quant.method.layers import QuantLinear as QuantLinear
    from accelkit.quant.method.storage import (
        load_quantized as load_quantized,
    )
    from accelkit.quant.method.storage import (
        save_quantized as save_quantized,
    )
    from accelkit.quant.models import model_factory as model_factory

__getattr__, __dir__, __all__ = lazy_exports(__name__)
