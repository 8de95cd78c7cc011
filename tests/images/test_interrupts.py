"""Ctrl-C and SIGTERM in `accelkit images`: embed and insert signalled mid-run in a terminal, and
the service stopped by a signal (the rest of the capabilities: tests/runtime/test_interrupts.py)."""

import signal

import pytest
from PIL import Image

from tests.support.interrupts import interrupt, leftovers
from tests.support.terminal import accelkit, run_in_terminal


@pytest.fixture(scope="module")
def many_photos(tmp_path_factory, photos):
    """96 photos: with batches of 4 an embed is long enough to be interrupted in."""
    folder = tmp_path_factory.mktemp("interrupt-photos")
    names = sorted(photos)
    for i in range(96):
        Image.fromarray(photos[names[i % len(names)]]).save(folder / f"p{i:03d}.jpg")
    return folder


@pytest.fixture
def config(tmp_path, onnx_path):
    path = tmp_path / "images.yaml"
    path.write_text(
        f"preprocess:\n  cache_compiled: false\n  batch_size: 4\nmodel:\n  onnx_path: {onnx_path}\n"
        f"store:\n  uri: {tmp_path / 'store.db'}\n"
    )
    return path


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_embed(many_photos, config, tmp_path, signum):
    out = tmp_path / "emb.npy"
    argv = accelkit("images", "embed", str(many_photos), "-o", str(out), "--config", str(config))
    run = interrupt(argv, "embedding", signum)
    name = signal.Signals(signum).name
    assert run.code == 128 + signum, run.output[-2000:]
    assert f"interrupted ({name}); nothing written" in run.output
    assert not out.exists() and not (tmp_path / "emb.inputs.txt").exists()
    assert leftovers(tmp_path) == []


def test_insert_says_what_it_kept_and_frees_the_database(many_photos, config, tmp_path):
    argv = accelkit("images", "insert", str(many_photos), "--config", str(config))
    argv += ["--collection", "pics", "--create-collection"]
    run = interrupt(argv, "inserting")
    assert run.code == 130, run.output[-2000:]
    line = next(line for line in run.output.splitlines() if "interrupted (SIGINT)" in line)
    assert line.endswith("nothing written") or "images stored in collection 'pics'" in line
    # the Milvus Lite file is free again, and holds what was acknowledged
    listed = run_in_terminal(
        accelkit("images", "collection", "list", "--config", str(config), "--json"), timeout=300
    )
    assert listed.code == 0, listed.output[-2000:]


def test_service_stops_on_a_signal(config, tmp_path):
    """SIGINT and SIGTERM stop `images serve` after a graceful shutdown, with the line and code."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        run = interrupt(
            accelkit("images", "serve", "--config", str(config), "--port", "0"),
            "accelkit images service on",
            signum,
        )
        name = signal.Signals(signum).name
        assert run.code == 128 + signum, run.output[-2000:]
        assert f"interrupted ({name})" in run.output
        assert "Traceback" not in run.output
