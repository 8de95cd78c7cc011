"""`--target-cosine` shown on an encoder and a causal LM: which layers leave 4-bit, and the size
and time it costs (QuantVLA's case: plain W4A8 loses too much until the sensitive projections stay
at higher precision).

    python -m benchmarks.quant.quant_target [--out benchmarks/results/quant_target.json]

- MiniLM (the shipped encoder) on the shipped pairs, DuQuant W4A8 (the default setting), target
  mean cosine 0.99 (its plain W4A8 reaches ~0.98);
- the matrix's Llama-style causal LM with random weights (benchmarks/research/quant_matrix.py
  `llama-random`, saved to a temporary folder with MiniLM's tokenizer), DuQuant W4A8, target
  0.995 on the last hidden states.
Each run is `accelkit.quant.evaluate(..., target_cosine=T)` — the `quant eval --target-cosine`
code — with compiled timings against FP32 (`--no-compile` for eager only).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from benchmarks.common import (
    ArgumentParser,
    out_file,
    positive,
)

RUNS = {"minilm": 0.99, "llama-random": 0.995}


def llama_folder(folder: Path) -> str:
    """The matrix's random-weight Llama, saved as a transformers folder with a tokenizer."""
    import torch
    import transformers

    from accelkit.quant.models import minilm_path

    torch.manual_seed(0)
    tok = transformers.AutoTokenizer.from_pretrained(minilm_path())
    config = transformers.LlamaConfig(
        vocab_size=tok.vocab_size, hidden_size=256, intermediate_size=768,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=128,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm_path() / name, folder / name)
    return str(folder)


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=out_file, default="benchmarks/results/quant_target.json")
    parser.add_argument("--pairs", type=positive(), default=128, help="MiniLM evaluation pairs")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--threads", type=positive())
    args = parser.parse_args()
    import torch

    from accelkit.quant import evaluate
    from accelkit.runtime.environment import record
    from accelkit.runtime.files import write_json_atomic

    if args.threads:
        torch.set_num_threads(args.threads)
    runs = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name, target in RUNS.items():
            model = "minilm" if name == "minilm" else llama_folder(Path(tmp) / name)
            t = time.perf_counter()
            result = evaluate(
                model,
                methods=["fp32", "duquant"],
                bits=["w4a8"],
                pairs=args.pairs,
                compiled=not args.no_compile,
                target_cosine=target,
            )
            row = asdict(result.rows[-1])
            runs.append(
                {
                    "model": name,
                    "kind": result.kind,
                    "target_cosine": target,
                    "target": result.target,
                    "row": row,
                    "rows": [asdict(r) for r in result.rows],
                    "recommendation": result.recommendation,
                    "phases": result.phases,
                    "wall_s": time.perf_counter() - t,
                }
            )
            print(f"{name}: {result.recommendation['text']}", flush=True)
    write_json_atomic(
        args.out,
        {
            "environment": {
                **record(("torch", "transformers")),
                "threads": torch.get_num_threads(),
            },
            "runs": runs,
            "wall_s": time.perf_counter() - start,
        },
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
