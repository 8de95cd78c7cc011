"""Fidelity of a quantized model against its FP32 self, and the subject it is measured on.

Encoder metrics against FP32: mean/min cosine of each text's embedding to its FP32 embedding and
top-1 retrieval agreement — on the shipped paraphrase pairs, is each query's nearest partner the
same as under FP32; on a user's texts, is each text's nearest other text the same.
Causal-LM metrics: next-token top-1 agreement with FP32 over every real position, and the ratio
of perplexities (quantized / FP32) on the evaluation texts. What is kept per evaluation text is
one float32 embedding (encoders) or its next-token choices (causal LMs), so memory grows by a few
hundred bytes per text, not by the file.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch
from torch import nn

from accelkit.errors import InputError
from accelkit.quant.evaluation.corpus import calibration_sentences, eval_pairs, generated_images
from accelkit.quant.evaluation.report import LM_KINDS
from accelkit.quant.evaluation.tokenize import (
    Batches,
    ImageBatches,
    ImageTextBatches,
    Texts,
    prepare,
    read_images,
)
from accelkit.quant.method.layers import QuantLinear, as_linear
from accelkit.quant.method.storage import compact_tensors
from accelkit.quant.models import (
    ImageInputs,
    VisionLanguageLogits,
    load_model,
    model_max_length,
)
from accelkit.runtime.timing import Protocol, measure

CALIBRATION_IMAGES = 64
NO_NEXT_TOKEN = "the evaluation texts have no position with a next token; use longer texts"  # generated images a vision tower is calibrated on by default


@torch.no_grad()
def embed(model: nn.Module, data) -> torch.Tensor:
    """Embeddings of every batch, float64 (lists of batches, as the benchmarks pass)."""
    return torch.cat([model(**b).to(torch.float64) for b in data])


@torch.no_grad()
def embed_stream(model: nn.Module, data) -> torch.Tensor:
    """Embeddings of every batch (its trailing padding columns cut: `trimmed`), stored float32
    (one vector per text; the metrics compute in float64)."""
    return torch.cat([model(**trimmed(b)).to(torch.float32) for b in data])


def nearest_other(emb: torch.Tensor, chunk: int = 512) -> torch.Tensor:
    """Index of each row's most similar other row (cosine), in row chunks (memory: chunk × N)."""
    e = nn.functional.normalize(emb.to(torch.float32), dim=-1)
    out = torch.empty(len(e), dtype=torch.long)
    for i in range(0, len(e), chunk):
        sims = e[i : i + chunk] @ e.T
        rows = torch.arange(i, min(i + chunk, len(e)))
        sims[rows - i, rows] = -2
        out[i : i + chunk] = sims.argmax(dim=1)
    return out


def neighbour_fidelity(emb: torch.Tensor, ref: torch.Tensor) -> dict[str, float]:
    """Cosine to FP32 and whether each text's nearest other text is the same as under FP32."""
    e, r = emb.to(torch.float64), ref.to(torch.float64)
    cos = (nn.functional.normalize(e, dim=-1) * nn.functional.normalize(r, dim=-1)).sum(-1)
    out = {"mean_cosine": float(cos.mean()), "min_cosine": float(cos.min())}
    if len(emb) > 1:
        out["top1_agreement"] = float((nearest_other(emb) == nearest_other(ref)).double().mean())
    return out


@dataclass
class LMReference:
    """What the FP32 causal LM predicts, kept small: per batch the top-1 next token at each
    position whose next token is real (int32), the last hidden state of every real token (float32), and the summed
    negative log-likelihood of the real next tokens."""

    argmax: list[torch.Tensor]
    nll: float
    count: int
    hidden: list[torch.Tensor]


def _next_token_mask(batch) -> torch.Tensor:
    return batch["attention_mask"][:, 1:].bool() & batch["attention_mask"][:, :-1].bool()


def trimmed(batch):
    """`batch` without its last columns where every text is padding (right padding, as the
    tokenizers here pad): every tensor shaped like the attention mask loses them. Nothing real
    moves — a token sees only the positions its mask lets it (and a causal LM only earlier ones)
    — so each real token's output is the one the full batch gives, for less work: the evaluation
    batches are padded to the longest text of all of them (a decoder's 192 shipped texts: 48, 61
    and 74 of 74 columns hold a real token)."""
    mask = batch.get("attention_mask") if isinstance(batch, dict) else None
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or not mask.shape[1]:
        return batch
    real = mask.bool().any(dim=0).nonzero()
    keep = int(real.max()) + 1 if len(real) else 1
    if keep == mask.shape[1]:
        return batch
    return {
        key: value[:, :keep]
        if isinstance(value, torch.Tensor) and value.shape == mask.shape
        else value
        for key, value in batch.items()
    }


def _real_logits(model: nn.Module, batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(next-token logits at every position whose next token is real, (n, vocab) in the model's
    dtype — the metrics take the argmax there (a float64 copy has the same order) and the
    softmax in float64; those next tokens (n,); the real tokens' last hidden states, float32). Only those positions reach
    the output projection (`CausalLogits`' `rows`), and the trailing padding columns not even the
    model (`trimmed`): a padded batch is largely padding, and the projection is a decoder's
    widest GEMM."""
    batch = trimmed(batch)
    mask = _next_token_mask(batch)
    target = batch["input_ids"][:, 1:][mask]
    # (batch, positions): the rows whose logits are taken; none at all: the full logits, cut
    rows = torch.cat([mask, mask.new_zeros((len(mask), 1))], dim=1) if len(target) else None
    logits, hidden = model(**batch, hidden=True, rows=rows)
    if rows is None:
        logits = logits[:, :-1][mask]
    return (
        logits,
        target,
        hidden[batch["attention_mask"].bool()].to(torch.float32),
    )


@torch.no_grad()
def lm_reference(model: nn.Module, data) -> LMReference:
    argmax, hiddens, nll, count = [], [], 0.0, 0
    for batch in data:
        logits, target, hidden = _real_logits(model, batch)
        loss = nn.functional.cross_entropy(logits.to(torch.float64), target, reduction="none")
        nll += float(loss.sum())
        count += len(target)
        argmax.append(logits.argmax(-1).to(torch.int32))
        hiddens.append(hidden)
    return LMReference(argmax, nll, count, hiddens)


@torch.no_grad()
def lm_fidelity(model: nn.Module, reference: LMReference, data) -> dict[str, float]:
    """Next-token top-1 agreement with FP32 and the perplexity ratio (quantized / FP32), over
    every position whose next token is real (attention mask 1); and the mean / min cosine of each
    real token's last hidden state to its FP32 one (float64)."""
    agree = count = 0
    nll_q = 0.0
    cosines = []
    for batch, ref, ref_hidden in zip(data, reference.argmax, reference.hidden, strict=True):
        logits, target, hidden = _real_logits(model, batch)
        agree += int((logits.argmax(-1) == ref).sum())
        count += len(target)
        nll = nn.functional.cross_entropy(logits.to(torch.float64), target, reduction="none")
        nll_q += float(nll.sum())
        cosines.append(
            nn.functional.cosine_similarity(hidden.double(), ref_hidden.double(), dim=-1)
        )
    if not count:
        raise InputError(NO_NEXT_TOKEN)
    nll_f = reference.nll
    cos = torch.cat(cosines)
    return {
        "mean_cosine": float(cos.mean()),
        "min_cosine": float(cos.min()),
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
    q_bytes = fp_bytes = 0
    for mod in model.modules():
        if isinstance(mod, QuantLinear):
            q_bytes += sum(t.numel() * t.element_size() for t in compact_tensors(mod).values())
            fp_bytes += 4 * (
                mod.in_features * mod.out_features + (mod.out_features if mod.spec.bias else 0)
            )
    return q_bytes, fp_bytes


def linear_bytes(model: nn.Module) -> int:
    """Bytes of every Linear layer: quantized ones as stored, float ones in FP32."""
    total = 0
    for m in model.modules():
        if isinstance(m, QuantLinear):
            total += sum(t.numel() * t.element_size() for t in compact_tensors(m).values())
        elif (linear := as_linear(m)) is not None:  # Linear, or Conv1D as the Linear it is
            bias = linear.bias  # Conv1D's own, as the Linear carries it
            total += 4 * (linear.weight.numel() + (bias.numel() if bias is not None else 0))
    return total


def latency_ms(model: nn.Module, batch: dict[str, torch.Tensor], repeats: int = 10) -> float:
    """Median wall time of one synchronized forward in ms (the first call and one warm-up apart),
    timed by `accelkit.runtime.timing` like every other measurement."""
    with torch.no_grad():
        timing, _ = measure(
            "forward", "pytorch", lambda: model(**batch), Protocol(repeats=repeats, warmup=1)
        )
    return 1e3 * timing.median_s


@dataclass
class Subject:
    """What is evaluated: the model, its kind, calibration and evaluation batches (`Batches` of
    texts, `ImageBatches` of images, `ImageTextBatches` of both), and `n_pairs` when the
    evaluation texts are the shipped paraphrase pairs."""

    name: str
    model: nn.Module
    kind: str
    calibration: Batches | ImageBatches | ImageTextBatches
    data: Batches | ImageBatches | ImageTextBatches
    n_pairs: int | None = None

    @property
    def texts(self) -> int:
        return self.data.count

    @property
    def dtype(self) -> str:
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")


def load_subject(
    spec: str = "minilm",
    *,
    n_pairs: int = 300,
    calibration_file: str | None = None,
    eval_file: str | None = None,
    max_length: int | None = None,
    dtype=None,
    tokenizer_path: str | os.PathLike | None = None,
) -> Subject:
    """The model and its data: the shipped sentences unless text files are given (streamed);
    for a vision tower, generated images (`corpus.generated_images`: `2 · n_pairs` to evaluate
    on) unless folders of images are given; for a vision-language model the same images, each
    with one of the shipped sentences as its prompt."""
    model, tokenizer, kind = load_model(spec, dtype, tokenizer_path)
    calib = calibration_data(model, tokenizer, calibration_file, max_length)
    inputs = _image_inputs(model, tokenizer)
    if inputs is not None:
        images = _image_set(eval_file, "--eval-data", 2 * n_pairs, inputs, seed=20240605)
        data = ImageBatches(images, inputs, 64, "--eval-data")
        if isinstance(model, VisionLanguageLogits):
            prompts = [a for pair in eval_pairs(n_pairs) for a in pair]
            data = _with_prompts(model, tokenizer, data, prompts, max_length)
        return Subject(spec, model, kind, calib, data, None)
    pairs = None
    if eval_file:
        texts = Texts("--eval-data", eval_file)
    else:
        pairs = eval_pairs(n_pairs)
        texts = Texts("the shipped pairs", items=[a for a, _ in pairs] + [b for _, b in pairs])
    limit = model_max_length(model, tokenizer)
    return Subject(
        spec,
        model,
        kind,
        calib,
        prepare(tokenizer, texts, max_length=max_length, model_max=limit, batch_size=64),
        len(pairs) if pairs and kind == "encoder" else None,
    )


def _images(path: str, flag: str):
    from pathlib import Path

    if not Path(path).is_dir():
        raise InputError(
            f"{flag} {path}: not a folder; a vision model takes a folder of images (.png, .jpg)"
        )
    return read_images(path, flag)


def _image_inputs(model: nn.Module, tokenizer) -> ImageInputs | None:
    """How the model wants its images (a vision tower's or a vision-language model's); None for
    a text model."""
    if isinstance(model, VisionLanguageLogits):
        return model.images
    return tokenizer if isinstance(tokenizer, ImageInputs) else None


def _image_set(path: str | None, flag: str, n: int, inputs: ImageInputs, seed: int):
    """The images of the folder `path`, else `n` generated ones of the model's side."""
    return _images(path, flag) if path else generated_images(n, inputs.size, seed=seed)


def _with_prompts(model, tokenizer, images: ImageBatches, prompts: list[str], max_length):
    """`images` each with a prompt (the texts cycled to one per image), as PaliGemma's batches."""
    texts = Texts(
        "the shipped sentences", items=[prompts[i % len(prompts)] for i in range(images.count)]
    )
    limit = model_max_length(model, tokenizer)
    batches = prepare(
        tokenizer, texts, max_length=max_length, model_max=limit, batch_size=images.batch_size
    )
    return ImageTextBatches(batches, images)


def calibration_data(model: nn.Module, tokenizer, calibration_file, max_length):
    """The calibration batches of a model: the shipped sentences or a text file, tokenized; for
    a vision tower (`tokenizer` is its `ImageInputs`), generated images or a folder of images;
    for a vision-language model those images, each with a shipped sentence as its prompt."""
    inputs = _image_inputs(model, tokenizer)
    if inputs is not None:
        images = _image_set(calibration_file, "--calibration", CALIBRATION_IMAGES, inputs, seed=7)
        data = ImageBatches(images, inputs, 32, "--calibration")
        if isinstance(model, VisionLanguageLogits):
            return _with_prompts(model, tokenizer, data, calibration_sentences(), max_length)
        return data
    texts = (
        Texts("--calibration", calibration_file)
        if calibration_file
        else Texts("the shipped calibration sentences", items=calibration_sentences())
    )
    limit = model_max_length(model, tokenizer)
    return prepare(tokenizer, texts, max_length=max_length, model_max=limit, batch_size=32)


def subject_fidelity(subject: Subject, model: nn.Module, reference) -> dict[str, float]:
    if subject.kind in LM_KINDS:
        return lm_fidelity(model, reference, subject.data)
    emb = embed_stream(model, subject.data)
    if subject.n_pairs:
        return fidelity(emb.to(torch.float64), reference.to(torch.float64), subject.n_pairs)
    return neighbour_fidelity(emb, reference)


def reference_fidelity(subject: Subject, reference) -> dict[str, float]:
    """FP32's figures against itself, from its reference outputs alone (no model pass): the
    numbers `subject_fidelity(subject, subject.model, reference)` gives."""
    if subject.kind in LM_KINDS:
        if not reference.count:
            raise InputError(NO_NEXT_TOKEN)
        cos = torch.cat(
            [
                nn.functional.cosine_similarity(h.double(), h.double(), dim=-1)
                for h in reference.hidden
            ]
        )
        perplexity = math.exp(reference.nll / reference.count)
        return {
            "mean_cosine": float(cos.mean()),
            "min_cosine": float(cos.min()),
            "top1_agreement": 1.0,
            "perplexity": perplexity,
            "perplexity_fp32": perplexity,
            "perplexity_ratio": 1.0,
        }
    if subject.n_pairs:
        return fidelity(reference.to(torch.float64), reference.to(torch.float64), subject.n_pairs)
    return neighbour_fidelity(reference, reference)


@torch.no_grad()
def subject_reference(subject: Subject):
    if subject.kind in LM_KINDS:
        return lm_reference(subject.model, subject.data)
    return embed_stream(subject.model, subject.data)
