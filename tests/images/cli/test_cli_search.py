"""`accelkit images insert/search/collection/health` on a local Milvus Lite store."""

import pytest
from PIL import Image

from accelkit.images.testing import altered
from tests.support.cli import result_of


def run(capsys, *args) -> tuple[int, str, str]:
    from accelkit.cli import main

    with pytest.raises(SystemExit) as done:
        main(["images", *args])
    out = capsys.readouterr()
    return done.value.code or 0, out.out, out.err


@pytest.fixture
def config(tmp_path, onnx_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(
        f"preprocess:\n  cache_compiled: false\n  batch_size: 8\nmodel:\n  onnx_path: {onnx_path}\n"
        f"store:\n  uri: {tmp_path / 'cli.db'}\n  collection_name: pics\n"
    )
    return str(path)


def test_cli_store_round_trip(tmp_path, config, photos, capsys):
    folder = tmp_path / "imgs"
    folder.mkdir()
    names = ["astronaut", "chelsea", "coffee", "rocket"]
    for name in names:
        Image.fromarray(photos[name]).save(folder / f"{name}.png")
    (folder / "zz_broken.jpg").write_bytes(b"broken")
    code, out, err = run(
        capsys,
        "collection",
        "create",
        "pics",
        "--description",
        "cli test",
        "--metric",
        "COSINE",
        "--config",
        config,
        "--json",
    )
    assert code == 0 and result_of(out)["description"] == "cli test"
    code, out, err = run(
        capsys,
        "insert",
        str(folder),
        "--ids",
        "a,b,c,d,e",
        "--metadata",
        '{"source": "cli"}',
        "--config",
        config,
        "--json",
    )
    assert code == 0, err
    report = result_of(out)
    assert [i["id"] for i in report["items"]] == ["a", "b", "c", "d"] and report["failures"][0][
        "input"
    ].endswith("zz_broken.jpg")
    query = tmp_path / "query.jpg"
    query.write_bytes(altered(photos["coffee"]))
    code, out, err = run(capsys, "search", str(query), "--topk", "2", "--config", config, "--json")
    results = result_of(out)["results"]
    assert (
        code == 0
        and results[0]["id"] == "c"
        and results[0]["metadata"] == {"source": "cli"}
        and len(results) == 2
    )
    code, out, err = run(
        capsys,
        "search",
        str(query),
        "--filter",
        'metadata["source"] == "elsewhere"',
        "--config",
        config,
        "--json",
    )
    assert code == 0 and result_of(out)["results"] == []
    code, out, err = run(capsys, "search", str(query), "--config", config)  # a table for people
    assert code == 0 and "rank" in out and " c " in out
    code, out, err = run(capsys, "collection", "list", "--config", config, "--json")
    assert code == 0 and [(c["name"], c["count"]) for c in result_of(out)["collections"]] == [
        ("pics", 4)
    ]
    code, out, err = run(capsys, "collection", "stats", "pics", "--config", config)
    assert code == 0 and "FLAT" in out and "1280" in out
    code, out, err = run(capsys, "health", "--config", config, "--json")
    health = result_of(out)
    assert (
        code == 0
        and health["status"] == "ok"
        and health["model"]["dim"] == 1280
        and health["store"]["collections"] == 1
    )
    code, out, err = run(capsys, "collection", "delete", "pics", "--config", config)
    assert code == 0 and "deleted collection pics" in out
    # errors: one line, exit 2
    for args in (
        ["search", str(query), "--config", config],
        ["collection", "stats", "nope", "--config", config],
        ["insert", str(folder / "astronaut.png"), "--collection", "nope", "--config", config],
        ["insert", str(folder / "astronaut.png"), "--metadata", "[1, 2]", "--config", config],
        ["collection", "create", "bad-name", "--config", config],
    ):
        code, out, err = run(capsys, *args)
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, (args, err)
    code, out, err = run(
        capsys,
        "insert",
        str(folder / "astronaut.png"),
        "--create-collection",
        "--collection",
        "fresh",
        "--config",
        config,
    )
    assert code == 0 and "inserted 1 of 1 into fresh" in out


def test_search_results_name_the_files(tmp_path, config, photos, capsys):
    """Inserting files records each one's path inside the folder given under "source"; search
    shows it, in the table and in JSON."""
    folder = tmp_path / "album"
    (folder / "trip").mkdir(parents=True)
    Image.fromarray(photos["rocket"]).save(folder / "trip" / "launch.png")
    Image.fromarray(photos["chelsea"]).save(folder / "cat.png")
    code, out, err = run(
        capsys,
        "insert",
        str(folder),
        "-c",
        "named",
        "--create-collection",
        "--config",
        config,
        "--json",
    )
    assert code == 0, err
    assert sorted(i["source"] for i in result_of(out)["items"]) == ["cat.png", "trip/launch.png"]
    query = tmp_path / "q.jpg"
    query.write_bytes(altered(photos["rocket"]))
    code, out, err = run(capsys, "search", str(query), "-c", "named", "--config", config, "--json")
    results = result_of(out)["results"]
    assert code == 0 and results[0]["metadata"] == {"source": "trip/launch.png"}
    assert len(results[0]["id"]) == 32  # a content id: the name is what a person reads
    code, out, err = run(capsys, "search", str(query), "-c", "named", "--config", config)
    assert code == 0 and "source" in out and "trip/launch.png" in out
    single = tmp_path / "solo.png"
    Image.fromarray(photos["coffee"]).save(single)
    code, out, err = run(capsys, "insert", str(single), "-c", "named", "--config", config, "--json")
    assert code == 0 and result_of(out)["items"][0]["source"] == "solo.png"


def test_inputs_are_checked_before_the_model_or_store_opens(tmp_path, capsys):
    """A missing file is the error, not the unreachable store or the missing model behind it."""
    path = tmp_path / "unreachable.yaml"
    path.write_text(
        f"model:\n  onnx_path: {tmp_path / 'no-model.onnx'}\nstore:\n  uri: http://127.0.0.1:9\n  timeout: 60\n"
    )
    missing = str(tmp_path / "nope.jpg")
    for args in (
        ["insert", missing, "--config", str(path)],
        ["search", missing, "--config", str(path)],
        ["embed", missing, "--config", str(path), "-o", str(tmp_path / "e.npy")],
    ):
        code, _out, err = run(capsys, *args)
        assert code == 2 and "nope.jpg: no such file" in err and err.count("\n") == 1, (args, err)
    code, _out, err = run(
        capsys, "search", str(tmp_path), "--filter", "x\x00", "--config", str(path)
    )
    assert code == 2 and "--filter contains a control character" in err


def test_health_of_an_unreachable_server_exits_3(capsys):
    import socket

    with socket.socket() as probe:  # a port with nothing listening on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, out, err = run(capsys, "health", "--server", f"http://127.0.0.1:{port}", "--json")
    assert code == 3, err
    assert result_of(out)["status"] == "unreachable"
    assert err.startswith("error: unhealthy") and err.count("\n") == 1


def test_min_score_folding_and_bad_values_on_the_command_line(
    tmp_path, pipeline, config, photos, capsys
):
    """--min-score cuts at the score numpy gives (and says so when nothing passes),
    --negative-id pushes the stored photo away (the formula in numpy), --fold-duplicates folds
    an altered copy under its original, and a bad value is one line naming the option, exit 2."""
    import numpy as np

    folder = tmp_path / "album"
    folder.mkdir()
    names = ["astronaut", "chelsea", "coffee", "rocket", "moon"]
    for name in names:
        Image.fromarray(photos[name]).save(folder / f"{name}.png")
    (folder / "rocket_copy.jpg").write_bytes(altered(photos["rocket"]))
    code, out, err = run(capsys, "insert", str(folder), "-c", "cut", "--create-collection", "--config", config)  # fmt: skip
    assert code == 0, err
    query = tmp_path / "q.jpg"
    query.write_bytes(altered(photos["rocket"]))
    stored = pipeline.embed_images([photos[n] for n in names] + [altered(photos["rocket"])])
    q = pipeline.embed_images([altered(photos["rocket"])])[0]
    scores = sorted((stored @ q / np.linalg.norm(stored, axis=1) / np.linalg.norm(q)).tolist())[
        ::-1
    ]
    cut_at = (scores[1] + scores[2]) / 2
    base = ["search", str(query), "-c", "cut", "--config", config]
    code, out, err = run(capsys, *base, "--min-score", str(cut_at), "--json")
    result = result_of(out)
    assert code == 0 and len(result["results"]) == 2 and result["message"] is None
    np.testing.assert_allclose([r["score"] for r in result["results"]], scores[:2], atol=1e-4)
    assert result["cut"]["kept"] == 2 and result["cut"]["dropped"] == 4
    # --negative-id on the best stored photo: the query pushed away from what sets it apart
    # from the candidates' centre μ (all 6), q' = q - 2w·(q·d)d/|d|², d = n - μ, w = 1/2
    best = result["results"][1 if result["results"][0]["metadata"]["source"] != "rocket.png" else 0]
    assert best["metadata"]["source"] == "rocket.png"
    code, out, err = run(capsys, *base, "--negative-id", best["id"], "--json")
    pushed = result_of(out)["results"]
    unit = stored / np.linalg.norm(stored, axis=1, keepdims=True)
    away = unit[3] - unit.mean(axis=0)
    steered = q / np.linalg.norm(q) - (away @ q / np.linalg.norm(q)) * away / (away @ away)
    steered /= np.linalg.norm(steered)  # the scores are cosines with it
    order = np.argsort(-(unit @ steered))
    sources = [f"{n}.png" for n in names] + ["rocket_copy.jpg"]
    assert code == 0 and [r["metadata"]["source"] for r in pushed] == [sources[i] for i in order]
    np.testing.assert_allclose([r["score"] for r in pushed], (unit @ steered)[order], atol=1e-4)
    # w = 1/2 takes away its lead over the candidates: it scores their mean, far below before
    after = {r["metadata"]["source"]: r["score"] for r in pushed}
    assert after["rocket.png"] == pytest.approx(np.mean(list(after.values())), abs=1e-4)
    assert best["score"] > np.mean(scores) + 0.1
    other = tmp_path / "coins.jpg"  # not stored: nothing scores 0.99
    other.write_bytes(altered(photos["coins"]))
    code, out, err = run(capsys, "search", str(other), *base[2:], "--min-score", "0.99")
    assert code == 0 and "no photo scores above 0.99 (the best scores" in out
    alike = float(unit[3] @ unit[5])  # the rocket and its copy
    fold = ["--fold-duplicates", "--fold-cosine", f"{alike - 0.01:.4f}", "-k", "3"]
    code, out, err = run(capsys, *base, *fold, "--json")
    results = result_of(out)["results"]
    assert code == 0 and len(results) == 3 and len(results[0]["similar"]) == 1
    assert results[0]["metadata"]["source"] in ("rocket.png", "rocket_copy.jpg")
    code, out, err = run(capsys, *base, *fold)
    assert code == 0 and "+1 similar" in out
    for option, value in (("--min-score", "nan"), ("--min-score", "1.5"), ("--fold-cosine", "0")):
        code, out, err = run(capsys, *base, option, value)
        assert code == 2 and err.startswith(f"error: {option}") and err.count("\n") == 1, err
