"""What the frameworks must agree on: lockstep losses and BatchNorm statistics, multi-device
evaluation, and training that learned."""

from __future__ import annotations

import numpy as np

from accelkit.bench.experiments.train.config import BN_MOMENTUM
from accelkit.bench.experiments.train.shared import record_epochs
from accelkit.bench.harness import Result, Timing, check_below, check_true

# final test accuracies may differ by this many percentage points across frameworks (the runs
# differ only by their dropout masks), widened on small test sets to three binomial standard
# errors at 50 % (150/√n points: 7.5 at n = 400)
ACCURACY_TOLERANCE = 5.0


def accuracy_tolerance(test_samples: int) -> float:
    return max(ACCURACY_TOLERANCE, 150.0 / np.sqrt(test_samples))


def lockstep_checks(result: Result, mode: str, got: dict, want: dict, batch: int) -> None:
    """`mode`'s lockstep run (dropout off, same batches) against PyTorch's."""
    losses, want_losses = np.asarray(got["losses"]), np.asarray(want["losses"])
    result.checks.append(
        check_below(
            f"{mode}: lockstep losses = pytorch's, {len(want_losses)} steps (max abs diff)",
            np.max(np.abs(losses - want_losses)) if len(losses) == len(want_losses) else np.inf,
            1e-4,
        )
    )
    result.checks.append(
        check_below(
            f"{mode}: BatchNorm running means = pytorch's after the same steps (max abs diff)",
            np.max(np.abs(np.asarray(got["mean"]) - np.asarray(want["mean"]))),
            1e-4,
        )
    )
    decay = (1 - BN_MOMENTUM) ** len(want_losses)
    bessel = batch / (batch - 1)
    expected = decay + bessel * (np.asarray(got["var"]) - decay)
    result.checks.append(
        check_below(
            f"{mode}: BatchNorm running variances = pytorch's with Bessel's n/(n-1) (max abs diff)",
            np.max(np.abs(np.asarray(want["var"]) - expected)),
            1e-4,
            f"n = {batch}; uncorrected max diff "
            f"{np.max(np.abs(np.asarray(want['var']) - np.asarray(got['var']))):.2e}",
        )
    )


def device_checks(result: Result, out: dict, devices: int, test: int) -> None:
    result.checks.append(
        check_true(f"child process sees {devices} CPU devices", out["devices"] == devices)
    )
    result.timings += [Timing.from_json(t) for t in out["timings"]]
    results = out["results"]
    one = results["single device (jit)"]
    for name, got in results.items():
        result.facts[f"eval accuracy %, {name}"] = 100 * got["correct"] / got["count"]
        if name == "single device (jit)":
            continue
        result.checks.append(
            check_true(
                f"{name}: same correct predictions as one device",
                got["correct"] == one["correct"] and got["count"] == one["count"] == test,
                f"{got['correct']:.0f}/{got['count']:.0f} vs {one['correct']:.0f}/{one['count']:.0f}",
            )
        )
        result.checks.append(
            check_below(
                f"{name}: logits = one device's (max abs diff)",
                np.max(np.abs(np.asarray(got["logits"]) - np.asarray(one["logits"]))),
                1e-5,
            )
        )


def training_checks(
    result: Result, histories: dict, initial_loss: float, steps: int, test: int
) -> None:
    finals = {}
    for mode, history in histories.items():
        losses = [float(np.mean(h["losses"])) for h in history]
        finals[mode] = record_epochs(result, mode, losses, [h["accuracy"] for h in history])
        last = float(np.mean(history[-1]["losses"]))
        result.checks.append(
            check_true(
                f"{mode}: {steps} steps per epoch, training loss fell below the initial loss",
                all(len(h["losses"]) == steps for h in history) and last < initial_loss,
                f"{initial_loss:.3f} → {last:.3f}",
            )
        )
        result.series.insert(
            len(finals) - 1,
            {
                "label": mode,
                "x": list(range(1, len(history) + 1)),
                "y": [float(np.mean(h["losses"])) for h in history],
                "xlabel": "epoch",
                "ylabel": "training loss",
            },
        )
    if len(finals) > 1:
        spread = max(finals.values()) - min(finals.values())
        result.checks.append(
            check_below(
                "final test accuracies agree across frameworks (max - min, points)",
                spread,
                accuracy_tolerance(test),
                ", ".join(f"{m} {a:.2f}" for m, a in finals.items()),
            )
        )
