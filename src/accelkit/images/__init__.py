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

if TYPE_CHECKING:  # the public names, listed once (runtime/exports.py reads them)
    from accelkit.images.api import (
        create_collection as create_collection,
        delete_collection as delete_collection,
        describe_collection as describe_collection,
        embed as embed,
        flush_collection as flush_collection,
        health as health,
        import_model as import_model,
        index_collection as index_collection,
        insert as insert,
        list_collections as list_collections,
        load_settings as load_settings,
        open_index as open_index,
        search as search,
        serve as serve,
        set_model as set_model,
    )
    from accelkit.images.compat import ImageEmbeddingPipeline as ImageEmbeddingPipeline
    from accelkit.images.config import (
        ModelConfig as ModelConfig,
        PreprocessConfig as PreprocessConfig,
        ServerConfig as ServerConfig,
        ServiceConfig as ServiceConfig,
        StoreConfig as StoreConfig,
    )
    from accelkit.images.embedding.decode import (
        ImageDecodeError as ImageDecodeError,
        decode_image as decode_image,
    )
    from accelkit.images.embedding.pipeline import (
        EmbeddingPipeline as EmbeddingPipeline,
        EmbeddingResult as EmbeddingResult,
    )
    from accelkit.images.embedding.preprocess import (
        HostImagePreprocessor as HostImagePreprocessor,
        JAXImagePreprocessor as JAXImagePreprocessor,
        make_preprocessor as make_preprocessor,
    )
    from accelkit.images.index.base import (
        ImageIndex as ImageIndex,
        ImageInput as ImageInput,
        InsertResult as InsertResult,
        Steering as Steering,
    )
    from accelkit.images.index.local import LocalIndex as LocalIndex
    from accelkit.images.index.remote import RemoteIndex as RemoteIndex
    from accelkit.images.results import (
        EmbedReport as EmbedReport,
        HealthReport as HealthReport,
        ImportReport as ImportReport,
        InsertReport as InsertReport,
        SearchReport as SearchReport,
    )
    from accelkit.images.store import Hit as Hit, IndexSpec as IndexSpec, VectorStore as VectorStore

__getattr__, __dir__, __all__ = lazy_exports(__name__)
