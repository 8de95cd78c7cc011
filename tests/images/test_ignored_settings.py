"""What a backend does not apply is said, not silently dropped: Milvus Lite 2.x builds IVF_FLAT
but searches it the same whatever nprobe is (measured here), so a search warns once, the service
adds the line to its answer's warnings, and `images health` lists the index in use. Milvus Lite
3 (faiss) and a server apply it, and nothing is said."""

import httpx
import numpy as np
import pytest

from accelkit.images.store.lite import lite_generation
from tests.support.cli import envelope_of

ROWS, DIM, NLIST = 3000, 16, 64


def run(capsys, *args) -> tuple[int, str, str]:
    from accelkit.cli import main

    with pytest.raises(SystemExit) as done:
        main(["images", *args])
    out = capsys.readouterr()
    return done.value.code or 0, out.out, out.err


def searches(settings: dict, queries: np.ndarray, nprobe: int) -> list[list[str]]:
    """Top-10 ids per query at this nprobe, asked of Milvus directly."""
    from accelkit.images.store import StoreConfig, VectorStore

    with VectorStore(StoreConfig(**settings)) as store:
        store._client.load_collection("ivf")  # Lite 3 loads nothing of its own accord
        found = store._client.search(
            "ivf",
            data=queries.tolist(),
            limit=10,
            search_params={"metric_type": "COSINE", "params": {"nprobe": nprobe}},
            consistency_level="Strong",
        )
    return [[str(h["id"]) for h in hits] for hits in found]


@pytest.fixture(scope="module")
def ivf(store_settings):
    """An IVF_FLAT collection of clustered random vectors, on Lite and on the server."""
    from accelkit.images.store import StoreConfig, VectorStore

    rng = np.random.default_rng(7)
    centres = rng.normal(size=(NLIST, DIM))
    vectors = centres[rng.integers(0, NLIST, ROWS)] + 0.3 * rng.normal(size=(ROWS, DIM))
    with VectorStore(StoreConfig(**store_settings, nlist=NLIST)) as store:
        if "ivf" in store.list_collections():
            store.drop_collection("ivf")
        store.create_collection("ivf", DIM, index_type="IVF_FLAT")
        store.upsert("ivf", [f"v{i}" for i in range(ROWS)], vectors.astype(np.float32))
        store.wait_for_index("ivf", timeout=300)
    return store_settings, rng.normal(size=(40, DIM)).astype(np.float32)


def test_nprobe_is_ignored_by_lite_and_applied_by_a_server(ivf):
    from accelkit.images.store import StoreConfig, VectorStore

    settings, queries = ivf
    narrow, wide = searches(settings, queries, 1), searches(settings, queries, NLIST)
    server = "db_name" in settings or lite_generation() == 3  # both apply nprobe
    assert (narrow != wide) == server  # Lite 2: the same results whatever nprobe says
    with VectorStore(StoreConfig(**settings)) as store:
        said = store.ignored("ivf")
        in_use = store.index_in_use("ivf")
    assert in_use["index_type"] == "IVF_FLAT" and in_use["params"]["nlist"] == NLIST
    if server:
        assert said == [] and in_use["ignored"] == [] and in_use["params"]["nprobe"] == 16
    else:
        assert len(said) == 1 and "Milvus Lite ignores nprobe (16) for IVF_FLAT" in said[0]
        assert in_use["ignored"] == ["nprobe"] and "nprobe" not in in_use["params"]


def test_the_command_line_warns_once_and_health_lists_the_index(
    tmp_path, onnx_path, photos, capsys
):
    from PIL import Image

    query = tmp_path / "q.png"
    Image.fromarray(photos["coffee"]).save(query)
    config = tmp_path / "c.yaml"
    config.write_text(
        f"preprocess:\n  cache_compiled: false\nmodel:\n  onnx_path: {onnx_path}\n"
        f"store:\n  uri: {tmp_path / 'w.db'}\n  index_type: IVF_FLAT\n  nprobe: 64\n"
    )
    said = 0 if lite_generation() == 3 else 1  # Lite 3 applies nprobe
    code, out, err = run(capsys, "collection", "create", "pics", "--config", str(config))
    assert code == 0 and err.count("Milvus Lite ignores nprobe (64) for IVF_FLAT") == said
    code, out, err = run(capsys, "insert", str(query), "-c", "pics", "--config", str(config), "--json")  # fmt: skip
    warnings = envelope_of(out)["warnings"]
    assert code == 0 and len(warnings) == said and all("ignores nprobe (64)" in w for w in warnings)
    code, out, err = run(capsys, "search", str(query), "-c", "pics", "--config", str(config))
    assert code == 0 and err.count("ignores nprobe") == said and "coffee" not in err
    code, out, err = run(capsys, "collection", "create", "flat", "--index-type", "FLAT", "--config", str(config))  # fmt: skip
    assert code == 0 and "ignores" not in err
    code, out, err = run(capsys, "health", "--config", str(config))
    in_use = "nlist=128 nprobe=64" if lite_generation() == 3 else "nlist=128 (ignored: nprobe)"
    assert code == 0 and f"IVF_FLAT COSINE {in_use}" in out, out
    assert "index.flat" in out and "FLAT COSINE" in out
    code, out, err = run(capsys, "health", "--config", str(config), "--json")
    indexes = {c["name"]: c for c in envelope_of(out)["result"]["collections"]}
    assert indexes["pics"]["ignored"] == ["nprobe"] * said and indexes["flat"]["ignored"] == []


def test_the_service_adds_the_line_to_its_answers(tmp_path, onnx_path, photos):
    from PIL import Image

    from tests.support.service import Server

    query = tmp_path / "q.png"
    Image.fromarray(photos["coffee"]).save(query)
    config = tmp_path / "s.yaml"
    config.write_text(
        f"preprocess:\n  cache_compiled: false\nmodel:\n  onnx_path: {onnx_path}\n"
        f"store:\n  uri: {tmp_path / 's.db'}\n  index_type: IVF_FLAT\n"
    )
    server = Server(config, tmp_path / "server.log").start()
    try:
        files = {"files": ("q.png", query.read_bytes())}
        inserted = httpx.post(
            server.url + "/insert", files=files, data={"create_collection": "true"}
        )
        assert inserted.status_code == 200
        answer = httpx.post(server.url + "/search", files={"file": ("q.png", query.read_bytes())})
        assert answer.status_code == 200
        said = 0 if lite_generation() == 3 else 1  # Lite 3 applies nprobe
        lines = answer.json()["warnings"]
        assert len(lines) == said
        assert all("Milvus Lite ignores nprobe (16) for IVF_FLAT" in line for line in lines)
        health = httpx.get(server.url + "/health").json()  # no key set: the details are public
        (images,) = health["collections"]
        assert images["name"] == "images" and images["ignored"] == ["nprobe"] * said
    finally:
        server.stop()
