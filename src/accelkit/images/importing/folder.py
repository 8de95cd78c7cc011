"""What a Hugging Face CLIP or SigLIP folder says about itself, read from its own files and turned
into accelkit's settings, or one line naming the file and what to do.

Read, never assumed: the model type and towers (`config.json`), the image rule
(`preprocessor_config.json`, or the `image_processor` nested in the `processor_config.json`
transformers 5 writes for a whole processor: resize, crop, rescale, mean/std, size;
transformers' defaults for the model type where the folder has neither) and the text length (`text_config.
max_position_embeddings`, shortened to the tokenizer's `model_max_length` where that is less).
The padding rule comes from the tokenizer itself (`export.hf_tokenizer`)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelkit.errors import InputError

KINDS = {"clip": "CLIPModel", "siglip": "SiglipModel"}
WEIGHTS = ("model.safetensors", "model.safetensors.index.json")
TOKENIZER = "tokenizer.json"
PROCESSOR = "preprocessor_config.json"
COMBINED = "processor_config.json"  # transformers 5's save of a whole processor: image one nested
RESAMPLE_NAMES = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


@dataclass(frozen=True)
class FolderPlan:
    """One folder's model and rules, in accelkit's terms: `fit` "shortest-edge-crop" (CLIP: the
    short side resized to the crop's, the centre cut out) or "stretch" (SigLIP: resized to
    height × width); `resample` the processor's own filter, which accelkit applies PIL-exactly."""

    folder: Path
    kind: str
    name: str
    image_size: tuple[int, int]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    fit: str
    resample: str
    context_length: int
    vocab_size: int
    processor: dict[str, Any]
    notes: tuple[str, ...] = ()
    snapshot: tuple[str, str] | None = None  # (repo id, commit) of a Hugging Face cache snapshot


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(
            f"{path}: cannot read this {what} ({str(exc).splitlines()[0]}); save the folder again"
            " with transformers' save_pretrained"
        ) from exc
    if not isinstance(value, dict):
        raise InputError(f"{path}: not a {what} (a JSON object); save the folder again")
    return value


def _bad(path: Path, key: str, value: Any, want: str) -> InputError:
    return InputError(f"{path}: {key}={value!r} {want}; correct it or save the processor again")


def _side(value: Any, path: Path, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
        raise _bad(path, key, value, "must be a side in pixels (1-4096)")
    return value


def _triple(value: Any, path: Path, key: str, positive: bool) -> tuple[float, float, float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value] * 3
    if (
        not isinstance(value, list)
        or len(value) != 3
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        or (positive and min(value) <= 0)
    ):
        want = "three positive numbers" if positive else "three numbers"
        raise _bad(path, key, value, f"must be {want} (one per RGB channel)")
    return tuple(float(v) for v in value)  # type: ignore[return-value]


def processor_class(kind: str):
    """The model type's image processor that needs no torchvision: transformers 5's PIL one
    (`CLIPImageProcessorPil`), transformers 4's (PIL-based) `CLIPImageProcessor`."""
    import transformers

    name = "CLIPImageProcessor" if kind == "clip" else "SiglipImageProcessor"
    return getattr(transformers, f"{name}Pil", None) or getattr(transformers, name)


def _default_processor(kind: str, image_size: int) -> dict[str, Any]:
    """transformers' own defaults for the model type, at the model's image size (a folder saved
    without its processor)."""
    if kind == "clip":
        processor = processor_class(kind)(
            size={"shortest_edge": image_size},
            crop_size={"height": image_size, "width": image_size},
        )
    else:
        processor = processor_class(kind)(size={"height": image_size, "width": image_size})
    return json.loads(processor.to_json_string())


def image_rule(processor: dict[str, Any], path: Path, model_size: int):
    """(image_size, mean, std, fit, resample) of a processor config, or one line for a rule
    accelkit's preprocessing cannot express (no resize, a crop of another size than the resize,
    a rescale other than 1/255)."""
    if not processor.get("do_resize", True):
        raise _bad(path, "do_resize", False, "is not a rule accelkit applies (it always resizes)")
    factor = processor.get("rescale_factor", 1 / 255) if processor.get("do_rescale", True) else 1
    if not isinstance(factor, (int, float)) or abs(float(factor) - 1 / 255) > 1e-9:
        raise _bad(path, "rescale_factor", factor, "is not 1/255, the scale accelkit applies")
    size = processor.get("size") or {}
    if not isinstance(size, dict):
        size = {"height": size, "width": size}
    crop = processor.get("crop_size") if processor.get("do_center_crop") else None
    if "shortest_edge" in size:
        edge = _side(size["shortest_edge"], path, "size.shortest_edge")
        if not isinstance(crop, dict) or "height" not in crop:
            raise _bad(
                path,
                "do_center_crop",
                processor.get("do_center_crop"),
                "must be true with"
                " size.shortest_edge (accelkit keeps the centre of the resized image)",
            )
        shape = (
            _side(crop["height"], path, "crop_size.height"),
            _side(crop.get("width"), path, "crop_size.width"),
        )
        if shape != (edge, edge):
            raise _bad(
                path,
                "crop_size",
                crop,
                f"differs from size.shortest_edge {edge}: accelkit's"
                " shortest-edge-crop resizes the short side to the crop's side, not a larger one",
            )
        fit = "shortest-edge-crop"
    elif "height" in size and "width" in size:
        shape = (
            _side(size["height"], path, "size.height"),
            _side(size["width"], path, "size.width"),
        )
        if isinstance(crop, dict) and (crop.get("height"), crop.get("width")) != shape:
            raise _bad(path, "crop_size", crop, f"differs from size {list(shape)}")
        fit = "stretch"
    else:
        raise _bad(path, "size", size, "must have shortest_edge or height and width")
    if shape != (model_size, model_size):
        raise _bad(
            path,
            "size",
            list(shape),
            f"differs from config.json's vision_config.image_size"
            f" {model_size}, the size the image tower takes",
        )
    if processor.get("do_normalize", True):
        mean = _triple(processor.get("image_mean"), path, "image_mean", positive=False)
        std = _triple(processor.get("image_std"), path, "image_std", positive=True)
    else:
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    resample = RESAMPLE_NAMES.get(processor.get("resample", 3), str(processor.get("resample")))
    if resample not in ("bilinear", "bicubic"):
        raise _bad(
            path,
            "resample",
            processor.get("resample"),
            f"({resample}) is not a filter accelkit applies; it resizes bilinear (2) or bicubic (3)",
        )
    return shape, mean, std, fit, resample


def _side_or(value: Any, path: Path) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(path, "text_config.vocab_size", value, "must be a positive number of tokens")
    return value


def _real(path: Path) -> Path:
    """`path` with `..` and symbolic links resolved as far as it exists (it may not yet)."""
    return Path(os.path.realpath(path))


def cache_repo(folder: Path) -> Path | None:
    """The repository folder of a Hugging Face hub cache that `folder` is or lies in — told by
    its layout (`snapshots/`, `blobs/` and `refs/` side by side, as huggingface_hub writes
    `models--org--name/`), not by its name — else None."""
    for part in (_real(folder), *_real(folder).parents):
        if all((part / sub).is_dir() for sub in ("snapshots", "blobs", "refs")):
            return part
    return None


def cache_snapshot(folder: Path) -> tuple[str, str] | None:
    """(repo id, commit) where `folder` is in a Hugging Face hub cache snapshot
    (`models--org--name/snapshots/<commit>/`, beside `blobs/` and `refs/`, as huggingface_hub
    writes it), else None."""
    repo = cache_repo(folder)
    if repo is None:
        return None
    inside = _real(folder).relative_to(repo).parts
    if len(inside) < 2 or inside[0] != "snapshots":
        return None
    return repo.name.removeprefix("models--").replace("--", "/"), inside[1]


def snapshot_of_repo(folder: Path) -> Path | None:
    """The snapshot a cache repository folder given itself names in `refs/main` (what
    huggingface_hub loads by default); None where `folder` is not one. Refused in one line where
    refs/main names no snapshot of it."""
    repo = cache_repo(folder)
    if repo is None or repo != _real(folder):
        return None
    snapshots = sorted(p.name for p in (repo / "snapshots").iterdir() if p.is_dir())
    ref = repo / "refs" / "main"
    commit = ref.read_text(encoding="utf-8", errors="replace").strip() if ref.is_file() else ""
    if commit and commit in snapshots:
        return folder / "snapshots" / commit
    shown = ", ".join(snapshots[:3]) + (", …" if len(snapshots) > 3 else "") or "none"
    raise InputError(
        f"{folder}: a Hugging Face cache repository folder whose refs/main names no snapshot;"
        f" give one of its snapshots/<commit> folders (here: {shown})"
    )


def model_name(folder: Path, config: dict[str, Any]) -> str:
    """The name collections record: a cache snapshot's repository (`org/name`, not its commit
    hash), else the folder's name (or its `_name_or_path`), in the alphabet model names take."""
    snapshot = cache_snapshot(folder)
    if snapshot:
        name = re.sub(r"[^A-Za-z0-9._/-]+", "-", snapshot[0]).strip("-._/")
        return name[:128] or "imported"
    raw = str(config.get("_name_or_path") or "").strip("/").split("/")[-1] or folder.name
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("-._") or "imported"
    return name[:128]


def processor_file(folder: Path) -> Path | None:
    """The folder's processor file transformers reads: preprocessor_config.json, else the
    processor_config.json transformers 5 writes for a whole processor; None where neither."""
    return next((p for p in (folder / PROCESSOR, folder / COMBINED) if p.is_file()), None)


def _image_processor(folder: Path, kind: str, model_size: int):
    """(the image processor's settings, the file they are from, notes): preprocessor_config.json,
    else the `image_processor` nested in processor_config.json (what transformers 5 writes for a
    whole CLIPProcessor/SiglipProcessor), else transformers' defaults for the model type."""
    path = processor_file(folder)
    if path is not None and path.name == PROCESSOR:
        return _read_json(path, "image processor config"), path, []
    if path is not None:
        nested = _read_json(path, "processor config").get("image_processor")
        if not isinstance(nested, dict):
            raise InputError(
                f"{path}: no image_processor object in it; save the model's processor into the"
                " folder (processor.save_pretrained(folder))"
            )
        return nested, path, []
    notes = [f"no {PROCESSOR} or {COMBINED}: transformers' defaults for {KINDS[kind]}"]
    return _default_processor(kind, model_size), folder / PROCESSOR, notes


def read_folder(path: str | Path, tokenizer_max_length: int | None = None) -> FolderPlan:
    """The folder's plan, or one line naming the input and the fix, before any weights load."""
    folder = Path(path)
    if not folder.is_dir():
        raise InputError(
            f"{folder}: not a folder; give the folder of a Hugging Face CLIPModel or SiglipModel"
            " (config.json, model.safetensors, tokenizer.json)"
        )
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise InputError(
            f"{folder}: no config.json; give the folder transformers' save_pretrained wrote for a"
            " CLIPModel or SiglipModel"
        )
    config = _read_json(config_path, "model config")
    kind = config.get("model_type")
    if kind not in KINDS:
        raise InputError(
            f"{config_path}: model_type {kind!r} is not a CLIPModel or SiglipModel; import-model"
            " takes a two-tower CLIP or SigLIP folder (model_type clip or siglip)"
        )
    if not any((folder / name).is_file() for name in WEIGHTS):
        raise InputError(
            f"{folder}: no model.safetensors; save the model with transformers' save_pretrained"
            " (safetensors weights)"
        )
    if not (folder / TOKENIZER).is_file():
        raise InputError(
            f"{folder}: no tokenizer.json; save the model's tokenizer into the folder"
            " (AutoTokenizer.from_pretrained(...).save_pretrained(folder))"
        )
    vision, text = config.get("vision_config") or {}, config.get("text_config") or {}
    model_size = _side(vision.get("image_size", 224), config_path, "vision_config.image_size")
    processor, processor_path, notes = _image_processor(folder, kind, model_size)
    image_size, mean, std, fit, resample = image_rule(processor, processor_path, model_size)
    positions = text.get("max_position_embeddings", 77 if kind == "clip" else 64)
    context = _side(positions, config_path, "text_config.max_position_embeddings")
    if tokenizer_max_length and 1 <= tokenizer_max_length < context:
        context = tokenizer_max_length
    return FolderPlan(
        folder=folder,
        kind=kind,
        name=model_name(folder, config),
        image_size=image_size,
        mean=mean,
        std=std,
        fit=fit,
        resample=resample,
        context_length=context,
        vocab_size=_side_or(
            text.get("vocab_size", 49408 if kind == "clip" else 32000), config_path
        ),
        processor=processor,
        notes=tuple(notes),
        snapshot=cache_snapshot(folder),
    )
