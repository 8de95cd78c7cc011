"""A collection's model record is what every write checks against, even where it could have
changed behind this process's back: on a Milvus server another client may make a collection
anew under the same name with another model, and on Milvus Lite another program may have
dropped a collection whose catalog row stayed behind."""

import numpy as np
import pytest
from PIL import Image

from tests.images import two_tower
from tests.support.groups import SERVERS


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
    from tests.images.test_service import Server
    from tests.support.milvus_server import server_database

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
    from tests.images.test_migrate import run

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
