"""What `quant eval` spends no time on (so that its time scales): calls whose result
nothing reads. Each test counts the work, never the seconds."""

import pytest
import torch
from torch import nn

from accelkit.quant.evaluation.speed import Phases, SpeedBench


class Counted(nn.Module):
    """A small model that counts its calls."""

    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        self.lin = nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.lin(x)


def test_fp32_warms_up_once_per_run_not_once_per_setting():
    fp32 = Counted(0)
    bench = SpeedBench(fp32, {"x": torch.randn(4, 8)}, Phases(), rounds=3)  # 3 rounds exactly
    first, second = Counted(1), Counted(2)
    bench.measure(first, compiled=False)
    assert (fp32.calls, first.calls) == (1 + 3, 1 + 3)  # a warm-up call each, then 3 rounds
    bench.measure(second, compiled=False)
    # the second setting warms up; FP32, already called on this batch, does not again
    assert (fp32.calls, second.calls) == (1 + 3 + 3, 1 + 3)
    bench.measure(first, compiled=False)  # a model measured again is warm too
    assert (fp32.calls, first.calls) == (1 + 3 + 3 + 3, 1 + 3 + 3)


def test_the_output_projection_sees_only_positions_with_a_real_next_token(causal_dir):
    """A causal LM's fidelity pass: the vocabulary-wide head runs on the positions whose next
    token is real, not on the padding (and the trailing padding columns never reach the model);
    its figures are transformers' own on the full padded batches."""
    import torch.nn.functional as F

    from accelkit.quant.evaluation.fidelity import load_subject, subject_reference

    subject = load_subject(str(causal_dir), n_pairs=48)  # 96 texts: two batches of one length
    lm = subject.model.lm
    head_rows, widths = [], []
    hooks = [
        lm.get_output_embeddings().register_forward_hook(
            lambda _m, _args, out: head_rows.append(out.shape[:-1].numel())
        ),
        lm.register_forward_pre_hook(
            lambda _m, args, kwargs: widths.append(kwargs["input_ids"].shape[1]), with_kwargs=True
        ),
    ]
    try:
        reference = subject_reference(subject)
    finally:
        for hook in hooks:
            hook.remove()
    batches = list(subject.data)
    assert len(batches) == 2
    assert sum(head_rows) == reference.count  # one head row per real next token, no more
    assert reference.count < sum(b["attention_mask"].numel() for b in batches)
    # each batch as wide as its longest text, not the longest of all
    assert widths == [int(b["attention_mask"].sum(1).max()) for b in batches]
    # the independent figures: transformers' logits on the full padded batches, float64
    nll, count, argmax = 0.0, 0, []
    with torch.no_grad():
        for b in batches:
            logits = lm(**b, use_cache=False).logits[:, :-1].to(torch.float64)
            mask = b["attention_mask"][:, 1:].bool() & b["attention_mask"][:, :-1].bool()
            nll += float(
                F.cross_entropy(logits[mask], b["input_ids"][:, 1:][mask], reduction="sum")
            )
            count += int(mask.sum())
            argmax.append(logits[mask].argmax(-1))
    assert reference.count == count
    assert reference.nll == pytest.approx(nll, rel=1e-6)
    agree = (torch.cat(reference.argmax).long() == torch.cat(argmax)).double().mean()
    assert agree == 1.0


def test_trailing_padding_columns_are_cut_and_change_no_embedding(encoder_dir):
    from accelkit.quant.evaluation.fidelity import embed_stream, load_subject, trimmed

    subject = load_subject(str(encoder_dir), n_pairs=4)
    batch = subject.data.first()
    width = int(batch["attention_mask"].sum(1).max())
    padded = {k: torch.cat([v, v.new_zeros(len(v), 5)], dim=1) for k, v in batch.items()}
    cut = trimmed(padded)
    assert {k: v.shape[1] for k, v in cut.items()} == {k: width for k in padded}
    assert trimmed(cut) is cut  # nothing left to cut
    with torch.no_grad():
        full = subject.model(**padded)
    got = embed_stream(subject.model, [padded])
    assert torch.allclose(got, full.to(torch.float32), atol=1e-5, rtol=1e-5)


def test_rows_on_the_float_path_only_are_not_timed(causal_dir, texts):
    """A weight-only row runs FP32's GEMMs on dequantized weights, and more: it cannot be faster
    than FP32, so it is not timed (the recommendation is never slower than FP32); an int8 row of
    the same run is."""
    from accelkit.quant import evaluate
    from accelkit.quant.evaluation.sweep import FLOAT_PATH

    result = evaluate(
        str(causal_dir), methods="fp32,rtn", bits="w8a8,w8a16", eval_data=texts / "eval.txt",
        compiled=False, target_top1=0.01,
    )  # fmt: skip
    rows = {r.label: r for r in result.rows}
    assert rows["rtn/w8a16"].kernels == {"float": 14}
    assert rows["rtn/w8a16"].not_timed == FLOAT_PATH and rows["rtn/w8a16"].eager_ms is None
    assert set(rows["rtn/w8a8"].kernels) != {"float"}  # this CPU's int8 GEMM
    assert rows["rtn/w8a8"].not_timed is None and rows["rtn/w8a8"].eager_ms is not None


def test_fp32_is_kept_when_the_only_faithful_rows_run_on_the_float_path():
    from accelkit.quant.evaluation.recommend import recommend
    from accelkit.quant.evaluation.sweep import FLOAT_PATH, EvalRow

    rows = [
        EvalRow("fp32", "w32a32", 8.0, 8.0, mean_cosine=1.0, top1_agreement=1.0,
                label="fp32"),
        EvalRow("rtn", "w4a8", 1.0, 8.0, mean_cosine=0.90, top1_agreement=0.8,
                label="rtn/w4a8",
                not_timed="misses the fidelity targets"),
        EvalRow("rtn", "w8a16", 2.0, 8.0, mean_cosine=0.999, top1_agreement=0.99,
                label="rtn/w8a16",
                kernels={"float": 4}, not_timed=FLOAT_PATH),
    ]  # fmt: skip
    setting = recommend(rows)["setting"]
    assert setting["label"] == "fp32" and not setting["meets_targets"]
    assert "rtn/w8a16 run every quantized layer on the float path" in setting["text"]
