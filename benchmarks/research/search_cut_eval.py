"""Does the automatic cut (`accelkit.images.index.ranking.gap_cut`) hold up on the test sets?

    python -m benchmarks.research.search_cut_eval            # measure; write benchmarks/results/search_cut.json
    python -m benchmarks.research.search_cut_eval --docs     # rewrite docs/images.md's generated blocks
                                                    # (this one's, search_steering_bench.py's
                                                    # and search_less_like_eval.py's)
    python -m benchmarks.research.search_cut_eval --check    # exit 1 when the docs differ from the JSON

Image queries (EfficientNet-Lite0, the shipped model): each of the 25 shipped photos' altered
copies (`testing.altered`) searched among the 25 originals, top 10, brute force (the same scores
a COSINE store returns). Relevant: the photo's family (itself, its crops, or its source). "present":
the family is stored; "absent": the family is left out of the collection, so every answer is
wrong and the ideal cut keeps nothing. Text queries (the tests' two-tower model with random
weights, the only text model here): there is no right answer to measure against, so only how often
the rule fires and how much it keeps. The baseline is no cut (top 10); a fixed min-score is given
as what separates the image scores best.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.common import REPO, ArgumentParser
from benchmarks.docs.blocks import Table, rewrite

OUT = REPO / "benchmarks" / "results" / "search_cut.json"
DOC = REPO / "docs" / "images.md"
TOPK = 10
TEXTS = [
    "a photo of a cat",
    "a cup of coffee",
    "a red rocket at night",
    "astronaut on the moon",
    "green coins",
    "a dog",
    "blue bicycle",
    "a photo of the moon at night",
    "red cup",
    "a cat at night",
]


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def judge(scores_sets: list[list[float]], relevant_sets: list[list[bool]]) -> dict:
    """The rule over many answers (scores best first, and which of them are relevant)."""
    from accelkit.images.index.ranking import gap_cut

    fired = kept_total = relevant_kept = relevant_all = wrong_kept = 0
    exact = 0
    for scores, relevant in zip(scores_sets, relevant_sets, strict=True):
        at = gap_cut(scores)
        kept = len(scores) if at is None else sum(s >= at for s in scores)
        fired += at is not None
        kept_total += kept
        relevant_kept += sum(relevant[:kept])
        relevant_all += sum(relevant)
        wrong_kept += kept - sum(relevant[:kept])
        exact += at is not None and sum(relevant[:kept]) == kept == sum(relevant)
    n = len(scores_sets)
    return {
        "queries": n,
        "fired": fired,
        "mean_kept": round(kept_total / n, 2),
        "relevant_kept": relevant_kept,
        "relevant_in_topk": relevant_all,
        "wrong_kept": wrong_kept,
        "wrong_in_topk": n * TOPK - relevant_all if n else 0,
        "exact": exact,
    }


def image_eval() -> dict:
    from accelkit.images import ImageEmbeddingPipeline, ServiceConfig
    from accelkit.images.testing import altered, family, photos

    shots = photos()
    names = sorted(shots)
    config = ServiceConfig.from_env(env={}, preprocess={"cache_compiled": False, "batch_size": 8})
    with ImageEmbeddingPipeline(config) as pipeline:
        originals = unit(pipeline.embed_images([shots[n] for n in names]))
        copies = unit(pipeline.embed_images([altered(shots[n]) for n in names]))
    present_scores, present_relevant, absent_scores, absent_relevant = [], [], [], []
    true_best, false_best = [], []
    for q, name in enumerate(names):
        sims = originals @ copies[q]
        mine = [family(n) == family(name) for n in names]
        order = np.argsort(-sims)[:TOPK]
        present_scores.append([float(sims[i]) for i in order])
        present_relevant.append([mine[i] for i in order])
        true_best.append(float(sims[q]))
        others = [i for i in np.argsort(-sims) if not mine[i]][:TOPK]
        absent_scores.append([float(sims[i]) for i in others])
        absent_relevant.append([False] * len(others))
        false_best.append(float(sims[others[0]]))
    return {
        "model": "efficientnet-lite0",
        "collection": len(names),
        "present": judge(present_scores, present_relevant),
        "absent": judge(absent_scores, absent_relevant),
        "lowest_true_match": round(min(true_best), 4),
        "highest_wrong_match": round(max(false_best), 4),
    }


def text_eval() -> dict:
    from tests.support import two_tower

    from accelkit.images.testing import altered, photos

    shots = photos()
    with tempfile.TemporaryDirectory() as folder:
        model, _ = two_tower.build(Path(folder) / "model")
        paths = []
        for name in sorted(shots):
            for kind, data in (("png", None), ("jpg", altered(shots[name]))):
                path = Path(folder) / f"{name}.{kind}"
                if data is None:
                    from PIL import Image

                    Image.fromarray(shots[name]).save(path)
                else:
                    path.write_bytes(data)
                paths.append(path)
        vectors = two_tower.image_vectors(model, paths)
        scores = []
        for text in TEXTS:
            sims = vectors @ two_tower.text_vector(model, text)
            scores.append(sorted((float(s) for s in sims), reverse=True)[:TOPK])
    result = judge(scores, [[False] * TOPK for _ in scores])
    return {"model": "two-tower test model (random weights)", "collection": len(paths), **result}


# -- the docs block --------------------------------------------------------------------------------


def render(data: dict) -> str:
    images, text = data["images"], data["text"]
    lines = [
        "| queries | model | fired | mean kept (of 10) | relevant kept | wrong kept | exact |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, model, row in (
        ("image, subject stored", images["model"], images["present"]),
        ("image, subject absent", images["model"], images["absent"]),
        ("text", text["model"], text),
    ):
        relevant = f"{row['relevant_kept']} of {row['relevant_in_topk']}"
        wrong = f"{row['wrong_kept']} of {row['wrong_in_topk']}"
        lines.append(
            f"| {label} ({row['queries']}) | {model} | {row['fired']} | {row['mean_kept']}"
            f" | {relevant} | {wrong} | {row['exact']} |"
        )
    lines.append("")
    lines.append(
        f"Image scores: the lowest score of a photo's own original is {images['lowest_true_match']},"
        f" the highest score of a wrong photo {images['highest_wrong_match']}"
        f" (load average {data['loadavg']}; `{data['command']}`)."
    )
    return "\n".join(lines)


COST = REPO / "benchmarks" / "results" / "search_steering.json"  # images/search_steering_bench.py


def render_cost(data: dict) -> str:
    lines = ["| search | p50 ms | p99 ms | p50 / plain p50 |", "|---|---|---|---|"]
    for name, row in data["results"].items():
        lines.append(
            f"| {name} | {row['p50_ms']} | {row['p99_ms']} | {row['ratio_to_plain_p50']} |"
        )
    lines.append("")
    lines.append(
        f"{data['rows']:,} × {data['dim']} unit vectors, {data['store']}, top {data['topk']},"
        f" {data['queries']} query vectors, the variants interleaved (load average"
        f" {data['loadavg']}; `{data['command']}`)."
    )
    return "\n".join(lines)


LESS_LIKE = REPO / "benchmarks" / "results" / "search_less_like.json"  # search_less_like_eval.py


def render_less_like(data: dict) -> str:
    lines = [
        "| model (image-image cosine, median) | form | best stays first | its rank | its copy's"
        " | other top 10 kept |",
        "|---|---|---|---|---|---|",
    ]
    for model in data["models"]:
        for n, row in enumerate(model["rows"]):
            label = f"{model['model']} ({model['image_cosine_median']})" if n == 0 else ""
            form = "q − w·n (before)" if row["form"] == "before" else "push_away"
            lines.append(
                f"| {label} | {form}, w = {row['weight']} | {row['stays_first']:.0%}"
                f" | {row['median_rank']:g} | {row['median_copy_rank']:g}"
                f" | {row['other_top10_kept']} |"
            )
    lines.append("")
    lines.append(
        f"{data['items']} items, {data['queries']} queries, random weights (`{data['command']}`)."
    )
    return "\n".join(lines)


TABLES = {
    "search-cut": Table(OUT, render),
    "search-steering": Table(COST, render_cost),
    "search-less-like": Table(LESS_LIKE, render_less_like),
}  # docs engine


def main() -> int:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", action="store_true", help="rewrite docs/images.md's blocks")
    args = parser.parse_args()
    if args.docs:
        for name, table in TABLES.items():
            rewrite(DOC, name, table.make(json.loads(table.source.read_text(encoding="utf-8"))))
        return 0
    from accelkit.runtime.files import write_json_atomic

    data = {
        "command": "python -m benchmarks.research.search_cut_eval",
        "topk": TOPK,
        "images": image_eval(),
        "text": text_eval(),
        "loadavg": Path("/proc/loadavg").read_text().split()[0],
    }
    write_json_atomic(OUT, data, trailing_newline=True)
    print(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
