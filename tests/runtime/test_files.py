"""Atomic writes: permissions like a plain open(), old file kept on failure."""

import os
import stat

import pytest

from accelkit.errors import InputError
from accelkit.runtime.files import atomic_open, write_json_atomic


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_new_file_gets_umask_permissions_like_open(tmp_path, umask):
    previous = os.umask(umask)
    try:
        with open(tmp_path / "plain.txt", "w") as handle:
            handle.write("x")
        write_json_atomic(tmp_path / "atomic.json", {"a": 1})
    finally:
        os.umask(previous)
    assert _mode(tmp_path / "atomic.json") == _mode(tmp_path / "plain.txt") == 0o666 & ~umask


def test_replacing_keeps_the_existing_files_permissions(tmp_path):
    target = tmp_path / "stats.json"
    target.write_text("{}")
    os.chmod(target, 0o640)
    write_json_atomic(target, {"b": 2})
    assert _mode(target) == 0o640
    assert target.read_text() == '{\n  "b": 2\n}'


def test_failure_leaves_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_open(target, "wb") as handle:
        handle.write(b"new, half written")
        raise RuntimeError("interrupted")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_unserializable_payload_never_touches_the_file(tmp_path):
    target = tmp_path / "s.json"
    target.write_text("kept")
    with pytest.raises(ValueError):
        write_json_atomic(target, {"nan": float("nan")})
    assert target.read_text() == "kept"


def test_folder_target_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="is a folder"):
        write_json_atomic(tmp_path, {})


def test_a_full_disk_is_one_line_naming_the_path_and_leaves_the_old_file(tmp_path):
    from accelkit.errors import NoSpaceError
    from tests.support.small_disk import fill, small_disk

    with small_disk(tmp_path / "disk") as disk:
        target = disk / "stats.json"
        target.write_text("old")
        fill(disk)
        with pytest.raises(NoSpaceError) as caught, atomic_open(target, "wb") as handle:
            handle.write(b"x" * 200_000)
        message = str(caught.value)
        assert "\n" not in message and str(target) in message and "no space left" in message
        assert target.read_text() == "old"
        assert sorted(p.name for p in disk.iterdir()) == ["filler", "stats.json"]
