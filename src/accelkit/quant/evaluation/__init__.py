"""How a quantized model is judged: the sweep over settings, fidelity and speed against FP32, the
accuracy target, the recommendation, the report, and the text it all runs on."""
