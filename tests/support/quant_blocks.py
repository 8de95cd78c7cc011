"""A pre-norm MLP block with a residual: the smallest model with the linears, the norm and the
activation a transformer layer quantizes, shared by the quant tests."""

from __future__ import annotations

from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))
