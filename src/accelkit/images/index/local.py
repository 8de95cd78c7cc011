"""`LocalIndex`: the `ImageIndex` that embeds with a model and stores in a `VectorStore` (Milvus
Lite or a Milvus server) in this process; `open_local_index` builds it from a config.

The model is reached through one function, `embed(items) -> [ItemResult]` (a vector or a reason
per item): the pipeline's `embed_items` in the CLI and the Python API, the dynamic batcher in
the service (which merges concurrent requests), vectors embedded already on a Ray actor.
Thumbnails for the search page are made here, at insert time, so every face makes them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from accelkit.errors import AccelkitError, DataError, InputError
from accelkit.images.embedding.batching import ItemResult
from accelkit.images.embedding.models import PROBE_TEXT, ModelRecords, no_text_tower
from accelkit.images.embedding.pipeline import EmbeddingPipeline
from accelkit.images.index import ranking
from accelkit.images.index.base import (
    Hits,
    ImageIndex,
    ImageInput,
    InsertResult,
    ItemNotFoundError,
    ModelMismatchError,
    TextQuery,
    check_same_model,
    content_id,
)
from accelkit.images.settings.config import ServiceConfig
from accelkit.images.settings.fields import scalar_values
from accelkit.images.settings.schema import (
    SOURCE_KEY,
    check_collection_name,
    check_id,
    check_metadata,
)
from accelkit.images.store import CollectionNotFoundError, Hit, VectorStore
from accelkit.images.store.records import PROP_MODEL
from accelkit.images.store.thumbnails import make_thumbnail, open_thumbnails

log = logging.getLogger(__name__)

EmbedFn = Callable[[list[Any]], list[ItemResult]]
EmbedTextFn = Callable[[list[str]], np.ndarray]


# `set_model`: items re-embedded, how many times that many are looked at for a readable source,
# and the tolerance. Calibrated on sample photos (docs/images.md has the cosines): the same model
# and settings, and bfloat16 preprocessing, pass; another fit or mean/std, which change what the
# vectors mean, do not
SET_MODEL_SAMPLE, SET_MODEL_LOOK = 32, 50
SET_MODEL_MIN_COSINE, SET_MODEL_NORM_TOLERANCE = 0.999, 0.01
MAX_FETCH = 16384  # the most candidates one search fetches (Milvus' limit on top k)


def _roots(roots: list[str] | None) -> list[Path]:
    return [Path(root).expanduser() for root in roots] if roots else [Path.cwd()]


def _source_file(source: Any, roots: list[str] | None) -> str | None:
    """The readable local file an item's `source` names: an absolute path, or a path below one
    of `roots`; None for a URL, an upload's name or a file not found."""
    if not isinstance(source, str) or not source or "://" in source:
        return None
    path = Path(source).expanduser()
    candidates = [path] if path.is_absolute() else [root / path for root in _roots(roots)]
    return next((str(c) for c in candidates if c.is_file()), None)


def _likeness(vector: np.ndarray, stored: np.ndarray) -> tuple[float, float]:
    """(cosine, length ratio) of a new vector and the stored one, in float64."""
    a, b = np.asarray(vector, np.float64), np.asarray(stored, np.float64)
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 or nb == 0:
        return (1.0 if na == nb else 0.0), (1.0 if na == nb else 0.0)
    return float(a @ b) / (na * nb), na / nb


class LocalIndex(ImageIndex):
    """The model (through `embed`, and `embed_text` for a two-tower model's words) and a
    `VectorStore`, in this process.

    `thumbnails` (a `ThumbnailStore`, optional) receives a small JPEG of every stored image.
    `model` is the configured model's `models.ModelRecords`: its record is kept with the
    collections this index creates, and compared with theirs before it fills or searches one
    (the image tower for inserts and image queries, the text tower for text queries; None: no
    check).
    """

    def __init__(
        self,
        store: Any,
        embed: EmbedFn,
        default_collection: str,
        dim: int,
        thumbnails: Any = None,
        max_pixels: int | None = None,
        embed_text: EmbedTextFn | None = None,
        model: Any = None,
    ):
        self.store = store
        self.embed = embed
        self.embed_text = embed_text
        self.records = model
        self.default_collection = default_collection
        self.dim = dim
        self.thumbnails = thumbnails
        self.max_pixels = max_pixels
        self.model_info: dict[str, Any] = {}
        self._finished: set[str] = set()  # collections checked to have their index
        self._on_close: list[Callable[[], None]] = []

    def _name(self, collection: str | None) -> str:
        return check_collection_name(collection or self.default_collection)

    def model_record(self) -> dict[str, Any] | None:
        """The full record of this index's model (both towers), for a collection it creates."""
        return None if self.records is None else self.records.full()

    def _same_model(
        self, name: str, tower: str = "image", fresh: bool = False, info: dict | None = None
    ) -> None:
        """`index.check_same_model` for `tower`; a text tower the collection has no record of is
        recorded. `info`: the collection's description just read (a server's records in it)."""
        recorded = self.store.recorded(name, PROP_MODEL, fresh=fresh, info=info)
        checked = check_same_model(name, recorded, self.records, tower)
        if checked.record_text and recorded is not None:
            text = self.records.text()
            self.store.record(name, {PROP_MODEL: {**recorded, "text": True, "text_tower": text}})

    def fillable(self, name: str, create: bool) -> bool:
        """Whether collection `name` exists, checked as one this index's model may fill (the
        model that made its vectors); a missing one is `CollectionNotFoundError` unless `create`
        (then False: `create_for_insert` makes it). Every insert asks this first, on Ray too."""
        try:  # the dimension is kept after the first call: no round trip per insert
            self.store.describe_dim(name)
            # read again each time on a server: another client may have made the collection
            # anew with another model since (a write into it would mix two models' vectors for
            # good), or dropped it (then made here again when asked to)
            self._same_model(name, "image", fresh=True)
        except CollectionNotFoundError:
            if not create:
                raise
            return False
        if create and name not in self._finished:  # asked to create it: finish a killed creation
            self.store.finish_index(name)
            self._finished.add(name)
        return True

    def create_for_insert(self, name: str) -> None:
        """The collection an insert made: this model's dimension and record."""
        self.store.create_collection(name, self.dim, exist_ok=True, model=self.model_record())

    def set_model(
        self,
        collection: str | None = None,
        roots: list[str] | None = None,
        sample: int = SET_MODEL_SAMPLE,
        seed: int = 0,
        min_cosine: float = SET_MODEL_MIN_COSINE,
        force: bool = False,
    ) -> dict[str, Any]:
        """Record the configured model as the one that made `collection`'s vectors, after
        checking it: up to `sample` stored items, in a seeded random order, whose `source`
        metadata names a file this machine can read (an absolute path, or one below one of
        `roots`, default the working directory) are embedded again, and every new vector must
        have a cosine of at least `min_cosine` with the stored one and a length within
        `SET_MODEL_NORM_TOLERANCE` of it; else `ModelMismatchError` and the record stays. With no
        readable item the model cannot be checked: refused unless `force`. The text tower is
        recorded as configured: no text vector is stored to check it against."""
        name = self._name(collection)
        if self.records is None:
            raise InputError("this index has no model to record")
        if not isinstance(sample, int) or isinstance(sample, bool) or sample < 1:
            raise InputError(f"--sample {sample!r} must be a whole number of at least 1")
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise InputError(f"--seed {seed!r} must be a whole number of at least 0")
        if not 0 < min_cosine <= 1:
            raise InputError(f"--min-cosine {min_cosine!r} must be more than 0 and at most 1")
        self.store.describe_dim(name)
        previous = self.store.recorded(name, PROP_MODEL, fresh=True)
        configured = self.records.full()  # every configured file read and named first
        found, looked = self._readable_items(name, roots, sample, seed)
        if not found and not force:
            raise InputError(
                f"collection {name!r}: none of the {looked} stored items looked at has a source"
                f" file this machine can read (metadata 'source' below"
                f" {', '.join(map(str, _roots(roots)))}), so the model cannot be checked against"
                " the stored vectors: give --root the folder the images were inserted from, or"
                " --force to record the configured model unchecked"
            )
        results = self.embed([path for _, path, _ in found]) if found else []
        lowest: float | None = None
        checked = 0
        for (item_id, _, stored), result in zip(found, results, strict=True):
            if result.error is not None:
                continue
            checked += 1
            cosine, ratio = _likeness(result.embedding, stored)
            lowest = cosine if lowest is None else min(lowest, cosine)
            if cosine < min_cosine or abs(ratio - 1) > SET_MODEL_NORM_TOLERANCE:
                raise ModelMismatchError(
                    f"collection {name!r}: item {item_id!r} embedded again by the configured"
                    f" model has cosine {cosine:.6f} with its stored vector (at least"
                    f" {min_cosine} needed) and {ratio:.4f} times its length (within"
                    f" {SET_MODEL_NORM_TOLERANCE:.0%} needed): the configured model does not make"
                    " this collection's vectors; the record is left as it was"
                )
        if not checked and not force:
            raise InputError(
                f"collection {name!r}: none of the {len(found)} stored items whose source was"
                " found could be embedded again, so the model cannot be checked: fix the"
                " sources, or --force to record the configured model unchecked"
            )
        self.store.record(name, {PROP_MODEL: configured})
        return {
            "collection": name,
            "checked": checked,
            "looked_at": looked,
            "min_cosine": lowest,
            "tolerance": min_cosine,
            "forced": checked == 0,
            "model": configured,
            "previous": previous,
        }

    def _readable_items(
        self, name: str, roots: list[str] | None, sample: int, seed: int
    ) -> tuple[list[tuple[str, str, np.ndarray]], int]:
        """(id, readable source file, stored vector) of up to `sample` items, looked for among
        at most `SET_MODEL_LOOK` × `sample` items in a random order drawn with `seed`."""
        ids = [row["id"] for rows in self.store.iterate(name, ids_only=True) for row in rows]
        order = [ids[i] for i in np.random.default_rng(seed).permutation(len(ids))]
        order = order[: SET_MODEL_LOOK * sample]
        found: list[tuple[str, str, np.ndarray]] = []
        for start in range(0, len(order), 256):
            if len(found) >= sample:
                break
            for row in self.store.get(name, order[start : start + 256], with_vectors=True):
                path = _source_file(row["metadata"].get(SOURCE_KEY), roots)
                if path is not None and len(found) < sample:
                    found.append((row["id"], path, row["vector"]))
        return found, len(order)

    # items -----------------------------------------------------------------------------------

    def _insert(
        self, items: list[ImageInput], metadata: list[Any], collection: str | None, create: bool
    ) -> InsertResult:
        name = self._name(collection)
        exists = self.fillable(name, create)  # before any embedding
        declared = self.store.fields_to_write(name, exists)
        failures: dict[int, str] = {}
        checked: list[tuple[int, str | None, dict[str, Any]]] = []
        labels = [item.label or f"item #{i}" for i, item in enumerate(items)]
        for i, item in enumerate(items):  # ids and metadata first: a bad one costs no embedding
            try:
                item_id = None if item.id is None else check_id(item.id, f"{labels[i]}: id")
                meta = dict(check_metadata(metadata[i], f"{labels[i]}: metadata"))
                scalar_values(declared, meta, f"{labels[i]}: metadata")  # the declared types
                checked.append((i, item_id, meta))
            except (AccelkitError, ValueError) as exc:  # ValueError: scalar_values'
                failures[i] = str(exc)
        results = self.embed([items[i].data for i, _, _ in checked]) if checked else []
        rows: dict[str, tuple[int, np.ndarray, dict[str, Any]]] = {}
        for (i, item_id, meta), result in zip(checked, results, strict=True):
            if result.error is not None:
                failures[i] = f"{labels[i]}: {result.error}"
                continue
            if item_id is None:
                try:
                    item_id = content_id(items[i].data)
                except OSError as exc:  # the file changed between embedding and hashing
                    failures[i] = f"{labels[i]}: cannot read ({exc.strerror})"
                    continue
            if item_id in rows:  # the last item with an id wins, as consecutive upserts would
                earlier = rows[item_id][0]
                failures[earlier] = (
                    f"{labels[earlier]}: replaced by {labels[i]}, which has the same id {item_id!r}"
                )
            rows[item_id] = (i, result.embedding, meta)
        stored = sorted(rows.items(), key=lambda kv: kv[1][0])
        ids = [item_id for item_id, _ in stored]
        if ids:
            if not exists:  # created only when something is stored: a refused batch leaves nothing
                self.create_for_insert(name)
            vectors = np.stack([vector for _, (_, vector, _) in stored])
            # thumbnails first: a process killed between the two (SIGKILL, OOM) leaves thumbnails
            # of items not stored, never shown, rather than stored items without their picture
            self._store_thumbnails(
                name, [(item_id, items[i].data) for item_id, (i, _, _) in stored]
            )
            self.store.upsert(name, ids, vectors, [meta for _, (_, _, meta) in stored])
        return InsertResult(
            name, ids, [i for _, (i, _, _) in stored], dict(sorted(failures.items()))
        )

    def _store_thumbnails(self, name: str, items: list[tuple[str, Any]]) -> None:
        """A thumbnail per item to store, kept before the store takes the items (a thumbnail is
        shown only for an item the store holds); one that cannot be made or kept costs the page
        its picture, never the insert."""
        if self.thumbnails is None:
            return

        made = []
        for item_id, data in items:
            try:
                made.append((item_id, make_thumbnail(data, max_pixels=self.max_pixels)))
            except (AccelkitError, OSError, ValueError) as exc:
                log.warning("no thumbnail for %r in %r: %s", item_id, name, exc)
        try:
            self.thumbnails.put(name, made)
        except Exception as exc:  # sqlite3.Error, a full disk: the items are stored regardless
            log.warning("thumbnails of %d items in %r not kept: %s", len(made), name, exc)

    def thumbnail(self, item_id: str, collection: str | None = None) -> bytes | None:
        """The JPEG thumbnail of a stored item, or None (no such item, or no thumbnail of it).
        Only items the store holds have one: a thumbnail a delete by filter left is not shown."""
        name = self._name(collection)
        item_id = check_id(item_id)
        if self.thumbnails is None:
            self.store.describe_dim(name)  # a missing collection is still a 404 of its own
            return None
        if not self.store.get(name, [item_id]):
            return None
        return self.thumbnails.get(name, item_id)

    def stored_vector(self, item_id: str, collection: str | None = None) -> np.ndarray:
        """The stored vector of an item ("search by this result"); `InputError` if there is none."""
        name = self._name(collection)
        rows = self.store.get(name, [check_id(item_id)], with_vectors=True)
        if not rows:
            raise ItemNotFoundError(f"id {item_id!r}: no such item in collection {name!r}")
        return rows[0]["vector"]

    def query_texts(self, texts: list[str]) -> np.ndarray:
        if self.embed_text is None:
            raise InputError("this index has no text tower: search it by an image")
        return self.embed_text(texts)

    def query_vector(self, query: ImageInput | TextQuery | np.ndarray) -> np.ndarray:
        if isinstance(query, np.ndarray):
            return query.astype(np.float32)
        if isinstance(query, TextQuery):
            return self.query_texts([query.text])[0]
        (result,) = self.embed([query.data])
        if result.error is not None:
            raise DataError(f"query: {result.error}")
        return result.embedding

    def _search(self, query, topk, filter, collection, consistency, steering) -> Hits:
        name = self._name(collection)
        # one description for the whole search (dimension, index spec, declared fields, a
        # server's model record), read now: another client may have made the collection anew
        # with another model (its vectors ranked by this model's query, a 200 as if right)
        info = self.store.described(name)
        self.store.describe_dim(name)  # a missing collection fails before the model runs
        if steering.cuts and self.store._spec(name, info).metric_type == "L2":
            raise InputError(
                f"min_score and auto_cut compare similarities; collection {name!r} ranks by L2"
                " distance (smaller is closer): search it without them, or use a COSINE one"
            )
        if not isinstance(query, np.ndarray):  # a vector is the caller's to match
            tower = "text" if isinstance(query, TextQuery) else "image"
            self._same_model(name, tower, info=info)
        if steering.negatives and not isinstance(query, TextQuery):
            self._same_model(name, "text", info=info)
        vector = self._steered_vector(query, steering, name)
        if steering.negative_ids:
            vector = self._less_like(name, vector, steering, filter, consistency)
        hits = self._fetch(name, vector, topk, filter, consistency, steering.fold, info)
        cut = ranking.cut([h.score for h in hits], steering.min_score, steering.auto_cut)
        return Hits(hits[: cut.kept], self.store.ignored(name, searched=True), name, cut)

    def _steered_vector(self, query: Any, steering: Any, name: str) -> np.ndarray:
        """The query's vector; with negative terms (in the words, or given), pushed away from
        theirs (`ranking.steer`): the words and negative texts embedded in one call. Stored
        items (`negative_ids`) are pushed away from after it (`ranking.push_away`)."""
        negatives = list(steering.negatives)
        if isinstance(query, TextQuery):
            terms = ranking.parse_terms(query.text)
            negatives = list(terms.negatives) + negatives
            if negatives:
                vectors = self.query_texts([terms.positive, *negatives])
                positive, pushed = vectors[0], list(vectors[1:])
            else:
                positive, pushed = self.query_vector(TextQuery(terms.positive)), []
        else:
            positive = self.query_vector(query)
            pushed = list(self.query_texts(negatives)) if negatives else []
        if not pushed:
            return positive
        return ranking.steer(positive, pushed, steering.negative_weight)

    def _less_like(self, name, vector, steering, filter, consistency) -> np.ndarray:
        """The query pushed away from stored items (`ranking.push_away`), measured from the
        centre of its `STEER_CANDIDATES` best candidates under the same filter."""
        items = [self.stored_vector(i, name) for i in steering.negative_ids]
        _, around = self._candidates(name, vector, ranking.STEER_CANDIDATES, filter, consistency)
        centre = ranking.centre(list(around.values()))
        return ranking.push_away(vector, items, centre, steering.negative_weight)

    def _fetch(self, name, vector, topk, filter, consistency, fold, info=None) -> list[Hit]:
        """The `topk` hits; with `fold`, near-duplicates folded under the best-ranked of them,
        fetching FOLD_OVERFETCH times as many candidates (and more while too few distinct ones
        come back from a collection that has more)."""
        if fold is None:
            return self.store.search(name, vector, topk, filter, consistency, info)[0]
        fetch = min(topk * ranking.FOLD_OVERFETCH, MAX_FETCH)
        while True:
            found, vectors = self._candidates(name, vector, fetch, filter, consistency)
            kept = (
                ranking.fold(np.stack([vectors[h.id] for h in found]), fold, topk) if found else []
            )
            if len(kept) >= topk or len(found) < fetch or fetch >= MAX_FETCH:
                break
            fetch = min(fetch * ranking.FOLD_OVERFETCH, MAX_FETCH)
        return [
            Hit(found[i].id, found[i].score, found[i].metadata, [found[j].id for j in folded])
            for i, folded in kept
        ]

    def _candidates(self, name, vector, fetch, filter, consistency) -> tuple[list[Hit], dict]:
        """The `fetch` best hits and their stored vectors by id (one deleted meanwhile: left out)."""
        found = self.store.search(name, vector, fetch, filter, consistency=consistency)[0]
        rows = self.store.get(name, [h.id for h in found], with_vectors=True)
        vectors = {row["id"]: row["vector"] for row in rows}
        return [h for h in found if h.id in vectors], vectors

    def _get(self, ids: list[str], collection: str | None) -> list[dict[str, Any]]:
        return self.store.get(self._name(collection), ids)

    def _delete_ids(self, ids: list[str], collection: str | None) -> int:
        name = self._name(collection)
        deleted = self.store.delete(name, ids)
        self._forget_thumbnails(name, ids)
        return deleted

    def _delete_matching(self, filter: str, collection: str | None) -> int:
        return self.store.delete_matching(self._name(collection), filter)  # thumbnails stay, unseen

    # collections -----------------------------------------------------------------------------

    def list_collections(self) -> list[str]:
        return self.store.list_collections()

    def _describe(self, collection: str | None) -> dict[str, Any]:
        return self.store.describe(self._name(collection))

    def _create_collection(self, name, dim, description, spec, exist_ok) -> dict[str, Any]:
        if dim is not None and dim != self.dim:
            model = self.model_info.get("name") or "the model"
            raise DataError(
                f"dim {dim!r}: {model} makes {self.dim}-d embeddings, so every insert into a"
                f" {dim!r}-d collection would be refused; leave dim out (or give {self.dim})"
            )
        return self.store.create_collection(
            self._name(name),
            self.dim if dim is None else dim,
            description,
            **spec,
            exist_ok=exist_ok,
            model=self.model_record(),
        )

    def _drop_collection(self, name: str | None) -> None:
        name = self._name(name)
        try:
            self.store.drop_collection(name)
        except CollectionNotFoundError:  # also those of a delete killed between the two
            self._forget_thumbnails(name, None)
            raise
        self._forget_thumbnails(name, None)

    def _forget_thumbnails(self, name: str, ids: list[str] | None) -> None:
        if self.thumbnails is None:
            return
        try:
            if ids is None:
                self.thumbnails.drop(name)
            else:
                self.thumbnails.delete(name, ids)
        except Exception as exc:  # left behind: never shown, replaced when an id comes back
            log.warning("thumbnails in %r not removed: %s", name, exc)

    def _flush(self, name: str | None) -> dict[str, Any]:
        name = self._name(name)
        self.store.flush(name)
        return self.store.index_progress(name)

    def _index_progress(self, name, wait, progress) -> dict[str, Any]:
        name = self._name(name)
        if wait:
            return self.store.wait_for_index(name, progress=progress)
        return self.store.index_progress(name)

    def _rebuild_index(self, name: str | None, spec: dict[str, Any]) -> dict[str, Any]:
        return self.store.rebuild_index(self._name(name), **spec)

    def health(self) -> dict[str, Any]:
        """The store's status, and the model's: it embeds a plain 64×64 test image, and with a
        text tower (`model_info["text"]`) a few words."""
        store = self.store.ping()
        store.pop("uri", None)
        model: dict[str, Any] = dict(self.model_info)
        try:
            (result,) = self.embed([np.full((64, 64, 3), 128, np.uint8)])
            model.update(
                {
                    "ok": result.error is None,
                    "dim": None if result.vector is None else int(result.vector.shape[0]),
                }
            )
            if result.error is not None:
                model["error"] = result.error
            elif model.get("text") and self.embed_text is not None:
                self.embed_text([PROBE_TEXT])
        except AccelkitError as exc:
            model.update({"ok": False, "error": str(exc)})
        healthy = store["ok"] and model["ok"]
        report = {"status": "ok" if healthy else "unhealthy", "model": model, "store": store}
        if store["ok"]:
            report["collections"] = self.indexes_in_use()
        return report

    def indexes_in_use(self) -> list[dict[str, Any]]:
        """Per collection, the index its searches use and what of its settings is ignored."""
        try:
            return [self.store.index_in_use(n) for n in self.store.list_collections()]
        except AccelkitError as exc:
            return [{"error": str(exc)}]

    def close(self) -> None:
        for close in self._on_close:
            close()
        self._on_close.clear()


def open_local_index(
    config: ServiceConfig,
    store: Any = None,
    embed: EmbedFn | None = None,
    embed_text: EmbedTextFn | None = None,
) -> LocalIndex:
    """The `LocalIndex` of a config. `store`: a `VectorStore` the caller keeps (else one is
    opened now and closed with the index). `embed`, `embed_text`: the caller's embed functions
    (else the config's model, loaded on the first embedding, so collection commands never load
    it)."""
    owned = store is None
    store = VectorStore(config.store) if owned else store
    loaded: list[Any] = []

    def pipeline():
        if not loaded:
            loaded.append(EmbeddingPipeline(config))
        return loaded[0]

    def text_pipeline():
        if not config.model.has_text:  # said before any model loads
            raise no_text_tower(config.model.name)
        return pipeline()

    index = LocalIndex(
        store,
        embed or (lambda items: pipeline().embed_items(items)),
        config.store.collection_name,
        config.model.embedding_dim,
        thumbnails=open_thumbnails(config.store.uri, config.store.thumbnails),
        max_pixels=config.preprocess.max_pixels,
        embed_text=embed_text or (lambda texts: text_pipeline().embed_texts(texts)),
        model=ModelRecords(config.model, config.preprocess),
    )
    index.model_info = {
        "name": config.model.name,
        "backend": config.model.backend,
        "text": config.model.has_text,  # words can be searched
    }
    index._on_close.append(lambda: loaded[0].close() if loaded else None)
    if owned:
        index._on_close.append(store.close)
    return index
