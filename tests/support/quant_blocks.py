"""Small models the quant tests share: a pre-norm MLP block with a residual (the smallest model
with the linears, the norm and the activation a transformer layer quantizes), and `Net`, linears of
several shapes (one an outlier channel's victim, `batches`) for the apply/storage and crash tests."""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


def make_net():
    torch.manual_seed(0)
    return Net().eval()


def batches(n=3):
    g = torch.Generator().manual_seed(5)
    out = []
    for _ in range(n):
        x = torch.randn(16, 128, generator=g)
        x[:, 9] *= 30
        out.append(x)
    return out


SMALL = {"block_size": 64, "rotation_steps": 16}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.ModuleDict({"q": nn.Linear(128, 128), "up": nn.Linear(128, 256)})
        self.down = nn.Linear(256, 128)
        self.odd = nn.Linear(128, 40)
        self.narrow = nn.Linear(40, 8)

    def forward(self, x, scale=None):
        h = self.encoder["q"](x)
        h = self.down(torch.relu(self.encoder["up"](h)))
        if scale is not None:
            h = h * scale
        return self.narrow(self.odd(h))
