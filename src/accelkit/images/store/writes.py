"""Writes: upserts in batches (threads on a server), deletes by id in bounded expressions, and
deletes by filter."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from accelkit.errors import DataError, InputError
from accelkit.images.settings.fields import scalar_values
from accelkit.images.settings.schema import GRAMMAR_ONLY, check_filter, check_ids, check_metadata
from accelkit.images.store.client import StoreClient
from accelkit.images.store.errors import FilterError, StoreError, StoreTimeoutError, _unreachable
from accelkit.images.store.lite import check_lite_space, row_bytes
from accelkit.images.store.records import (
    ID_BATCH,
    ID_FIELD,
    METADATA_FIELD,
    VECTOR_FIELD,
    ids_filter,
)


class ItemWrites(StoreClient):
    """Upsert and delete items."""

    def upsert(
        self,
        name: str,
        ids: Sequence[str],
        vectors: np.ndarray,
        metadata: Sequence[Mapping[str, Any] | None] | None = None,
    ) -> list[str]:
        """Store (or replace) items; returns the ids. Acknowledged means stored: the call returns
        after Milvus has accepted every batch."""
        ids = check_ids(list(ids))
        vectors = np.asarray(vectors, np.float32)
        if vectors.ndim != 2 or len(vectors) != len(ids):
            raise DataError(
                f"got {len(ids)} ids but vectors of shape {vectors.shape}; need one row per id"
            )
        if not np.isfinite(vectors).all():
            raise DataError("vectors contain NaN or Inf")
        metadata = list(metadata) if metadata is not None else [None] * len(ids)
        if len(metadata) != len(ids):
            raise DataError(f"got {len(ids)} ids but {len(metadata)} metadata entries")
        metadata = [
            check_metadata(dict(m) if isinstance(m, Mapping) else m, f"metadata #{i}")
            for i, m in enumerate(metadata)
        ]
        if not ids:
            return []
        used = (self.describe_dim(name), self.declared_fields(name))
        try:
            self._store_items(name, ids, vectors, metadata, *used)
        except StoreTimeoutError:
            raise
        except (StoreError, DataError):
            # refused, here or by the store: if another client dropped the collection and made
            # it anew (other declared fields, another dimension), the rows are made again for
            # what it is now, once
            if not self._schema_changed(name, used):
                raise
            now = (self.describe_dim(name), self.declared_fields(name))
            self._store_items(name, ids, vectors, metadata, *now)
        with self._lock:
            self._deleted.discard(name)
        return ids

    def _store_items(
        self,
        name: str,
        ids: list[str],
        vectors: np.ndarray,
        metadata: list[Any],
        dim: int,
        declared: dict[str, str],
    ) -> None:
        """Rows for the collection of dimension `dim` declaring `declared`, sent in batches."""
        if vectors.shape[1] != dim:
            raise DataError(f"collection {name!r} holds {dim}-d vectors; got {vectors.shape[1]}-d")
        last = {item_id: i for i, item_id in enumerate(ids)}  # duplicate ids: the last one wins
        order = sorted(last.values())
        try:  # every item checked before any is sent: nothing half-written
            scalars = [scalar_values(declared, metadata[i] or {}, f"metadata #{i}") for i in order]
        except ValueError as exc:
            raise DataError(str(exc)) from None
        rows = [
            {
                ID_FIELD: ids[i],
                VECTOR_FIELD: vectors[i],  # numpy rows: pymilvus packs them ~15 % faster than lists
                METADATA_FIELD: metadata[i],
                **scalar,
            }
            for i, scalar in zip(order, scalars, strict=True)
        ]
        if not self.is_server:  # Milvus Lite would take rows it cannot keep (check_lite_space)
            needed = sum(
                row_bytes(dim, ids[i], len(json.dumps(metadata[i] or {}, default=str)))
                for i in order
            )
            # on Lite 3 with room for the flush it may make of what is waiting, too, and for the
            # index builds and merges that follow it
            check_lite_space(
                self.config.uri,
                needed + 2 * self._pending(name) + self._upkeep(name),
                f"inserting {len(order)} items into {name!r}",
            )
            self._wrote(name, needed // 2)  # first: a batch that fails midway may be stored
        step = self.config.insert_batch_size
        batches = [rows[start : start + step] for start in range(0, len(rows), step)]
        threads = min(self.config.insert_threads if self.is_server else 1, len(batches))
        if (
            threads > 1
        ):  # a server ingests batches in parallel (2 threads: ~6.7k vs ~6.0k rows/s here)
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(threads, thread_name_prefix="accelkit-upsert") as pool:
                futures = [
                    pool.submit(
                        self._call, f"inserting into {name!r}", self._milvus.upsert, name, b
                    )
                    for b in batches
                ]
                for future in futures:
                    future.result()
        else:
            for batch in batches:
                self._call(f"inserting into {name!r}", self._milvus.upsert, name, batch)

    def delete(self, name: str, ids: Sequence[str]) -> int:
        """Delete items by id, `ID_BATCH` at a time (each batch counted, then deleted); returns
        how many of them existed."""
        ids = list(dict.fromkeys(check_ids(list(ids))))
        self.describe_dim(name)  # one of ours (kept after the first call)
        deleted = 0
        for start in range(0, len(ids), ID_BATCH):
            expr = ids_filter(ids[start : start + ID_BATCH])
            rows = self._with_load(
                name,
                f"counting in {name!r}",
                self._milvus.query,
                name,
                filter=expr,
                output_fields=["count(*)"],
                consistency_level="Strong",
            )
            with self._lock:
                self._deleted.add(name)
            self._with_load(name, f"deleting from {name!r}", self._milvus.delete, name, filter=expr)
            self._wrote(name)
            deleted += int(rows[0]["count(*)"])
        return deleted

    def delete_matching(self, name: str, filter_expr: str) -> int:
        """Delete every item matching a filter expression; returns how many matched."""
        checked = check_filter(filter_expr, max_values=GRAMMAR_ONLY)
        if not checked:
            raise InputError("delete by filter needs a non-empty filter expression")
        filter_expr = checked
        self.describe_dim(name)  # one of ours (kept after the first call)
        engine_filter = self._engine_filter(name, filter_expr)  # refused before anything is sent
        try:
            rows = self._with_load(
                name,
                f"counting matches in {name!r}",
                self._milvus.query,
                name,
                filter=engine_filter,
                output_fields=["count(*)"],
                consistency_level="Strong",
            )
            with self._lock:
                self._deleted.add(name)
            self._with_load(
                name,
                f"deleting from {name!r}",
                self._milvus.delete,
                name,
                filter=engine_filter,
            )
            self._wrote(name)
        except StoreTimeoutError:
            raise
        except StoreError as exc:
            if _unreachable(exc):
                raise
            raise FilterError(filter_expr, exc) from exc
        return int(rows[0]["count(*)"])
