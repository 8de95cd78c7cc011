"""What the images tests share about search: the filter expressions a store accepts, and folding
written out the plain way (cosine of every pair in float64)."""

from __future__ import annotations

import numpy as np

ACCEPTED = [
    'metadata["k"] == 1',
    'id in ["a", "b"]',
    'id not in ["a"]',
    'metadata["a"]["b"] > 2 and metadata["c"] < 1.5',
    'metadata["year"] > 2020 and metadata["tag"] in ["a", "b"]',
    'not (metadata["x"] == 0) || id == "q"',
    'json_contains(metadata["tags"], "a")',
    'json_contains_any(metadata["tags"], ["a", "b"])',
    'id like "ab%"',
    'metadata["s"] like "ax%"',
    'metadata["s"] == "a) or (b ] {x} ; \\"q\\""',
    'metadata["arr"]["-1"] == -3',
    'metadata["a"]["01"] == 1 or metadata["a"]["+1"] == 1 or metadata["a"]["1.0"] == 1',
    'metadata["2024"] == 1',
    "id in [" + ", ".join(f'"i{i}"' for i in range(256)) + "]",
    "metadata['k'] != 'x'",
    'metadata["n"] >= 0 && metadata["m"] <= 500',
    'metadata["even"] == true',
    "(((id == 'x')))",
    'metadata["x"] == .5 or metadata["x"] == 0.25 or metadata["x"] == 0',
    'metadata["sp key"] == "it\'s"',
    "id == 'q' or id == \"a\\\\b\"",
]


def brute_fold(vectors, threshold, topk):
    """Folding written out the plain way: cosine of every pair in float64."""
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    heads, under = [], {}
    for i in range(len(unit)):
        owner = next((h for h in heads if float(unit[h] @ unit[i]) >= threshold), None)
        if owner is not None:
            under[owner].append(i)
        elif len(heads) < topk:
            heads.append(i)
            under[i] = []
        else:
            break
    return [(h, under[h]) for h in heads]
