"""What the tests of `accelkit images migrate` share: the command run in-process, a store's
items read back, a small Milvus Lite store, and the one line of a migrate stopped on purpose."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def run(capsys, *args) -> tuple[int, str, str]:
    from accelkit.cli import main

    with pytest.raises(SystemExit) as done:
        main(["images", *args])
    out = capsys.readouterr()
    return done.value.code or 0, out.out, out.err


def everything(settings: dict, name: str) -> dict[str, tuple[np.ndarray, dict]]:
    """Every item of a collection: id -> (vector, metadata)."""
    from accelkit.images.store import StoreConfig, VectorStore

    with VectorStore(StoreConfig(**settings)) as store:
        return {
            row["id"]: (row["vector"], row["metadata"])
            for rows in store.iterate(name, 500)
            for row in rows
        }


def same_items(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(
        np.array_equal(a[i][0], b[i][0]) and a[i][1] == b[i][1] for i in a
    )


def small_lite(path: Path, name: str = "pics", count: int = 5) -> str:
    """A Milvus Lite database holding one collection of `count` 8-d vectors."""
    from accelkit.images.store import StoreConfig, VectorStore

    with VectorStore(StoreConfig(uri=str(path))) as store:
        store.create_collection(name, 8)
        vectors = np.random.default_rng(1).normal(size=(count, 8)).astype(np.float32)
        store.upsert(name, [f"i{k}" for k in range(count)], vectors)
    return str(path)


def add_items(path: str, ids: list[str], name: str = "pics") -> None:
    from accelkit.images.store import StoreConfig, VectorStore

    with VectorStore(StoreConfig(uri=path)) as store:
        vectors = np.random.default_rng(len(ids)).normal(size=(len(ids), 8)).astype(np.float32)
        store.upsert(name, ids, vectors)


def stopped_line(capsys, monkeypatch, where: str, failure: BaseException, *args):
    """The one line of a migrate that `failure` stops at `where` (`upsert`: the second batch
    written; `verify`: the verification)."""
    import accelkit.images.store.migrate as migrate_module
    from accelkit.images.store import VectorStore

    if where == "upsert":
        calls = []
        upsert = VectorStore.upsert

        def failing(self, *a, **k):
            calls.append(1)
            if len(calls) == 2:
                raise failure
            return upsert(self, *a, **k)

        monkeypatch.setattr(VectorStore, "upsert", failing)
    else:

        def failing(*a, **k):
            raise failure

        monkeypatch.setattr(migrate_module, "_verify", failing)
    code, _, err = run(capsys, "migrate", *args)
    monkeypatch.undo()
    lines = [x for x in err.splitlines() if x.strip()]
    return code, lines[-1]
