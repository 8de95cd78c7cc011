"""Reads: the top-k nearest items to query vectors (optionally among those a filter matches),
and items by id."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from accelkit.errors import DataError, InputError
from accelkit.images.settings.schema import GRAMMAR_ONLY, check_filter, check_ids
from accelkit.images.store.client import StoreClient
from accelkit.images.store.errors import FilterError, StoreError, StoreTimeoutError, _unreachable
from accelkit.images.store.records import (
    ID_BATCH,
    ID_FIELD,
    METADATA_FIELD,
    VECTOR_FIELD,
    Hit,
    ids_filter,
    literal,
)


class ItemSearch(StoreClient):
    """Search and get items."""

    def search(
        self,
        name: str,
        queries: np.ndarray,
        topk: int = 10,
        filter_expr: str | None = None,
        consistency: str | None = None,
        info: dict[str, Any] | None = None,
    ) -> list[list[Hit]]:
        """Top-k hits (best first) for each query row, optionally among items matching
        `filter_expr`. `info`: the collection's description the caller has just read
        (`described`; read here otherwise)."""
        filter_expr = check_filter(filter_expr, max_values=GRAMMAR_ONLY)
        queries = np.asarray(queries, np.float32)
        if queries.ndim == 1:
            queries = queries[None]
        if not isinstance(topk, int) or isinstance(topk, bool) or topk < 1 or topk > 16384:
            raise InputError(f"topk {topk!r} must be an integer between 1 and 16384")
        if queries.ndim != 2 or not np.isfinite(queries).all():
            raise DataError("query vector must be a flat list of finite numbers (no NaN or Inf)")
        if info is None:  # one round trip for dim, spec and fields
            info = self.described(name)
        dim = self.current_dim(name, queries.shape[1], info)
        if queries.shape[1] != dim:
            raise DataError(
                f"collection {name!r} holds {dim}-d vectors; the query is {queries.shape[1]}-d"
            )
        spec = self._spec(name, info)
        self._ensure_loaded(name)
        self._settle(name)
        engine_filter = self._engine_filter(name, filter_expr, info)
        try:
            results = self._with_load(
                name,
                f"searching {name!r}",
                self._milvus.search,
                name,
                data=queries.tolist(),
                limit=topk,
                filter=engine_filter,
                output_fields=[METADATA_FIELD],
                search_params={
                    "metric_type": spec.metric_type,
                    "params": spec.search_params(topk, bool(filter_expr)),
                },
                consistency_level=self._consistency(name, consistency),
            )
        except StoreTimeoutError:
            raise
        except StoreError as exc:
            if filter_expr and not _unreachable(exc):
                raise FilterError(filter_expr, exc) from exc
            raise
        return [
            [
                Hit(
                    str(h["id"]),
                    float(h["distance"]),
                    dict((h.get("entity") or {}).get(METADATA_FIELD) or {}),
                )
                for h in hits
            ]
            for hits in results
        ]

    def get(
        self,
        name: str,
        ids: Sequence[str],
        with_vectors: bool = False,
        consistency: str | None = None,
    ) -> list[dict[str, Any]]:
        """Stored items among `ids` (missing ones are left out), in the order of `ids`; read
        `ID_BATCH` ids at a time."""
        ids = list(dict.fromkeys(check_ids(list(ids))))
        self.describe_dim(name)  # one of ours (kept after the first call)
        fields = [ID_FIELD, METADATA_FIELD] + ([VECTOR_FIELD] if with_vectors else [])
        by_id = {}
        for start in range(0, len(ids), ID_BATCH):
            rows = self._with_load(
                name,
                f"reading from {name!r}",
                self._milvus.query,
                name,
                filter=ids_filter(ids[start : start + ID_BATCH]),
                output_fields=fields,
                consistency_level=self._consistency(name, consistency),
            )
            for row in rows:
                item = {"id": str(row[ID_FIELD]), "metadata": dict(row.get(METADATA_FIELD) or {})}
                if with_vectors:
                    item["vector"] = np.asarray(row[VECTOR_FIELD], np.float32)
                by_id[item["id"]] = item
        return [by_id[i] for i in ids if i in by_id]

    def iterate(
        self, name: str, batch_size: int = 1000, after: str | None = None, ids_only: bool = False
    ) -> Iterator[list[dict[str, Any]]]:
        """Every item (id, vector, metadata; or only its id) of a collection in batches, in
        ascending id order from the id after `after` (Milvus' query iterator pages by primary
        key)."""
        self._require(name)
        self._ensure_loaded(name)
        iterator = self._call(
            f"reading {name!r}",
            self._milvus.query_iterator,
            name,
            batch_size=batch_size,
            filter="" if after is None else f"{ID_FIELD} > {literal(after)}",
            output_fields=[ID_FIELD] if ids_only else [ID_FIELD, VECTOR_FIELD, METADATA_FIELD],
            consistency_level="Strong",
        )
        try:
            while True:
                rows = self._call(f"reading {name!r}", lambda timeout: iterator.next())
                if not rows:
                    return
                if ids_only:
                    yield [{"id": str(row[ID_FIELD])} for row in rows]
                    continue
                yield [
                    {
                        "id": str(row[ID_FIELD]),
                        "vector": np.asarray(row[VECTOR_FIELD], np.float32),
                        "metadata": dict(row.get(METADATA_FIELD) or {}),
                    }
                    for row in rows
                ]
        finally:
            iterator.close()
