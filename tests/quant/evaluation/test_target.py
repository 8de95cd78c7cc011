"""--target-cosine (target.py): the most sensitive layers leave 4-bit, worst first, until the
model reaches the target — on an encoder and a causal LM built here (random weights, MiniLM's
tokenizer), through the library API and the command line; the variant equals a model quantized
independently with those layers at 8 bits / in float, and `apply` saves what reaches the target."""

import pytest
import torch

from accelkit.quant import apply, evaluate
from tests.support.quant_eval import run_json

TARGET = 0.999  # the tiny Llama (RTN W4A8: ~0.993); MiniLM is asked for 0.99 (RTN W4A8: ~0.97)
BITS = "w4a8"


def data(which, encoder_dir, causal_dir, texts):
    """(model, evaluate/load_subject keywords, target): MiniLM on 16 shipped pairs (a random-weight
    BERT keeps cosine 0.99999 at any bits: nothing to test), the tiny Llama on the test's texts."""
    if which == "encoder":
        return "minilm", {"pairs": 16}, 0.99
    files = {"calibration": texts / "calib.txt", "eval_data": texts / "eval.txt"}
    return str(causal_dir), files, TARGET


def independent_cosine(model, layers: dict, kwargs) -> float:
    """The same variant built without target.py: RTN W4A8 with the W8A8 layers given as 8-bit
    (`layer_wbits`) and the float ones excluded, its mean cosine measured by fidelity.py."""
    import copy

    from accelkit.quant.config import QuantConfig
    from accelkit.quant.evaluation.fidelity import load_subject, subject_fidelity, subject_reference
    from accelkit.quant.method.convert import quantize

    subject = load_subject(
        model,
        n_pairs=kwargs.get("pairs", 300),
        calibration_file=kwargs.get("calibration"),
        eval_file=kwargs.get("eval_data"),
    )
    config = QuantConfig(
        method="rtn",
        wbits=4,
        abits=8,
        layer_wbits={n: 8 for n, level in layers.items() if level == "w8a8"},
        exclude=[n for n, level in layers.items() if level == "float"],
    )
    quantized = quantize(copy.deepcopy(subject.model), config, subject.calibration)
    return subject_fidelity(subject, quantized, subject_reference(subject))["mean_cosine"]


@pytest.mark.parametrize("which", ["encoder", "causal"])
def test_eval_reaches_the_target_worst_layers_first(which, encoder_dir, causal_dir, texts):
    model, kwargs, goal = data(which, encoder_dir, causal_dir, texts)
    result = evaluate(
        model,
        methods=["fp32", "rtn"],
        bits=[BITS],
        latency=False,
        target_cosine=goal,
        **kwargs,
    )
    rtn = result.rows[1]
    assert rtn.mean_cosine < goal  # the plain setting falls short: something had to move
    target = result.target
    assert target["reached"] and target["cosine"] >= goal
    assert target["base"] == f"rtn/{BITS}" and target["base_cosine"] == rtn.mean_cosine
    errors = [entry["relative_error"] for entry in target["order"]]
    assert errors == sorted(errors, reverse=True)  # worst first
    moved = list(target["layers"])
    ranked = [entry["layer"] for entry in target["order"]]
    assert moved == ranked[: len(moved)]  # the worst ones, in that order
    # fewest changes: one change fewer fell short (when it was tried)
    tried = {t["changes"]: t["mean_cosine"] for t in target["tried"]}
    if len(moved) - 1 in tried and len(moved) <= len(ranked):
        assert tried[len(moved) - 1] < goal
    variant = result.rows[-1]
    assert variant.label == f"rtn/{BITS}+target{goal:g}" and variant.mean_cosine >= goal
    assert target["linear_bytes_after"] > target["linear_bytes_before"]  # what it cost
    assert result.recommendation["setting"]["label"] == variant.label
    assert variant.mean_cosine == pytest.approx(
        independent_cosine(model, target["layers"], kwargs), rel=1e-9
    )


def test_a_target_already_met_changes_nothing(encoder_dir, texts):
    """A target the plain setting already reaches: no variant, the setting recommended as is."""
    result = evaluate(
        str(encoder_dir),
        methods=["fp32", "rtn"],
        bits=["w4a8"],
        calibration=texts / "calib.txt",
        eval_data=texts / "eval.txt",
        latency=False,
        target_cosine=0.5,
    )
    assert result.target is None and len(result.rows) == 2
    assert result.recommendation["setting"]["label"] == "rtn/w4a8"


def test_apply_saves_the_model_that_reaches_the_target(causal_dir, texts, tmp_path):
    from accelkit.quant.evaluation.fidelity import load_subject, subject_fidelity, subject_reference
    from accelkit.quant.method.storage import load_quantized
    from accelkit.quant.models import model_factory

    out = tmp_path / "q.safetensors"
    result = apply(
        str(causal_dir),
        out,
        method="rtn",
        calibration=texts / "calib.txt",
        eval_data=texts / "eval.txt",
        target_cosine=TARGET,
    )
    assert result.target["reached"] and result.target["layers"]
    assert "eager_ratio_after" in result.target
    loaded = load_quantized(out, model_factory(str(causal_dir)))
    subject = load_subject(str(causal_dir), eval_file=texts / "eval.txt")
    fid = subject_fidelity(subject, loaded, subject_reference(subject))
    assert fid["mean_cosine"] == pytest.approx(result.target["cosine"], rel=1e-12)
    assert fid["mean_cosine"] >= TARGET


def test_the_command_line_says_what_moved(causal_dir, texts, capsys):
    doc = run_json(
        ["quant", "eval", "--model", str(causal_dir), "--methods", "fp32,rtn", "--bits", BITS,
         "--calibration", str(texts / "calib.txt"), "--eval-data", str(texts / "eval.txt"),
         "--no-latency", "--target-cosine", str(TARGET), "--json"],
        capsys,
    )  # fmt: skip
    assert doc["target"]["reached"] and doc["rows"][-1]["label"].endswith(f"+target{TARGET:g}")
    assert {"load", "calibration", "fidelity", "target cosine"} <= set(doc["phases"])


@pytest.mark.parametrize("bad", ["0", "1.5"])
def test_a_target_outside_0_1_is_refused(bad, capsys):
    from tests.support.cli import run_cli

    code, _, err = run_cli(["quant", "eval", "--target-cosine", bad], capsys)
    assert code == 2 and "--target-cosine" in err


def test_without_vnni_the_default_bits_add_w4a7(monkeypatch):
    """And every CPU gets W8A8 and the weight-only rows, which can be faster where 4-bit
    activations lose."""
    from accelkit.quant import api
    from accelkit.quant.method import kernels

    monkeypatch.setattr(kernels, "full_range_exact", lambda: False)
    assert api.default_bits() == ["w4a8", "w4a7", "w4a4", "w8a8", "w4a16", "w8a16"]
    monkeypatch.setattr(kernels, "full_range_exact", lambda: True)
    assert api.default_bits() == ["w4a8", "w4a4", "w8a8", "w4a16", "w8a16"]


def test_hidden_state_cosine_of_a_causal_lm_equals_an_independent_one(causal_dir, texts):
    """fidelity.lm_fidelity's mean cosine against the last hidden states read by the test itself
    (transformers' output_hidden_states, float64)."""
    import copy

    from accelkit.quant.config import QuantConfig
    from accelkit.quant.evaluation.fidelity import load_subject, subject_fidelity, subject_reference
    from accelkit.quant.method.convert import quantize

    subject = load_subject(str(causal_dir), eval_file=texts / "eval.txt")
    model = quantize(copy.deepcopy(subject.model), QuantConfig(method="rtn"), subject.calibration)
    got = subject_fidelity(subject, model, subject_reference(subject))
    cosines = []
    with torch.no_grad():
        for batch in subject.data:
            mask = batch["attention_mask"].bool()
            h = [
                m.lm(**batch, use_cache=False, output_hidden_states=True).hidden_states[-1][mask]
                for m in (subject.model, model)
            ]
            cosines.append(torch.nn.functional.cosine_similarity(h[0].double(), h[1].double()))
    want = torch.cat(cosines)
    assert got["mean_cosine"] == pytest.approx(float(want.mean()), rel=1e-9)
    assert got["min_cosine"] == pytest.approx(float(want.min()), rel=1e-9)
