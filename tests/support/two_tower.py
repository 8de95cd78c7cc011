"""A small two-tower (CLIP-shaped) model with random weights, saved the way a user brings one:
an ONNX image encoder, an ONNX text encoder and a Hugging Face `tokenizers` tokenizer.json.
Built here, so nothing is downloaded; its own PyTorch outputs are the reference the tests
compare `accelkit images` against."""

from __future__ import annotations

from pathlib import Path

import numpy as np

WORDS = [
    "a",
    "photo",
    "of",
    "cat",
    "dog",
    "cup",
    "coffee",
    "rocket",
    "astronaut",
    "moon",
    "coins",
    "red",
    "green",
    "blue",
    "bicycle",
    "at",
    "night",
]
CONTEXT = 16
DIM = 32
SIZE = 64  # image side the model takes (the config's preprocess.image_size)


def build(folder: Path, seed: int = 0):
    """(model, files) with files {"image", "text", "tokenizer"} written into `folder`."""
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    torch.manual_seed(seed)

    class TinyTwoTower(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.visual = torch.nn.Sequential(
                torch.nn.Conv2d(3, 8, 5, stride=4),
                torch.nn.ReLU(),
                torch.nn.Conv2d(8, 16, 3, stride=2),
                torch.nn.ReLU(),
                torch.nn.AdaptiveAvgPool2d(1),
                torch.nn.Flatten(),
                torch.nn.Linear(16, DIM),
            )
            self.token_embedding = torch.nn.Embedding(len(WORDS) + 2, 24)
            self.text_projection = torch.nn.Linear(24, DIM)

        def encode_image(self, pixels):
            return self.visual(pixels)

        def encode_text(self, input_ids, attention_mask):
            mask = attention_mask.unsqueeze(-1).to(torch.float32)
            pooled = (self.token_embedding(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1)
            return self.text_projection(pooled)

    model = TinyTwoTower().eval()

    class ImageTower(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, pixels):
            return self.inner.encode_image(pixels)

    class TextTower(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask):
            return self.inner.encode_text(input_ids, attention_mask)

    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "image": folder / "image_encoder.onnx",
        "text": folder / "text_encoder.onnx",
        "tokenizer": folder / "tokenizer.json",
    }
    batch = {0: "batch"}
    torch.onnx.export(
        ImageTower(model),
        (torch.zeros(1, 3, SIZE, SIZE),),
        str(files["image"]),
        input_names=["pixels"],
        output_names=["embedding"],
        dynamic_axes={"pixels": batch, "embedding": batch},
        opset_version=17,
        dynamo=False,
    )
    ids = torch.zeros(1, CONTEXT, dtype=torch.int64)
    torch.onnx.export(
        TextTower(model),
        (ids, torch.ones_like(ids)),
        str(files["text"]),
        input_names=["input_ids", "attention_mask"],
        output_names=["text_embedding"],
        dynamic_axes={"input_ids": batch, "attention_mask": batch, "text_embedding": batch},
        opset_version=17,
        dynamo=False,
    )
    vocab = {"[PAD]": 0, "[UNK]": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(files["tokenizer"]))
    return model, files


def reference_tokens(text: str) -> tuple[np.ndarray, np.ndarray]:
    """The token ids and mask of `text` by the vocabulary above, written out independently of
    the tokenizers library: lower case, split on white space and punctuation, unknown words
    [UNK], cut and zero-padded to CONTEXT."""
    import re

    vocab = {w: i + 2 for i, w in enumerate(WORDS)}
    ids = [vocab.get(w, 1) for w in re.findall(r"\w+|[^\w\s]", text.lower())][:CONTEXT]
    mask = [1] * len(ids) + [0] * (CONTEXT - len(ids))
    return np.asarray([ids + [0] * (CONTEXT - len(ids))]), np.asarray([mask])


def image_vectors(model, paths: list) -> np.ndarray:
    """The model's own unit embeddings of image files: preprocessed as the config above says
    (PIL on the host, center crop to SIZE), then its PyTorch image tower."""
    from accelkit.images.embedding.preprocess import make_preprocessor

    pre = make_preprocessor("host", image_size=SIZE, fit="center-crop", cache_compiled=False)
    with pre:
        vectors = embed_image(model, pre.preprocess_batch([str(p) for p in paths]))
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def text_vector(model, text: str) -> np.ndarray:
    vector = embed_text(model, text)
    return vector / np.linalg.norm(vector)


def embed_image(model, pixels: np.ndarray) -> np.ndarray:
    """The model's own image embeddings of preprocessed [N, 3, H, W] pixels."""
    import torch

    with torch.no_grad():
        return model.encode_image(torch.from_numpy(np.asarray(pixels, np.float32))).numpy()


def embed_text(model, text: str) -> np.ndarray:
    import torch

    ids, mask = reference_tokens(text)
    with torch.no_grad():
        return model.encode_text(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()[0]


def config_yaml(files: dict, store_uri: str, name: str = "tiny-clip") -> str:
    return (
        f"preprocess:\n  image_size: {SIZE}\n  fit: center-crop\n  cache_compiled: false\n"
        f"  batch_size: 4\n"
        f"model:\n  name: {name}\n  onnx_path: {files['image']}\n"
        f"  text_onnx_path: {files['text']}\n  tokenizer_path: {files['tokenizer']}\n"
        f"  context_length: {CONTEXT}\n  embedding_dim: {DIM}\n"
        f"store:\n  uri: {store_uri}\n  collection_name: pics\n"
    )


def misfit_text_encoder(path: Path, per_token: bool = False) -> Path:
    """A text encoder that does not fit the image tower above: it returns DIM // 2 wide vectors,
    or (`per_token`) one DIM-wide vector per token ([N, CONTEXT, DIM]) instead of one per text."""
    import torch

    class Misfit(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(len(WORDS) + 2, DIM if per_token else DIM // 2)

        def forward(self, input_ids, attention_mask):
            states = self.embedding(input_ids) * attention_mask.unsqueeze(-1)
            return states if per_token else states.mean(1)

    ids = torch.zeros(1, CONTEXT, dtype=torch.int64)
    batch = {0: "batch"}
    torch.onnx.export(
        Misfit(),
        (ids, torch.ones_like(ids)),
        str(path),
        input_names=["input_ids", "attention_mask"],
        output_names=["out"],
        dynamic_axes={"input_ids": batch, "attention_mask": batch, "out": batch},
        opset_version=17,
        dynamo=False,
    )
    return path
