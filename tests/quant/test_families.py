"""The family matrix: `accelkit quant` on the models users bring — GPT-2 (Conv1D), a Qwen2 decoder
(RMSNorm, GQA, SwiGLU, tied embeddings), BERT, T5 (its encoder), a ViT vision tower (generated
images) and a PaliGemma (SigLIP + Gemma; generated images, each with a prompt) — built from configs,
trained for seconds so their activations grow outlier channels, and saved as `save_pretrained`
writes them (`tests/support/quant_families.py`); a CLIP is refused in one line. Each family through the real command line, `--no-latency` where
speed is not the point; one test compiles a Qwen2 model."""

import json
import logging

import pytest
import torch
from torch import nn

from accelkit.errors import InputError
from tests.support import quant_families as fam
from tests.support.cli import result_of, run_cli

transformers = pytest.importorskip("transformers")

CALIB = [t for t in fam.training_texts(24, seed=11)]
# one xdist worker runs this module (pyproject: --dist loadgroup), so the families are built once
pytestmark = pytest.mark.xdist_group("quant-families")


@pytest.fixture(scope="session")
def families(tmp_path_factory):
    """Every family built and trained once per session: name -> (folder, build info)."""
    root = tmp_path_factory.mktemp("quant-families")
    built = {}
    for name in fam.FAMILIES:
        built[name] = (root / name, fam.build(name, root / name))
    (root / "calib.txt").write_text("\n".join(CALIB))
    built["calib"] = root / "calib.txt"
    return built


def one_line(err: str) -> str:
    """The error line (the last; progress lines may come before it)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("error:"), err
    return lines[-1]


def run_json(args, capsys):
    code, out, err = run_cli(args, capsys)
    assert code == 0, err
    return result_of(out)


def test_conv1d_runs_as_the_linear_it_is_bit_for_bit():
    from transformers.pytorch_utils import Conv1D

    from accelkit.quant.method.layers import as_linear

    torch.manual_seed(0)
    conv = Conv1D(96, 64)
    nn.init.normal_(conv.weight)
    nn.init.normal_(conv.bias)
    linear = as_linear(conv)
    assert (linear.in_features, linear.out_features) == (64, 96)
    assert linear.weight.data_ptr() == conv.weight.data_ptr()  # a view, not a copy
    for shape in [(3, 7, 64), (5, 64), (1, 1, 64), (2, 33, 64)]:
        x = torch.randn(*shape)
        assert torch.equal(linear(x), conv(x))


def test_training_grows_outlier_channels(families, tmp_path):
    """max / median of the per-channel input absmax, trained against the same model at random
    init (printed: the numbers docs/quant.md quotes are from benchmarks/quant/quant_families.py)."""
    for name in fam.FAMILIES:
        fam.build(name, tmp_path / name, steps=0)
        init, trained = fam.channel_ratio(tmp_path / name), fam.channel_ratio(families[name][0])
        print(f"{name}: channel max/median {init:.2f} at init, {trained:.2f} trained")
        assert trained > 1.05 * init, name


@pytest.mark.parametrize("name", fam.FAMILIES)
def test_every_family_is_quantized_and_judged(families, name, capsys):
    folder = families[name][0]
    args = ["quant", "eval", "--model", str(folder), "--methods", "fp32,rtn", "--bits", "w4a8",
            "--pairs", "8", "--no-latency", "--json"]  # fmt: skip
    if name not in ("vit", "paligemma"):
        args += ["--calibration", str(families["calib"])]
    doc = run_json(args, capsys)
    fp32, rtn = doc["rows"]
    assert fp32["mean_cosine"] == pytest.approx(1.0)
    assert 0.5 < rtn["mean_cosine"] < 1.0 - 1e-6  # quantized: never the float model as is
    assert doc["quantized_share"] > 0.5
    if name in ("gpt2", "qwen2", "paligemma"):
        assert doc["kind"] == ("vision-language" if name == "paligemma" else "causal-lm")
        assert doc["lm_head"] == "float"
        assert rtn["perplexity_ratio"] > 0 and 0 < rtn["top1_agreement"] < 1
    else:
        assert doc["kind"] == ("vision" if name == "vit" else "encoder")
    if name == "vit":
        assert doc["timing_batch"] == [16, 3, fam.IMAGE, fam.IMAGE]


def test_gpt2_blocks_are_quantized_and_load_back(families, tmp_path, capsys):
    from accelkit.quant.method.layers import QuantLinear
    from accelkit.quant.method.storage import load_quantized
    from accelkit.quant.models import model_factory

    folder = families["gpt2"][0]
    out = tmp_path / "q.safetensors"
    doc = run_json(
        ["quant", "apply", "--model", str(folder), "--output", str(out), "--method", "rtn",
         "--calibration", str(families["calib"]), "--json"],
        capsys,
    )  # fmt: skip
    blocks = {f"lm.transformer.h.{i}.{p}" for i in range(2) for p in
              ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}  # fmt: skip
    assert set(doc["quantized"]) == blocks and doc["lm_head"] == "float"
    assert doc["quantized_share"] == 1.0
    loaded = load_quantized(out, model_factory(str(folder)))
    assert sum(isinstance(m, QuantLinear) for m in loaded.modules()) == len(blocks)


def test_lm_head_is_quantized_when_asked_and_its_error_reaches_the_metrics(families, capsys):
    folder = families["qwen2"][0]
    args = ["quant", "eval", "--model", str(folder), "--methods", "fp32,rtn", "--bits", "w4a8",
            "--pairs", "8", "--no-latency", "--json", "--calibration", str(families["calib"])]  # fmt: skip
    without = run_json(args, capsys)["rows"][1]
    doc = run_json([*args, "--lm-head"], capsys)
    with_head = doc["rows"][1]
    assert doc["lm_head"] == "quantized"
    # the hidden state lm_head reads is the same either way; its error shows after it
    assert with_head["mean_cosine"] == pytest.approx(without["mean_cosine"], abs=1e-12)
    assert with_head["perplexity_ratio"] != without["perplexity_ratio"]


def test_perplexity_target_moves_layers_until_reached(families, capsys):
    folder = families["qwen2"][0]
    doc = run_json(
        ["quant", "eval", "--model", str(folder), "--methods", "fp32,rtn", "--bits", "w4a4",
         "--pairs", "8", "--no-latency", "--json", "--calibration", str(families["calib"]),
         "--target-perplexity-ratio", "1.0001"],
        capsys,
    )  # fmt: skip
    rtn = doc["rows"][1]
    target = doc["target"]
    assert rtn["perplexity_ratio"] > 1.0001  # W4A4 misses it as is
    assert (
        target["metric"] == "perplexity_ratio" and target["base_value"] == rtn["perplexity_ratio"]
    )
    assert target["reached"] and target["value"] <= 1.0001 and target["layers"]
    assert doc["rows"][-1]["label"] == "rtn/w4a4+ppl1.0001"
    assert doc["rows"][-1]["perplexity_ratio"] == pytest.approx(target["value"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target-perplexity-ratio", "0.9"], "must be at least 1"),
        (["--target-top1", "0.9", "--target-cosine", "0.9"], "pass one of"),
    ],
)
def test_bad_targets_are_one_line(families, args, message, capsys):
    code, _, err = run_cli(
        ["quant", "eval", "--model", str(families["qwen2"][0]), "--no-latency", *args], capsys
    )
    assert code == 2 and one_line(err).startswith("error:") and message in one_line(err)


def test_perplexity_target_on_an_encoder_is_one_line(families, capsys):
    code, _, err = run_cli(
        ["quant", "eval", "--model", str(families["bert"][0]), "--no-latency", "--pairs", "4",
         "--target-perplexity-ratio", "1.05"], capsys,
    )  # fmt: skip
    assert code == 2 and "needs a causal LM" in one_line(err)


def test_paligemma_text_positions_are_judged_as_transformers_scores_them(families):
    """The FP32 reference of a PaliGemma (its image's placeholder tokens before each prompt, the
    outputs of those cut off) against transformers' own loss on the same image + text inputs,
    the image positions and the first text token unlabelled; and the pixels against
    transformers' SigLIP image processor."""
    from accelkit.quant.evaluation.corpus import generated_images
    from accelkit.quant.evaluation.fidelity import load_subject, subject_reference

    folder = families["paligemma"][0]
    subject = load_subject(str(folder), n_pairs=8)
    reference = subject_reference(subject)
    model = transformers.PaliGemmaForConditionalGeneration.from_pretrained(folder).eval()
    k = (fam.IMAGE // 8) ** 2
    nll = count = 0.0
    for batch in subject.data:
        ids, mask = batch["input_ids"], batch["attention_mask"]
        image = torch.full((len(ids), k), model.config.image_token_id)
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, 0] = -100  # predicted from the last image token: not a text position's
        with torch.no_grad():
            loss = model(
                input_ids=torch.cat([image, ids], dim=1),
                attention_mask=torch.cat([torch.ones_like(image), mask], dim=1),
                pixel_values=batch["pixel_values"],
                labels=torch.cat([torch.full_like(image, -100), labels], dim=1),
            ).loss
        n = int((labels[:, 1:] != -100).sum())
        nll, count = nll + float(loss) * n, count + n
    assert reference.count == count and reference.nll == pytest.approx(nll, rel=1e-5)
    processor = transformers.SiglipImageProcessor(
        size={"height": fam.IMAGE, "width": fam.IMAGE}, do_resize=False
    )
    images = generated_images(16, fam.IMAGE, seed=20240605)
    expected = processor(list(images), return_tensors="pt")["pixel_values"]
    assert torch.allclose(subject.data.first()["pixel_values"], expected, atol=1e-5)


def test_paligemma_applies_and_loads_back(families, tmp_path, capsys):
    from accelkit.quant.method.layers import QuantLinear
    from accelkit.quant.method.storage import load_quantized
    from accelkit.quant.models import model_factory

    folder = families["paligemma"][0]
    out = tmp_path / "q.safetensors"
    doc = run_json(
        ["quant", "apply", "--model", str(folder), "--output", str(out), "--method", "rtn",
         "--json"], capsys,
    )  # fmt: skip
    quantized = set(doc["quantized"])
    assert doc["lm_head"] == "float" and doc["quantized_share"] > 0.5
    for part in ("vision_tower", "multi_modal_projector", "language_model"):
        assert any(f".{part}." in name for name in quantized), part
    loaded = load_quantized(out, model_factory(str(folder)))
    assert sum(isinstance(m, QuantLinear) for m in loaded.modules()) == len(quantized)


def test_a_clip_is_refused_in_one_line(tmp_path, capsys):
    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    config = transformers.CLIPConfig(
        text_config=transformers.CLIPTextConfig(vocab_size=64, **small).to_dict(),
        vision_config=transformers.CLIPVisionConfig(image_size=32, patch_size=8, **small).to_dict(),
    )
    transformers.CLIPModel(config).save_pretrained(tmp_path)
    code, _, err = run_cli(["quant", "eval", "--model", str(tmp_path), "--no-latency"], capsys)
    assert code == 2 and "vision-language model (clip)" in one_line(err)
    assert "vision towers (ViT" in one_line(err) and "PaliGemma" in one_line(err)


class Fused(nn.Module):
    """A linear layer quant does not know (its weight a bare parameter)."""

    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n) / n**0.5)

    def forward(self, x):
        return x @ self.weight


class MostlyUnknown(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(Fused(256), Fused(256), Fused(256))
        self.head = nn.Linear(256, 2)

    def forward(self, x):
        return self.head(self.body(x))


def test_a_model_quant_would_leave_float_is_refused(caplog):
    from accelkit.quant import QuantConfig, quantize

    batches = [torch.randn(4, 8, 256)]
    with pytest.raises(InputError, match=r"only 0\.3 % of the model's linear weights"):
        quantize(MostlyUnknown(), QuantConfig(method="rtn"), batches)
    model = MostlyUnknown()
    model.body[1] = nn.Linear(256, 256)
    with caplog.at_level(logging.WARNING):
        quantize(model, QuantConfig(method="rtn"), batches)
    assert "only 33.5 % of the model's linear weights are quantized" in caplog.text
    assert "body.0" in caplog.text


def test_a_compile_failure_keeps_the_figures_and_times_eager(families, monkeypatch, caplog):
    from accelkit.quant import api
    from accelkit.quant.evaluation import speed

    def broken(model):
        raise RuntimeError("dynamo cannot trace this\nmore detail")

    monkeypatch.setattr(speed, "compile_model", broken)
    with caplog.at_level(logging.WARNING):
        result = api.evaluate(
            str(families["bert"][0]), methods="fp32,rtn", bits="w4a8", pairs=4,
            calibration=families["calib"], compiled=True, compile_all=True,
        )  # fmt: skip
    assert result.compile_error == "RuntimeError: dynamo cannot trace this"
    assert [r.mean_cosine is not None for r in result.rows] == [True] * 2
    timed = [r for r in result.rows if r.method != "fp32"]  # FP32 is timed inside each row
    assert timed and all(r.eager_ms and r.eager_fp32_ms for r in timed)
    assert all(r.compiled_ms is None for r in result.rows)
    assert caplog.text.count("torch.compile failed") == 1


def test_compile_works_on_a_qwen2_model_after_the_fidelity_pass(families, capsys):
    """transformers 5 installs output-capturing hooks for good once hidden states are asked of
    it; the fidelity pass takes them with a hook of its own, so the compile after it works."""
    doc = run_json(
        ["quant", "eval", "--model", str(families["qwen2"][0]), "--methods", "fp32,rtn", "--bits",
         "w4a8", "--pairs", "4", "--calibration", str(families["calib"]), "--compile-all",
         "--json"],
        capsys,
    )  # fmt: skip
    assert doc["compile_error"] is None
    timed = [r for r in doc["rows"] if r["method"] != "fp32"]  # FP32 is timed inside each row
    assert timed and all(r["compiled_ms"] and r["compiled_fp32_ms"] for r in timed)
    json.dumps(doc)
