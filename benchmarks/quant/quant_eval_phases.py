"""Where `accelkit quant eval`'s time goes on a ~13M-parameter decoder, phase by
phase, in CPU seconds of this process (the machine is shared: wall seconds follow the load, CPU
seconds much less; the load average is recorded beside them).

    python -m benchmarks.quant.quant_eval_phases [--methods duquant,rtn] [--pairs 96]
        [--out benchmarks/results/quant_eval_phases.json]

The model: a Qwen2-style decoder built from its config (hidden 256, 4 layers, intermediate 1408,
GQA 4/2 heads, tied embeddings; MiniLM's 30522-token tokenizer, so 12.9M parameters), random
weights (timing and calibration cost do not depend on training), on the shipped texts: 128
calibration sentences and `--pairs` pairs (192 texts at 96). Per method (W4A8): the calibration
(`quantize`, profiled: the top functions by cumulative CPU time), one fidelity pass, and one eager
timing against FP32 (`SpeedBench.measure`: rounds interleaved with FP32, stopping once settled).
"""

from __future__ import annotations

import copy
import cProfile
import os
import pstats
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.common import (
    ArgumentParser,
    listed,
    out_file,
    positive,
    write_progress,
    write_results,
)


def build_decoder(folder: Path) -> int:
    import torch
    import transformers

    from accelkit.quant.models import minilm_path

    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        vocab_size=30522, hidden_size=256, intermediate_size=1408, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        tie_word_embeddings=True,
    )  # fmt: skip
    model = transformers.Qwen2ForCausalLM(config)
    model.save_pretrained(folder, safe_serialization=True)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm_path() / name, folder / name)
    return sum(p.numel() for p in model.parameters())


def top_functions(profile: cProfile.Profile, n: int = 12) -> list[dict]:
    stats = pstats.Stats(profile)
    rows = []
    for (path, line, name), (_cc, _nc, tottime, cumtime, _callers) in stats.stats.items():
        rows.append({"function": f"{Path(path).name}:{line}({name})", "cum_cpu_s": cumtime,
                     "own_cpu_s": tottime})  # fmt: skip
    return sorted(rows, key=lambda r: r["cum_cpu_s"], reverse=True)[:n]


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--methods", type=listed(("duquant", "smoothquant", "rtn")), default="duquant,rtn"
    )
    parser.add_argument("--pairs", type=positive(), default=96)
    parser.add_argument("--out", type=out_file, default="benchmarks/results/quant_eval_phases.json")
    args = parser.parse_args()
    from accelkit.quant.config import QuantConfig
    from accelkit.quant.evaluation.fidelity import load_subject, subject_fidelity, subject_reference
    from accelkit.quant.evaluation.speed import Phases, SpeedBench
    from accelkit.quant.method.convert import quantize
    from accelkit.runtime.environment import record

    cpu = time.process_time
    doc: dict = {"environment": {**record(("torch", "transformers")), "cpus": os.cpu_count()}}
    doc["load_average_start"] = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="quant-eval-phases-") as tmp:
        doc["parameters"] = build_decoder(Path(tmp))
        t = cpu()
        subject = load_subject(tmp, n_pairs=args.pairs)
        reference = subject_reference(subject)
        doc["load_and_reference_cpu_s"] = cpu() - t
        doc["texts"] = subject.texts
        doc["timing_batch"] = list(subject.data.first()["input_ids"].shape)
        bench = SpeedBench(subject.model, subject.data.first(), Phases())
        doc["methods"] = {}
        for method in args.methods.split(","):
            profile = cProfile.Profile(time.process_time)
            t = cpu()
            profile.enable()
            model = quantize(
                copy.deepcopy(subject.model), QuantConfig(method=method), subject.calibration
            )
            profile.disable()
            entry = {"calibration_cpu_s": cpu() - t, "calibration_top": top_functions(profile)}
            t = cpu()
            entry["fidelity"] = subject_fidelity(subject, model, reference)
            entry["fidelity_cpu_s"] = cpu() - t
            t, wall = cpu(), time.perf_counter()
            entry["eager_timing"] = vars(bench.measure(model, compiled=False))
            entry["eager_timing_cpu_s"], entry["eager_timing_wall_s"] = (
                cpu() - t,
                time.perf_counter() - wall,
            )
            doc["methods"][method] = entry
            doc["load_average_end"] = os.getloadavg()
            write_progress(args.out, doc, newline=False)  # a cut-short run keeps its part
            print(method, {k: v for k, v in entry.items() if k.endswith("_s")}, flush=True)
    write_results(args.out, doc, newline=False)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
