"""`accelkit images`: exact JAX image preprocessing, a real offline embedding model, a Milvus
vector store and an HTTP service for image search.

The operations a user runs are plain functions (`accelkit.images.api`), the same ones the
command line calls: `embed`, `insert`, `search`, `serve`, `health`, and the collection admin
`list_collections`, `create_collection`, `describe_collection`, `flush_collection`,
`index_collection`, `set_model`, `delete_collection`; `import_model` makes a Hugging Face CLIP or
SigLIP folder into what text search loads; `open_index` gives the application layer itself
(`ImageIndex`: local, or a running service). Heavy libraries (jax, onnxruntime, torch, pymilvus,
fastapi) load on first use, so importing this package is cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelkit.runtime.exports import lazy_exports

_MODULES = {
    "accelkit.images.api": [
        "create_collection",
        "delete_collection",
        "describe_collection",
        "embed",
        "flush_collection",
        "health",
        "import_model",
        "index_collection",
        "insert",
        "list_collections",
        "load_settings",
        "open_index",
        "search",
        "serve",
        "set_model",
    ],
    "accelkit.images.results": [
        "EmbedReport",
        "HealthReport",
        "ImportReport",
        "InsertReport",
        "SearchReport",
    ],
    "accelkit.images.embedding.preprocess": [
        "HostImagePreprocessor",
        "JAXImagePreprocessor",
        "make_preprocessor",
    ],
    "accelkit.images.config": [
        "ModelConfig",
        "PreprocessConfig",
        "ServerConfig",
        "ServiceConfig",
        "StoreConfig",
    ],
    "accelkit.images.embedding.pipeline": ["EmbeddingPipeline", "EmbeddingResult"],
    "accelkit.images.compat": ["ImageEmbeddingPipeline"],
    "accelkit.images.index.base": ["ImageIndex", "ImageInput", "InsertResult", "Steering"],
    "accelkit.images.index.local": ["LocalIndex"],
    "accelkit.images.index.remote": ["RemoteIndex"],
    "accelkit.images.store": ["Hit", "IndexSpec", "VectorStore"],
    "accelkit.images.embedding.decode": ["ImageDecodeError", "decode_image"],
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}
if TYPE_CHECKING:  # the same names, for help(), dir(), pyright and editors
    from accelkit.images.api import (
        create_collection,
        delete_collection,
        describe_collection,
        embed,
        flush_collection,
        health,
        import_model,
        index_collection,
        insert,
        list_collections,
        load_settings,
        open_index,
        search,
        serve,
        set_model,
    )
    from accelkit.images.compat import ImageEmbeddingPipeline
    from accelkit.images.config import (
        ModelConfig,
        PreprocessConfig,
        ServerConfig,
        ServiceConfig,
        StoreConfig,
    )
    from accelkit.images.embedding.decode import ImageDecodeError, decode_image
    from accelkit.images.embedding.pipeline import EmbeddingPipeline, EmbeddingResult
    from accelkit.images.embedding.preprocess import (
        HostImagePreprocessor,
        JAXImagePreprocessor,
        make_preprocessor,
    )
    from accelkit.images.index.base import ImageIndex, ImageInput, InsertResult, Steering
    from accelkit.images.index.local import LocalIndex
    from accelkit.images.index.remote import RemoteIndex
    from accelkit.images.results import (
        EmbedReport,
        HealthReport,
        ImportReport,
        InsertReport,
        SearchReport,
    )
    from accelkit.images.store import Hit, IndexSpec, VectorStore

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
