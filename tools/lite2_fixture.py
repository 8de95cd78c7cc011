"""Rewrite tests/data/lite2_store.db (and its thumbnails beside it): a small Milvus Lite 2.x
database made by accelkit's own store, which the Lite 3 tests migrate without a 2.x engine.
Needs milvus-lite 2.x (`milvus-lite>=2.5,<3`) and the images extra.

    python3 tools/lite2_fixture.py            # writes the files
    python3 tools/lite2_fixture.py --check    # exit 1 if the shipped file reads differently
                                              # from a fresh one (compared as read, not as bytes:
                                              # the engine stamps rows with the time)

What it holds: `photos` (16-d, COSINE, FLAT, a model record, a description with non-ASCII
text, thumbnails), written with upserts over existing ids and deletes by id and by filter;
`clips` (8-d, L2, IVF_FLAT nlist 16, no model record); a collection made and dropped (gone from
the file and its catalog); and `foreign`, made by pymilvus directly as another program would
(non-ASCII ids, an INT64 field, a dynamic field, an id inserted twice), which migrate refuses.
"""

from __future__ import annotations

import io
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "data" / "lite2_store.db"
THUMBNAILS = Path(f"{FIXTURE}.thumbnails.sqlite")
MODEL = {"name": "fixture-model", "dim": 16, "metric": "COSINE", "version": "1"}


def _jpeg(seed: int) -> bytes:
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (8, 8, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=50)
    return buffer.getvalue()


def build(path: Path) -> None:
    """Make the database at `path` (a new file) with the Lite 2.x engine."""
    import warnings

    import numpy as np

    from accelkit.images.store import StoreConfig, VectorStore
    from accelkit.images.store.lite import lite_generation
    from accelkit.images.store.thumbnails import ThumbnailStore

    if lite_generation() != 2:
        raise SystemExit("the fixture is a Lite 2.x file: run this with milvus-lite 2.x installed")
    rng = np.random.default_rng(50)
    ids = [f"img-{i:04d}.jpg" for i in range(200)] + ["a/b@c+d=e~f", "x:y.z_w-1"]
    vectors = rng.normal(size=(len(ids), 16)).astype(np.float32)
    vectors[0, :4] = [np.float32(1e-38), -0.0, np.float32(3.4e38), np.float32(1e-45)]
    metadata = [
        {"i": i, "album": "été ☃" if i % 3 else "naïve", "tags": ["ü", "日本"][: i % 3],
         "deep": {"f": i * 1e-7, "ok": bool(i % 2), "none": None}}
        for i in range(len(ids))
    ]  # fmt: skip
    metadata[1] = {}
    with VectorStore(StoreConfig(uri=str(path))) as store:
        store.create_collection(
            "photos", 16, "Fotos — été 2026 ☃", metric_type="COSINE", index_type="FLAT", model=MODEL
        )
        store.upsert("photos", ids, vectors, metadata)
        again = ids[10:60]  # upserts over existing ids: new vectors and metadata
        store.upsert(
            "photos",
            again,
            rng.normal(size=(len(again), 16)).astype(np.float32),
            [{"i": -1, "again": k} for k in range(len(again))],
        )
        store.delete("photos", ids[100:120])
        store.delete_matching("photos", 'metadata["i"] >= 190 and metadata["i"] < 200')
        store.create_collection("clips", 8, "", metric_type="L2", index_type="IVF_FLAT",
                                index_params={"nlist": 16})  # fmt: skip
        store.upsert("clips", [f"clip-{i}" for i in range(60)],
                     rng.normal(size=(60, 8)).astype(np.float32), None)  # fmt: skip
        store.create_collection("gone", 4, "dropped", model={"name": "old"})
        store.drop_collection("gone")
        from pymilvus import DataType

        client = store._client
        schema = client.create_schema(auto_id=False, enable_dynamic_field=True)
        schema.add_field("pk", DataType.VARCHAR, is_primary=True, max_length=64)
        schema.add_field("v", DataType.FLOAT_VECTOR, dim=3)
        schema.add_field("n", DataType.INT64)
        index = client.prepare_index_params()
        index.add_index("v", index_type="FLAT", metric_type="L2")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            client.create_collection("foreign", schema=schema, index_params=index)
            client.insert("foreign", [{"pk": "ü1", "v": [1, 2, 3], "n": 1, "extra": "é"}])
            client.insert("foreign", [{"pk": "ü1", "v": [4, 5, 6], "n": 2}])  # twice: later wins
            client.insert("foreign", [{"pk": f"日本{i}", "v": [i, i, i], "n": i} for i in range(5)])
    kept = [i for i in ids[:100] if i.endswith("0.jpg")]
    ThumbnailStore(f"{path}.thumbnails.sqlite").put(
        "photos", [(i, _jpeg(k)) for k, i in enumerate(kept)]
    )
    import sqlite3

    thumbs = sqlite3.connect(f"{path}.thumbnails.sqlite")  # shipped without a WAL: read-only
    thumbs.execute("PRAGMA journal_mode=DELETE")  # readers then leave no -wal/-shm beside it
    thumbs.close()


def read(path: Path) -> dict:
    """Everything the reader sees of the file and its thumbnails (vectors as their bytes)."""
    import sqlite3

    from accelkit.images.store.lite2_file import Lite2File

    with Lite2File(str(path)) as lite:
        seen = {}
        for name in lite.collections(hidden=True):
            rows = [
                {k: (v.tobytes() if hasattr(v, "tobytes") else v) for k, v in row.items()}
                for batch in lite.rows(name)
                for row in batch
            ]
            seen[name] = {"schema": lite.schema(name), "index": lite.index(name), "rows": rows}
    thumbs = sqlite3.connect(f"file:{path}.thumbnails.sqlite?mode=ro", uri=True)
    seen["thumbnails"] = sorted(thumbs.execute("SELECT collection, id, jpeg FROM thumbnails"))
    thumbs.close()
    return seen


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as folder:
        fresh = Path(folder) / "lite2_store.db"
        build(fresh)
        if "--check" in argv:
            same = read(fresh) == read(FIXTURE)
            print("same" if same else f"{FIXTURE} differs from a fresh build")
            return 0 if same else 1
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        for made, shipped in ((fresh, FIXTURE), (Path(f"{fresh}.thumbnails.sqlite"), THUMBNAILS)):
            shutil.copyfile(made, f"{shipped}.tmp")
            Path(f"{shipped}.tmp").replace(shipped)
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size:,} bytes) and {THUMBNAILS.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
