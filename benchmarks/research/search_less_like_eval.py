"""What "less like this" on the best result does to a text search, before and after
`accelkit.images.index.ranking.push_away`, on the test models.

    python -m benchmarks.research.search_less_like_eval  # measure; write benchmarks/results/search_less_like.json
    python -m benchmarks.docs                            # rewrite the docs' generated blocks

The 25 shipped photos and their altered copies (`testing.altered`; 50 items), 66 two-word
queries, brute force in numpy (the ranking a COSINE store returns). Three models with random
weights, built here as the tests build them, which differ in how they spread their vectors: the
tests' two-tower model (tests/support/two_tower.py) and small CLIP- and SigLIP-shaped
transformers models (tests/support/hf_two_tower.py). Per query, the best result is marked; what
is counted: how often it stays first, its median rank after, its altered copy's median rank
after, and how many of the other top 10 (the best and its copy left out) stay in the top 10.
"""

from __future__ import annotations

import io
import itertools
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.common import (
    REPO,
    ArgumentParser,
)

OUT = REPO / "benchmarks" / "results" / "search_less_like.json"
WORDS = ["photo", "cat", "red", "bicycle", "night", "coffee", "cup", "astronaut", "moon"]
WORDS += ["rocket", "coins", "dog"]
TEXTS = [" ".join(pair) for pair in itertools.combinations(WORDS, 2)]


def unit(x) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def pictures() -> list:
    """Each shipped photo, then its altered copy (so item i's copy is i ^ 1)."""
    from PIL import Image

    from accelkit.images.testing import altered, photos

    shipped = photos()
    out = []
    for name in sorted(shipped):
        out.append(Image.fromarray(shipped[name]).convert("RGB"))
        out.append(Image.open(io.BytesIO(altered(shipped[name]))).convert("RGB"))
    return out


def two_tower_vectors(images: list, folder: Path) -> tuple[np.ndarray, np.ndarray]:
    from tests.support import two_tower

    model, _ = two_tower.build(folder / "model")
    paths = []
    for i, image in enumerate(images):
        paths.append(folder / f"{i}.png")
        image.save(paths[-1])
    texts = np.stack([two_tower.text_vector(model, t) for t in TEXTS])
    return two_tower.image_vectors(model, paths), texts


def transformers_vectors(kind: str, images: list, folder: Path) -> tuple[np.ndarray, np.ndarray]:
    import torch
    from tests.support import hf_two_tower
    from transformers import AutoImageProcessor, AutoTokenizer

    model = hf_two_tower.build(kind, folder / kind)
    pixels = AutoImageProcessor.from_pretrained(folder / kind)(images=images, return_tensors="pt")
    tokens = AutoTokenizer.from_pretrained(folder / kind)(
        TEXTS, padding="max_length", truncation=True, return_tensors="pt"
    )
    with torch.no_grad():
        found = [model.get_image_features(**pixels), model.get_text_features(**tokens)]
    return tuple(getattr(f, "pooler_output", f).numpy() for f in found)


def judge(vectors: np.ndarray, texts: np.ndarray, form: str, weight: float) -> dict:
    from accelkit.images.index import ranking

    ranks, copies, kept, stays = [], [], [], []
    for p in texts:
        before = list(np.argsort(-(vectors @ p), kind="stable"))
        best = before[0]
        if form == "before":  # q = unit(p - w·n), the form negative texts keep
            q = p - weight * vectors[best]
        else:
            around = ranking.centre(vectors[before[: ranking.STEER_CANDIDATES]])
            q = ranking.push_away(p, [vectors[best]], around, weight).astype(np.float64)
        after = list(np.argsort(-(vectors @ q), kind="stable"))
        stays.append(after[0] == best)
        ranks.append(after.index(best) + 1)
        copies.append(after.index(best ^ 1) + 1)
        others = [[i for i in order if i not in (best, best ^ 1)][:10] for order in (before, after)]
        kept.append(len(set(others[0]) & set(others[1])))
    return {
        "form": form,
        "weight": weight,
        "stays_first": round(float(np.mean(stays)), 2),
        "median_rank": float(np.median(ranks)),
        "median_copy_rank": float(np.median(copies)),
        "other_top10_kept": round(float(np.mean(kept)), 1),
    }


def main() -> int:
    ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # --help; no options
    from accelkit.runtime.files import write_json_atomic

    images = pictures()
    models = []
    with tempfile.TemporaryDirectory() as folder:
        for label, make in (
            ("two-tower test model", lambda: two_tower_vectors(images, Path(folder))),
            ("CLIP-shaped", lambda: transformers_vectors("clip", images, Path(folder))),
            ("SigLIP-shaped", lambda: transformers_vectors("siglip", images, Path(folder))),
        ):
            vectors, texts = (unit(v) for v in make())
            alike = (vectors @ vectors.T)[np.triu_indices(len(vectors), 1)]
            rows = [judge(vectors, texts, "before", 0.5)]
            rows += [judge(vectors, texts, "push_away", w) for w in (0.5, 0.25)]
            models.append(
                {
                    "model": label,
                    "image_cosine_median": round(float(np.median(alike)), 2),
                    "rows": rows,
                }
            )
    data = {
        "command": "python -m benchmarks.research.search_less_like_eval",
        "items": len(images),
        "queries": len(TEXTS),
        "models": models,
    }
    write_json_atomic(OUT, data, trailing_newline=True)
    print(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
