"""What `bench train`'s child processes run (`python -m accelkit.bench.experiments.train.child
TASK ARGS.json OUT.json`): `keras` under a KERAS_BACKEND, `resume` from the checkpoints in a
fresh process, `devices` with N virtual CPU devices."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from accelkit.bench.experiments.train.checkpoints import flax_restore, load_weights, torch_resume
from accelkit.bench.experiments.train.config import LOCKSTEP_STEPS, Setup
from accelkit.bench.experiments.train.data import make_data
from accelkit.bench.experiments.train.devices import multi_device_eval
from accelkit.bench.experiments.train.loops import flax_run, flax_state, keras_run
from accelkit.bench.experiments.train.models import full_precision
from accelkit.bench.harness import Protocol, fix_threads, run_child_process
from accelkit.runtime.files import write_json_atomic


def args_for_child(setup: Setup, folder: Path, threads: int | None, **extra) -> dict:
    return {"setup": asdict(setup), "dir": str(folder), "threads": threads, **extra}


def child_main(task: str, args: dict) -> dict:
    """What a child process runs: `keras` (under KERAS_BACKEND), `resume`, `devices`."""
    fix_threads(args["threads"])
    setup = Setup(**args["setup"])
    folder = Path(args["dir"])
    data = make_data(setup.samples, setup.seed)
    weights = load_weights(folder)
    if task == "keras":
        import keras

        with full_precision():
            steps, _, means, variances = keras_run(
                setup, data, weights, LOCKSTEP_STEPS, dropout=0.0
            )
        history, start_logits, _, _ = keras_run(setup, data, weights)
        return {
            "backend": keras.backend.backend(),
            "lockstep": {
                "losses": [v for h in steps for v in h["losses"]],
                "mean": means.tolist(),
                "var": variances.tolist(),
            },
            "history": history,
            "start_logits": start_logits.reshape(-1).tolist(),
        }
    if task == "resume":
        out = {}
        if (folder / "torch.pt").exists():
            out["pytorch"] = torch_resume(folder / "torch.pt", setup, data)
        if (folder / "flax_checkpoint").exists():
            template = flax_state(setup, weights)
            state = flax_restore(folder / "flax_checkpoint", template)
            start = int(state.step) // (len(data[1]) // setup.batch_size)
            out["flax"] = flax_run(state, setup, data, range(start, setup.epochs))[0]
        return out
    if task == "devices":
        template = flax_state(setup, weights)
        state = flax_restore(folder / "flax_final", template)
        return multi_device_eval(state, data[2], data[3], Protocol(**args["protocol"]))
    raise ValueError(f"unknown task {task!r}")


def run_child(task: str, args: dict, env: dict, timeout: float = 900) -> dict:
    folder = Path(args["dir"])
    (folder / f"{task}-args.json").write_text(json.dumps(args))
    return run_child_process(
        [
            sys.executable,
            "-m",
            "accelkit.bench.experiments.train.child",
            task,
            str(folder / f"{task}-args.json"),
            str(folder / f"{task}-{env.get('KERAS_BACKEND', '')}out.json"),
        ],
        env,
        f"bench train {task} child process",
        timeout,
    )


def main(argv: list[str]) -> int:
    task, args_path, out = argv
    write_json_atomic(out, child_main(task, json.loads(Path(args_path).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
