"""`accelkit images` in a terminal at CI sizes: never a still screen for more than 2 s (scaled by
the run queue when the machine is busy), and a query that is not an image refused before the
model or the store opens."""

import subprocess

import pytest
from PIL import Image

from tests.support.terminal import accelkit, assert_never_silent, run_in_terminal

# one xdist worker runs this module (pyproject: --dist loadgroup), so its collection is made once
pytestmark = pytest.mark.xdist_group("images-terminal")


@pytest.fixture(scope="module")
def setup(tmp_path_factory, photos, onnx_path):
    base = tmp_path_factory.mktemp("terminal-images")
    folder = base / "photos"
    folder.mkdir()
    for name in sorted(photos)[:12]:
        Image.fromarray(photos[name]).save(folder / f"{name}.jpg")
    (base / "query.txt").write_text("not an image\n")
    config = base / "images.yaml"
    config.write_text(
        f"preprocess:\n  cache_compiled: false\nmodel:\n  onnx_path: {onnx_path}\n"
        f"store:\n  uri: {base / 'store.db'}\n"
    )
    # the collection `search` reads, made here: each xdist worker has its own module fixture,
    # and a test must not need what another test (maybe on the other worker) made
    subprocess.run(
        [
            *accelkit("-q", "images", "insert", str(folder), "--config", str(config)),
            *("-c", "s", "--create-collection"),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return {"base": base, "folder": folder, "config": config}


def command(setup, *args):
    values = {"folder": setup["folder"], "base": setup["base"], "config": setup["config"]}
    return accelkit(*(a.format(**values) for a in args))


@pytest.mark.parametrize(
    "args",
    [
        ("images", "embed", "{folder}", "-o", "{base}/emb.npy", "--config", "{config}"),
        ("images", "insert", "{folder}", "--config", "{config}", "-c", "t", "--create-collection"),
        ("images", "search", "{folder}/chelsea.jpg", "--config", "{config}", "-c", "s"),
        ("images", "collection", "list", "--config", "{config}"),
        ("images", "health", "--config", "{config}"),
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_never_silent(setup, args):
    run = run_in_terminal(command(setup, *args), timeout=600)
    assert run.code == 0, run.output[-3000:]
    assert_never_silent(run)


def test_a_query_that_is_not_an_image_is_refused_before_anything_opens(setup, tmp_path):
    config = tmp_path / "fresh.yaml"
    config.write_text(f"store:\n  uri: {tmp_path / 'never.db'}\n")
    run = run_in_terminal(
        accelkit("images", "search", str(setup["base"] / "query.txt"), "--config", str(config))
    )
    assert run.code == 2 and "not an image" in run.output, run.output
    assert not (tmp_path / "never.db").exists()  # the store was never opened
    assert_never_silent(run)
