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
    )
    from accelkit.images.api import (
        delete_collection as delete_collection,
    )
    from accelkit.images.api import (
        describe_collection as describe_collection,
    )
    from accelkit.images.api import (
        embed as embed,
    )
    from accelkit.images.api import (
        flush_collection as flush_collection,
    )
    from accelkit.images.api import (
        health as health,
    )
    from accelkit.images.api import (
        import_model as import_model,
    )
    from accelkit.images.api import (
        index_collection as index_collection,
    )
    from accelkit.images.api import (
        insert as insert,
    )
    from accelkit.images.api import (
        list_collections as list_collections,
    )
    from accelkit.images.api import (
        load_settings as load_settings,
    )
    from accelkit.images.api import (
        open_index as open_index,
    )
    from accelkit.images.api import (
        search as search,
    )
    from accelkit.images.api import (
        serve as serve,
    )
    from accelkit.images.api import (
        set_model as set_model,
    )
    from accelkit.images.compat import ImageEmbeddingPipeline as ImageEmbeddingPipeline
    from accelkit.images.embedding.decode import (
        ImageDecodeError as ImageDecodeError,
    )
    from accelkit.images.embedding.decode import (
        decode_image as decode_image,
    )
    from accelkit.images.embedding.pipeline import (
        EmbeddingPipeline as EmbeddingPipeline,
    )
    from accelkit.images.embedding.pipeline import (
        EmbeddingResult as EmbeddingResult,
    )
    from accelkit.images.embedding.preprocess import (
        HostImagePreprocessor as HostImagePreprocessor,
    )
    from accelkit.images.embedding.preprocess import (
        JAXImagePreprocessor as JAXImagePreprocessor,
    )
    from accelkit.images.embedding.preprocess import (
        make_preprocessor as make_preprocessor,
    )
    from accelkit.images.index.base import (
        ImageIndex as ImageIndex,
    )
    from accelkit.images.index.base import (
        ImageInput as ImageInput,
    )
    from accelkit.images.index.base import (
        InsertResult as InsertResult,
    )
    from accelkit.images.index.base import (
        Steering as Steering,
    )
    from accelkit.images.index.local import LocalIndex as LocalIndex
    from accelkit.images.index.remote import RemoteIndex as RemoteIndex
    from accelkit.images.operations.results import (
        EmbedReport as EmbedReport,
    )
    from accelkit.images.operations.results import (
        HealthReport as HealthReport,
    )
    from accelkit.images.operations.results import (
        ImportReport as ImportReport,
    )
    from accelkit.images.operations.results import (
        InsertReport as InsertReport,
    )
    from accelkit.images.operations.results import (
        SearchReport as SearchReport,
    )
    from accelkit.images.settings.config import (
        ModelConfig as ModelConfig,
    )
    from accelkit.images.settings.config import (
        PreprocessConfig as PreprocessConfig,
    )
    from accelkit.images.settings.config import (
        ServerConfig as ServerConfig,
    )
    from accelkit.images.settings.config import (
        ServiceConfig as ServiceConfig,
    )
    from accelkit.images.settings.config import (
        StoreConfig as StoreConfig,
    )
    from accelkit.images.store import Hit as Hit
    from accelkit.images.store import IndexSpec as IndexSpec
    from accelkit.images.store import VectorStore as VectorStore

__getattr__, __dir__, __all__ = lazy_exports(__name__)
