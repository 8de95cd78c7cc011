"""`accelkit images`: exact JAX image preprocessing, a real offline embedding model, a Milvus
vector store and an HTTP service for image search.

Heavy libraries (jax, onnxruntime, torch, pymilvus, fastapi) load on first use, so importing this package is cheap.
"""

from __future__ import annotations

from accelkit.runtime.output import lazy_exports

_EXPORTS = {
    "JAXImagePreprocessor": "accelkit.images.preprocess",
    "HostImagePreprocessor": "accelkit.images.preprocess",
    "make_preprocessor": "accelkit.images.preprocess",
    "PreprocessConfig": "accelkit.images.config",
    "ModelConfig": "accelkit.images.config",
    "ServiceConfig": "accelkit.images.config",
    "ImageEmbeddingPipeline": "accelkit.images.pipeline",
    "EmbeddingResult": "accelkit.images.pipeline",
    "InsertResult": "accelkit.images.index",
    "ImageIndex": "accelkit.images.index",
    "LocalIndex": "accelkit.images.index",
    "ImageInput": "accelkit.images.index",
    "RemoteIndex": "accelkit.images.remote",
    "StoreConfig": "accelkit.images.config",
    "ServerConfig": "accelkit.images.config",
    "VectorStore": "accelkit.images.store",
    "Hit": "accelkit.images.store",
    "IndexSpec": "accelkit.images.store",
    "ImageDecodeError": "accelkit.images.decode",
    "decode_image": "accelkit.images.decode",
}

__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
