"""Texts to calibrate and evaluate on, tokenized in batches.

Texts (the shipped sentences or a file, one text per line) are read as a stream and tokenized in
batches, every batch padded to one length: the longest text, at most `--max-length` (default: the
model's maximum). A text cut to that length and tokens the tokenizer cannot represent ([UNK]) are
each said in one warning line; nothing is dropped silently.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import torch

from accelkit.errors import InputError

SEQ_LEN = 32  # `batches()` pads to this by default (the benchmarks' fixed 64×32-token batch)

log = logging.getLogger(__name__)


class Texts:
    """Texts to tokenize: a list, or the non-empty lines of a UTF-8 file read as a stream (each
    pass reads the file again, so a 100k-line file is never held whole)."""

    def __init__(self, flag: str, path: str | None = None, items: list[str] | None = None):
        self.flag, self.path, self.items = flag, path, items
        if path is not None and not Path(path).is_file():
            raise InputError(
                f"{flag} {path}: no such file; give a text file with one text per line"
            )

    def __iter__(self) -> Iterator[str]:
        if self.items is not None:
            yield from self.items
            return
        assert self.path is not None  # texts are a list or a file
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


class ImageBatches:
    """Images as a vision tower's batches: {"pixel_values": (batch, channels, size, size)} float32,
    resized to the model's side (bilinear), scaled to [0, 1] and normalized by the model's mean
    and std (`models.ImageInputs`), made on demand on every pass. `count` images; `length` and
    `tokens` count patch tokens (per image, and in all) as `Batches` counts text tokens."""

    def __init__(self, images, inputs, batch_size: int, flag: str):
        self.images, self.inputs, self.batch_size, self.flag = images, inputs, batch_size, flag
        self.count = len(images)
        self.length = inputs.tokens
        self.tokens = self.count * inputs.tokens

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for i in range(0, self.count, self.batch_size):
            yield {"pixel_values": self._pixels(self.images[i : i + self.batch_size])}

    def _pixels(self, images) -> torch.Tensor:
        x = torch.as_tensor(images).permute(0, 3, 1, 2).to(torch.float32) / 255.0
        side = self.inputs.size
        if x.shape[-1] != side or x.shape[-2] != side:
            x = torch.nn.functional.interpolate(
                x, size=(side, side), mode="bilinear", antialias=True, align_corners=False
            )
        x = x[:, : self.inputs.channels]
        mean = torch.tensor(self.inputs.mean[: x.shape[1]]).reshape(1, -1, 1, 1)
        std = torch.tensor(self.inputs.std[: x.shape[1]]).reshape(1, -1, 1, 1)
        return (x - mean) / std

    def __len__(self) -> int:
        return -(-self.count // self.batch_size)

    def first(self) -> dict[str, torch.Tensor]:
        return next(iter(self))


class ImageTextBatches:
    """Image + text pairs as a vision-language model's batches: each image (`ImageBatches`) with
    one prompt (`Batches`, as many texts as images), {"input_ids", "attention_mask",
    "pixel_values"}. `length` and `tokens` count the prompt's tokens and the image's."""

    def __init__(self, texts: Batches, images: ImageBatches):
        if texts.count != images.count or texts.batch_size != images.batch_size:
            raise ValueError("one prompt per image, in batches of one size")
        self.texts, self.images = texts, images
        self.count, self.batch_size = images.count, images.batch_size
        self.length = texts.length + images.length
        self.tokens = texts.tokens + images.tokens

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for text, image in zip(self.texts, self.images, strict=True):
            yield {**text, **image}

    def __len__(self) -> int:
        return len(self.images)

    def first(self) -> dict[str, torch.Tensor]:
        return next(iter(self))


def read_images(folder: str, flag: str):
    """The images of a folder (PNG, JPEG, WebP, BMP; sorted by name) as uint8 RGB arrays of one
    size (the first image's), for a vision tower's calibration or evaluation."""
    import numpy as np
    from PIL import Image

    names = sorted(
        p
        for p in Path(folder).iterdir()
        if p.suffix.lower() in (".png", ".jpg", ".jpeg", ".webp", ".bmp")
    )
    if not names:
        raise InputError(f"{flag} {folder}: no images (.png, .jpg, .webp, .bmp) in the folder")
    first = Image.open(names[0]).convert("RGB")
    size = first.size
    return np.stack([np.asarray(Image.open(p).convert("RGB").resize(size)) for p in names])
