"""The real model: all-MiniLM-L6-v2 from the installed package, offline, CI-sized."""

import copy

import pytest
import torch

from accelkit.quant.config import QuantConfig
from accelkit.quant.evaluation.corpus import calibration_sentences, eval_pairs
from accelkit.quant.evaluation.fidelity import embed, fidelity
from accelkit.quant.evaluation.sweep import with_abits
from accelkit.quant.evaluation.tokenize import batches
from accelkit.quant.method.calibrate import collect_inputs
from accelkit.quant.method.convert import quantize
from accelkit.quant.method.transforms import fit_transform
from accelkit.quant.models import load_minilm

PAIRS = 48


@pytest.fixture(scope="module")
def minilm():
    model, tokenizer = load_minilm()
    pairs = eval_pairs(PAIRS)
    data = batches(tokenizer, [a for a, _ in pairs] + [b for _, b in pairs])
    calib = batches(tokenizer, calibration_sentences(32), batch_size=32)
    return model, data, calib, embed(model, data)


def test_shipped_sets_are_fixed_large_and_disjoint():
    pairs = eval_pairs()
    sentences = {s for pair in pairs for s in pair}
    assert len(sentences) == 600
    assert pairs[0] == (
        "A tourist sold the wooden table during the storm.",
        "While the storm raged, a traveller traded away the timber desk.",
    )
    assert not sentences & set(calibration_sentences())


def test_fp32_reference_embeddings_are_sane(minilm):
    ref = minilm[3]
    assert torch.allclose(ref.norm(dim=-1), torch.ones(len(ref), dtype=torch.float64), atol=1e-5)
    # paraphrase partners are mostly each other's nearest neighbour under FP32
    assert fidelity(ref, ref, PAIRS)["top1_partner_accuracy"] > 0.5
    assert fidelity(ref, ref, PAIRS)["mean_cosine"] == pytest.approx(1.0)


def test_duquant_lowers_outlier_ratio_on_the_outlier_layer(minilm):
    model, _, calib, _ = minilm
    downs = {
        n: m
        for n, m in model.named_modules()
        if n.endswith("output.dense") and "attention" not in n
    }
    inputs = collect_inputs(model, downs, calib, max_rows=512)
    ratio = {n: float(e.absmax.max() / e.absmax.median()) for n, e in inputs.items()}
    name = max(ratio, key=ratio.get)
    assert ratio[name] > 20  # MiniLM's known FFN outlier channel
    x = inputs[name].sample().to(torch.float64)
    t = fit_transform(
        x,
        downs[name].weight.detach(),
        method="duquant",
        alpha=0.6,
        block=128,
        steps=64,
        permutation=True,
        act_absmax=inputs[name].absmax,
    )

    def max_over_mean(z):
        return float(z.abs().amax() / z.abs().mean())

    smoothed = x / t.smooth
    assert max_over_mean(t.activations(x)) < 0.5 * max_over_mean(smoothed) < max_over_mean(x)


def test_ci_fidelity_duquant_beats_rtn_at_w4a8_and_w4a4(minilm):
    """CI-sized: short rotation search and a small calibration sample (the full run is the benchmark)."""
    model, data, calib, ref = minilm
    fast = {"rotation_steps": 16, "calibration_rows": 512, "weight_group_size": 64}
    scores = {}
    rtn = quantize(copy.deepcopy(model), QuantConfig(method="rtn", wbits=4, abits=4, **fast), calib)
    duquant = quantize(
        copy.deepcopy(model), QuantConfig(method="duquant", wbits=4, abits=8, **fast), calib
    )
    # W4A4 is W4A8's calibration with 4-bit activations (`with_abits`, what `quant eval` runs;
    # tests/quant/method/test_shared_quantization.py holds it equal to quantizing for W4A4)
    models = {("rtn", 4): rtn, ("duquant", 8): duquant, ("duquant", 4): with_abits(duquant, 4)}
    for key, q in models.items():
        scores[key] = fidelity(embed(q, data), ref, PAIRS)["mean_cosine"]
    assert scores["duquant", 4] > scores["rtn", 4] + 0.02
    assert scores["duquant", 4] >= 0.94
    assert scores["duquant", 8] >= 0.97
