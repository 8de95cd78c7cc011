"""FLOPs: Flax's `tabulate` and PyTorch's flop counter against 2·B·in·out per dense layer."""

from __future__ import annotations

import itertools

from accelkit.bench.experiments.train.config import FEATURES, LAYERS, Setup
from accelkit.bench.experiments.train.models import flax_model, torch_model
from accelkit.bench.harness import Result, check_true


def dense_flops(batch: int) -> list[int]:
    """Multiply-adds of each dense layer's matrix product, counted as 2 FLOPs each."""
    return [2 * batch * i * o for i, o in itertools.pairwise(LAYERS)]


def flax_tabulate(batch: int, dropout: float) -> tuple[str, dict]:
    """The rendered `tabulate` table and, per module path, (flops, vjp_flops) read from it."""
    import re

    import jax
    import jax.numpy as jnp

    text = flax_model(dropout).tabulate(
        jax.random.key(0),
        jnp.zeros((batch, FEATURES)),
        train=False,
        compute_flops=True,
        compute_vjp_flops=True,
        console_kwargs={"width": 160, "force_terminal": False, "no_color": True},
    )
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    counts = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 7 and cells[5].isdigit() and cells[6].isdigit():
            counts[cells[1] or "total"] = (int(cells[5]), int(cells[6]))
    return text.strip("\n"), counts


def torch_flops(batch: int, dropout: float) -> dict:
    """FLOPs per dense layer (in order) and in total, from `torch.utils.flop_counter`."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    net = torch_model(dropout).eval()
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        net(torch.zeros(batch, FEATURES))
    per_module = counter.get_flop_counts()
    linear = [i for i, m in enumerate(net) if isinstance(m, torch.nn.Linear)]
    return {
        "dense": [int(sum(per_module.get(f"Sequential.{i}", {}).values())) for i in linear],
        "total": int(counter.get_total_flops()),
    }


def add_flops(result: Result, setup: Setup) -> None:
    batch = setup.batch_size
    text, flax_counts = flax_tabulate(batch, setup.dropout)
    torch_counts = torch_flops(batch, setup.dropout)
    want = dense_flops(batch)
    result.facts[f"flax tabulate (batch {batch}, eval mode)"] = text
    names = [f"dense{i}" for i in range(len(LAYERS) - 1)]
    flax_dense = [flax_counts.get(n, (-1, -1))[0] for n in names]
    bias = [batch * o for o in LAYERS[1:]]
    result.checks.append(
        check_true(
            "pytorch flop_counter: each dense layer = 2·B·in·out",
            torch_counts["dense"] == want and torch_counts["total"] == sum(want),
            f"{torch_counts['dense']} vs {want}",
        )
    )
    result.checks.append(
        check_true(
            "flax tabulate flops: each dense layer = 2·B·in·out + B·out (bias add)",
            [f - b for f, b in zip(flax_dense, bias, strict=True)] == want,
            f"{flax_dense}",
        )
    )
    total, vjp = flax_counts.get("total", (-1, -1))
    result.facts["flops per forward, pytorch (matmuls)"] = torch_counts["total"]
    result.facts["flops per forward, flax (XLA: all ops)"] = total
    result.facts["vjp flops (forward + backward), flax"] = vjp
    result.facts["flax / pytorch forward flops"] = total / max(1, torch_counts["total"])
    result.checks.append(
        check_true(
            "flax vjp flops exceed the forward's (backward counted)",
            vjp > total > torch_counts["total"],
            f"{vjp} > {total} > {torch_counts['total']}",
        )
    )
