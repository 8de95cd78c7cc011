"""The folder's model written as accelkit loads it: the image tower and the text tower as two
ONNX files, the tokenizer.json with the model's own padding and truncation written into it, and
the YAML `model:`/`preprocess:` block.

The towers go through `torch.onnx.export`'s TorchScript exporter (`dynamo=False`, opset 17,
dynamic batch): with transformers 5 on torch 2.13 it exports both towers of CLIP and SigLIP in
about a second each; the dynamo exporter took 24 s for a small CLIP and wrote an image tower
ONNX Runtime refused (`Duplicate definition of name (embedding)`)."""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from accelkit.errors import InputError, require
from accelkit.images.importing.folder import TOKENIZER, FolderPlan

IMAGE_FILE = "image_encoder.onnx"
TEXT_FILE = "text_encoder.onnx"
CONFIG_FILE = "accelkit.yaml"
EXPORTER = "torch.onnx.export (TorchScript, dynamo=False), opset 17, dynamic batch"
_OPSET = 17


@contextmanager
def quiet_transformers():
    """transformers' progress bars and config warnings off (one line is the rule on stderr),
    and back as they were after."""
    logging = require("transformers", "images-import").utils.logging
    verbosity, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bars:
            logging.enable_progress_bar()


def hf_tokenizer(folder: Path):
    """The folder's tokenizer as transformers reads it (its pad token, sides, inputs)."""
    transformers = require("transformers", "images-import")
    try:
        with quiet_transformers():
            return transformers.AutoTokenizer.from_pretrained(str(folder))
    except Exception as exc:
        raise InputError(
            f"{folder / TOKENIZER}: transformers cannot load this tokenizer"
            f" ({str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__});"
            " save the model's own tokenizer into the folder"
        ) from exc


def hf_model(folder: Path):
    """The CLIPModel or SiglipModel of the folder in eval mode, with eager attention (the form
    the TorchScript exporter traces)."""
    transformers = require("transformers", "images-import")
    try:
        with quiet_transformers():
            model = transformers.AutoModel.from_pretrained(str(folder), attn_implementation="eager")
    except Exception as exc:
        raise InputError(
            f"{folder}: transformers cannot load this model"
            f" ({str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__});"
            " check config.json and model.safetensors"
        ) from exc
    return model.eval()


def features(output) -> Any:
    """The projected vector of get_image_features / get_text_features: a tensor in transformers
    4, the `pooler_output` of the returned object in transformers 5."""
    import torch

    return output if isinstance(output, torch.Tensor) else output.pooler_output


def padding_rule(tokenizer, plan: FolderPlan) -> dict[str, Any]:
    """How the model's tokenizer pads and cuts, from the tokenizer itself: to `context_length`
    with its pad token on its padding side, cut on its truncation side, and whether the model
    is given an attention mask (its `model_input_names`)."""
    if tokenizer.pad_token_id is None:
        raise InputError(
            f"{plan.folder}: the tokenizer has no pad token; set pad_token in"
            " tokenizer_config.json (CLIP pads with <|endoftext|>, SigLIP with </s>)"
        )
    if len(tokenizer) > plan.vocab_size:
        raise InputError(
            f"{plan.folder / TOKENIZER}: the tokenizer has {len(tokenizer)} tokens, the text tower"
            f" {plan.vocab_size} (config.json text_config.vocab_size): it is not this model's"
            " tokenizer; put the model's own tokenizer.json into the folder"
        )
    return {
        "length": plan.context_length,
        "pad_id": int(tokenizer.pad_token_id),
        "pad_token": str(tokenizer.pad_token),
        "side": tokenizer.padding_side,
        "truncation_side": tokenizer.truncation_side,
        "attention_mask": "attention_mask" in tokenizer.model_input_names,
    }


def write_tokenizer(tokenizer, rule: dict[str, Any], target: Path) -> None:
    """The backend tokenizer of `tokenizer` saved with the padding and truncation `rule` in it,
    which accelkit's `load_tokenizer` keeps."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise InputError(
            f"{target.name}: the tokenizer is not a Hugging Face tokenizers one; save a"
            " tokenizer.json of the model's tokenizer into the folder"
        )
    from tokenizers import Tokenizer

    copy = Tokenizer.from_str(backend.to_str())
    copy.enable_padding(
        length=rule["length"],
        pad_id=rule["pad_id"],
        pad_token=rule["pad_token"],
        direction=rule["side"],
    )
    copy.enable_truncation(rule["length"], direction=rule["truncation_side"])
    copy.save(str(target))


def export_towers(model, plan: FolderPlan, folder: Path, rule: dict[str, Any]) -> None:
    """image_encoder.onnx (`pixels` [N, 3, H, W] -> `embedding` [N, D]) and text_encoder.onnx
    (`input_ids` and, when the tokenizer gives one, `attention_mask` -> `text_embedding`)."""
    import torch

    class ImageTower(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, pixels):
            return features(self.inner.get_image_features(pixel_values=pixels))

    class TextTower(torch.nn.Module):
        def __init__(self, inner, mask: bool):
            super().__init__()
            self.inner, self.mask = inner, mask

        def forward(self, input_ids, attention_mask=None):
            return features(
                self.inner.get_text_features(input_ids=input_ids, attention_mask=attention_mask)
            )

    batch = {0: "batch"}
    ids = torch.zeros(2, plan.context_length, dtype=torch.int64)
    text_inputs = ["input_ids", "attention_mask"] if rule["attention_mask"] else ["input_ids"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer chatter
        torch.onnx.export(
            ImageTower(model),
            (torch.zeros(2, 3, *plan.image_size),),
            str(folder / IMAGE_FILE),
            input_names=["pixels"],
            output_names=["embedding"],
            dynamic_axes={"pixels": batch, "embedding": batch},
            opset_version=_OPSET,
            dynamo=False,
        )
        torch.onnx.export(
            TextTower(model, rule["attention_mask"]),
            (ids, torch.ones_like(ids)) if rule["attention_mask"] else (ids,),
            str(folder / TEXT_FILE),
            input_names=text_inputs,
            output_names=["text_embedding"],
            dynamic_axes={**{name: batch for name in text_inputs}, "text_embedding": batch},
            opset_version=_OPSET,
            dynamo=False,
        )


def config_yaml(plan: FolderPlan, dim: int, rule: dict[str, Any]) -> str:
    """The YAML block accelkit loads (`--config`), paths beside the file."""
    import yaml

    block = {
        "preprocess": {
            "image_size": list(plan.image_size),
            "mean": list(plan.mean),
            "std": list(plan.std),
            "fit": plan.fit,
            "resample": plan.resample,
            # the processor's pixels exactly (see `verify`): no reduce first (0: off; a file's
            # null would read as "not set"), full JPEG decode
            "reducing_gap": 0,
            "fast_jpeg_downscale": False,
        },
        "model": {
            "name": plan.name,
            "onnx_path": IMAGE_FILE,
            "text_onnx_path": TEXT_FILE,
            "tokenizer_path": TOKENIZER,
            "context_length": plan.context_length,
            "embedding_dim": dim,
        },
    }
    mask = "with attention_mask" if rule["attention_mask"] else "input_ids only"
    header = [
        f"# {plan.kind} model imported by `accelkit images import-model {plan.folder}`",
        f"# text: padded {rule['side']} to {plan.context_length} tokens with"
        f" {rule['pad_token']!r} (id {rule['pad_id']}), cut on the {rule['truncation_side']}, {mask}",
        f"# images: resized {plan.resample} with fit {plan.fit}, PIL-exact, as the processor does;",
        "# reducing_gap 0 and fast_jpeg_downscale false keep its pixels exactly (turned on, large"
        " photos preprocess faster",
        "# and vectors move: the import's checks.preprocess_speedups_min_cosine says how far)",
    ]
    return (
        "\n".join(header) + "\n" + yaml.safe_dump(block, sort_keys=False, default_flow_style=None)
    )
