"""The state of one data pass (see `device.py`): its static shape `PassSpec` and the `PassState`
pytree, with `init` and `merge` on host arrays. No JAX here: the host kernel (`kernel/host.py`) and
the device kernel (`device.py`) share these."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from accelkit.stats.core import moments as mom
from accelkit.stats.core.sort_keys import key_dtype

if TYPE_CHECKING:
    from accelkit.stats.kernel.windows import Windows


class PassSpec(NamedTuple):
    """Static shape of a pass (hashable: it keys the compiled function)."""

    dim: int
    groups: int
    prefix_bits: int
    digit_bits: int
    with_moments: bool
    centered: bool = False  # fast mode: keys of x - center
    integer: bool = False  # int64 data: 64-bit keys, exact beyond float32's 2**24


class PassState(NamedTuple):
    extremes: mom.Extremes  # count, min, max (first pass and fast mode only)
    # host (numpy) or device arrays
    counts: mom.HostOrDevice  # int32 [D, U, 2**digit_bits] (int64 once merged on the host)
    prefixes: mom.HostOrDevice  # uint32 [D, U] (uint64 for integer data)
    center: (
        mom.HostOrDevice
    )  # float32 [D] near the data: the moments' shift; fast mode keys x - center
    # int64 [D]: NaN/Inf values seen (first pass only; the driver locates them)
    nonfinite: mom.HostOrDevice
    # the host kernel's first pass only: the values near each quantile (`windows.Windows`)
    windows: Windows | None = None


def init(
    spec: PassSpec, prefixes: np.ndarray, center: np.ndarray, windows: Windows | None = None
) -> PassState:
    """A fresh state as host (numpy) arrays; `replicate_per_device` places it. `windows`
    (`windows.start`, the host kernel's first pass only) keep the values near each quantile."""
    return PassState(
        extremes=mom.init(spec.dim, spec.integer),
        counts=np.zeros((spec.dim, spec.groups, 1 << spec.digit_bits), np.int32),
        prefixes=np.asarray(prefixes, key_dtype(spec.integer)),
        center=np.asarray(center, np.float32),
        nonfinite=np.zeros(spec.dim, np.int64),
        windows=windows,
    )


def merge(a: PassState, b: PassState) -> PassState:
    """Combine two partial states of the same pass (same prefixes and center); host or device.
    Windows do not merge: the result has none (its quantiles come from the radix passes)."""
    return PassState(
        extremes=mom.merge(a.extremes, b.extremes),
        counts=a.counts + b.counts,
        prefixes=a.prefixes,
        center=a.center,
        nonfinite=a.nonfinite + b.nonfinite,
    )
