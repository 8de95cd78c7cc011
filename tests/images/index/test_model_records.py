"""A collection's model record is what every write checks against, even where it could have
changed behind this process's back: on a Milvus server another client may make a collection
anew under the same name with another model, and on Milvus Lite another program may have
dropped a collection whose catalog row stayed behind."""

import numpy as np
import pytest
from PIL import Image

from tests.support import two_tower
from tests.support.cli import result_of
from tests.support.groups import SERVERS

# one xdist worker runs this module (pyproject: --dist loadgroup), so
# its index is built once more at most (one test is the servers group's)
pytestmark = pytest.mark.xdist_group("model-records")


@pytest.fixture(scope="module")
def built(tmp_path_factory, photos):
    folder = tmp_path_factory.mktemp("records")
    _, files = two_tower.build(folder / "model")
    paths = []
    for name in ("chelsea", "coffee"):
        paths.append(folder / f"{name}.png")
        Image.fromarray(photos[name]).save(paths[-1])
    return files, paths


@pytest.mark.xdist_group(SERVERS)
def test_a_service_checks_a_collection_made_anew_by_another_client(built, milvus_server, tmp_path):
    """The service inserted into `pics` (and so knows its record); another client deletes it
    and makes it again for another model of the same width: the service's next insert is
    refused (409), not mixed into the other model's collection by a record read long ago."""
    import httpx

    from accelkit import images
    from tests.support.milvus_server import server_database
    from tests.support.service import Server

    files, paths = built
    database = server_database(milvus_server, "model_records")
    where = f"uri: {milvus_server.uri}\n  db_name: {database}\n  timeout: 60"

    def config(name: str):
        path = tmp_path / f"{name}.yaml"
        path.write_text(two_tower.config_yaml(files, milvus_server.uri, name).replace(f"uri: {milvus_server.uri}", where))  # fmt: skip
        return path

    ours, theirs = config("tiny-clip"), config("other-clip")
    server = Server(ours, tmp_path / "server.log").start()
    try:

        def insert(path):
            with open(path, "rb") as handle:
                return httpx.post(
                    server.url + "/insert",
                    files={"files": (path.name, handle.read())},
                    data={"collection": "pics", "create_collection": "true"},
                    timeout=120,
                )

        assert insert(paths[0]).status_code == 200
        images.delete_collection("pics", config=theirs)
        images.create_collection("pics", config=theirs)
        answer = insert(paths[1])
        assert answer.status_code == 409, answer.text
        assert answer.json()["error"]["code"] == "model_mismatch"
        assert "'other-clip'" in answer.json()["error"]["message"]
        assert images.describe_collection("pics", config=theirs)["count"] == 0
    finally:
        server.stop()


def test_a_lite_collection_inherits_nothing_of_a_dropped_ones_records(tmp_path, capsys):
    """A Lite collection dropped by another program (pymilvus itself) leaves its catalog row;
    one made again under its name must not take that row's model or migration mark — with the
    mark, `migrate` took the user's own collection for an unfinished copy to go on with."""
    from pymilvus import MilvusClient

    from accelkit.images.store import StoreConfig, VectorStore
    from accelkit.images.store.records import PROP_MODEL, PROP_ORIGIN
    from tests.support.migrate import run

    source, target = str(tmp_path / "s.db"), str(tmp_path / "t.db")
    model = {"name": "old-model", "dim": 8, "text": False, "fingerprint": None}
    with VectorStore(StoreConfig(uri=source)) as store:
        store.create_collection("pics", 8, model=model)
        store.upsert("pics", ["a", "b"], np.eye(2, 8, dtype=np.float32))
    assert run(capsys, "migrate", source, target)[0] == 0
    other = MilvusClient(uri=target)  # another program drops the copy
    other.drop_collection("pics")
    other.close()
    with VectorStore(StoreConfig(uri=target)) as store:  # the user's own collection, anew
        store.create_collection("pics", 8)
        store.upsert("pics", ["mine"], np.ones((1, 8), np.float32))
        assert store.recorded("pics", PROP_MODEL) is None
        assert store.recorded("pics", PROP_ORIGIN) is None
    code, _out, err = run(capsys, "migrate", source, target)
    assert code == 2 and "came from no migration" in err, err
    with VectorStore(StoreConfig(uri=target)) as store:
        assert [r["id"] for r in store.get("pics", ["a", "b", "mine"])] == ["mine"]


# Each tower has its own record -------------------------------------------------------------------
#
# The image tower (encoder weights and every setting that changes an image's vector) is checked
# on inserts and image searches; the text tower (encoder weights and the tokenizer, known by
# what it produces) only on text searches. A mismatch names the part that differs.


def run(capsys, *args) -> tuple[int, str, str]:
    from accelkit.cli import main

    with pytest.raises(SystemExit) as done:
        main(["images", *args])
    out = capsys.readouterr()
    return done.value.code or 0, out.out, out.err


def write_config(path, files, database, preprocess=None, model=None, text=True):
    """A config of the tiny two-tower model, with `preprocess` / `model` settings over it."""
    import yaml

    pre = {"image_size": two_tower.SIZE, "fit": "center-crop", "cache_compiled": False}
    mod = {
        "name": "tiny-clip",
        "onnx_path": str(files["image"]),
        "text_onnx_path": str(files["text"]),
        "tokenizer_path": str(files["tokenizer"]),
        "context_length": two_tower.CONTEXT,
        "embedding_dim": two_tower.DIM,
    }
    if not text:
        del mod["text_onnx_path"], mod["tokenizer_path"]
    body = {
        "preprocess": {**pre, **(preprocess or {})},
        "model": {**mod, **(model or {})},
        "store": {"uri": str(database), "collection_name": "pics"},
    }
    path.write_text(yaml.safe_dump(body))
    return str(path)


@pytest.fixture
def filled(built, tmp_path, capsys):
    """`pics` filled with the first photo by the two-tower model, whose tokenizer is a copy the
    test may change; (config writer, files, photo paths)."""
    import shutil

    files, paths = built
    tokenizer = tmp_path / "tokenizer.json"
    shutil.copy(files["tokenizer"], tokenizer)
    files = {**files, "tokenizer": tokenizer}
    database = tmp_path / "r.db"

    def config(name="c", **changes):
        return write_config(tmp_path / f"{name}.yaml", files, database, **changes)

    code, _out, err = run(capsys, "insert", str(paths[0]), "-c", "pics", "--create-collection", "--no-progress", "--config", config())  # fmt: skip
    assert code == 0, err
    return config, files, paths


def searches(capsys, config, photo) -> tuple[tuple[int, str], tuple[int, str]]:
    """(exit code, stderr) of an image search and of a text search of `pics`."""
    image = run(capsys, "search", str(photo), "-c", "pics", "--config", config)
    text = run(capsys, "search", "--text", "a cat", "-c", "pics", "--config", config)
    return (image[0], image[2]), (text[0], text[2])


def test_an_image_insert_never_reads_the_tokenizer(filled, capsys):
    """Seen: an insert with a truncated tokenizer.json succeeded, and once the right file was
    back every search (images too) failed blaming 'weights'. An insert into an existing
    collection checks the image tower only; the restored tokenizer searches."""
    config, files, paths = filled
    good = files["tokenizer"].read_bytes()
    files["tokenizer"].write_bytes(good[: len(good) // 2])
    code, _out, err = run(capsys, "insert", str(paths[1]), "-c", "pics", "--no-progress", "--config", config())  # fmt: skip
    assert code == 0, err
    # a new collection records both towers: a tokenizer that cannot be read is one line
    code, _out, err = run(capsys, "insert", str(paths[1]), "-c", "fresh", "--create-collection", "--no-progress", "--config", config())  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "tokenizer.json" in err, err
    files["tokenizer"].write_bytes(good)
    (image, text) = searches(capsys, config(), paths[0])
    assert image == (0, "") and text[0] == 0, (image, text)


def test_a_tokenizer_is_known_by_what_it_produces(filled, capsys):
    """The same tokenizer saved with other indentation and key order is the same tokenizer;
    one that tokenizes differently (another vocabulary) is refused for text queries only,
    naming the tokenizer."""
    import json

    config, files, paths = filled
    parsed = json.loads(files["tokenizer"].read_text())
    files["tokenizer"].write_text(json.dumps(parsed, indent=4, sort_keys=True))
    image, text = searches(capsys, config(), paths[0])
    assert image[0] == 0 and text[0] == 0, (image, text)
    parsed["model"]["vocab"]["cat"], parsed["model"]["vocab"]["dog"] = (
        parsed["model"]["vocab"]["dog"],
        parsed["model"]["vocab"]["cat"],
    )
    files["tokenizer"].write_text(json.dumps(parsed))
    image, text = searches(capsys, config(), paths[0])
    assert image[0] == 0, image
    assert text[0] == 2 and text[1].count("\n") == 1 and "tokenizer" in text[1], text
    assert "weights" not in text[1], text


def test_a_text_tower_added_to_an_image_only_collection_is_recorded(built, tmp_path, capsys):
    from accelkit import images

    files, paths = built
    database = tmp_path / "i.db"
    alone = write_config(tmp_path / "alone.yaml", files, database, text=False)
    code, _out, err = run(capsys, "insert", str(paths[0]), "-c", "pics", "--create-collection", "--no-progress", "--config", alone)  # fmt: skip
    assert code == 0, err
    assert images.describe_collection("pics", config=alone)["model"]["text"] is False
    both = write_config(tmp_path / "both.yaml", files, database)
    code, _out, err = run(capsys, "insert", str(paths[1]), "-c", "pics", "--no-progress", "--config", both)  # fmt: skip
    assert code == 0, err
    image, text = searches(capsys, both, paths[0])
    assert image[0] == 0 and text[0] == 0, (image, text)
    record = images.describe_collection("pics", config=both)["model"]
    assert record["text"] is True and record["text_tower"]["context_length"] == two_tower.CONTEXT
    # recorded: another text encoder is refused from now on
    _, other = two_tower.build(tmp_path / "retrained", seed=1)
    changed = write_config(tmp_path / "changed.yaml", {**files, "text": other["text"]}, database)
    image, text = searches(capsys, changed, paths[0])
    assert image[0] == 0 and text[0] == 2 and "text encoder weights" in text[1], (image, text)


SETTINGS = [
    ({"preprocess": {"fit": "letterbox"}}, "preprocess.fit"),
    ({"preprocess": {"resample": "bicubic"}}, "preprocess.resample"),
    ({"preprocess": {"image_size": 48}}, "preprocess.image_size"),
    ({"preprocess": {"mean": [0.5, 0.5, 0.5]}}, "preprocess.mean"),
    ({"preprocess": {"std": [0.5, 0.5, 0.5]}}, "preprocess.std"),
    ({"model": {"normalize": False}}, "model.normalize"),
]


@pytest.mark.parametrize(("change", "named"), SETTINGS, ids=[s[1] for s in SETTINGS])
def test_every_setting_that_changes_an_image_vector_is_recorded(filled, capsys, change, named):
    """Seen: a `fit: letterbox` insert into a center-crop collection was stored (exit 0),
    mixing incompatible vectors. Now inserts and image searches are refused naming the
    setting; text searches, which preprocess no image, go on."""
    from accelkit import images

    config, _files, paths = filled
    changed = config("changed", **change)
    code, _out, err = run(capsys, "insert", str(paths[1]), "-c", "pics", "--no-progress", "--config", changed)  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and named in err, err
    assert "set-model" in err
    image, text = searches(capsys, changed, paths[0])
    assert image[0] == 2 and named in image[1], image
    assert text[0] == 0, text
    assert images.describe_collection("pics", config=config())["count"] == 1


def test_a_resample_mismatch_names_both_filters(filled, capsys):
    """Seen: a bilinear config against a bicubic collection said `(configured: None)` (a
    record leaves the default, bilinear, out). Both directions name both filters."""
    config, _files, paths = filled
    bicubic = config("bicubic", preprocess={"resample": "bicubic"})
    code, _out, err = run(capsys, "insert", str(paths[1]), "-c", "pics", "--no-progress", "--config", bicubic)  # fmt: skip
    assert code == 2 and "preprocess.resample 'bilinear' (configured: 'bicubic')" in err, err
    code, _out, err = run(capsys, "insert", str(paths[0]), "-c", "cubic", "--create-collection", "--no-progress", "--config", bicubic)  # fmt: skip
    assert code == 0, err
    code, _out, err = run(capsys, "insert", str(paths[1]), "-c", "cubic", "--no-progress", "--config", config())  # fmt: skip
    assert code == 2 and "preprocess.resample 'bicubic' (configured: 'bilinear')" in err, err


def test_other_image_weights_are_named_and_leave_text_queries_alone(filled, tmp_path, capsys):
    _config, files, paths = filled
    _, other = two_tower.build(tmp_path / "retrained", seed=1)
    changed = write_config(
        tmp_path / "w.yaml", {**files, "image": other["image"]}, tmp_path / "r.db"
    )
    code, _out, err = run(capsys, "insert", str(paths[1]), "-c", "pics", "--no-progress", "--config", changed)  # fmt: skip
    assert code == 2 and "image encoder weights" in err and err.count("\n") == 1, err
    image, text = searches(capsys, changed, paths[0])
    assert image[0] == 2 and "image encoder weights" in image[1], image
    assert text[0] == 0, text  # the stored vectors are the text tower's partner's


def test_a_pre_release_record_is_refused_with_the_way_on(built, tmp_path, capsys):
    """A collection recorded by a pre-release accelkit (record version 1: one fingerprint over
    all the model's files) is not read as one of today's records: an insert and both searches
    are refused in one line naming `collection set-model`, which re-embeds stored items and
    records each tower; after it, both go on."""
    from accelkit.images.store import StoreConfig, VectorStore
    from accelkit.images.store.records import PROP_MODEL

    files, paths = built
    database = tmp_path / "v1.db"
    config = write_config(tmp_path / "c.yaml", files, database)
    code, _out, err = run(capsys, "insert", *map(str, paths), "-c", "pics", "--create-collection", "--no-progress", "--config", config)  # fmt: skip
    assert code == 0, err
    record = {"name": "tiny-clip", "dim": two_tower.DIM, "text": True, "fingerprint": "0" * 16}
    with VectorStore(StoreConfig(uri=str(database))) as store:  # as a pre-release recorded it
        store.record("pics", {PROP_MODEL: record})
    code, _out, err = run(capsys, "insert", str(paths[0]), "-c", "pics", "--no-progress", "--config", config)  # fmt: skip
    assert code == 2 and "pre-release" in err and "set-model pics" in err, err
    assert err.count("\n") == 1, err
    image, text = searches(capsys, config, paths[0])
    assert image[0] == 2 and text[0] == 2 and "set-model" in image[1] and "set-model" in text[1]
    code, out, err = run(capsys, "collection", "set-model", "pics", "--root", str(paths[0].parent), "--config", config, "--json")  # fmt: skip
    assert code == 0, err
    result = result_of(out)
    assert result["previous"] == record and result["model"]["text_tower"]["tokenizer"]
    image, text = searches(capsys, config, paths[0])
    assert image[0] == 0 and text[0] == 0, (image, text)


# Re-recording a model after the user checked it: `collection set-model` ----------------------


def test_set_model_refuses_vectors_that_differ(filled, capsys):
    """set-model re-embeds a seeded sample of stored items whose source it can read and
    refuses (exit 2, one line) when their vectors differ beyond the stated tolerance; the
    record stays as it was."""
    from accelkit import images

    config, _files, paths = filled
    root = str(paths[0].parent)
    changed = config("letterbox", preprocess={"fit": "letterbox"})
    code, _out, err = run(capsys, "collection", "set-model", "pics", "--root", root, "--config", changed)  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "cosine" in err, err
    assert images.describe_collection("pics", config=config())["model"]["image_tower"]["fit"] == "center-crop"  # fmt: skip


def test_set_model_records_a_checked_change(filled, capsys):
    """A change that leaves every vector as it was (a tokenizer re-saved, or here another
    data_format for a model whose input says its layout) is recorded after the check; then
    inserts go on."""
    from accelkit import images

    config, _files, paths = filled
    changed = config("nhwc", preprocess={"data_format": "NHWC"})
    code, _out, err = run(capsys, "insert", str(paths[1]), "-c", "pics", "--no-progress", "--config", changed)  # fmt: skip
    assert code == 2 and "preprocess.data_format" in err, err
    result = images.set_model("pics", roots=[str(paths[0].parent)], config=changed)
    assert result["checked"] == 1 and result["min_cosine"] > 0.9999, result
    assert images.describe_collection("pics", config=changed)["model"]["image_tower"]["data_format"] == "NHWC"  # fmt: skip
    code, _out, err = run(capsys, "insert", str(paths[1]), "-c", "pics", "--no-progress", "--config", changed)  # fmt: skip
    assert code == 0, err


def test_set_model_refuses_a_negative_seed(filled, capsys):
    """Seen: `--seed -1` was `internal error: ValueError` (exit 1) from numpy's generator."""
    config, _files, paths = filled
    code, _out, err = run(capsys, "collection", "set-model", "pics", "--root", str(paths[0].parent), "--seed", "-1", "--config", config())  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "--seed -1" in err and "at least 0" in err, err


def test_set_model_without_a_readable_item_needs_force(filled, tmp_path, capsys):
    from accelkit import images

    config, _files, _paths = filled
    elsewhere = tmp_path / "empty"
    elsewhere.mkdir()
    changed = config("nhwc", preprocess={"data_format": "NHWC"})
    code, _out, err = run(capsys, "collection", "set-model", "pics", "--root", str(elsewhere), "--config", changed)  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "--force" in err, err
    code, out, err = run(capsys, "collection", "set-model", "pics", "--root", str(elsewhere), "--force", "--config", changed, "--json")  # fmt: skip
    assert code == 0, err
    assert result_of(out)["forced"] is True and result_of(out)["checked"] == 0
    assert images.describe_collection("pics", config=changed)["model"]["image_tower"]["data_format"] == "NHWC"  # fmt: skip


# Paths: a config file's relative paths are beside it; a path that is no file says what it is ---


def test_a_config_files_relative_paths_work_from_another_working_folder(built, tmp_path):
    """Seen: model and tokenizer paths in the YAML resolved against the working folder, so
    `images serve` under a service manager (which runs in `/`) found no model. Run here from
    another folder, as a separate process."""
    import shutil
    import subprocess
    import sys

    files, paths = built
    folder = tmp_path / "deploy"
    (folder / "model").mkdir(parents=True)
    for key in ("image", "text", "tokenizer"):
        shutil.copy(files[key], folder / "model" / files[key].name)
    relative = {key: f"model/{files[key].name}" for key in files}
    config = folder / "images.yaml"
    write_config(config, relative, "data.db")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def accelkit(*args):
        done = subprocess.run(
            [sys.executable, "-m", "accelkit", "images", *args, "--config", str(config)],
            cwd=elsewhere, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        return done.returncode, done.stderr

    assert accelkit("insert", str(paths[0]), "-c", "pics", "--create-collection", "--no-progress") == (0, "")  # fmt: skip
    code, err = accelkit("search", "--text", "a cat", "-c", "pics")
    assert code == 0, err
    assert (folder / "data.db").exists() and not (elsewhere / "data.db").exists()


@pytest.mark.parametrize("setting", ["image", "text", "tokenizer"])
@pytest.mark.parametrize("kind", ["a FIFO", "a folder", "a socket"])
def test_a_model_path_that_is_not_a_file_says_what_it_is(built, tmp_path, capsys, setting, kind):
    """Seen: a FIFO given as the tokenizer was reported as "does not exist"."""
    import os
    import socket

    files, _paths = built
    odd = named = tmp_path / "odd"
    if kind == "a FIFO":
        os.mkfifo(odd)
    elif kind == "a folder":
        odd.mkdir()
        if setting == "tokenizer":  # a folder is where tokenizer.json is looked for
            named = odd / "tokenizer.json"
            named.mkdir()
    else:
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(odd))
    try:
        config = write_config(tmp_path / "c.yaml", {**files, setting: odd}, tmp_path / "o.db")
        code, _out, err = run(capsys, "collection", "create", "pics", "--config", config)
    finally:
        if kind == "a socket":
            listener.close()
    assert code == 2 and err.count("\n") == 1 and f"{named}: is {kind}" in err, err
