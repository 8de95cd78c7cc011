"""The imported files checked against the framework's own outputs before anything is kept.

Through accelkit's own loading of the written YAML (`load_settings`, `make_backend`,
`make_text_encoder`), on a few shipped photos and texts:

* images: accelkit's preprocessing of each photo, run by the ONNX image encoder and by
  transformers' `get_image_features` on the same pixels — cosine at least `MIN_COSINE`;
* texts: accelkit's token ids (`load_tokenizer` over the written tokenizer.json) equal the
  tokenizer's own (`padding="max_length"`, `truncation=True`), and the ONNX text encoder's vector
  has cosine at least `MIN_COSINE` with `get_text_features` on them;
* preprocessing: accelkit's vector of each photo, given as pixels and as JPEG bytes, against
  `get_image_features` on the pixels (of PIL's decode) of transformers' own image processor of
  the folder (`AutoImageProcessor.from_pretrained`, not accelkit's reading of its files) — cosine at least
  `MIN_COSINE` (`preprocess_min_cosine`). The YAML asks for the processor's filter and geometry
  (`resample`, `fit`) and for no host speed-ups, which move pixels (`reducing_gap: null`,
  `fast_jpeg_downscale: false`); measured, not a gate: the same with those speed-ups on
  (`preprocess_speedups_min_cosine`), for a user who weighs turning them back on.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from accelkit.errors import InputError
from accelkit.images.embedding.models import make_backend, make_text_encoder
from accelkit.images.embedding.preprocess import make_preprocessor
from accelkit.images.importing.export import features, quiet_transformers
from accelkit.images.importing.folder import FolderPlan, processor_class, processor_file
from accelkit.images.settings.config import load_settings

MIN_COSINE = 0.9999
TEXTS = (
    "a photo of a cat",
    "a red bicycle at night",
    "coffee",
    "Two astronauts ride horses across the moon, " * 12,  # longer than any context: cut
)
PHOTOS = ("chelsea", "coffee", "astronaut", "rocket", "china", "camera")


def _jpeg(pixels: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def _decoded(item) -> np.ndarray:
    """What the processor is given: PIL's decode of a JPEG, the pixels as they are."""
    if isinstance(item, bytes):
        from PIL import Image

        return np.asarray(Image.open(io.BytesIO(item)).convert("RGB"))
    return item


def sample_images() -> dict[str, np.ndarray]:
    """Photos that ship with scikit-image and scikit-learn (`accelkit.images.testing`), or, where
    those are not installed, three deterministic pictures of other sizes and aspect ratios."""
    try:
        from accelkit.images.testing import photos

        found = photos(crops=False)
        return {name: found[name] for name in PHOTOS}
    except Exception:
        rng = np.random.default_rng(0)
        shapes = {"wide": (180, 320), "tall": (300, 140), "square": (256, 256)}
        out = {}
        for name, (h, w) in shapes.items():
            y, x = np.mgrid[0:h, 0:w]
            base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 127 / (h + w)], -1)
            out[name] = np.clip(base + rng.normal(0, 20, (h, w, 3)), 0, 255).astype(np.uint8)
        return out


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def _refuse(plan: FolderPlan, what: str, values: np.ndarray, names) -> InputError:
    worst = int(np.argmin(values))
    return InputError(
        f"{plan.folder}: the exported {what} differs from transformers' own output (cosine"
        f" {values[worst]:.6f} on {names[worst]!r}, need >= {MIN_COSINE}); nothing written —"
        " this model does not export faithfully, report its config.json"
    )


def hf_image_processor(plan: FolderPlan) -> Any:
    """transformers' own image processor of the folder (`AutoImageProcessor.from_pretrained`,
    which reads preprocessor_config.json or processor_config.json), its PIL one (no torchvision
    needed); the model type's defaults where the folder has no processor file."""
    path = processor_file(plan.folder)  # the folder's own, whatever accelkit read of it
    if path is None:
        cls = processor_class(plan.kind)
        return cls(**{k: v for k, v in plan.processor.items() if k != "image_processor_type"})
    import transformers

    auto = transformers.AutoImageProcessor
    try:
        with quiet_transformers():
            try:
                return auto.from_pretrained(str(plan.folder), backend="pil")
            except TypeError:  # transformers 4: no backend choice, its processors are PIL ones
                return auto.from_pretrained(str(plan.folder))
    except Exception as exc:
        raise InputError(
            f"{path}: transformers cannot load this image processor"
            f" ({str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__});"
            " save the model's own processor into the folder"
        ) from exc


def processor_pixels(plan: FolderPlan, pictures: list[np.ndarray]) -> np.ndarray:
    """transformers' own processor of the folder on `pictures`; one line where its pixels are
    not the size the image tower takes."""
    processor = hf_image_processor(plan)
    pixels = processor(images=pictures, return_tensors="np")["pixel_values"]
    pixels = np.asarray(pixels, np.float32)
    if tuple(pixels.shape[-2:]) != tuple(plan.image_size):
        raise InputError(
            f"{processor_file(plan.folder) or plan.folder}: transformers' image processor makes"
            f" {pixels.shape[-2]}x{pixels.shape[-1]} pixels, the image tower takes"
            f" {plan.image_size[0]}x{plan.image_size[1]} (config.json vision_config.image_size);"
            " save the model's own processor into the folder"
        )
    return pixels


def verify(plan: FolderPlan, model, tokenizer, config_path: Path) -> dict[str, Any]:
    """The checks' figures; one line (exit 2) when a tower or the tokenizer differs."""
    import torch

    settings = load_settings(config_path)
    images = sample_images()
    names, pictures = list(images), list(images.values())
    configured = settings.preprocess
    with make_preprocessor("host", configured) as pre:
        pixels = np.asarray(pre.preprocess_batch(pictures), np.float32)
    # the photos as JPEG files come to accelkit's decoder; the processor gets PIL's decode
    inputs = pictures + [_jpeg(picture) for picture in pictures]
    input_names = names + [f"{name}.jpg" for name in names]
    with make_preprocessor("host", configured) as pre:
        as_configured = np.asarray(pre.preprocess_batch(inputs), np.float32)
    fast = {"reducing_gap": 3.0, "fast_jpeg_downscale": True}
    with make_preprocessor("host", configured, **fast) as pre:
        with_speedups = np.asarray(pre.preprocess_batch(inputs), np.float32)
    backend = make_backend(settings.model)
    text_encoder = make_text_encoder(settings.model)
    assert text_encoder is not None, "an imported folder has a text tower"
    try:
        ours = backend.embed(pixels)
        ours_configured = backend.embed(as_configured)
        ours_fast = backend.embed(with_speedups)
        ids, _ = text_encoder.tokenize(list(TEXTS))
        ours_text = text_encoder.embed(list(TEXTS))
    finally:
        backend.close()
        text_encoder.close()
    reference = tokenizer(
        list(TEXTS),
        padding="max_length",
        max_length=plan.context_length,
        truncation=True,
        return_tensors="np",
    )
    if not np.array_equal(ids, reference["input_ids"]):
        row = int(np.argmax((ids != reference["input_ids"]).any(1)))
        raise InputError(
            f"{plan.folder}: the written tokenizer.json gives other token ids than the model's"
            f" tokenizer for {TEXTS[row][:40]!r}; nothing written — save the tokenizer again"
        )
    with torch.no_grad():
        theirs = features(model.get_image_features(pixel_values=torch.from_numpy(pixels)))
        hf_pixels = torch.from_numpy(processor_pixels(plan, [_decoded(i) for i in inputs]))
        processed = features(model.get_image_features(pixel_values=hf_pixels))
        inputs = {k: torch.from_numpy(np.asarray(v)) for k, v in reference.items()}
        theirs_text = features(model.get_text_features(**inputs))
    image_cos = cosines(ours, theirs.numpy())
    text_cos = cosines(ours_text, theirs_text.numpy())
    if image_cos.min() < MIN_COSINE:
        raise _refuse(plan, "image encoder", image_cos, names)
    if text_cos.min() < MIN_COSINE:
        raise _refuse(plan, "text encoder", text_cos, [t[:40] for t in TEXTS])
    preprocess_cos = cosines(ours_configured, processed.numpy())
    if preprocess_cos.min() < MIN_COSINE:
        worst = int(np.argmin(preprocess_cos))
        path = processor_file(plan.folder)
        processor_name = path.name if path else "config.json"
        raise InputError(
            f"{plan.folder}: accelkit's preprocessing differs from the model's image processor"
            f" (cosine {preprocess_cos[worst]:.6f} on {input_names[worst]!r}, need >="
            f" {MIN_COSINE}); nothing written — report its {processor_name}"
        )
    return {
        "images": names,
        "texts": len(TEXTS),
        "min_cosine": MIN_COSINE,
        "image_min_cosine": float(image_cos.min()),
        "text_min_cosine": float(text_cos.min()),
        "preprocess_min_cosine": float(preprocess_cos.min()),
        "preprocess_speedups_min_cosine": float(cosines(ours_fast, processed.numpy()).min()),
    }
