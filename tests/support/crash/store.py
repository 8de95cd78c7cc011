"""What a vector store holds, for the crash harness (harness.py): dumped by a child process
(`python -m tests.support.crash.store URI [DB_NAME [--marks]]`, one JSON document on stdout) through
accelkit's own store client, which waits for an engine a killed command left stopping; and the
comparison of a store after a kill with the old and the new state.

A dump: {"collections": {name: {"meta": {dim, index, metric, model record, or the error its
description raised}, "items": {id: {"vector": sha256 of the float32 bytes, "metadata": ...,
"thumbnail": sha256 of the JPEG or null}}, "duplicates": [ids held more than once]}},
"stray_thumbnails": {name: count of thumbnails of ids the collection does not hold}}; with
`marks` also {"marks": {name: how far a migration's copy got (`images migrate`'s origin record:
after, copied, complete), or null}}.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def dump(uri: str, db_name: str = "", marks: bool = False) -> dict[str, Any]:
    import numpy as np

    from accelkit.images.settings.config import StoreConfig
    from accelkit.images.store import ID_FIELD, METADATA_FIELD, VECTOR_FIELD, VectorStore
    from accelkit.images.store.records import PROP_MODEL, PROP_ORIGIN
    from accelkit.images.store.thumbnails import open_thumbnails

    store = VectorStore(StoreConfig(uri=uri, db_name=db_name, timeout=120))
    thumbnails = open_thumbnails(uri, "auto")
    out: dict[str, Any] = {"collections": {}, "stray_thumbnails": {}}
    try:
        for name in store.list_collections():
            entry: dict[str, Any] = {}
            try:
                info = store.describe(name)
                meta = {k: info[k] for k in ("dim", "index_type", "metric_type", "model")}
                meta["indexes"] = sorted(store._client.list_indexes(name))
                store._ensure_loaded(name)
                rows = store._client.query(
                    name,
                    filter=f'{ID_FIELD} != ""',
                    output_fields=[ID_FIELD, VECTOR_FIELD, METADATA_FIELD],
                    limit=16384,
                    consistency_level="Strong",
                )
            except Exception as exc:  # a half-made collection: what it says is its state
                if store.is_server and "index not found" in str(exc):
                    # a creation killed before its index: a server loads (and so reads, and
                    # counts) no collection without one; nothing was written into it yet (the
                    # index comes before any write); the next insert or migrate finishes it
                    spec = store._spec(name)
                    meta = {"dim": store.describe_dim(name), "index_type": spec.index_type,
                            "metric_type": spec.metric_type,
                            "model": store.recorded(name, PROP_MODEL), "indexes": []}  # fmt: skip
                    out["collections"][name] = {"meta": meta, "items": {}, "duplicates": []}
                    continue
                entry["meta"] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
                entry["items"], entry["duplicates"] = {}, []
                out["collections"][name] = entry
                continue
            ids = Counter(row[ID_FIELD] for row in rows)
            jpegs = thumbnails.get_many(name, sorted(ids)) if thumbnails else {}
            entry["meta"] = meta
            entry["duplicates"] = sorted(i for i, n in ids.items() if n > 1)
            entry["items"] = {
                row[ID_FIELD]: {
                    "vector": hashlib.sha256(
                        np.asarray(row[VECTOR_FIELD], np.float32).tobytes()
                    ).hexdigest(),
                    "metadata": row[METADATA_FIELD],
                    "thumbnail": hashlib.sha256(jpegs[row[ID_FIELD]]).hexdigest()
                    if row[ID_FIELD] in jpegs
                    else None,
                }
                for row in sorted(rows, key=lambda r: r[ID_FIELD])
            }
            out["collections"][name] = entry
            if marks:
                origin = store.recorded(name, PROP_ORIGIN)
                out.setdefault("marks", {})[name] = origin and {
                    k: origin.get(k) for k in ("after", "copied", "complete")
                }
        if thumbnails and Path(thumbnails.path).exists():
            import sqlite3

            with sqlite3.connect(thumbnails.path) as db:
                for name, item_id in db.execute("SELECT collection, id FROM thumbnails"):
                    held = out["collections"].get(name, {}).get("items", {})
                    if item_id not in held:
                        out["stray_thumbnails"][name] = out["stray_thumbnails"].get(name, 0) + 1
    finally:
        store.close()
    return out


def store_state(uri: str, db_name: str = "", marks: bool = False) -> dict[str, Any]:
    """`dump` in a child process (as a separate client, after the command's engine is gone)."""
    from tests.support.crash.process import child_env

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.crash.store",
            uri,
            db_name,
            *(["--marks"] if marks else []),
        ],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=300,
    )
    if done.returncode != 0:
        raise RuntimeError(f"dumping {uri} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare_stores(
    old: dict | None, new: dict | None, after: dict | None, acknowledged: int, exact: bool = False
) -> tuple[str, list[str]]:
    """The store after a kill against the old and the new state: ("old" | "new" | "partial",
    problems). Each collection must be whole (its description the old or the new one), each item
    held once and whole (vector, metadata and thumbnail of one version; a collection whose
    creation was killed before its index is noted: the next insert finishes it), and at least
    `acknowledged` items of the new state there. `exact`: `after` must equal `new` (a rerun)."""
    old, new, after = (s or {"collections": {}} for s in (old, new, after))
    problems: list[str] = []
    if exact:
        for name in sorted(set(new["collections"]) | set(after["collections"])):
            mine, theirs = after["collections"].get(name), new["collections"].get(name)
            if mine != theirs:
                what = "missing" if mine is None else "unexpected" if theirs is None else "differs"
                problems.append(f"collection {name!r} {what} (store)")
        strays, clean = after.get("stray_thumbnails", {}), new.get("stray_thumbnails", {})
        if strays != clean:
            problems.append(f"thumbnails of items not stored: {strays}, a clean run {clean}")
        return ("new" if not problems else "differs"), problems
    new_items = 0
    notes: list[str] = []
    for name, entry in sorted(after["collections"].items()):
        before = old["collections"].get(name)
        later = new["collections"].get(name)
        if before is None and later is None:
            problems.append(f"half: collection {name!r} is in neither the old store nor the new")
            continue
        metas = [c["meta"] for c in (before, later) if c is not None]
        if entry["meta"] not in metas:
            if {**entry["meta"], "indexes": []} in [{**m, "indexes": []} for m in metas]:
                notes.append("a collection without its index")  # the rerun finishes it
            else:
                problems.append(f"half: collection {name!r} is half-made: {entry['meta']}")
        if entry["duplicates"]:
            problems.append(f"duplicate: {name!r} holds {entry['duplicates'][:3]} more than once")
        for item_id, item in entry["items"].items():
            versions = [c["items"].get(item_id) for c in (before, later) if c is not None]
            if item not in versions:
                which = [
                    part
                    for part in ("vector", "metadata", "thumbnail")
                    if all(v is None or v.get(part) != item[part] for v in versions)
                ]
                problems.append(
                    f"half: item {item_id!r} in {name!r}: its {'/'.join(which)} is no version of it"
                )
            elif (
                later is not None
                and item == later["items"].get(item_id)
                and (before is None or item != before["items"].get(item_id))
            ):
                new_items += 1
    if new_items < acknowledged:
        problems.append(
            f"unacknowledged: {acknowledged} items were reported stored, {new_items} are there"
        )
    strip = lambda s: {n: c for n, c in s["collections"].items()}  # noqa: E731
    outcome = (
        "old" if strip(after) == strip(old) else "new" if strip(after) == strip(new) else "partial"
    )
    return outcome + "".join(f" ({n})" for n in notes), problems


if __name__ == "__main__":
    print(
        json.dumps(
            dump(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "", "--marks" in sys.argv[3:])
        )
    )
