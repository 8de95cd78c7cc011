"""Object-storage paths (`accelkit.runtime.storage`) against a real S3 API on 127.0.0.1 (moto)."""

import pickle
from pathlib import Path

import pytest

from accelkit.errors import InputError
from accelkit.runtime import storage


def test_local_paths_and_file_uris_stay_plain_paths(tmp_path):
    assert storage.as_path(str(tmp_path)) == tmp_path
    assert storage.as_path(f"file://{tmp_path}") == tmp_path
    assert isinstance(storage.as_path("relative/x.parquet"), Path)
    assert not storage.is_uri("C:/data") and storage.is_uri("s3://b/k") and storage.is_uri("gs://b")
    with pytest.raises(InputError, match="names host"):
        storage.as_path("file://elsewhere/x")
    with pytest.raises(InputError, match="names no bucket"):
        storage.as_path("s3:///key")


def test_bad_endpoint_is_one_line_naming_the_fix():
    with pytest.raises(InputError, match="--endpoint-url or AWS_ENDPOINT_URL"):
        storage.as_path("s3://bucket/key", endpoint_url="ftp://host")


def test_object_path_reads_lists_writes_and_pickles(s3_env, tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "one.parquet").write_bytes(b"1")
    (tmp_path / "a" / "b" / "two.parquet").write_bytes(b"22")
    (tmp_path / "a" / "b" / "note.txt").write_text("hello")
    root = storage.as_path(s3_env.upload(tmp_path / "a", "accelkit-storage", "root"))
    assert root.is_dir() and not root.is_file() and root.exists()
    assert [str(p) for p in storage.files_under(root, "*.parquet")] == [
        "s3://accelkit-storage/root/b/two.parquet",
        "s3://accelkit-storage/root/one.parquet",
    ]
    note = root / "b" / "note.txt"
    assert note.is_file() and note.read_text() == "hello" and note.suffix == ".txt"
    assert note.relative_to(root).as_posix() == "b/note.txt" and note.parent == root / "b"
    assert not (root / "missing").exists()
    (root / "out.json").write_bytes(b"{}")
    again = pickle.loads(pickle.dumps(root / "out.json"))
    assert again == root / "out.json" and again.read_bytes() == b"{}"
    with pytest.raises(InputError, match="does not exist"):
        (root / "missing").read_bytes()
