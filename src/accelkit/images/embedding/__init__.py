"""Images in, vectors out: decoding, the exact resampling and preprocessing (JAX or host), the
embedding models and the pipeline that overlaps them, and the micro-batcher they share."""
