"""`accelkit images embed|insert --ray` on a real Ray cluster on 127.0.0.1 (head + worker node, see
conftest), with images on S3 (moto) and vectors into a real Milvus server: embeddings equal the
local run's to 1e-6, a bad image fails itself and is listed, ids equal the local insert's."""

import json
from pathlib import Path

import numpy as np
import pytest

from accelkit.images.embedding.ray import MANIFEST, read_shards
from tests.support.cli import result_of, run_cli
from tests.support.groups import SERVERS

pytestmark = [pytest.mark.xdist_group(SERVERS), pytest.mark.slow]


@pytest.fixture(scope="module")
def photo_folder(tmp_path_factory) -> Path:
    """Real photos as JPEG and PNG files in two folders, and one file that is not an image."""
    from PIL import Image

    from accelkit.images.testing import photos

    folder = tmp_path_factory.mktemp("photos")
    for i, (name, array) in enumerate(sorted(photos().items())):
        sub = folder / ("a" if i % 2 else "b")
        sub.mkdir(exist_ok=True)
        Image.fromarray(array).save(sub / f"{name}.{'jpg' if i % 3 else 'png'}")
    (folder / "a" / "broken.jpg").write_bytes(b"\xff\xd8\xff not a jpeg at all")
    return folder


@pytest.fixture(scope="module")
def local_run(photo_folder, tmp_path_factory):
    """The local embedding run: vectors by name inside the folder, failures by name."""
    out = tmp_path_factory.mktemp("local") / "emb.npy"
    from accelkit.cli import main

    with pytest.raises(SystemExit) as done:
        main(["images", "embed", str(photo_folder), "-o", str(out), "--no-progress"])
    assert done.value.code == 0
    names = [
        Path(p).relative_to(photo_folder).as_posix()
        for p in out.with_name("emb.inputs.txt").read_text().split()
    ]
    failures = json.loads(out.with_name("emb.failures.json").read_text())
    return dict(zip(names, np.load(out), strict=True)), failures


def test_embed_on_the_cluster_from_s3_equals_local(
    ray_cluster, s3_env, photo_folder, local_run, capsys
):
    vectors, local_failures = local_run
    uri = s3_env.upload(photo_folder, "accelkit-images", "photos")
    output = "s3://accelkit-images/out/emb"
    code, out, err = run_cli(
        [
            "images",
            "embed",
            uri,
            "--ray",
            ray_cluster.address,
            "--batch-size",
            "4",  # several batches, shards and both actors
            "-o",
            output,
            "--no-progress",
            "--json",
        ],
        capsys,
    )
    assert code == 0, err
    summary = result_of(out)
    assert summary["embedded"] == len(vectors) and summary["failed"] == 1
    assert summary["shards"] > 1
    got, sources = read_shards(output)
    names = [source.removeprefix(uri + "/") for source in sources]
    assert names == sorted(vectors)  # every image once, in input order
    expected = np.stack([vectors[name] for name in names])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
    failures = json.loads(
        s3_env.client()
        .get_object(Bucket="accelkit-images", Key="out/emb.failures.json")["Body"]
        .read()
    )
    assert list(failures) == [f"{uri}/a/broken.jpg"]
    [(_local_name, local_reason)] = local_failures.items()
    assert failures[f"{uri}/a/broken.jpg"].replace(uri, "") == local_reason.replace(
        str(photo_folder), ""
    )


def test_embed_on_the_cluster_into_a_local_folder_replaces_an_earlier_run(
    ray_cluster, photo_folder, local_run, tmp_path, capsys
):
    vectors, _ = local_run
    output = tmp_path / "emb"
    output.mkdir()
    (output / "part-000000999.parquet").write_bytes(b"an earlier run's shard")
    code, _, err = run_cli(
        [
            "images",
            "embed",
            str(photo_folder / "b"),
            "--ray",
            ray_cluster.address,
            "-o",
            str(output),
            "--no-progress",
        ],
        capsys,
    )
    assert code == 0, err
    assert not (output / "part-000000999.parquet").exists()
    assert json.loads((output / MANIFEST).read_text())["embedded"] == len(
        [n for n in vectors if n.startswith("b/")]
    )
    got, sources = read_shards(str(output))
    expected = np.stack([vectors[Path(s).relative_to(photo_folder).as_posix()] for s in sources])
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_insert_on_the_cluster_into_a_milvus_server(
    ray_cluster, milvus_server, photo_folder, tmp_path, capsys
):
    """The actors upsert into the server: the same ids (content hashes) and vectors as a local
    insert, the bad image reported, nothing else stored."""
    from accelkit.runtime.logs import import_library

    MilvusClient = import_library("pymilvus", "images").MilvusClient

    from tests.support.milvus_server import server_database

    database = server_database(milvus_server, "ray_insert")
    config = tmp_path / "images.yaml"
    config.write_text(f"store:\n  uri: {milvus_server.uri}\n  db_name: {database}\n  timeout: 60\n")
    results = {}
    for name, extra in (("local", []), ("ray", ["--ray", ray_cluster.address])):
        code, out, err = run_cli(
            [
                "images",
                "insert",
                str(photo_folder),
                "--config",
                str(config),
                "--collection",
                name,
                "--create-collection",
                "--json",
                "--no-progress",
                *extra,
            ],
            capsys,
        )
        assert code == 0, err
        results[name] = result_of(out)
    local, ray = results["local"], results["ray"]
    assert {i["id"]: i["source"] for i in ray["items"]} == {
        i["id"]: i["source"] for i in local["items"]
    }
    assert [f["input"] for f in ray["failures"]] == [str(photo_folder / "a" / "broken.jpg")]
    client = MilvusClient(uri=milvus_server.uri, db_name=database, timeout=60)
    try:
        ids = [i["id"] for i in local["items"]]
        rows = {
            name: {
                r["id"]: np.asarray(r["vector"], np.float32)
                for r in client.get(collection_name=name, ids=ids, output_fields=["vector"])
            }
            for name in ("local", "ray")
        }
        client.flush("ray")
        assert client.get_collection_stats("ray")["row_count"] == len(ids)  # nothing else
    finally:
        client.close()
    assert set(rows["ray"]) == set(ids)
    for item_id in ids:
        np.testing.assert_allclose(rows["ray"][item_id], rows["local"][item_id], atol=1e-6)
    # the collection Ray made records its model, as a local insert's does; and another model's
    # vectors go into it neither locally nor on Ray (once it made one without a record and
    # filled anyone's collection unchecked)
    from accelkit import images

    made = {n: images.describe_collection(n, config=config)["model"] for n in ("local", "ray")}
    assert made["ray"] == made["local"] and made["ray"]["name"] == "efficientnet-lite0"
    other = tmp_path / "other.yaml"
    other.write_text(config.read_text() + "model:\n  name: another-model\n")
    for extra in ([], ["--ray", ray_cluster.address]):
        code, _out, err = run_cli(
            ["images", "insert", str(photo_folder / "b"), "--config", str(other), "-c", "ray",
             "--no-progress", *extra],
            capsys,
        )  # fmt: skip
        assert code == 2 and "holds vectors of model 'efficientnet-lite0'" in err, err
    assert images.describe_collection("ray", config=config)["count"] == len(ids)


def test_ray_refusals_are_one_line_errors(photo_folder, tmp_path, capsys):
    """Checked before any cluster is reached: exit code 2 and the flag named."""
    lite = tmp_path / "images.yaml"
    lite.write_text(f"store:\n  uri: {tmp_path / 'store.db'}\n")
    cases = [
        (["images", "insert", str(photo_folder), "--config", str(lite), "--ray", "local"], "Lite"),
        (["images", "embed", str(photo_folder), "--ray-actors", "2"], "--ray-actors"),
        (["images", "embed", str(photo_folder), "--ray", "local", "-o", "x.npy"], "-o x.npy"),
        (["images", "insert", str(photo_folder), "--ray", "local", "--ids", "a"], "--ids"),
        (["images", "embed", str(photo_folder), "--ray", "local", "--ray-actors", "0"], "0"),
    ]
    for args, named in cases:
        code, _, err = run_cli([*args, "--no-progress"], capsys)
        assert code == 2, (args, err)
        assert named in err and len(err.strip().splitlines()) == 1, err


def test_workers_without_the_images_code_fail_in_one_line(photo_folder, tmp_path):
    """A cluster whose nodes run an accelkit without the images code (an older version, another
    environment's Python): the command ends with one line naming the module the workers cannot
    import and the install to make, exit 2, not an internal error with Ray's traceback."""
    import os
    import re
    import subprocess
    import sys

    from tests.support.ray_cluster import RayCluster

    stale = tmp_path / "stale" / "accelkit"
    stale.mkdir(parents=True)
    (stale / "__init__.py").write_text('"""an accelkit without its images package"""\n')
    cluster = RayCluster({"PYTHONPATH": str(stale.parent), "JAX_PLATFORMS": "cpu"}).start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "accelkit", "images", "embed", str(photo_folder), "--ray",
             cluster.address, "--ray-actors", "1", "-o", str(tmp_path / "out"), "--no-progress"],
            env={**os.environ, **cluster.client_env}, capture_output=True, text=True,
            timeout=600, check=False,
        )  # fmt: skip
    finally:
        cluster.stop()
    assert done.returncode == 2, done.stderr
    # Ray's C++ core writes its own log lines to the driver's stderr (one, about the actor pool's
    # constructor arguments, comes with every run): not ours to word; every other line is
    glog = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+ [IWEF] \d+ \d+\] ")
    lines = [line for line in done.stderr.strip().splitlines() if not glog.match(line)]
    assert len(lines) == 1, done.stderr
    assert "workers cannot import 'accelkit.images'" in lines[0], lines[0]
    assert "images extra" in lines[0]
