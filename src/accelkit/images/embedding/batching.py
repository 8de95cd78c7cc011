"""One image's outcome (`ItemResult`, `split_result`), shared by every embedding path, and the
dynamic batching and admission control of the HTTP service.

`ItemResult` is what an embedder hands the index for each image, a vector or the reason it failed:
the local index (`index/local.py`), the pipeline (`pipeline.py`), the Ray actors (`ray.py`) and
the service's batcher all speak it.

`DynamicBatcher` merges the images of concurrent requests into model batches: the first waiting
job opens a batch, which closes when it holds `max_batch` images or `max_wait_s` has passed. One
worker runs the batches (the model already uses every core), so a burst of single-image searches
costs a few model calls instead of one each. `split_result` (pure) hands each job its rows back.

`AdmissionLimiter` bounds the work in the service: `max_active` requests run, `max_queue` more
wait, and anything beyond is refused at once (HTTP 429 + Retry-After) instead of queueing without
bound and timing out for everyone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ItemResult:
    """One image's outcome: a vector, or the reason it failed."""

    vector: np.ndarray | None
    error: str | None = None

    @property
    def embedding(self) -> np.ndarray:
        """The vector of an image that did not fail."""
        if self.vector is None:
            raise ValueError(f"this image has no vector: {self.error}")
        return self.vector


def split_result(
    embeddings: np.ndarray, indices: Sequence[int], failures: dict[int, str], sizes: Sequence[int]
) -> list[list[ItemResult]]:
    """Per job (of `sizes` consecutive items), per item: its vector or its failure reason.

    `embeddings[k]` belongs to merged input `indices[k]`; `failures` maps merged positions to reasons.
    """
    row_of = {index: row for row, index in enumerate(indices)}
    out, start = [], 0
    for size in sizes:
        job = []
        for position in range(start, start + size):
            if position in row_of:
                job.append(ItemResult(embeddings[row_of[position]]))
            else:
                job.append(ItemResult(None, failures.get(position, "failed")))
        out.append(job)
        start += size
    return out


@dataclass
class _Job:
    items: list[Any]
    future: asyncio.Future = field(repr=False)


class BatcherClosed(RuntimeError):
    """The service is shutting down and takes no new embedding work."""


class DynamicBatcher:
    """`await batcher.embed(items)` -> one `ItemResult` per item, computed in merged batches.

    `embed_fn(items)` must return an object with `embeddings`, `indices` and `failures` (the
    pipeline's `EmbeddingResult`); it runs on `executor`, never on the event loop.
    """

    def __init__(
        self,
        embed_fn: Callable[[list[Any]], Any],
        executor: Executor,
        max_batch: int = 32,
        max_wait_s: float = 0.005,
        on_batch: Callable[[int, int], None] | None = None,
    ):
        self.embed_fn = embed_fn
        self.executor = executor
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self.on_batch = on_batch  # (images, jobs) per model batch, for metrics
        self._queue: asyncio.Queue[_Job | None] = asyncio.Queue()
        self._worker: asyncio.Task | None = None
        self._closing = False

    def start(self) -> None:
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(
                self._run(), name="accelkit-batcher"
            )

    async def embed(self, items: list[Any]) -> list[ItemResult]:
        if self._closing:
            raise BatcherClosed("the service is shutting down")
        if not items:
            return []
        self.start()
        job = _Job(list(items), asyncio.get_running_loop().create_future())
        await self._queue.put(job)
        return await job.future

    async def close(self) -> None:
        """Finish every job already queued, then stop."""
        self._closing = True
        if self._worker is not None:
            await self._queue.put(None)
            await self._worker
            self._worker = None

    async def _collect(self, first: _Job) -> tuple[list[_Job], _Job | None, bool]:
        """Jobs for one batch, a job carried over to the next, and whether the stop marker came."""
        jobs, count = [first], len(first.items)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait_s
        while count < self.max_batch:
            remaining = deadline - loop.time()
            try:
                job = (
                    self._queue.get_nowait()
                    if remaining <= 0
                    else await asyncio.wait_for(self._queue.get(), remaining)
                )
            except (asyncio.QueueEmpty, TimeoutError):
                break
            if job is None:
                return jobs, None, True
            if count + len(job.items) > self.max_batch:
                return jobs, job, False  # would overfill: it opens the next batch
            jobs.append(job)
            count += len(job.items)
        return jobs, None, False

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        carried: _Job | None = None
        stopping = False
        while True:
            first = (
                carried
                if carried is not None
                else (None if stopping and self._queue.empty() else await self._queue.get())
            )
            carried = None
            if first is None:
                if self._queue.empty():
                    return
                stopping = True
                continue
            jobs, carried, stop = await self._collect(first)
            stopping = stopping or stop
            merged = [item for job in jobs for item in job.items]
            try:
                result = await loop.run_in_executor(self.executor, self.embed_fn, merged)
                parts = split_result(
                    result.embeddings, result.indices, result.failures, [len(j.items) for j in jobs]
                )
                if self.on_batch:
                    self.on_batch(len(merged), len(jobs))
                for job, part in zip(jobs, parts, strict=True):
                    if not job.future.done():
                        job.future.set_result(part)
            except Exception as exc:  # the model failed: every job of this batch learns why
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(exc)
            if stopping and carried is None and self._queue.empty():
                return


class Overloaded(Exception):
    """More requests than `max_active + max_queue` are in the service."""


class AdmissionLimiter:
    """At most `max_active` holders at once, `max_queue` waiting; more raise `Overloaded`."""

    def __init__(self, max_active: int, max_queue: int):
        self.max_active = max_active
        self.max_queue = max_queue
        self._semaphore = asyncio.Semaphore(max_active)
        self.admitted = 0  # running + waiting

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self.admitted >= self.max_active + self.max_queue:
            raise Overloaded(f"{self.admitted} requests are in progress or waiting")
        self.admitted += 1
        try:
            async with self._semaphore:
                yield
        finally:
            self.admitted -= 1
