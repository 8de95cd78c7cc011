"""`ServiceState`: what the routes share — the config, the model (`EmbeddingPipeline`) behind
the dynamic batcher, the store, the `LocalIndex` over them, admission, the decode budget and the
metrics — and the loading of a request's images within its limits."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any

from fastapi import Depends, Request  # module level: FastAPI resolves annotations here

from accelkit.errors import DataError, InputError
from accelkit.images.embedding.batching import AdmissionLimiter, DynamicBatcher
from accelkit.images.embedding.decode import check_pixels, header_cost
from accelkit.images.embedding.models import PROBE_TEXT
from accelkit.images.embedding.pipeline import EmbeddingPipeline
from accelkit.images.index.local import LocalIndex, open_local_index
from accelkit.images.service import forms, guards
from accelkit.images.service.errors import ServiceError
from accelkit.images.service.sources import Source, load
from accelkit.images.settings.config import ServiceConfig
from accelkit.images.store import VectorStore

log = logging.getLogger(__name__)
FETCH_CONCURRENCY = 4  # sources of one request loaded at a time (URLs, server-side paths)


class ServiceState:
    """What the routes share: config, the model (`pipeline`), the store, the index over them,
    batcher, admission, decode budget, metrics."""

    def __init__(self, config: ServiceConfig, pipeline: Any = None):
        server = config.server
        self.config = config
        self.limits = server.request_limits()  # the caps on a request's lists
        self.pipeline = pipeline
        self.owns_pipeline = pipeline is None
        self.metrics = guards.Metrics()
        self.limiter = AdmissionLimiter(server.max_concurrency, server.max_queue)
        self.budget = guards.DecodeBudget(
            server.max_decode_bytes_in_flight,
            server.max_decode_bytes_per_request,
            server.decode_wait_s,
            server.retry_after_s,
        )
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accelkit-batch")
        self.batcher: DynamicBatcher | None = None
        self.store: Any = None
        self._index: LocalIndex | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.started = time.time()

    @property
    def index(self) -> LocalIndex:
        """The index the routes call; it exists once `start` has run."""
        if self._index is None:
            raise RuntimeError("the service has not started")
        return self._index

    async def read(self, request, model):
        """The request's body read once (JSON or multipart) and validated into `model` (a schema
        model, within this service's caps), and its uploaded files."""
        fields, uploads = await forms.read_body(request, self.config.server.max_items_per_request)
        return forms.validate(model, fields, self.limits), uploads

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        if self.pipeline is None:
            self.pipeline = await asyncio.to_thread(EmbeddingPipeline, self.config)
        if self.config.model.has_text:  # a broken text tower fails the start, not each query
            await asyncio.to_thread(self.pipeline.embed_texts, [PROBE_TEXT])
        # open the store and load its collections now: fail at start, and no first request waits
        self.store = await asyncio.to_thread(VectorStore, self.config.store)
        await asyncio.to_thread(self.store.load_all)

        def on_batch(images: int, jobs: int) -> None:
            self.metrics.batch_images.observe(images)
            self.metrics.batch_requests.observe(jobs)

        self.batcher = DynamicBatcher(
            self.pipeline.embed,
            self.executor,
            self.config.server.batch_max_size,
            self.config.server.batch_max_wait_ms / 1000.0,
            on_batch,
        )
        self.batcher.start()
        self._index = open_local_index(
            self.config,
            store=self.store,
            embed=self.embed_blocking,
            embed_text=self.pipeline.embed_texts,  # one text at a time: no batcher needed
        )

    async def stop(self) -> None:
        if self.batcher is not None:
            await self.batcher.close()
        self.executor.shutdown(wait=True)
        if self.pipeline is not None and self.owns_pipeline:
            await asyncio.to_thread(self.pipeline.close)
        if self.store is not None:
            await asyncio.to_thread(self.store.close)

    def embed_blocking(self, items: list[Any]):
        """The index's embed function: runs in a worker thread, waits for the batcher on the loop."""
        assert self.batcher is not None and self.loop is not None, "the service has not started"
        results = asyncio.run_coroutine_threadsafe(self.batcher.embed(items), self.loop).result()
        ok = sum(r.error is None for r in results)
        self.metrics.images.inc(ok)
        self.metrics.failed_images.inc(len(results) - ok)
        return results

    async def run(self, fn: Callable, *args, **kwargs):
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def _load_all(self, sources: list[Source], labels: list[str]) -> list:
        """Each source's (bytes, name) or its error, loaded FETCH_CONCURRENCY at a time within one
        deadline for the whole request (`server.fetch_timeout_s`): 256 slow URLs or paths on a
        hanging file system once held a request for minutes, one deadline after another. A source
        refused for the whole request (403) is raised."""
        server = self.config.server
        gate = asyncio.Semaphore(FETCH_CONCURRENCY)

        async def one(i: int):
            async with gate:
                return await load(sources[i], server, labels[i])

        tasks = [asyncio.create_task(one(i)) for i in range(len(sources))]
        if not tasks:
            return []
        _, pending = await asyncio.wait(tasks, timeout=server.fetch_timeout_s)
        for task in pending:
            task.cancel()
        outcomes = []
        for i, task in enumerate(tasks):  # every outcome read first: none is left unretrieved
            if task in pending:
                outcomes.append(
                    DataError(
                        f"{labels[i]}: not loaded within server.fetch_timeout_s "
                        f"({server.fetch_timeout_s:g} s) for the request's images"
                    )
                )
            else:
                error = task.exception()
                outcomes.append(error if error is not None else task.result())
        for outcome in outcomes:  # refused for the whole request (403), or a failure of ours
            if isinstance(outcome, BaseException) and (
                isinstance(outcome, ServiceError)
                or not isinstance(outcome, (DataError, InputError))
            ):
                raise outcome
        return outcomes

    async def load_images(
        self, sources: list[Source], where: str
    ) -> tuple[list[tuple[int, bytes, str | None]], dict[int, str], int]:
        """(position, bytes, name) of every source that loaded and fits the per-image decode
        budget, failures by position, and the decode bytes the loaded ones need together."""
        per_image = self.config.server.max_decode_bytes_per_image
        loaded, failures, total = [], {}, 0
        labels = [
            f"{where}[{i}]" if len(sources) > 1 or where == "items" else where
            for i in range(len(sources))
        ]
        fetched = await self._load_all(sources, labels)
        for i, outcome in enumerate(fetched):
            label = labels[i]
            if isinstance(outcome, BaseException):
                failures[i] = str(outcome)
                continue
            data, name = outcome
            width, height, cost = header_cost(data)
            if width and height:  # the pixel limit first: a bomb is named as one
                try:
                    check_pixels(label, width, height, self.config.preprocess.max_pixels)
                except DataError as exc:
                    failures[i] = str(exc)
                    continue
            if cost > per_image:
                failures[i] = (
                    f"{label}: decoding it needs {cost / 2**20:,.0f} MiB, over the limit of "
                    f"{per_image / 2**20:,.0f} MiB per image; send a smaller image"
                )
                continue
            loaded.append((i, data, name))
            total += cost
        return loaded, failures, total


async def service_state(request: Request) -> ServiceState:
    """The app's one `ServiceState`, for the routes' dependency `State`."""
    return request.app.state.service


State = Annotated[ServiceState, Depends(service_state)]  # a route's `state: State` parameter
