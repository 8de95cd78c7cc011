"""`accelkit images` tables at 80 and 120 columns: file names (metadata["source"]), ids, scores
and counts are never cut (the shared `runtime.tables.fitting_table`)."""

import pytest
from PIL import Image

from tests.support.cli import result_of, run_cli
from tests.support.tables import WIDTHS, assert_whole

NAMES = ["a_cat_photographed_on_a_sunny_afternoon_in_the_garden_0001", "rocket", "coffee_cup_02"]


@pytest.fixture(scope="module")
def setup(tmp_path_factory, onnx_path, photos):
    base = tmp_path_factory.mktemp("table-widths")
    folder = base / "a_folder_of_holiday_photos"
    folder.mkdir()
    for name, photo in zip(NAMES, ("chelsea", "rocket", "coffee"), strict=True):
        Image.fromarray(photos[photo]).save(folder / f"{name}.png")
    config = base / "cfg.yaml"
    config.write_text(
        f"preprocess:\n  cache_compiled: false\n  batch_size: 8\nmodel:\n  onnx_path: {onnx_path}\n"
        f"store:\n  uri: {base / 'widths.db'}\n  collection_name: holiday_photos_collection\n"
    )
    return {"folder": folder, "config": str(config)}


def images(capsys, *args):
    return run_cli(["images", *args], capsys)


@pytest.mark.parametrize("width", WIDTHS)
def test_insert_search_and_list_tables_fit(setup, capsys, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    config, folder = setup["config"], setup["folder"]
    collection = f"widths_{width}"
    code, out, err = images(
        capsys, "insert", str(folder), "-c", collection, "--create-collection", "--config", config
    )
    assert code in (0, None), err
    assert_whole(out, width, [f"{n}.png" for n in NAMES])
    query = str(folder / f"{NAMES[0]}.png")
    code, out, err = images(capsys, "search", query, "-c", collection, "--config", config)
    assert code in (0, None), err
    code, printed, _ = images(
        capsys, "search", query, "-c", collection, "--config", config, "--json"
    )
    hits = result_of(printed)["results"]
    assert hits[0]["metadata"]["source"] == f"{NAMES[0]}.png"
    cells = [h["metadata"]["source"] for h in hits] + [f"{h['score']:.4f}" for h in hits]
    assert_whole(out, width, cells + [str(h["id"]) for h in hits])
    code, out, err = images(capsys, "collection", "list", "--config", config)
    assert code in (0, None), err
    assert_whole(out, width, [collection, "1280", "3"])
