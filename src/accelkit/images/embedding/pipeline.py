"""`EmbeddingPipeline`: decode → preprocess → inference, overlapped, with per-item results.

Three stages run at once: decoding in the preprocessor's thread pool, resizing on the JAX device
(asynchronous dispatch), and inference in one worker thread (ONNX Runtime and tritonclient release
the GIL). A bad image fails only itself: its position and reason land in `EmbeddingResult.failures`.
Embedding only: storing and searching are the index's (`accelkit.images.index.base`), and
EmbeddingTrident's all-in-one `ImageEmbeddingPipeline` is a facade above both
(`accelkit.images.compat`).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from accelkit.errors import DataError
from accelkit.images.embedding.batching import split_result
from accelkit.images.embedding.decode import describe_input
from accelkit.images.embedding.models import (
    l2_normalize,
    make_backend,
    make_text_encoder,
    no_text_tower,
)
from accelkit.images.embedding.preprocess import make_preprocessor
from accelkit.images.settings.config import ServiceConfig

__all__ = ["EmbeddingPipeline", "EmbeddingResult"]

log = logging.getLogger(__name__)


@dataclass
class EmbeddingResult:
    """`embeddings[i]` (L2-normalized unless the config says otherwise) belongs to input
    `indices[i]`; `failures` maps input positions to a one-line reason. Rows are in input order."""

    embeddings: np.ndarray
    indices: list[int]
    failures: dict[int, str] = field(default_factory=dict)

    def dense(self, total: int) -> np.ndarray:
        """[total, D] with NaN rows where an input failed."""
        out = np.full((total, self.embeddings.shape[1]), np.nan, np.float32)
        out[self.indices] = self.embeddings
        return out


class EmbeddingPipeline:
    """Embed images with the configured preprocessing and model backend.

    ```python
    with EmbeddingPipeline(ServiceConfig.from_yaml("configs/images.yaml")) as pipeline:
        vectors = pipeline.embed_images(["a.jpg", "b.png"])   # [2, 1280], L2-normalized
    ```
    """

    def __init__(
        self,
        config: ServiceConfig | None = None,
        *,
        preprocessor: Any = None,
        backend: Any = None,
    ):
        self.config = config or ServiceConfig()
        self.preprocessor = preprocessor or make_preprocessor(config=self.config.preprocess)
        self.backend = backend or make_backend(self.config.model)
        self._inference = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelkit-infer")
        self._text: Any = None  # the text tower of a two-tower model, loaded on first use
        self._text_lock = threading.Lock()
        self._closed = False

    @property
    def device(self):
        return self.preprocessor.device

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._inference.shutdown(wait=True, cancel_futures=True)
        self.preprocessor.close()
        self.backend.close()
        if self._text is not None:
            self._text.close()

    def __enter__(self) -> EmbeddingPipeline:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _infer(self, positions: list[int], array: Any) -> tuple[list[int], np.ndarray]:
        batch = np.asarray(array, np.float32)[
            : len(positions)
        ]  # waits for the device; drops padding rows
        vectors = self.backend.embed(batch)
        if self.config.model.normalize:
            vectors = l2_normalize(vectors)
        return positions, vectors.astype(np.float32, copy=False)

    def embed(
        self, inputs: Iterable[Any], progress: Callable[[int], None] | None = None
    ) -> EmbeddingResult:
        """Per-item embeddings; `progress(n)` is called with the number of inputs finished so far."""
        if self._closed:
            raise RuntimeError("this pipeline is closed")

        items = list(inputs)
        failures = {}
        in_flight: deque[Future] = deque()
        positions: list[int] = []
        parts: list[np.ndarray] = []
        reported = 0

        def collect(future: Future) -> None:
            nonlocal reported
            done_positions, vectors = future.result()
            positions.extend(done_positions)
            parts.append(vectors)
            if progress:
                finished = len(positions) + len(failures)
                progress(finished - reported)
                reported = finished

        for group_positions, array in self.preprocessor.iter_groups(items, failures):
            in_flight.append(self._inference.submit(self._infer, group_positions, array))
            while len(in_flight) > 2:  # bound memory: at most two batches wait for the model
                collect(in_flight.popleft())
        while in_flight:
            collect(in_flight.popleft())
        if progress and len(positions) + len(failures) > reported:
            progress(len(positions) + len(failures) - reported)
        reasons = {
            i: str(exc) if str(exc) else f"{describe_input(items[i])}: failed"
            for i, exc in failures.items()
        }
        if not parts:
            dim = self.config.model.embedding_dim
            return EmbeddingResult(
                np.zeros((0, dim), np.float32), [], dict(sorted(reasons.items()))
            )
        order = np.argsort(np.asarray(positions), kind="stable")
        return EmbeddingResult(
            np.concatenate(parts)[order],
            [positions[i] for i in order],
            dict(sorted(reasons.items())),
        )

    def embed_images(
        self, inputs: Sequence[Any], errors: Literal["raise", "nan"] = "raise"
    ) -> np.ndarray:
        """[N, D] embeddings in input order. A bad input raises `DataError` naming every failure
        (errors="raise") or leaves a NaN row (errors="nan")."""
        items = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        result = self.embed(items)
        if result.failures and errors == "raise":
            lines = "; ".join(f"#{i}: {reason}" for i, reason in result.failures.items())
            raise DataError(f"{len(result.failures)} of {len(items)} images failed: {lines}")
        return result.dense(len(items))

    def embed_items(self, items: list[Any]) -> list[Any]:
        """One `ItemResult` (a vector, or the reason it failed) per input, in order."""
        result = self.embed(items)
        return split_result(result.embeddings, result.indices, result.failures, [len(items)])[0]

    @property
    def has_text(self) -> bool:
        """Whether the model has a text tower (text queries)."""
        return self.config.model.has_text

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """[N, D] embeddings of texts by the model's text tower (L2-normalized unless the
        config says otherwise), comparable with its image embeddings."""
        if self._closed:
            raise RuntimeError("this pipeline is closed")
        with self._text_lock:
            if self._text is None:
                self._text = make_text_encoder(self.config.model)
                if self._text is None:
                    raise no_text_tower(self.config.model.name)
        vectors = self._text.embed(list(texts))
        if self.config.model.normalize:
            vectors = l2_normalize(vectors)
        return vectors.astype(np.float32, copy=False)
