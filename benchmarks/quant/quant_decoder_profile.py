"""Where a Llama-family decoder's W4A8 time goes against compiled FP32: the family
matrix's Qwen2-style model (`tests/support/quant_families.py`: RMSNorm, grouped-query attention,
SwiGLU, tied embeddings) built at hidden 512 and trained briefly, quantized with `quant eval`'s
default (DuQuant W4A8, progressive groups of 64), both compiled as `quant eval` compiles them
(`speed.compile_model`), profiled with torch.profiler at the timing batch (the first evaluation
batch: 64 of the shipped texts) and at one text: each op's self CPU ms per forward, summed by what
it does (`quant_bench.PROFILE_RULES`), and the two models' medians in interleaved rounds.

    python -m benchmarks.quant.quant_decoder_profile [--hidden 512] [--steps 20]
        [--out benchmarks/results/quant_decoder_profile.json]
"""

from __future__ import annotations

import copy
import os
import tempfile
import time
from pathlib import Path

from benchmarks.common import (
    ArgumentParser,
    out_file,
    positive,
    write_progress,
    write_results,
)
from benchmarks.quant.quant_bench import model_profile


def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=positive(), default=512)
    parser.add_argument("--steps", type=positive(), default=20, help="training steps (outliers)")
    parser.add_argument("--rounds", type=positive(), default=10)
    parser.add_argument(
        "--out", type=out_file, default="benchmarks/results/quant_decoder_profile.json"
    )
    args = parser.parse_args()
    from tests.support import quant_families as fam

    from accelkit.quant.config import QuantConfig
    from accelkit.quant.evaluation.fidelity import load_subject
    from accelkit.quant.evaluation.speed import compile_model, one_text
    from accelkit.quant.evaluation.sweep import kernel_counts
    from accelkit.quant.method.convert import quantize
    from accelkit.runtime.environment import record

    doc: dict = {"environment": {**record(("torch", "transformers")), "cpus": os.cpu_count()}}
    doc["load_average_start"] = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="quant-decoder-profile-") as tmp:
        fam.HIDDEN = args.hidden  # the family's config at this width (read when it is built)
        doc["build"] = fam.build("qwen2", Path(tmp), steps=args.steps)
        subject = load_subject(tmp, n_pairs=96)
        doc["parameters"] = sum(p.numel() for p in subject.model.parameters())
        config = doc["config"] = {"hidden_size": args.hidden, "layers": 2, "heads": 4}
        config["intermediate_size"] = 2 * args.hidden
        started = time.perf_counter()
        w4a8 = quantize(copy.deepcopy(subject.model), QuantConfig(), subject.calibration)
        doc["quantize_s"] = time.perf_counter() - started
        doc["kernels"] = kernel_counts(w4a8)
        compiled = {"fp32": compile_model(subject.model), "duquant/w4a8": compile_model(w4a8)}
        batch = subject.data.first()
        doc["profiles"] = {}
        for name, b in (("timing batch", batch), ("one text", one_text(batch))):
            doc["profiles"][name] = model_profile(args.rounds, subject, b, compiled)
            ratio = doc["profiles"][name]["ratio"]
            print(name, doc["profiles"][name]["batch"], f"{ratio:.2f}x", flush=True)
            doc["load_average_end"] = os.getloadavg()
            write_progress(args.out, doc, newline=False)
    write_results(args.out, doc, newline=False)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
