"""A Milvus Lite 2.x file read without its engine (`lite2_file`), and `images migrate` of one
into the installed engine's store.

The reader is checked against the 2.x engine's own answers on the shipped fixture
(tests/data/lite2_store.db, made by tools/lite2_fixture.py with accelkit's store: upserts over
existing ids, deletes by id and by filter, a dropped collection, model records, thumbnails, and
a collection another program made with non-ASCII ids, a dynamic field and an id inserted twice)
plus collections of every scalar type added here. The migration runs under either engine: under
Lite 3 as a user runs it (the 2.x file cannot be opened there), under Lite 2 with the reader
asked for; every row, record and thumbnail of the copy is compared with the source."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from tests.support.cli import run_cli
from tests.support.require import not_applicable

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "data" / "lite2_store.db"
ACCELKIT = ["clips", "photos"]


def major() -> int:
    from accelkit.images.store.lite import lite_generation

    return lite_generation()


def fixture_copy(folder: Path) -> Path:
    """The fixture and its thumbnails copied into `folder` (the shipped files stay untouched)."""
    for suffix in ("", ".thumbnails.sqlite"):
        shutil.copyfile(f"{FIXTURE}{suffix}", folder / f"lite2_store.db{suffix}")
    return folder / "lite2_store.db"


def bits(value):
    """A value with its vectors as their bytes: equal means bit for bit."""
    if isinstance(value, np.ndarray):
        return (str(value.dtype), value.tobytes())
    if isinstance(value, dict):
        return {k: bits(v) for k, v in value.items()}
    if isinstance(value, list):
        return [bits(v) for v in value]
    return value


def flat(row: dict) -> dict:
    """A reader row as pymilvus' query answers it: the dynamic field's keys at the top."""
    dynamic = row.get("$meta") or {}
    return {**{k: v for k, v in row.items() if k != "$meta"}, **dynamic}


def add_other_collections(path: Path) -> None:
    """Collections of every scalar type the reader decodes, an INT64 primary key, upserts and
    deletes through pymilvus directly (2.x engine)."""
    import warnings

    from pymilvus import DataType, MilvusClient

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = MilvusClient(str(path))
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("key", DataType.INT64, is_primary=True)
        for name, kind in (("b", DataType.BOOL), ("i8", DataType.INT8), ("i16", DataType.INT16),
                           ("i32", DataType.INT32), ("f", DataType.FLOAT), ("d", DataType.DOUBLE),
                           ("j", DataType.JSON)):  # fmt: skip
            schema.add_field(name, kind)
        schema.add_field("s", DataType.VARCHAR, max_length=32)
        schema.add_field("v", DataType.FLOAT_VECTOR, dim=5)
        index = client.prepare_index_params()
        index.add_index("v", index_type="FLAT", metric_type="IP")
        client.create_collection("scalars", schema=schema, index_params=index)
        rng = np.random.default_rng(5)
        rows = [
            {"key": k, "b": k % 2 == 0, "i8": -128 + k % 256, "i16": -(k % 30000), "i32": 2**31 - 1 - k % 1000,
             "f": float(np.float32(k / 3)), "d": k / 7, "j": {"k": [k, "ß"]}, "s": f"s{k}ñ",
             "v": rng.normal(size=5).astype(np.float32).tolist()}
            for k in (-(2**62), -5, 0, 3, 7, 11, 2**62)
        ]  # fmt: skip
        client.insert("scalars", rows)
        client.upsert("scalars", [{**rows[3], "s": "again", "v": [9.5] * 5}])
        client.delete("scalars", filter="key == 7")
        client.close()


def engine_view(path: Path) -> dict:
    """Everything the 2.x engine answers of the file (accelkit's store for its collections)."""
    import warnings

    from pymilvus import MilvusClient

    from accelkit.images.store import StoreConfig, VectorStore

    seen: dict = {}
    with VectorStore(StoreConfig(uri=str(path))) as store:
        for name in ACCELKIT:
            items = [row for rows in store.iterate(name, 64) for row in rows]
            seen[name] = {
                "describe": store.describe(name),
                "records": [store.recorded(name, k) for k in ("model", "origin")],
                "items": items,
            }
        names = store.list_collections()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            client = MilvusClient(str(path))
            for name in ("foreign", "scalars"):
                iterator = client.query_iterator(name, batch_size=3, output_fields=["*"])
                seen[name] = []
                while batch := iterator.next():
                    seen[name] += [{k: np.asarray(v, np.float32) if k == "v" else v for k, v in r.items()} for r in batch]  # fmt: skip
                iterator.close()
            client.close()
    seen["names"] = names
    return seen


def reader_view(path: Path) -> dict:
    from accelkit.images.store import StoreConfig
    from accelkit.images.store.lite2_file import Lite2Store

    seen: dict = {}
    with Lite2Store(StoreConfig(uri=str(path))) as store:
        for name in ACCELKIT:
            seen[name] = {
                "describe": store.describe(name),
                "records": [store.recorded(name, k) for k in ("model", "origin")],
                "items": [row for rows in store.iterate(name, 64) for row in rows],
            }
            got = store.get(name, [i["id"] for i in seen[name]["items"][::-7]] + ["nope"], True)
            assert bits(got) == bits(seen[name]["items"][::-7])
        for name in ("foreign", "scalars"):
            seen[name] = [flat(row) for rows in store.file.rows(name, 3) for row in rows]
        seen["names"] = store.list_collections()
    return seen


def test_the_reader_answers_what_the_2x_engine_answers(tmp_path):
    if major() != 2:
        not_applicable("the reader is compared with the Lite 2.x engine, not installed here")
    path = fixture_copy(tmp_path)
    add_other_collections(path)
    engine = engine_view(path)
    before = path.read_bytes()
    ours = reader_view(path)
    assert path.read_bytes() == before  # read-only
    assert bits(ours) == bits(engine)
    # what the fixture holds, as built: upserts replaced rows, deletes left none behind
    photos = {i["id"]: i for i in ours["photos"]["items"]}
    assert len(photos) == 172 and "img-0100.jpg" not in photos and "img-0195.jpg" not in photos
    assert photos["img-0010.jpg"]["metadata"] == {"i": -1, "again": 0}
    assert photos["a/b@c+d=e~f"]["metadata"]["album"] == "été ☃"
    assert ours["photos"]["describe"]["description"] == "Fotos — été 2026 ☃"
    assert ours["photos"]["records"][0]["name"] == "fixture-model"
    assert ours["clips"]["describe"]["index_params"]["nlist"] == 16
    assert ours["foreign"][0] == {"pk": "ü1", "v": ours["foreign"][0]["v"], "n": 2}
    assert [r["key"] for r in ours["scalars"]] == [-(2**62), -5, 0, 3, 11, 2**62]
    assert ours["names"] == ["clips", "foreign", "photos", "scalars"]  # "gone" went with its drop


def copy_everything(settings: dict, name: str) -> dict:
    from accelkit.images.store import StoreConfig, VectorStore

    with VectorStore(StoreConfig(**settings)) as store:
        return {
            "items": [row for rows in store.iterate(name, 100) for row in rows],
            "describe": store.describe(name),
            "records": [store.recorded(name, k) for k in ("model", "origin")],
        }


def migrate(
    source: Path, target: Path, capsys, *collections: str, batch_size: int = 1000
) -> tuple[int, str, str]:
    """The command a user runs (Lite 3); under Lite 2 the same copy with the reader asked for."""
    import json

    if major() >= 3:
        code, out, err = run_cli(["images", "migrate", str(source), str(target), "--no-progress",
                                  "--json", "--batch-size", str(batch_size), *[w for c in collections for w in ("-c", c)]], capsys)  # fmt: skip
        return code or 0, json.dumps(json.loads(out)["result"]) if code in (0, None) else out, err
    from accelkit.errors import AccelkitError
    from accelkit.images.store import StoreConfig
    from accelkit.images.store.migrate import migrate as copy

    try:
        report = copy(StoreConfig(uri=str(source)), StoreConfig(uri=str(target)),
                      list(collections) or None, lite2_reader=True, batch_size=batch_size)  # fmt: skip
    except AccelkitError as exc:
        return exc.exit_code, "", f"error: {exc}\n"
    return 0, json.dumps(report.document()), ""


def test_a_2x_file_migrates_into_the_installed_engine_with_everything_verified(tmp_path, capsys):
    import json

    from accelkit.images.store import StoreConfig
    from accelkit.images.store.lite import lite_format
    from accelkit.images.store.lite2_file import Lite2Store
    from accelkit.images.store.thumbnails import ThumbnailStore

    source = fixture_copy(tmp_path)
    target = tmp_path / "new.db"
    before = source.read_bytes()
    code, out, err = migrate(source, target, capsys, "photos", "clips")
    assert code == 0, err
    report = json.loads(out)
    assert [(c["name"], c["copied"], c["total"], c["verified"]) for c in report["collections"]] == [
        ("photos", 172, 172, True),
        ("clips", 60, 60, True),
    ]
    assert report["collections"][0]["thumbnails"] == 10
    assert source.read_bytes() == before
    assert lite_format(str(target)) == (3 if major() >= 3 else 2)
    with Lite2Store(StoreConfig(uri=str(source))) as src:
        for name in ("photos", "clips"):
            copied = copy_everything({"uri": str(target)}, name)
            want = [row for rows in src.iterate(name, 100) for row in rows]
            assert bits(copied["items"]) == bits(want)  # every row, vectors bit for bit
            described, theirs = copied["describe"], src.describe(name)
            for key in ("description", "dim", "count", "metric_type", "index_type"):
                assert described[key] == theirs[key], key
            assert copied["records"][0] == src.recorded(name, "model")
            assert copied["records"][1]["complete"] is True
            assert copied["records"][1]["uri"] == str(source.resolve())
    thumbs = ThumbnailStore(f"{source}.thumbnails.sqlite"), ThumbnailStore(f"{target}.thumbnails.sqlite")  # fmt: skip
    ids = [f"img-{i:04d}.jpg" for i in range(0, 100, 10)]
    assert thumbs[1].get_many("photos", ids) == thumbs[0].get_many("photos", ids)
    assert thumbs[1].count("photos") == 10
    # run again: complete, nothing copied, verified again
    code, out, err = migrate(source, target, capsys, "photos")
    assert code == 0, err
    assert json.loads(out)["collections"][0]["copied"] == 0
    # every collection: the one another program made is refused before any is copied
    code, _, err = migrate(source, tmp_path / "all.db", capsys)
    assert code == 2 and "'foreign'" in error_line(err) and "not made by accelkit" in err
    assert not (tmp_path / "all.db").exists()


def error_line(err: str) -> str:
    """The one `error:` line of a refused command (Lite 3's gRPC server may log more)."""
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    return line


def damaged(folder: Path, how: str) -> Path:
    """A copy of the fixture damaged as `how` says."""
    from pymilvus.grpc_gen import schema_pb2

    path = fixture_copy(folder)
    if how == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif how == "not sqlite":
        path.write_bytes(b"not a database at all\n" * 100)
    elif how == "other sqlite":
        path.unlink()
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE photos (id TEXT, data BLOB)")
    elif how == "torn row":
        with sqlite3.connect(path) as db:
            db.text_factory = bytes  # the engine stores its protobufs as TEXT
            (rowid, data), *_ = db.execute('SELECT id, data FROM "photos" ORDER BY id')
            db.execute('UPDATE "photos" SET data = ? WHERE id = ?', (data[:-9], rowid))
    elif how == "unfinished write":  # a writer gone mid-transaction: a hot journal left
        import subprocess
        import sys

        stopped = (
            "import os, sqlite3, sys; db = sqlite3.connect(sys.argv[1], isolation_level=None);"
            " db.execute('PRAGMA cache_size=1'); db.execute('BEGIN');"
            " db.execute('DELETE FROM photos'); os._exit(0)"
        )
        subprocess.run([sys.executable, "-c", stopped, str(path)], check=True)
        assert Path(f"{path}-journal").stat().st_size > 0
    elif how == "unknown type":
        with sqlite3.connect(path) as db:
            db.text_factory = bytes
            (key, blob), *_ = db.execute(
                "SELECT id, blob_field FROM collection_meta WHERE collection_name = 'photos'"
                " AND meta_type = 'schema'"
            )
            schema = schema_pb2.CollectionSchema.FromString(blob)
            schema.fields[2].data_type = schema_pb2.DataType.Value("Float16Vector")
            db.execute("UPDATE collection_meta SET blob_field = ? WHERE id = ?",
                       (schema.SerializeToString(), key))  # fmt: skip
    return path


@pytest.mark.parametrize(
    "how, says",
    [
        ("truncated", "damaged"),
        ("not sqlite", "no SQLite header"),
        ("other sqlite", "without Milvus Lite's collection_meta table"),
        ("torn row", "row 1 does not decode"),
        ("unknown type", "'metadata' is of type Float16Vector"),
        ("unfinished write", "holds a write its engine did not finish"),
    ],
)
def test_what_the_reader_does_not_understand_is_one_line(tmp_path, how, says):
    from accelkit.errors import InputError
    from accelkit.images.store.lite2_file import Lite2File

    path = damaged(tmp_path, how)
    with pytest.raises(InputError) as refused, Lite2File(str(path)) as lite:
        for name in lite.collections():
            for _ in lite.rows(name):
                pass
    message = str(refused.value)
    assert says in message and str(path) in message and "\n" not in message


@pytest.mark.parametrize("how", ["truncated", "torn row"])
def test_a_damaged_2x_file_is_refused_before_anything_is_copied(tmp_path, capsys, how):
    source = damaged(tmp_path, how)
    code, _, err = migrate(source, tmp_path / "new.db", capsys, "photos")
    assert code == 2 and str(source) in error_line(err)
    if how == "truncated":  # refused at open: DST never made
        assert not (tmp_path / "new.db").exists()


def test_a_database_the_installed_engine_cannot_open_is_one_line(tmp_path, capsys):
    """Lite 3: a 2.x file as DST. Lite 2: a Lite 3 directory as SRC (its shape: made by hand,
    as no Lite 3 engine is here to make one)."""
    source = fixture_copy(tmp_path)
    if major() >= 3:
        other = tmp_path / "other.db"
        shutil.copyfile(source, other)
        code, _, err = run_cli(
            ["images", "migrate", str(source), str(other), "-c", "photos"], capsys
        )
        assert code == 2 and f"DST {other} is a Milvus Lite 2.x database" in error_line(err)
    else:
        lite3 = tmp_path / "three.db"
        for entry in ("collections", "databases"):
            (lite3 / entry).mkdir(parents=True)
        code, _, err = run_cli(["images", "migrate", str(lite3), str(tmp_path / "new.db")], capsys)
        assert code == 2 and f"SRC {lite3} is a Milvus Lite 3.x database" in error_line(err)
        assert "milvus-lite>=3" in err


def test_an_unfinished_write_is_undone_as_the_refusal_says(tmp_path):
    """The advised command, pasted into a shell, undoes the write; a path with shell syntax in
    it (findings 56 #9: `x$(touch PWNED).db` ran touch, `it's.db` broke the quoting) is quoted.
    Under Lite 3, the advice to migrate a 2.x file quotes its path too."""
    import os
    import shlex
    import subprocess

    from accelkit.errors import DataError, InputError
    from accelkit.images.store import StoreConfig, VectorStore
    from accelkit.images.store.lite import lite_generation
    from accelkit.images.store.lite2_file import Lite2File

    folder = tmp_path / "x$(touch PWNED) it's"
    folder.mkdir()
    path = damaged(folder, "unfinished write")
    with pytest.raises(DataError) as refused:
        Lite2File(str(path))
    advice = str(refused.value).split("then run again: ")[1]
    assert advice.startswith("python3 -c ")
    python = os.path.dirname(shutil.which("python3") or "")
    env = {**os.environ, "PATH": os.pathsep.join([python, os.environ.get("PATH", "")])}
    subprocess.run(["bash", "-c", advice], check=True, cwd=tmp_path, env=env)
    assert not (tmp_path / "PWNED").exists()
    with Lite2File(str(path)) as lite:
        assert lite.count("photos") == 172 and lite.count("clips") == 60
    if lite_generation() >= 3:
        with pytest.raises(InputError) as refused, VectorStore(StoreConfig(uri=str(path))):
            pass
        assert f"images migrate {shlex.quote(str(path))} NEW.db" in str(refused.value)


def test_a_stopped_copy_from_a_2x_file_resumes_after_its_mark(tmp_path, capsys, monkeypatch):
    """The copy fails on its third batch; run again, it goes on after the last id it marked
    and ends with every item equal."""
    import json

    from accelkit.images.store import StoreConfig, StoreError
    from accelkit.images.store.lite2_file import Lite2Store
    from accelkit.images.store.writes import ItemWrites

    source, target = fixture_copy(tmp_path), tmp_path / "new.db"
    upsert, calls = ItemWrites.upsert, []

    def failing(self, name, ids, *args, **kwargs):
        calls.append(list(ids))
        if len(calls) == 3:
            raise StoreError(f"upserting into {name!r} failed: gone")
        return upsert(self, name, ids, *args, **kwargs)

    monkeypatch.setattr(ItemWrites, "upsert", failing)
    code, _, err = migrate(source, target, capsys, "photos", batch_size=64)
    assert code == 2 and "stopped in the copy (128 of 172 items" in error_line(err)
    monkeypatch.setattr(ItemWrites, "upsert", upsert)
    code, out, err = migrate(source, target, capsys, "photos", batch_size=64)
    assert code == 0, err
    (copy,) = json.loads(out)["collections"]
    assert copy["resumed_after"] == calls[1][-1] and copy["copied"] == 172 - 128
    with Lite2Store(StoreConfig(uri=str(source))) as src:
        want = [row for rows in src.iterate("photos", 100) for row in rows]
    assert bits(copy_everything({"uri": str(target)}, "photos")["items"]) == bits(want)


def test_a_finished_copy_of_a_2x_file_run_again_keeps_what_the_new_store_gained(tmp_path, capsys):
    """On the 2.x → Lite 3 path too: photos inserted into the new store after the copy are
    kept by the same command run again (it once advised --restart, which dropped them)."""
    import json

    from accelkit.images.store import StoreConfig, VectorStore

    source, target = fixture_copy(tmp_path), tmp_path / "new.db"
    assert migrate(source, target, capsys, "clips")[0] == 0
    with VectorStore(StoreConfig(uri=str(target))) as store:
        dim = store.describe_dim("clips")
        store.upsert("clips", ["added-later"], np.ones((1, dim), np.float32))
    code, out, err = migrate(source, target, capsys, "clips")
    assert code == 0, err
    (copy,) = json.loads(out)["collections"]
    assert copy["copied"] == 0 and copy["extra"] == 1 and copy["verified"], copy
    assert "nothing needs doing" in copy["note"] and "--restart" not in copy["note"]
    with VectorStore(StoreConfig(uri=str(target))) as store:
        assert store.count("clips", consistency="Strong") == 61
