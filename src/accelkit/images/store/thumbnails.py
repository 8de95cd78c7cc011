"""Thumbnails of stored images, for the search page: made at insert time, kept in a side store.

`make_thumbnail` turns an image input (the bytes, path, array or PIL image the insert embedded)
into a small JPEG: at most `MAX_SIDE` pixels on its longer side and at most `MAX_BYTES` bytes
(the quality steps down until it fits). It decodes with `decode_image`, so the same formats,
pixel limit and EXIF orientation apply as for embedding, and a large JPEG is decoded at a reduced
DCT scale (1/2 .. 1/8), which is cheap.

`ThumbnailStore` keeps them in one SQLite file beside the Milvus Lite database
(`images.db` → `images.db.thumbnails.sqlite`), keyed by (collection, id). Why a side store, not
a field of the item: Milvus holds every scalar field of a loaded collection in memory, so 5-10 KB
per item would cost a server 5-10 GB per million items to speed up nothing but the page; and an
existing collection's schema cannot gain a field. SQLite is in the standard library, safe across
threads and processes (one connection per call, WAL), and needs no server. A thumbnail is served
only for an item the vector store still holds (the service checks), so a thumbnail left behind
by a delete by filter is never shown, and it is replaced when its id is inserted again.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from accelkit.images.embedding.decode import DEFAULT_MAX_PIXELS, DecodeOptions, decode_image
from accelkit.images.store import is_local_uri

log = logging.getLogger(__name__)

MAX_SIDE = 160  # pixels on the longer side: a grid cell at 1x, sharp enough at 2x for 80 px
MAX_BYTES = 16_384  # bytes of one thumbnail, whatever the image
QUALITIES = (80, 65, 50, 35, 20)


def make_thumbnail(
    item: Any, max_side: int = MAX_SIDE, max_bytes: int = MAX_BYTES, max_pixels: int | None = None
) -> bytes:
    """A baseline JPEG of `item` at most `max_side` pixels on its longer side and at most
    `max_bytes` bytes; raises `ImageDecodeError` for what cannot be decoded."""
    from PIL import Image

    options = DecodeOptions(
        max_pixels=max_pixels or DEFAULT_MAX_PIXELS,
        min_size=(max_side, max_side),
        reduce_margin=1.0,
    )
    image = Image.fromarray(decode_image(item, options))
    image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
    side = max_side
    while True:
        for quality in QUALITIES:
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG", quality=quality, optimize=True)
            if buffer.tell() <= max_bytes:
                return buffer.getvalue()
        side = max(side * 3 // 4, 8)  # noise that will not compress: fewer pixels
        image.thumbnail((side, side), Image.Resampling.LANCZOS)
        if side == 8:
            return buffer.getvalue()  # 8×8 at quality 20 is a few hundred bytes


def thumbnail_path(uri: str, setting: str) -> str | None:
    """Where the thumbnails of a store live: `setting` "auto" means beside a Milvus Lite database
    and none for a server (whose service may run on several hosts; name a file to have them),
    "off" means none, anything else is the SQLite file's path."""
    if setting == "off":
        return None
    if setting == "auto":
        return f"{os.path.abspath(uri)}.thumbnails.sqlite" if is_local_uri(uri) else None
    return os.path.abspath(os.path.expanduser(setting))


class ThumbnailStore:
    """JPEG bytes by (collection, id) in one SQLite file, made on the first thumbnail kept; every
    call opens its own connection, so one instance serves any number of threads."""

    def __init__(self, path: str):
        self.path = path
        self._ready = False

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30)
        try:
            if not self._ready:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(
                    "CREATE TABLE IF NOT EXISTS thumbnails ("
                    " collection TEXT NOT NULL, id TEXT NOT NULL, jpeg BLOB NOT NULL,"
                    " PRIMARY KEY (collection, id)) WITHOUT ROWID"
                )
                self._ready = True
            with db:  # one transaction: committed on success, rolled back on an error
                yield db
        finally:
            db.close()

    def _exists(self) -> bool:
        return self._ready or os.path.exists(self.path)

    def put(self, collection: str, items: Sequence[tuple[str, bytes]]) -> None:
        if items:
            with self._connect() as db:
                db.executemany(
                    "INSERT OR REPLACE INTO thumbnails VALUES (?, ?, ?)",
                    [(collection, item_id, jpeg) for item_id, jpeg in items],
                )

    def get(self, collection: str, item_id: str) -> bytes | None:
        if not self._exists():
            return None
        with self._connect() as db:
            row = db.execute(
                "SELECT jpeg FROM thumbnails WHERE collection = ? AND id = ?",
                (collection, item_id),
            ).fetchone()
        return None if row is None else bytes(row[0])

    def get_many(self, collection: str, ids: Sequence[str]) -> dict[str, bytes]:
        """The thumbnails of `ids` that exist, by id."""
        if not self._exists() or not ids:
            return {}
        found: dict[str, bytes] = {}
        with self._connect() as db:
            for start in range(0, len(ids), 500):  # SQLite's bound-parameter limit
                part = list(ids[start : start + 500])
                marks = ", ".join("?" * len(part))
                rows = db.execute(
                    f"SELECT id, jpeg FROM thumbnails WHERE collection = ? AND id IN ({marks})",
                    (collection, *part),
                )
                found.update({item_id: bytes(jpeg) for item_id, jpeg in rows})
        return found

    def delete(self, collection: str, ids: Sequence[str]) -> None:
        if self._exists():
            with self._connect() as db:
                db.executemany(
                    "DELETE FROM thumbnails WHERE collection = ? AND id = ?",
                    [(collection, item_id) for item_id in ids],
                )

    def drop(self, collection: str) -> None:
        if self._exists():
            with self._connect() as db:
                db.execute("DELETE FROM thumbnails WHERE collection = ?", (collection,))

    def count(self, collection: str) -> int:
        if not self._exists():
            return 0
        with self._connect() as db:
            return db.execute(
                "SELECT count(*) FROM thumbnails WHERE collection = ?", (collection,)
            ).fetchone()[0]


def open_thumbnails(uri: str, setting: str) -> ThumbnailStore | None:
    path = thumbnail_path(uri, setting)
    return None if path is None else ThumbnailStore(path)
