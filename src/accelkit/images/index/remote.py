"""`RemoteIndex`: the `ImageIndex` of a running `accelkit images serve`, over HTTP.

The CLI's `--server URL` opens one instead of a `LocalIndex`; everything else is the same code.
Local files are read here and uploaded (multipart); arrays and PIL images are sent as PNG. The
service's JSON errors come back as the same accelkit errors a local index raises (a missing
collection is `CollectionNotFoundError`, a refused filter an `InputError`, ...), with the
service's own one-line message.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from accelkit.errors import AccelkitError, DataError, InputError
from accelkit.images.index.base import (
    Hits,
    ImageIndex,
    ImageInput,
    InsertResult,
    ModelMismatchError,
    TextQuery,
)
from accelkit.images.index.ranking import Cut
from accelkit.images.store import CollectionExistsError, CollectionNotFoundError, Hit, StoreError

# ids sent in one request: within the service's server.max_ids_per_request (10,000 by default);
# a GET /items query string stays within QUERY_CHARS (uvicorn refuses request lines over 16 KB)
IDS_PER_REQUEST = 1000
QUERY_CHARS = 8000


def _id_groups(ids: Sequence[str], max_chars: int | None = None):
    """`ids` in groups of at most IDS_PER_REQUEST ids (and `max_chars` characters as `ids=` query
    parameters)."""
    group: list[str] = []
    size = 0
    from urllib.parse import quote

    for item in ids:
        cost = len(quote(str(item), safe="")) + len("&ids=")  # as sent: / : @ + = cost 3 each
        full = len(group) == IDS_PER_REQUEST or (max_chars and size + cost > max_chars)
        if group and full:
            yield group
            group, size = [], 0
        group.append(item)
        size += cost
    if group:
        yield group


def _form_text(value: Any) -> str:
    """A multipart field: lists as JSON, booleans as true/false, the rest as text."""
    if isinstance(value, list):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _upload(item: ImageInput, position: int) -> tuple[str, bytes]:
    """(file name, bytes) to upload for one input; a file that cannot be read is a DataError."""
    data = item.data
    if isinstance(data, (str, os.PathLike)):
        try:
            with open(data, "rb") as handle:
                return item.source or os.path.basename(os.fspath(data)), handle.read()
        except OSError as exc:
            raise DataError(
                f"item #{position}: {os.fspath(data)}: cannot read ({exc.strerror})"
            ) from exc
    if isinstance(data, (bytes, bytearray, memoryview)):
        return item.source or f"image{position}", bytes(data)
    from PIL import Image

    image = Image.fromarray(np.asarray(data)) if isinstance(data, np.ndarray) else data
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return item.source or f"image{position}.png", buffer.getvalue()


class RemoteIndex(ImageIndex):
    """An `ImageIndex` whose work happens in the service at `url` (API key: `api_key`)."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 300.0):
        import httpx

        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def _call(self, method: str, path: str, **kwargs) -> Any:
        import httpx

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise InputError(
                f"cannot reach the service at {self.url} ({type(exc).__name__}); is `accelkit images serve` running?"
            ) from exc
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code == 200:
            return body
        error = (body or {}).get("error") if isinstance(body, dict) else None
        message = f"service answered {response.status_code}: " + (
            str(error.get("message")) if isinstance(error, dict) else response.text[:200]
        )
        code = error.get("code") if isinstance(error, dict) else None
        if code == "collection_not_found":
            kind = CollectionNotFoundError
        elif code == "collection_exists":
            kind = CollectionExistsError
        elif code == "model_mismatch":
            kind = ModelMismatchError
        elif response.status_code in (503, 504) or code in ("store_unavailable", "store_timeout"):
            kind = StoreError
        elif response.status_code == 422:
            kind = DataError
        else:
            kind = InputError
        failure = kind(message)
        failure.code, failure.detail = (
            code,
            error.get("detail") if isinstance(error, dict) else None,
        )
        raise failure

    # items -----------------------------------------------------------------------------------

    def _insert(
        self, items: list[ImageInput], metadata: list[Any], collection: str | None, create: bool
    ) -> InsertResult:
        files, sent, failures = [], [], {}
        for i, item in enumerate(items):
            try:
                name, data = _upload(item, i)
            except DataError as exc:
                failures[i] = str(exc)
                continue
            files.append(("files", (name, data)))
            sent.append(i)
        form = {"create_collection": str(bool(create)).lower()}
        if collection:
            form["collection"] = collection
        if any(items[i].id is not None for i in sent):
            form["ids"] = json.dumps([items[i].id for i in sent])
        if any(metadata[i] is not None for i in sent):  # the source as a local insert records it
            form["metadata"] = json.dumps([metadata[i] for i in sent])
        if not files:
            return InsertResult(collection or "", [], [], failures)
        try:
            report = self._call("POST", "/insert", files=files, data=form)
        except DataError as exc:
            if getattr(exc, "code", None) != "no_item_stored":
                raise
            # nothing was stored: every item's reason, as a local insert reports them
            failures.update({sent[f["index"]]: f["error"] for f in exc.detail["failures"]})
            return InsertResult(collection or "", [], [], dict(sorted(failures.items())))
        failures.update({sent[f["index"]]: f["error"] for f in report["failures"]})
        return InsertResult(
            report["collection"],
            report["ids"],
            [sent[i] for i in report["indices"]],
            dict(sorted(failures.items())),
        )

    def _search(self, query, topk, filter, collection, consistency, steering) -> Hits:
        fields: dict[str, Any] = {"topk": topk, **steering.fields()}
        for key, value in (
            ("filter", filter),
            ("collection", collection),
            ("consistency", consistency),
        ):
            if value is not None:
                fields[key] = value
        if isinstance(query, np.ndarray):
            answer = self._call(
                "POST", "/search", json={**fields, "vector": query.astype(float).tolist()}
            )
        elif isinstance(query, TextQuery):
            answer = self._call("POST", "/search", json={**fields, "text": query.text})
        else:
            name, data = _upload(query, 0)
            form = {k: _form_text(v) for k, v in fields.items()}
            answer = self._call("POST", "/search", files={"file": (name, data)}, data=form)
        cut = answer.get("cut")
        return Hits(
            [
                Hit(
                    h["id"],
                    float(h["score"]),
                    dict(h.get("metadata") or {}),
                    list(h.get("similar") or []),
                )
                for h in answer["results"]
            ],
            answer.get("warnings") or [],
            answer.get("collection"),
            None if cut is None else Cut(**{k: v for k, v in cut.items() if k != "message"}),
        )

    def _get(self, ids: list[str], collection: str | None) -> list[dict[str, Any]]:
        where = [("collection", collection)] if collection else []
        items = []
        seen: set[str] = set()
        for group in _id_groups(list(dict.fromkeys(ids)), QUERY_CHARS):  # each id once, as locally
            for item in self._call("GET", "/items", params=[("ids", i) for i in group] + where)[
                "items"
            ]:
                if item["id"] not in seen:
                    seen.add(item["id"])
                    items.append(item)
        return items

    def _delete_ids(self, ids: list[str], collection: str | None) -> int:
        body: dict[str, Any] = {"collection": collection} if collection else {}
        return sum(
            self._call("DELETE", "/items", json={**body, "ids": group})["deleted"]
            for group in list(_id_groups(ids)) or [[]]
        )

    def _delete_matching(self, filter: str, collection: str | None) -> int:
        body: dict[str, Any] = {"collection": collection} if collection else {}
        return self._call("POST", "/delete", json={**body, "filter": filter})["deleted"]

    # collections -----------------------------------------------------------------------------

    def list_collections(self) -> list[str]:
        return self._call("GET", "/collections")["collections"]

    def _describe(self, collection: str | None) -> dict[str, Any]:
        if not collection:
            raise InputError("name the collection")
        return self._call("GET", f"/collections/{collection}")

    def _create_collection(self, name, dim, description, spec, exist_ok) -> dict[str, Any]:
        body = {"name": name, "dim": dim, "description": description, **spec, "exist_ok": exist_ok}
        info = self._call(
            "POST", "/collections/create", json={k: v for k, v in body.items() if v is not None}
        )
        info.pop("message", None)
        return info

    def _drop_collection(self, name: str | None) -> None:
        self._call("DELETE", f"/collections/{name}")

    def _flush(self, name: str | None) -> dict[str, Any]:
        return self._call("POST", f"/collections/{name}/flush")

    def _index_progress(self, name, wait, progress) -> dict[str, Any]:
        return self._call("GET", f"/collections/{name}/index", params={"wait": str(wait).lower()})

    def _rebuild_index(self, name: str | None, spec: dict[str, Any]) -> dict[str, Any]:
        return self._call(
            "POST",
            f"/collections/{name}/index",
            json={k: v for k, v in spec.items() if v is not None},
        )

    def health(self) -> dict[str, Any]:
        try:
            report = self._call("GET", "/health")
        except AccelkitError as exc:
            return {"status": "unreachable", "error": str(exc)}
        return report

    def close(self) -> None:
        self._http.close()
