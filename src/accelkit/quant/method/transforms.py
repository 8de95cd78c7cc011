"""DuQuant's equivalent transforms of a Linear's input dimension, as pure float64 functions.

For y = x·Wᵀ (x: tokens×n, W: m×n) every transform acts on n:

    x' = x · diag(s)⁻¹ · R₁ · P · R₂        W' = W · diag(s) · R₁ · P · R₂        x'·W'ᵀ = x·Wᵀ

R₁ and R₂ are block-diagonal orthogonal matrices (n/b blocks of b×b) found by a greedy search, P is
the zigzag permutation. The same `Transform.apply` maps activations (after dividing by s) and
weights (after multiplying by s), so equivalence holds by construction: the rotations and P are
orthogonal and the two diagonal scalings cancel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# A channel whose largest calibration activation is below this share of the layer's median
# channel max was quiet (or dead) during calibration: its smoothing scale is not fitted to it.
QUIET_RATIO = 0.05


def quiet_channels(act_absmax: torch.Tensor, ratio: float = QUIET_RATIO) -> torch.Tensor:
    """Indices of the input channels that were quiet or dead during calibration."""
    a = act_absmax.to(torch.float64)
    live = a > 0
    if not bool(live.any()):
        return torch.arange(a.numel())
    return torch.nonzero(a < ratio * a[live].median()).flatten()


def smooth_scales(act_absmax: torch.Tensor, w_absmax: torch.Tensor, alpha: float) -> torch.Tensor:
    """SmoothQuant: s_j = max|X_j|^α / max|W_:,j|^(1−α), clamped ≥ 1e-5 (zero weights stay finite).

    A channel quiet in calibration (`quiet_channels`) gets the median scale of the others, not
    its own: its own would be tiny and multiply whatever it carries at inference by hundreds
    (x / s) — calibration saw nothing of it, so it is treated as a typical channel. With no
    live channel at all, every scale is 1 (nothing to smooth)."""
    a = torch.clamp(act_absmax.to(torch.float64), min=1e-5)
    w = torch.clamp(w_absmax.to(torch.float64), min=1e-5)
    s = torch.clamp(a**alpha / w ** (1.0 - alpha), min=1e-5)
    quiet = quiet_channels(act_absmax)
    if len(quiet) == s.numel():
        return torch.ones_like(s)
    if len(quiet):
        keep = torch.ones(s.numel(), dtype=torch.bool)
        keep[quiet] = False
        s[quiet] = s[keep].median()
    return s


def block_base(block: int, seed: int) -> torch.Tensor:
    """A random b×b orthogonal matrix whose first row is constant 1/√b.

    QR of a matrix whose first column is all ones gives Q with first column ±1/√b; Qᵀ then maps a
    vector concentrated on channel 0 to a vector spread evenly over all b channels.
    """
    generator = torch.Generator().manual_seed(seed)
    m = torch.randn(block, block, generator=generator, dtype=torch.float64)
    m[:, 0] = 1.0
    q, r = torch.linalg.qr(m)
    q = q * torch.sign(torch.diagonal(r))  # unique QR: positive diagonal of r, so q[:, 0] = +1/√b
    return q.T.contiguous()


def blockwise(z: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """z (..., K·b) times the block-diagonal matrix with blocks rot (K, b, b)."""
    k, b, _ = rot.shape
    shaped = z.reshape(*z.shape[:-1], k, b)
    return torch.einsum("...kb,kbc->...kc", shaped, rot).reshape(z.shape)


def rotation_from_steps(base: torch.Tensor, channels: torch.Tensor) -> torch.Tensor:
    """Block rotations (K, b, b) from each block's chosen outlier channels (K, steps; -1 = no step).

    Step j is the base matrix conjugated by the swap 0 ↔ j. Both the fit and `load_quantized`
    build rotations with this function, so a reloaded model holds bit-identical matrices.
    """
    k, steps = channels.shape
    block = base.shape[0]
    rot = torch.eye(block, dtype=torch.float64).repeat(k, 1, 1)
    idx = torch.arange(block)
    for s in range(steps):
        active = channels[:, s] >= 0
        if not bool(active.any()):
            break
        chan = torch.where(active, channels[:, s], torch.zeros_like(channels[:, s]))
        perm = idx.expand(k, block).clone()
        perm[:, 0] = chan
        perm[torch.arange(k), chan] = 0
        step = base[perm[:, :, None], perm[:, None, :]]  # swap · base · swap
        rot = torch.where(active[:, None, None], rot @ step, rot)
    return rot


def greedy_rotation(
    x: torch.Tensor, base: torch.Tensor, steps: int, patience: int = 32
) -> torch.Tensor:
    """Greedy block rotation (DuQuant R₁/R₂) fitted on activation rows x (T, n).

    Returns the chosen outlier channel of every step per block, (K, steps) with -1 after the kept
    prefix; `rotation_from_steps` turns it into matrices. Each block runs independently: at every
    step take the channel holding the largest |activation| in the block, conjugate the base matrix
    by the swap 0 ↔ that channel (so that channel is spread evenly over the block) and apply it.
    The paper picks the outlier's *channel*; the official code indexes a row instead — we follow
    the paper. Of the prefixes of 0..steps steps we keep the one with the smallest max−min of the
    block's transformed activations (possibly zero steps). The search stops early once no block
    has improved for `patience` steps (later steps are then never kept anyway in practice).
    """
    t, n = x.shape
    block = base.shape[0]
    k = n // block
    # the search only ranks candidates, so float32 suffices (twice as fast); the kept steps are
    # turned into float64 matrices by rotation_from_steps
    base = base.to(torch.float32)
    xb = x.to(torch.float32).reshape(t, k, block).permute(1, 0, 2).contiguous()  # (K, T, b)
    best_obj = xb.amax(dim=(1, 2)) - xb.amin(dim=(1, 2))
    best_len = torch.zeros(k, dtype=torch.long)
    chosen = torch.full((k, steps), -1, dtype=torch.long)
    idx = torch.arange(block)
    for s in range(steps):
        channel = xb.abs().amax(dim=1).argmax(dim=1)  # (K,) outlier channel per block
        chosen[:, s] = channel
        perm = idx.expand(k, block).clone()
        perm[:, 0] = channel
        perm[torch.arange(k), channel] = 0
        xb = xb @ base[perm[:, :, None], perm[:, None, :]]
        obj = xb.amax(dim=(1, 2)) - xb.amin(dim=(1, 2))
        better = obj < best_obj
        best_obj = torch.where(better, obj, best_obj)
        best_len = torch.where(better, torch.full_like(best_len, s + 1), best_len)
        if s + 1 - int(best_len.max()) >= patience:
            break
    keep = torch.arange(steps)[None, :] < best_len[:, None]
    return torch.where(keep, chosen, torch.full_like(chosen, -1))


def zigzag_permutation(channel_max: torch.Tensor, block: int) -> torch.Tensor:
    """Channel order that deals channels sorted by max|x| to the n/b blocks in snake order.

    Returns perm with x' = x[..., perm]. The i-th largest channel goes to block i mod K in rounds
    0…K−1, K−1…0, …, so every block gets a balanced share of outlier mass.
    """
    n = channel_max.shape[0]
    k = n // block
    order = torch.argsort(channel_max, descending=True, stable=True)
    perm = torch.empty(n, dtype=torch.long)
    for i in range(n):
        rnd, pos = divmod(i, k)
        blk = pos if rnd % 2 == 0 else k - 1 - pos
        perm[blk * block + rnd] = order[i]
    return perm


@dataclass(frozen=True)
class Transform:
    """x' = ((x / smooth) · R₁)[perm] · R₂; any part may be None (identity).

    rot1/rot2 are (K, b, b) block matrices; steps1/steps2 the greedy channel choices that rebuild
    them (what storage keeps: a few bytes instead of K·b² floats).
    """

    smooth: torch.Tensor | None = None
    rot1: torch.Tensor | None = None
    perm: torch.Tensor | None = None
    rot2: torch.Tensor | None = None
    steps1: torch.Tensor | None = None
    steps2: torch.Tensor | None = None

    def rotate(self, z: torch.Tensor) -> torch.Tensor:
        """The orthogonal part R₁·P·R₂ applied to rows z (..., n)."""
        if self.rot1 is not None:
            z = blockwise(z, self.rot1.to(z.dtype))
        if self.perm is not None:
            z = z[..., self.perm]
        if self.rot2 is not None:
            z = blockwise(z, self.rot2.to(z.dtype))
        return z

    def activations(self, x: torch.Tensor) -> torch.Tensor:
        if self.smooth is not None:
            x = x / self.smooth.to(x.dtype)
        return self.rotate(x)

    def weight(self, w: torch.Tensor) -> torch.Tensor:
        if self.smooth is not None:
            w = w * self.smooth.to(w.dtype)
        return self.rotate(w)

    def orthogonal_matrix(self, n: int) -> torch.Tensor:
        """Dense R₁·P·R₂ (n×n, float64), for tests and inspection."""
        return self.rotate(torch.eye(n, dtype=torch.float64))


def fit_transform(
    x: torch.Tensor,
    w: torch.Tensor,
    *,
    method: str,
    alpha: float,
    block: int,
    steps: int,
    permutation: bool,
    seed: int = 0,
    act_absmax: torch.Tensor | None = None,
    rotation_rows: int = 256,
) -> Transform:
    """Fit the transform of one Linear from calibration rows x (T, n) and its weight w (m, n), in float64."""
    x = x.to(torch.float64)
    w = w.to(torch.float64)
    if method == "rtn":
        return Transform()
    # smoothing uses the exact max over all calibration tokens when given (x may be a sample)
    a_max = x.abs().amax(dim=0) if act_absmax is None else act_absmax.to(torch.float64)
    smooth = smooth_scales(a_max, w.abs().amax(dim=0), alpha)
    if method == "smoothquant":
        return Transform(smooth=smooth)
    base = block_base(block, seed)
    z = x / smooth
    if z.shape[0] > rotation_rows:  # the greedy search sees a fixed, seeded subset of token rows
        keep = torch.randperm(z.shape[0], generator=torch.Generator().manual_seed(seed))[
            :rotation_rows
        ]
        z = z[keep.sort().values]
    steps1 = greedy_rotation(z, base, steps)
    rot1 = rotation_from_steps(base, steps1)
    z = blockwise(z, rot1)
    perm = None
    if permutation:
        perm = zigzag_permutation(z.abs().amax(dim=0), block)
        z = z[:, perm]
    steps2 = greedy_rotation(z, base, steps)
    rot2 = rotation_from_steps(base, steps2)
    return Transform(smooth=smooth, rot1=rot1, perm=perm, rot2=rot2, steps1=steps1, steps2=steps2)
