"""A two-tower model the user brings (an ONNX image encoder, an ONNX text encoder and a
tokenizer.json): search by words through the API, the CLI and the service, scored with the
model's own cosines; collections remember their model; a missing file is one line."""

import json

import numpy as np
import pytest
from PIL import Image

from tests.support import two_tower
from tests.support.cli import result_of

NAMES = ["chelsea", "coffee", "rocket", "astronaut", "moon"]
TEXTS = ["a photo of a cat at night", "Red bicycle!", "coffee cup", "zebra on the moon"]


def run(capsys, *args) -> tuple[int, str, str]:
    from accelkit.cli import main

    with pytest.raises(SystemExit) as done:
        main(["images", *args])
    out = capsys.readouterr()
    return done.value.code or 0, out.out, out.err


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = tmp_path_factory.mktemp("two-tower")
    model, files = two_tower.build(folder / "model")
    return model, files, folder


@pytest.fixture(scope="module")
def setup(built, photos):
    """The photos stored by the two-tower model in a Milvus Lite collection, and the model's
    own unit embeddings of them (on the preprocessed pixels, by PyTorch)."""
    from accelkit import images

    model, files, folder = built
    (folder / "photos").mkdir()
    paths = []
    for name in NAMES:
        path = folder / "photos" / f"{name}.png"
        Image.fromarray(photos[name]).save(path)
        paths.append(str(path))
    config = folder / "tiny.yaml"
    config.write_text(two_tower.config_yaml(files, str(folder / "tiny.db")))
    report = images.insert(paths, "pics", create_collection=True, config=config)
    assert report.ok and len(report.stored) == len(NAMES)
    vectors = two_tower.image_vectors(model, paths)
    return {"config": config, "paths": paths, "vectors": vectors, "model": model}


def expected(setup, query: np.ndarray) -> dict[str, float]:
    query = query / np.linalg.norm(query)
    return {f"{n}.png": float(v @ query) for n, v in zip(NAMES, setup["vectors"], strict=True)}


def scores(hits) -> dict[str, float]:
    return {hit.metadata["source"]: hit.score for hit in hits}


@pytest.mark.parametrize("text", TEXTS)
def test_words_find_images_with_the_models_own_cosines(setup, text):
    from accelkit import images

    report = images.search(text=text, topk=len(NAMES), collection="pics", config=setup["config"])
    want = expected(setup, two_tower.embed_text(setup["model"], text))
    got = scores(report.hits)
    assert set(got) == set(want)
    for name in want:
        assert got[name] == pytest.approx(want[name], abs=2e-5), name
    ranked = [hit.metadata["source"] for hit in report.hits]
    assert ranked == sorted(want, key=want.get, reverse=True) or np.allclose(
        sorted(got.values()), sorted(want.values()), atol=2e-5
    )
    assert report.text == text and report.query is None


def test_image_queries_of_the_same_model_are_unchanged(setup):
    from accelkit import images

    for i, path in enumerate(setup["paths"]):
        report = images.search(path, topk=len(NAMES), collection="pics", config=setup["config"])
        assert report.hits[0].metadata["source"] == f"{NAMES[i]}.png"
        want = expected(setup, setup["vectors"][i])
        for name, score in scores(report.hits).items():
            assert score == pytest.approx(want[name], abs=2e-5)


def test_the_command_line_searches_by_words(setup, capsys):
    text = "a photo of a cat at night"
    code, out, err = run(capsys, "search", "--text", text, "-c", "pics", "-k", "3", "--config", str(setup["config"]), "--json")  # fmt: skip
    assert code == 0, err
    result = result_of(out)
    assert result["text"] == text and result["query"] is None and len(result["results"]) == 3
    want = expected(setup, two_tower.embed_text(setup["model"], text))
    for hit in result["results"]:
        assert hit["score"] == pytest.approx(want[hit["metadata"]["source"]], abs=2e-5)
    code, out, err = run(capsys, "search", "--text", text, "-c", "pics", "--config", str(setup["config"]))  # fmt: skip
    assert code == 0 and f'for "{text}"' in out
    code, out, err = run(capsys, "search", "-c", "pics", "--config", str(setup["config"]))
    assert code == 2 and "give a query image or --text" in err
    code, out, err = run(capsys, "search", setup["paths"][0], "--text", "cat", "--config", str(setup["config"]))  # fmt: skip
    assert code == 2 and "one of the two" in err
    code, out, err = run(capsys, "search", "--text", "  ", "-c", "pics", "--config", str(setup["config"]))  # fmt: skip
    assert code == 2 and "--text is empty" in err
    code, out, err = run(capsys, "search", "--text", '""', "-c", "pics", "--config", str(setup["config"]))  # fmt: skip
    assert code == 2 and err.startswith("error: --text: only empty quotes") and err.count("\n") == 1


def test_collections_remember_their_model(setup, built, onnx_path, tmp_path, capsys):
    """A collection is filled and searched only by the model that made its vectors: another
    model's name, or the same name with other weights, is one clear error before any work."""
    from accelkit import images
    from accelkit.images.index.base import ModelMismatchError

    info = images.describe_collection("pics", config=setup["config"])
    assert info["model"]["name"] == "tiny-clip" and info["model"]["text"] is True
    assert (
        info["model"]["dim"] == two_tower.DIM and len(info["model"]["image_tower"]["weights"]) == 16
    )
    assert len(info["model"]["text_tower"]["tokenizer"]) == 16
    database = json.dumps(str(setup["config"].parent / "tiny.db"))
    default = tmp_path / "default.yaml"
    default.write_text(
        f"model:\n  onnx_path: {onnx_path}\n  embedding_dim: {two_tower.DIM}\n"
        f"preprocess:\n  cache_compiled: false\nstore:\n  uri: {database}\n"
    )
    with pytest.raises(ModelMismatchError, match=r"'tiny-clip'.*'efficientnet-lite0'"):
        images.search(setup["paths"][0], collection="pics", config=default)
    code, _out, err = run(capsys, "insert", setup["paths"][1], "-c", "pics", "--config", str(default))  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "holds vectors of model 'tiny-clip'" in err
    _, other_files = two_tower.build(tmp_path / "retrained", seed=1)  # same name, other weights
    other = tmp_path / "other.yaml"
    other.write_text(two_tower.config_yaml(other_files, json.loads(database)))
    with pytest.raises(ModelMismatchError, match="weights"):
        images.search(text="cat", collection="pics", config=other)
    assert images.describe_collection("pics", config=setup["config"])["count"] == len(NAMES)


def test_a_collection_without_a_model_record_is_the_default_models(setup, tmp_path):
    from accelkit import images
    from accelkit.images.index.base import ModelMismatchError
    from accelkit.images.store import StoreConfig, VectorStore

    database = str(setup["config"].parent / "tiny.db")
    with VectorStore(StoreConfig(uri=database)) as store:
        store.create_collection("legacy", two_tower.DIM)  # as accelkit made it before records
    try:
        with pytest.raises(ModelMismatchError, match="no model recorded"):
            images.search(text="cat", collection="legacy", config=setup["config"])
    finally:
        images.delete_collection("legacy", config=setup["config"])


def test_the_default_model_has_no_text_tower(tmp_path, capsys):
    config = tmp_path / "default.yaml"
    config.write_text(f"store:\n  uri: {tmp_path / 'd.db'}\n")
    assert run(capsys, "collection", "create", "pics", "--config", str(config))[0] == 0
    code, _out, err = run(capsys, "search", "--text", "a cat", "-c", "pics", "--config", str(config))  # fmt: skip
    assert code == 2 and "has no text tower" in err and err.count("\n") == 1


@pytest.mark.parametrize("missing", ["image", "text", "tokenizer"])
def test_a_missing_weights_file_is_one_line_naming_it(built, tmp_path, capsys, missing):
    _, files, _ = built
    files = {**files, missing: tmp_path / f"gone-{missing}"}
    config = tmp_path / "c.yaml"
    config.write_text(two_tower.config_yaml(files, str(tmp_path / "m.db")))
    code, _out, err = run(capsys, "collection", "create", "pics", "--config", str(config))
    assert code == 2 and err.count("\n") == 1 and f"gone-{missing}" in err, err
    assert "does not exist" in err


def test_half_a_text_tower_is_refused(built, tmp_path, capsys):
    _, files, _ = built
    config = tmp_path / "half.yaml"
    config.write_text(
        f"model:\n  name: half\n  onnx_path: {files['image']}\n  text_onnx_path: {files['text']}\n"
        f"  embedding_dim: {two_tower.DIM}\nstore:\n  uri: {tmp_path / 'h.db'}\n"
    )
    code, _out, err = run(capsys, "collection", "create", "pics", "--config", str(config))
    assert code == 2 and "model.tokenizer_path is not set" in err


def test_words_through_the_service(setup, tmp_path, capsys):
    """`/search` with `text`, `--server` with `--text`, and RemoteIndex: the local answer."""
    import httpx

    from accelkit.images.index.base import TextQuery
    from accelkit.images.index.remote import RemoteIndex
    from tests.support.service import Server

    config = tmp_path / "service.yaml"
    database = tmp_path / "service.db"
    text = (
        setup["config"].read_text().replace(str(setup["config"].parent / "tiny.db"), str(database))
    )
    config.write_text(text)
    from accelkit import images

    images.insert(setup["paths"], "pics", create_collection=True, config=config)
    server = Server(config, tmp_path / "server.log").start()
    try:
        answer = httpx.post(
            server.url + "/search", json={"text": TEXTS[0], "topk": 5, "collection": "pics"}
        ).json()
        want = expected(setup, two_tower.embed_text(setup["model"], TEXTS[0]))
        for hit in answer["results"]:
            assert hit["score"] == pytest.approx(want[hit["metadata"]["source"]], abs=2e-5)
        assert answer["warnings"] == []
        assert httpx.get(server.url + "/health").json()["model"]["text"] is True
        refused = httpx.post(server.url + "/search", json={"text": "", "collection": "pics"})
        assert refused.status_code == 422 and "text" in refused.json()["error"]["message"]
        both = httpx.post(server.url + "/search", json={"text": "cat", "id": "x"})
        assert both.status_code == 400 and "exactly one query" in both.json()["error"]["message"]
        with RemoteIndex(server.url) as remote:
            hits = remote.search(TextQuery(TEXTS[0]), topk=5, collection="pics")
        assert [h.id for h in hits] == [h["id"] for h in answer["results"]]
        code, out, _err = run(capsys, "search", "--text", TEXTS[0], "-c", "pics", "--server", server.url, "--config", str(config), "--json")  # fmt: skip
        assert code == 0 and [h["id"] for h in result_of(out)["results"]] == [h.id for h in hits]
        # no collection named: the service searches its own default, and the answer says which
        # (not the default of a config this side, which the service never read)
        code, out, _err = run(capsys, "search", "--text", TEXTS[0], "--server", server.url, "--json")  # fmt: skip
        assert code == 0 and result_of(out)["collection"] == "pics", out
        assert [h["id"] for h in result_of(out)["results"]] == [h.id for h in hits][:10]
        code, out, _err = run(capsys, "search", "--text", TEXTS[0], "--server", server.url)
        assert code == 0 and f'in pics for "{TEXTS[0]}"' in " ".join(out.split())
        assert images.search(text=TEXTS[0], server=server.url).collection == "pics"
    finally:
        server.stop()


def test_words_that_are_not_text_are_one_line(setup, tmp_path, capsys):
    """An argument of bytes that are not UTF-8 (Python decodes it to lone surrogates, which no
    tokenizer takes), C1 control characters, text of nothing but invisible format characters
    and words of nothing but empty quotes ('""') are the caller's mistake: exit 2 naming --text,
    and 4xx naming the field through the service."""
    import subprocess
    import sys

    from accelkit import images
    from accelkit.errors import InputError
    from tests.support.service import Server

    done = subprocess.run(
        [sys.executable, "-m", "accelkit", "images", "search", "--text", b"red \xff\xfe bicycle",
         "-c", "pics", "--config", str(setup["config"])],
        capture_output=True, timeout=300,
    )  # fmt: skip
    err = done.stderr.decode()
    assert done.returncode == 2 and "--text holds an unpaired UTF-16 surrogate" in err, err
    assert err.count("\n") == 1
    for text, reason in (
        ("cat \udcff", "surrogate"),
        ("cat\u0085dog", "control character"),
        ("\u200b\ufeff \u2060", "is empty"),
        ('""', "--text: only empty quotes"),
        ('" "  "\u200b"', "--text: only empty quotes"),
    ):
        with pytest.raises(InputError, match=reason):
            images.search(text=text, collection="pics", config=setup["config"])
    config = tmp_path / "service.yaml"
    config.write_text(
        setup["config"]
        .read_text()
        .replace(str(setup["config"].parent / "tiny.db"), str(tmp_path / "s.db"))
    )
    server = Server(config, tmp_path / "server.log").start()
    try:
        import httpx

        for text in ("cat\u0085dog", "\u200b\u200b", "\u0090", '""', '" " ""', "  \t"):
            answer = httpx.post(server.url + "/search", json={"text": text, "collection": "pics"})
            assert answer.status_code == 422, (text, answer.text)
            assert answer.json()["error"]["message"].startswith("text: ")
    finally:
        server.stop()


@pytest.mark.parametrize("per_token", [False, True], ids=["narrow", "per-token"])
def test_a_text_tower_that_does_not_fit_the_image_tower_is_named(built, setup, tmp_path, capsys, per_token):  # fmt: skip
    """A text encoder returning vectors of another width than the image tower's, or one per
    token, is a configuration error naming model.text_onnx_path — never a query of the wrong
    dimension blamed on the caller (nor per-token states flattened into one long vector)."""
    _, files, _ = built
    misfit = two_tower.misfit_text_encoder(tmp_path / "misfit.onnx", per_token)
    config = tmp_path / "misfit.yaml"
    config.write_text(two_tower.config_yaml({**files, "text": misfit}, str(tmp_path / "m.db")))
    assert run(capsys, "insert", setup["paths"][0], "-c", "pics", "--create-collection", "--no-progress", "--config", str(config))[0] == 0  # fmt: skip
    code, _out, err = run(capsys, "search", "--text", "coffee cup", "-c", "pics", "--config", str(config))  # fmt: skip
    assert code == 2 and err.count("\n") == 1, err
    assert "model.text_onnx_path" in err and f"one {two_tower.DIM}-d vector per text" in err


def test_a_broken_text_tower_is_unhealthy_and_stops_the_service_at_start(built, setup, tmp_path, capsys):  # fmt: skip
    """A text tower whose tokenizer is missing, or whose tokenizer gives ids the encoder has no
    row for: `images health` is unhealthy (it embeds a few words too) and the service does not
    start (as with a broken image model), instead of answering every text query 400 or 500."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from tests.support.service import Server

    _, files, _ = built
    foreign = Tokenizer(models.WordLevel({"[PAD]": 0, "[UNK]": 1, "a": 5000}, unk_token="[UNK]"))
    foreign.pre_tokenizer = pre_tokenizers.Whitespace()
    foreign.save(str(tmp_path / "foreign.json"))
    code, out, _ = run(capsys, "health", "--config", str(setup["config"]), "--json")
    assert code == 0 and result_of(out)["model"]["text"] is True
    for tokenizer, named in ((tmp_path / "gone.json", "gone.json"), (tmp_path / "foreign.json", "own tokenizer")):  # fmt: skip
        config = tmp_path / "broken.yaml"
        config.write_text(two_tower.config_yaml({**files, "tokenizer": tokenizer}, str(tmp_path / "b.db")))  # fmt: skip
        code, out, _err = run(capsys, "health", "--config", str(config), "--json")
        assert code == 3 and result_of(out)["model"]["ok"] is False, out
        assert named in result_of(out)["model"]["error"]
        server = Server(config, tmp_path / "server.log")
        try:
            with pytest.raises(RuntimeError, match="server exited"):
                server.start()
        finally:
            server.stop()
        assert named in (tmp_path / "server.log").read_text()


def test_a_tokenizer_pads_and_cuts_on_its_own_side(built, tmp_path):
    """A tokenizer.json that pads (and cuts) on the left feeds the encoder the ids its model was
    made with: padded and cut to context_length on the left, its own pad token kept."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from accelkit.images.embedding.models import TextEncoder

    _, files, _ = built
    vocab = {"<pad>": 7, "[UNK]": 1, **{w: i + 10 for i, w in enumerate(two_tower.WORDS)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.enable_padding(direction="left", pad_id=7, pad_token="<pad>")
    tokenizer.enable_truncation(512, direction="left")
    tokenizer.save(str(tmp_path / "left.json"))
    encoder = TextEncoder(files["text"], tmp_path / "left.json", context_length=4)
    ids, mask = encoder.tokenize(["red bicycle", "a photo of a cat at night"])
    word = {w: i + 10 for i, w in enumerate(two_tower.WORDS)}
    assert ids.tolist() == [
        [7, 7, word["red"], word["bicycle"]],
        [word["a"], word["cat"], word["at"], word["night"]],  # the last four words
    ]
    assert mask.tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]]
