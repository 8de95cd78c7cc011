"""`accelkit images import-model`: a small Hugging Face CLIP and SigLIP folder (random weights,
built here) made into the ONNX pair, tokenizer.json and YAML that text search loads; accelkit's
embeddings and text search through those files against transformers' own outputs; a folder
that is not one, or is broken, refused with one line and nothing written."""

import contextlib
import io
import json
import shutil

import numpy as np
import pytest
import yaml
from PIL import Image

from tests.support import hf_two_tower
from tests.support.cli import result_of, run_cli
from tests.support.import_model import NAMES, cosine, refused
from tests.support.require import not_applicable

# one xdist worker runs this module (pyproject: --dist loadgroup), so
# each imported model is made once
pytestmark = pytest.mark.xdist_group("import-convert")

KINDS = ("clip", "siglip")
TEXTS = ["a photo of a cat", "a red bicycle at night", "coffee cup", "an astronaut on the moon"]
CONTEXT = {"clip": hf_two_tower.CLIP_CONTEXT, "siglip": hf_two_tower.SIGLIP_CONTEXT}
MEAN = {"clip": (0.48145466, 0.4578275, 0.40821073), "siglip": (0.5, 0.5, 0.5)}
# PIL's resize on the whole photo, as the reference does (no reduce first: that moves pixels by
# rounding, ~3e-4 in these random models' text scores)
EXACT = {"reducing_gap": None}
STD = {"clip": (0.26862954, 0.26130258, 0.27577711), "siglip": (0.5, 0.5, 0.5)}


@pytest.fixture(scope="module", params=KINDS)
def imported(request, tmp_path_factory, photos):
    """The folder, the model transformers saved into it, and `import-model`'s --json result
    (the command run in-process, its standard output read)."""
    from accelkit.cli import main

    kind = request.param
    root = tmp_path_factory.mktemp(kind)
    model = hf_two_tower.build(kind, root / kind)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), pytest.raises(SystemExit) as done:
        main(["images", "import-model", str(root / kind), "--output", str(root / "out"), "--json"])
    code, out, err = done.value.code or 0, printed.getvalue(), ""
    assert code == 0, err
    paths = []
    for name in NAMES:
        path = root / f"{name}.png"
        Image.fromarray(photos[name]).save(path)
        paths.append(str(path))
    return {"kind": kind, "root": root, "folder": root / kind, "model": model,
            "result": result_of(out), "paths": paths}  # fmt: skip


def reference_images(imported) -> np.ndarray:
    """transformers' get_image_features on pixels made independently of accelkit: the model's
    own image processor (CLIP's resize of the short side and whole-pixel centre crop, SigLIP's
    stretch, both bicubic), built from the folder's preprocessor_config.json by transformers."""
    import torch
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(str(imported["folder"]), backend="pil")
    pictures = [np.asarray(Image.open(path).convert("RGB")) for path in imported["paths"]]
    pixels = processor(images=pictures, return_tensors="np")["pixel_values"]
    with torch.no_grad():
        out = imported["model"].get_image_features(
            pixel_values=torch.from_numpy(np.asarray(pixels, np.float32))
        )
    return (out if isinstance(out, torch.Tensor) else out.pooler_output).numpy()


def reference_texts(imported, texts) -> np.ndarray:
    """transformers' get_text_features on the tokenizer's own max_length padding."""
    import torch
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(imported["folder"]))
    inputs = tokenizer(texts, padding="max_length", max_length=CONTEXT[imported["kind"]],
                       truncation=True, return_tensors="pt")  # fmt: skip
    with torch.no_grad():
        out = imported["model"].get_text_features(**inputs)
    return (out if isinstance(out, torch.Tensor) else out.pooler_output).numpy()


def test_the_folder_becomes_the_files_text_search_loads(imported):
    result, kind = imported["result"], imported["kind"]
    out = imported["root"] / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "accelkit.yaml", "image_encoder.onnx", "text_encoder.onnx", "tokenizer.json"
    ]  # fmt: skip
    assert not [p for p in imported["root"].iterdir() if p.name.startswith(".out.")]
    block = yaml.safe_load((out / "accelkit.yaml").read_text())
    assert block["preprocess"] == {
        "image_size": [hf_two_tower.SIZE] * 2,
        "mean": list(MEAN[kind]),
        "std": list(STD[kind]),
        "fit": "shortest-edge-crop" if kind == "clip" else "stretch",
        "resample": "bicubic",
        "reducing_gap": 0,
        "fast_jpeg_downscale": False,
    }
    assert block["model"]["context_length"] == CONTEXT[kind]
    assert block["model"]["embedding_dim"] == (24 if kind == "clip" else 32)
    assert block["model"]["onnx_path"] == "image_encoder.onnx"
    end = "<|endoftext|>" if kind == "clip" else "</s>"
    tokenizer = json.loads((out / "tokenizer.json").read_text())
    assert tokenizer["padding"]["strategy"] == {"Fixed": CONTEXT[kind]}
    assert tokenizer["padding"]["pad_token"] == end
    assert tokenizer["truncation"]["max_length"] == CONTEXT[kind]
    assert result["text"]["pad_token"] == end and result["preprocess"]["resample"] == "bicubic"
    import onnx

    inputs = [i.name for i in onnx.load(str(out / "text_encoder.onnx")).graph.input]
    masked = kind == "clip"  # the SigLIP folder's tokenizer gives input_ids only
    assert inputs == (["input_ids", "attention_mask"] if masked else ["input_ids"])
    assert result["text"]["attention_mask"] is masked
    checks = result["checks"]
    assert checks["image_min_cosine"] >= 0.9999 and checks["text_min_cosine"] >= 0.9999
    # the processor's own pixels (photos as arrays and as JPEG files): a gate, like the towers
    assert checks["preprocess_min_cosine"] >= 0.9999
    assert 0.9 < checks["preprocess_speedups_min_cosine"] <= 1.0


def test_the_table_says_the_filter_and_the_checks(imported, tmp_path, capsys):
    if imported["kind"] != "clip":
        not_applicable("one kind suffices: the table is the same code")
    code, out, _ = run_cli(["images", "import-model", str(imported["folder"]), "-o", str(tmp_path / "o")], capsys)  # fmt: skip
    assert code == 0
    assert "64x64 shortest-edge-crop, bicubic (the processor's, PIL-exact)" in out
    assert "vs processor" in out and "speed-ups on" in out


def test_accelkit_embeds_like_transformers(imported, tmp_path):
    """accelkit's own paths (embed; the text tower as text search loads it) over the imported
    files against transformers on independently made inputs: cosine >= 0.9999."""
    from accelkit import images
    from accelkit.images.embedding.models import make_text_encoder

    yaml_path = imported["root"] / "out" / "accelkit.yaml"
    settings = images.load_settings(images.load_settings(yaml_path), preprocess=EXACT)
    report = images.embed(imported["paths"], str(tmp_path / "e.npy"), config=settings)
    assert report.embedded == len(NAMES)
    ours = np.load(tmp_path / "e.npy")
    assert cosine(ours, reference_images(imported)).min() >= 0.99999
    encoder = make_text_encoder(images.load_settings(yaml_path).model)
    long = "an astronaut on the moon with a red bicycle " * 10  # cut to the context
    texts = [*TEXTS, long]
    assert cosine(encoder.embed(texts), reference_texts(imported, texts)).min() >= 0.99999


def test_text_search_ranks_like_brute_force_over_transformers(imported, tmp_path):
    from accelkit import images

    settings = images.load_settings(
        images.load_settings(imported["root"] / "out" / "accelkit.yaml"),
        preprocess=EXACT,  # None given as a keyword is "not given": set on the loaded settings
        store={"uri": str(tmp_path / "s.db")},
    )
    stored = images.insert(imported["paths"], "pics", create_collection=True, config=settings)
    assert stored.ok and len(stored.stored) == len(NAMES)
    image_vectors = reference_images(imported)
    for text, query in zip(TEXTS, reference_texts(imported, TEXTS), strict=True):
        want = cosine(image_vectors, query[None, :])
        report = images.search(text=text, topk=len(NAMES), collection="pics", config=settings)
        got = {Path_name(h.metadata["source"]): h.score for h in report.hits}
        for name, score in zip(NAMES, want, strict=True):
            assert got[name] == pytest.approx(score, abs=2e-5), (text, name)
        order = [Path_name(h.metadata["source"]) for h in report.hits]
        brute = [NAMES[i] for i in np.argsort(-want)]
        gaps = np.diff(np.sort(want)[::-1])
        assert order == brute or np.abs(gaps).min() < 4e-5, (text, order, brute)


def test_different_texts_give_different_ids_vectors_and_ranks(imported, tmp_path):
    """The folder's tokenizer as transformers runs it tells the texts apart (no unknown token,
    which CLIP's tower reads as the end it pools at), so the tower's vectors and text search's
    ranks depend on the text: what lets the checks above catch a tower that ignores it."""
    from transformers import AutoTokenizer

    from accelkit import images
    from accelkit.images.embedding.models import make_text_encoder

    tokenizer = AutoTokenizer.from_pretrained(str(imported["folder"]))
    ids = [tokenizer(text)["input_ids"] for text in TEXTS]
    assert len({tuple(row) for row in ids}) == len(TEXTS)
    assert all(tokenizer.unk_token_id not in row[1:-1] for row in ids), ids
    theirs = reference_texts(imported, TEXTS)
    yaml_path = imported["root"] / "out" / "accelkit.yaml"
    ours = make_text_encoder(images.load_settings(yaml_path).model).embed(TEXTS)
    for vectors in (theirs, ours):
        pairs = [cosine(vectors[i], vectors[j]) for i in range(4) for j in range(i + 1, 4)]
        assert max(pairs) < 0.999, pairs
    settings = images.load_settings(
        images.load_settings(yaml_path), preprocess=EXACT, store={"uri": str(tmp_path / "s.db")}
    )
    assert images.insert(imported["paths"], "pics", create_collection=True, config=settings).ok
    ranks = set()
    for text in TEXTS:
        hits = images.search(text=text, topk=len(NAMES), collection="pics", config=settings).hits
        ranks.add(tuple(Path_name(h.metadata["source"]) for h in hits))
    assert len(ranks) > 1, ranks


def Path_name(source: str) -> str:
    return source.rsplit("/", 1)[-1].removesuffix(".png")


def broken_copy(imported, tmp_path, change) -> tuple[str, str]:
    """(a copy of the folder with `change` applied to it, an output path beside it)."""
    copy = tmp_path / "model"
    shutil.copytree(imported["folder"], copy)
    change(copy)
    return str(copy), str(tmp_path / "out")


def edit_json(name: str, **values):
    def change(folder):
        path = folder / name
        document = json.loads(path.read_text())
        for key, value in values.items():
            document[key] = value
        path.write_text(json.dumps(document))

    return change


CASES = {
    "not a CLIP folder": (edit_json("config.json", model_type="bert"), ["config.json", "model_type 'bert'", "CLIP or SigLIP"]),
    "no tokenizer": (lambda f: (f / "tokenizer.json").unlink(), ["no tokenizer.json", "save_pretrained"]),
    "no weights": (lambda f: (f / "model.safetensors").unlink(), ["no model.safetensors"]),
    "no config": (lambda f: (f / "config.json").unlink(), ["no config.json"]),
    "two means": (edit_json("preprocessor_config.json", image_mean=[0.5, 0.5]), ["preprocessor_config.json", "image_mean=[0.5, 0.5]", "three numbers"]),
    "a zero std": (edit_json("preprocessor_config.json", image_std=[0.5, 0, 0.5]), ["image_std", "three positive"]),
    "another rescale": (edit_json("preprocessor_config.json", rescale_factor=1 / 127.5), ["rescale_factor", "1/255"]),
    "no resize": (edit_json("preprocessor_config.json", do_resize=False), ["do_resize"]),
    "another size": (edit_json("preprocessor_config.json", size={"height": 48, "width": 48}, crop_size={"height": 48, "width": 48}, do_center_crop=False), ["size", "vision_config.image_size 64"]),
    "a lanczos filter": (edit_json("preprocessor_config.json", resample=1), ["resample=1", "(lanczos)", "bilinear (2) or bicubic (3)"]),
    "a torn config": (lambda f: (f / "config.json").write_text('{"model_type": "cl'), ["config.json", "cannot read"]),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_broken_folder_is_one_line_and_nothing_written(imported, tmp_path, capsys, case):
    change, words = CASES[case]
    line = refused(capsys, *broken_copy(imported, tmp_path, change))
    assert str(tmp_path / "model") in line
    for word in words:
        assert word in line, (case, line)


def test_a_crop_of_another_size_than_the_resize_is_refused(imported, tmp_path, capsys):
    if imported["kind"] != "clip":
        not_applicable("SigLIP's processor does not crop")
    crop = edit_json("preprocessor_config.json", size={"shortest_edge": 72})
    line = refused(capsys, *broken_copy(imported, tmp_path, crop))
    assert "crop_size" in line and "shortest_edge 72" in line


def test_a_tokenizer_of_another_model_is_refused(imported, tmp_path, capsys):
    """CLIP's tokenizer (hundreds of tokens) in the SigLIP folder (a 44-token text tower)."""
    if imported["kind"] != "siglip":
        not_applicable("the CLIP tower's vocabulary is the larger one")
    from transformers import PreTrainedTokenizerFast

    def swap(folder):
        PreTrainedTokenizerFast(
            tokenizer_object=hf_two_tower.clip_tokenizer(), pad_token="<|endoftext|>"
        ).save_pretrained(folder)

    line = refused(capsys, *broken_copy(imported, tmp_path, swap))
    assert "tokenizer.json" in line and "text_config.vocab_size" in line


def test_an_output_that_is_not_empty_is_refused(imported, tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    code, _, err = run_cli(["images", "import-model", str(imported["folder"]), "-o", str(tmp_path / "taken")], capsys)  # fmt: skip
    assert code == 2 and "not empty" in err and str(tmp_path / "taken") in err
    # a folder accelkit did not write and never looked into: no advice to remove it
    assert "remove" not in err.lower() and "delete" not in err.lower(), err
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["keep.txt"]


def test_an_export_that_differs_from_transformers_is_refused_and_nothing_is_left(
    imported, tmp_path, capsys, monkeypatch
):
    """The towers exported from other weights than the folder's (what a faulty export would
    write): the check against the folder's own model refuses, and neither the output nor the
    temporary folder is left."""
    if imported["kind"] != "clip":
        not_applicable("one kind suffices: the check is the same code")
    import torch
    from transformers import AutoConfig, AutoModel

    from accelkit.images.importing import convert

    loaded = {}

    def other_weights(folder):
        torch.manual_seed(1)
        model = AutoModel.from_config(
            AutoConfig.from_pretrained(str(folder)), attn_implementation="eager"
        ).eval()
        loaded.setdefault("export", model)
        return model

    real = convert.hf_model
    monkeypatch.setattr(convert, "hf_model", other_weights)
    monkeypatch.setattr(
        convert,
        "verify",
        lambda plan, model, tok, path: convert_verify(plan, real(plan.folder), tok, path),
    )
    line = refused(capsys, str(imported["folder"]), str(tmp_path / "out"))
    assert (
        "image encoder differs from transformers' own output" in line
        and str(imported["folder"]) in line
    )
    assert list(tmp_path.iterdir()) == []


def test_preprocessing_that_differs_from_the_processor_is_refused(
    imported, tmp_path, capsys, monkeypatch
):
    """The preprocessing gate: the YAML written with what accelkit did before it had the
    processor's filter (bilinear, and CLIP's crop before the resize) and with the speed-ups on
    differs from the processor by more than 1e-4 on these models: refused, nothing left."""
    from accelkit.images.importing import convert

    real = convert.config_yaml

    def as_before(plan, dim, rule):
        fit = "center-crop" if plan.fit == "shortest-edge-crop" else plan.fit
        text = real(plan, dim, rule).replace(f"fit: {plan.fit}", f"fit: {fit}")
        text = text.replace("resample: bicubic", "resample: bilinear")
        return text.replace("reducing_gap: 0", "reducing_gap: 3.0").replace(
            "fast_jpeg_downscale: false", "fast_jpeg_downscale: true"
        )

    monkeypatch.setattr(convert, "config_yaml", as_before)
    line = refused(capsys, str(imported["folder"]), str(tmp_path / "out"))
    assert "preprocessing differs from the model's image processor" in line
    assert str(imported["folder"]) in line and "need >= 0.9999" in line
    assert list(tmp_path.iterdir()) == []


def convert_verify(plan, model, tokenizer, path):
    from accelkit.images.importing.verify import verify

    return verify(plan, model, tokenizer, path)


def test_a_written_tokenizer_that_tokenizes_otherwise_is_refused(imported, tmp_path):
    """The check's token-id gate: the imported files with two words' ids swapped in
    tokenizer.json against the folder's own tokenizer."""
    from transformers import AutoTokenizer

    from accelkit.errors import InputError
    from accelkit.images.importing.folder import read_folder
    from accelkit.images.importing.verify import verify

    files = tmp_path / "files"
    shutil.copytree(imported["root"] / "out", files)
    from tokenizers import Tokenizer

    used = Tokenizer.from_file(str(files / "tokenizer.json")).encode("a photo of a cat")
    pairs = zip(used.ids, used.special_tokens_mask, strict=True)
    i, j = sorted({n for n, special in pairs if not special})[:2]
    document = json.loads((files / "tokenizer.json").read_text())
    vocab = document["model"]["vocab"]
    if isinstance(vocab, dict):  # BPE: token -> id
        a, b = (next(t for t, n in vocab.items() if n == k) for k in (i, j))
        vocab[a], vocab[b] = j, i
    else:  # Unigram: [token, score] by id
        vocab[i], vocab[j] = vocab[j], vocab[i]
    (files / "tokenizer.json").write_text(json.dumps(document))
    folder = imported["folder"]
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    plan = read_folder(folder, tokenizer.model_max_length)
    with pytest.raises(InputError, match="other token ids than the model's tokenizer"):
        verify(plan, imported["model"], tokenizer, files / "accelkit.yaml")
