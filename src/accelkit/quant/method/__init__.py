"""How a model is quantized: the quantizers, the transforms, calibration, conversion to
`QuantLinear` layers, the integer kernels they run on and the files they are stored in."""
