"""A Hugging Face `CLIPModel` or `SiglipModel` folder made into what accelkit's text search loads:
`folder` reads what the folder says about itself (the processor's and the model's own rules),
`export` writes the ONNX pair, the tokenizer and the YAML block, `verify` compares them with the
framework's own outputs, and `convert` does the three into a temporary folder renamed at the end."""
