"""`bench train`'s `run`: one start, lockstep steps, training with checkpoints, Keras in child
processes, resumption in a fresh process, multi-device evaluation and FLOPs, each checked."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from accelkit.bench.experiments.train.checkpoints import flax_save, torch_save
from accelkit.bench.experiments.train.checks import (
    device_checks,
    lockstep_checks,
    training_checks,
)
from accelkit.bench.experiments.train.child import args_for_child, run_child
from accelkit.bench.experiments.train.config import FEATURES, LAYERS, LOCKSTEP_STEPS, Setup
from accelkit.bench.experiments.train.data import make_data
from accelkit.bench.experiments.train.flops import add_flops
from accelkit.bench.experiments.train.loops import flax_run, flax_state, flax_steps, torch_run
from accelkit.bench.experiments.train.models import (
    bn_stats_flax,
    bn_stats_torch,
    full_precision,
    torch_model,
    torch_weights,
)
from accelkit.bench.experiments.train.shared import epoch_timing
from accelkit.bench.harness import (
    DEFAULT_PROTOCOL,
    Protocol,
    Result,
    Timing,
    check_below,
    check_true,
    fix_threads,
)
from accelkit.runtime.files import temporary_folder


def _epoch_timing(mode: str, device: str, history: list, size: int, compile_s=None) -> Timing:
    return epoch_timing(mode, device, [h["seconds"] for h in history], size, compile_s)


def run(
    modes,
    setup: Setup,
    *,
    devices: int = 8,
    protocol: Protocol = DEFAULT_PROTOCOL,
    threads: int | None = None,
    progress=lambda text: None,
) -> Result:
    """Train in every mode; lockstep, FLOPs, checkpoint-resume and multi-device checks with it."""
    import jax
    import torch

    from accelkit.bench.experiments.parallel import child_env

    # this process and its children run with one thread count: bit-equal resumes need it (a
    # caller's `threads` is applied here too, not only in the children: with OMP_NUM_THREADS=1
    # in the environment and threads=2 the resumed losses differed by 9e-8)
    threads = fix_threads(threads) if threads else torch.get_num_threads()
    data = make_data(setup.samples, setup.seed)
    _, y_train, x_test, y_test = data
    steps_per_epoch = len(y_train) // setup.batch_size
    result = Result(
        "train",
        {
            "modes": list(modes),
            "samples": setup.samples,
            "train": len(y_train),
            "test": len(y_test),
            "features": FEATURES,
            "layers": "→".join(map(str, LAYERS)),
            "epochs": setup.epochs,
            "batch_size": setup.batch_size,
            "lr": setup.lr,
            "momentum": setup.momentum,
            "dropout": setup.dropout,
            "checkpoint_epoch": setup.resume_at,
        },
    )
    torch.manual_seed(setup.seed)
    net = torch_model(setup.dropout)
    weights = torch_weights(net)
    net.eval()
    with torch.no_grad():
        start_logits = net(torch.from_numpy(x_test)).numpy().reshape(-1)
    initial_loss = float(
        np.mean(np.logaddexp(0, start_logits) - y_test * start_logits)
    )  # binary cross-entropy on logits, float64
    result.facts["parameters"] = int(sum(p.numel() for p in net.parameters()))
    result.facts["initial test loss (eval mode)"] = initial_loss
    lockstep = {}
    histories: dict[str, list] = {}
    resume = setup.epochs >= 2 and 1 <= setup.resume_at < setup.epochs
    with temporary_folder("accelkit-train-") as tmp:
        folder = Path(tmp)
        np.savez(folder / "initial.npz", *weights)

        # lockstep: dropout off, the same first steps in PyTorch and Flax (Keras: in its child)
        progress("lockstep steps")
        twin = torch_model(0.0)
        twin.load_state_dict(net.state_dict())
        steps, _ = torch_run(twin, setup, data, range(setup.epochs), steps=LOCKSTEP_STEPS)
        mean, var = bn_stats_torch(twin)
        lockstep["pytorch"] = {
            "losses": [v for h in steps for v in h["losses"]],
            "mean": mean,
            "var": var,
        }
        if "flax" in modes:
            state = flax_state(setup, weights, dropout=0.0)
            with full_precision():
                logits = np.asarray(flax_steps(setup.seed)[1](state, x_test)).reshape(-1)
                steps, state, _ = flax_run(
                    state, setup, data, range(setup.epochs), steps=LOCKSTEP_STEPS
                )
            result.checks.append(
                check_below(
                    "flax: identical start, eval-mode logits = pytorch's (max abs diff)",
                    np.max(np.abs(logits - start_logits)),
                    1e-4,
                )
            )
            mean, var = bn_stats_flax(state.batch_stats)
            got = {"losses": [v for h in steps for v in h["losses"]], "mean": mean, "var": var}
            lockstep_checks(result, "flax", got, lockstep["pytorch"], setup.batch_size)

        # full training, checkpoints half-way
        if "pytorch" in modes:
            progress("pytorch training")
            torch.manual_seed(setup.seed)

            def save_torch(epoch, net, opt):
                if resume and epoch == setup.resume_at - 1:
                    torch_save(folder / "torch.pt", epoch, net, opt)

            histories["pytorch"], _ = torch_run(
                net, setup, data, range(setup.epochs), on_epoch=save_torch
            )
            result.timings.append(
                _epoch_timing("pytorch", "cpu", histories["pytorch"], len(y_train))
            )
        if "flax" in modes:
            progress("flax training")

            def save_flax(epoch, state):
                if resume and epoch == setup.resume_at - 1:
                    flax_save(folder / "flax_checkpoint", state)

            histories["flax"], state, compile_s = flax_run(
                flax_state(setup, weights), setup, data, range(setup.epochs), on_epoch=save_flax
            )
            result.timings.append(
                _epoch_timing(
                    "flax", jax.devices()[0].platform, histories["flax"], len(y_train), compile_s
                )
            )
            flax_save(folder / "flax_final", state)
            result.facts["flax TrainState custom fields after training: loss / metric"] = (
                f"{float(state.loss):.4f} / {float(state.metric):.4f}"
            )
        args = args_for_child(setup, folder, threads)
        for mode in (m for m in modes if m.startswith("keras")):
            progress(f"{mode} (child process)")
            backend = mode.split("-")[1]
            out = run_child("keras", args, {**os.environ, "KERAS_BACKEND": backend})
            result.checks.append(
                check_true(f"{mode}: child ran on the {backend} backend", out["backend"] == backend)
            )
            result.checks.append(
                check_below(
                    f"{mode}: identical start, eval-mode logits = pytorch's (max abs diff)",
                    np.max(np.abs(np.asarray(out["start_logits"]) - start_logits[:64])),
                    1e-4,
                )
            )
            lockstep_checks(result, mode, out["lockstep"], lockstep["pytorch"], setup.batch_size)
            histories[mode] = out["history"]
            result.timings.append(
                _epoch_timing(
                    mode,
                    "cpu" if backend == "torch" else jax.devices()[0].platform,
                    out["history"],
                    len(y_train),
                )
            )
        if resume and ("pytorch" in modes or "flax" in modes):
            progress("resume from checkpoints (child process)")
            resumed = run_child("resume", args, dict(os.environ))
            for mode, history in resumed.items():
                # CPU programs are deterministic: bit-equal; GPU reductions need not be
                exact = mode == "pytorch" or jax.default_backend() == "cpu"
                tail = [v for h in histories[mode][setup.resume_at :] for v in h["losses"]]
                again = [v for h in history for v in h["losses"]]
                diff = (
                    float(np.max(np.abs(np.asarray(tail) - np.asarray(again))))
                    if len(tail) == len(again) and tail
                    else np.inf
                )
                result.checks.append(
                    check_below(
                        f"{mode}: resumed in a fresh process, losses = uninterrupted run's "
                        f"({'bit-equal' if exact else 'max abs diff'}, {len(again)} steps)",
                        diff,
                        0.0 if exact else 1e-5,
                        "torch.save" if mode == "pytorch" else "orbax-checkpoint",
                    )
                )
                result.series.append(
                    {
                        "label": f"{mode} (resumed at epoch {setup.resume_at})",
                        "x": list(range(setup.resume_at + 1, setup.epochs + 1)),
                        "y": [float(np.mean(h["losses"])) for h in history],
                        "xlabel": "epoch",
                        "ylabel": "training loss",
                        "linestyle": "dashed",
                    }
                )
        if not resume:
            result.notes.append(
                f"no checkpoint-resume check: it needs a checkpoint epoch in [1, {setup.epochs})"
            )
        if "flax" in modes:
            progress(f"evaluation on {devices} virtual devices (child process)")
            out = run_child(
                "devices",
                {**args, "protocol": {"repeats": protocol.repeats, "warmup": protocol.warmup}},
                child_env(devices),
            )
            device_checks(result, out, devices, len(y_test))
    if "pytorch" in modes and "flax" in modes:
        progress("flops")
        add_flops(result, setup)
    training_checks(result, histories, initial_loss, steps_per_epoch, len(y_test))
    return result
