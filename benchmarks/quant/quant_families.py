"""The family matrix of docs/quant.md: each family of `tests/support/quant_families.py` (GPT-2,
Qwen2, BERT, T5's encoder, ViT, PaliGemma; the suite's own test models, trained for seconds on
generated text, images or image + text pairs), quantized with RTN and DuQuant at W4A8 by `accelkit.quant.evaluate` — the `quant eval`
code — with fidelity to FP32 (mean cosine; perplexity ratio and next-token agreement for causal
LMs and PaliGemma's text positions), the quantized share of the linear weights, the eager time
against FP32 in the same interleaved rounds, and the outlier measure (max / median per-channel
input absmax) at random init and trained.

    python -m benchmarks.quant.quant_families [--pairs 16] [--out benchmarks/results/quant_families.json]

Eager only (`compiled=False`: compiling is `tests/quant/test_families.py`'s compile test and
docs/quant.md's "Speed"); the JSON is written after each family, and `--families a,b` replaces
those families' entries in an existing JSON.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from tests.support import quant_families as fam

from accelkit.runtime.environment import record
from benchmarks.common import (
    ArgumentParser,
    fail,
    listed,
    out_file,
    positive,
    write_progress,
    write_results,
)

KEYS = ("mean_cosine", "min_cosine", "top1_agreement", "perplexity_ratio", "eager_ratio")


def run_family(name: str, root: Path, pairs: int, calib: Path) -> dict:
    from accelkit.quant import evaluate

    folder = root / name
    started = time.perf_counter()
    built = fam.build(name, folder)
    out = {"build": {**built, "seconds": round(time.perf_counter() - started, 1)}}
    fam.build(name, root / f"{name}-init", steps=0)
    out["channel_ratio"] = {
        "init": fam.channel_ratio(root / f"{name}-init"),
        "trained": fam.channel_ratio(folder),
    }
    started = time.perf_counter()
    result = evaluate(
        str(folder), methods="fp32,rtn,duquant", bits="w4a8", pairs=pairs, compiled=False,
        calibration=None if name in ("vit", "paligemma") else calib,
    )  # fmt: skip
    out.update(
        kind=result.kind,
        quantized_share=result.quantized_share,
        lm_head=result.lm_head,
        texts=result.texts,
        seconds=round(time.perf_counter() - started, 1),
        rows={r.label: {k: getattr(r, k) for k in KEYS} for r in result.rows},
    )
    return out


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=positive(), default=16)
    parser.add_argument("--families", type=listed(fam.FAMILIES), default=",".join(fam.FAMILIES))
    parser.add_argument("--out", type=out_file, default="benchmarks/results/quant_families.json")
    args = parser.parse_args()
    doc = {"environment": record(), "pairs": args.pairs, "steps": fam.STEPS, "families": {}}
    if Path(args.out).is_file():  # a run of some families adds to the others' numbers
        try:
            doc["families"] = json.loads(Path(args.out).read_text())["families"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            fail(f"argument --out: {args.out} holds no readable families ({exc!r}); fix or move it")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        calib = root / "calib.txt"
        calib.write_text("\n".join(fam.training_texts(64, seed=11)))
        for name in args.families.split(","):
            doc["families"][name] = run_family(name, root, args.pairs, calib)
            print(name, doc["families"][name], flush=True)
            write_progress(args.out, doc, newline=False)
    write_results(args.out, doc, newline=False)


if __name__ == "__main__":
    main()
