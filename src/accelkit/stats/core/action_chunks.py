"""The statistics openpi trains with: action chunks after its data transforms.

openpi's `compute_norm_stats.py` runs the dataset through `[*repack_transforms.inputs,
*data_transforms.inputs]` before it counts anything; for many configs that includes
`DeltaActions(mask)`, which makes the selected action dimensions relative to the frame's state:

    actions[..., :len(mask)] -= where(mask, state[..., :len(mask)], 0)[..., None, :]

so the statistics of `actions` are those of `action[t + k] - state[t]` over every frame `t` and
chunk step `k` (joints), and of the raw action on the other dimensions (grippers). That depends
on the pair (t, k), so the chunk elements are built here (`materialize`), a block of whole
episodes at a time, instead of weighting rows as plain action chunks are (`sources.chunk_weights`).

Pure functions over numpy arrays; the stream (`sources.FileStream`) calls them on each chunk.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from accelkit.errors import ConfigError, DataError

STATE, ACTIONS = "state", "actions"  # openpi's names for the two keys a transform sees
PAD = "actions_is_pad"  # True where a chunk step lies past its episode's end (LeRobot's padding)


def make_bool_mask(*dims: int) -> tuple[bool, ...]:
    """openpi's `make_bool_mask`: `make_bool_mask(6, -1, 6, -1)` is six True, one False, six True,
    one False (a positive count of True, a negative count of False)."""
    mask: list[bool] = []
    for dim in dims:
        mask.extend([dim > 0] * abs(int(dim)))
    return tuple(mask)


TRUE, FALSE = ("true", "t", "yes", "y"), ("false", "f", "no", "n")


def parse_mask(text: str, where: str = "--delta-actions") -> tuple[bool, ...]:
    """`6,-1,6,-1` (as `make_bool_mask` reads it) or explicit booleans `true,true,false`."""
    parts = [p.strip().lower() for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ConfigError(f"{where} is empty; give a mask such as 6,-1,6,-1 or true,false")
    if all(p in TRUE + FALSE for p in parts):
        return tuple(p in TRUE for p in parts)
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise ConfigError(
            f"{where} {text!r} is neither counts (6,-1,6,-1: six deltas, one absolute, ...) nor "
            "booleans (true,false,...)"
        ) from None
    if any(d == 0 for d in dims):
        raise ConfigError(f"{where} {text!r}: a count of 0 selects nothing; drop it")
    return make_bool_mask(*dims)


@dataclass(frozen=True)
class DeltaActions:
    """openpi's `DeltaActions(mask)`: the masked action dimensions minus the frame's state, in
    float32 as openpi computes it; dimensions past the mask stay absolute."""

    mask: tuple[bool, ...]

    def __call__(self, batch: dict) -> dict:
        state, actions = batch[STATE], np.array(batch[ACTIONS], copy=True)
        dims = len(self.mask)
        if actions.shape[-1] < dims or state.shape[-1] < dims:
            raise DataError(
                f"--delta-actions has {dims} entries but actions have {actions.shape[-1]} and "
                f"state {state.shape[-1]} dimensions; give at most min of the two"
            )
        mask = np.asarray(self.mask)
        actions[..., :dims] -= np.expand_dims(np.where(mask, state[..., :dims], 0), axis=-2)
        return {**batch, ACTIONS: actions}


def load_hook(spec: str) -> Callable[[dict], dict]:
    """`module:callable` (or `module.path:object.attr`): a function of a dict batch returning a
    dict batch, openpi's transform shape. The module is imported as Python imports it (the
    current folder first)."""
    module_name, sep, attr = str(spec).partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--transform {spec!r} is not module:callable, e.g. my_transforms:delta")
    import sys

    if "" not in sys.path:
        sys.path.insert(0, "")  # the folder the command runs in, as `python -m` would
    try:
        target = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--transform {spec!r}: cannot import {module_name} ({exc})") from exc
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(f"--transform {spec!r}: {module_name} has no {attr}") from None
    if not callable(target):
        raise ConfigError(f"--transform {spec!r}: {attr} is not callable")
    return cast("Callable[[dict], dict]", target)  # the user's hook: its batches are checked


@dataclass(frozen=True)
class ChunkTransform:
    """How action chunks become the rows the statistics count: `horizon` steps per frame,
    `end` what a chunk does past its episode's end (clamp: repeat the last action, as LeRobot's
    loader pads; truncate: drop those steps), the transforms in order, and whether each chunk
    step also gets statistics of its own."""

    horizon: int = 1
    end: str = "clamp"
    transforms: tuple[Callable[[dict], dict], ...] = ()
    per_timestep: bool = False
    names: tuple[str, ...] = field(default=(), compare=False)  # for the run facts

    def step_key(self, k: int) -> str:
        return f"{ACTIONS}@{k}"


def chunk_index(
    episode: np.ndarray, sampled: np.ndarray, horizon: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every sampled frame t and step k < horizon: (t, the row its step k reads, whether that
    step lies past the episode's end), frame-major. The row is clamped to the episode's last
    row, which is what LeRobot's loader returns there (with its padding flag set).

    episode: int64 [R] with each episode contiguous; sampled: bool [R]."""
    frames = np.flatnonzero(sampled)
    if len(episode) == 0 or len(frames) == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros((0, horizon), bool)
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    ends = np.r_[starts[1:], len(episode)]  # one past each episode's last row
    last = ends[np.searchsorted(starts, frames, side="right") - 1] - 1
    steps = frames[:, None] + np.arange(horizon)[None, :]
    rows = np.minimum(steps, last[:, None])
    return frames, rows, steps > last[:, None]


def materialize(
    state: np.ndarray,
    actions: np.ndarray,
    episode: np.ndarray,
    sampled: np.ndarray,
    spec: ChunkTransform,
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """The rows of `state` and `actions` the statistics count, after the transforms:

    ({"state": [F, Ds], "actions": [N, Da], "actions@k": [N_k, Da] with per_timestep}, frames [F],
    action frame [N], action row [N]) for the F sampled frames of a block of whole episodes; each
    frame contributes its chunk's steps (all of them with clamp, those inside the episode with
    truncate). Chunk steps past the end read the episode's last action (clamp) and carry
    `actions_is_pad` for the transforms to see."""
    frames, rows, pad = chunk_index(episode, sampled, spec.horizon)
    batch = {
        STATE: state[frames],
        ACTIONS: actions[rows],  # [F, H, Da]
        PAD: pad,
    }
    for i, transform in enumerate(spec.transforms):
        try:
            batch = transform(batch)
        except Exception as exc:  # the user's code: its failure is the input's, not ours
            name = spec.names[i] if i < len(spec.names) else f"transform #{i + 1}"
            raise DataError(
                f"--transform {name} raised {type(exc).__name__}: {str(exc)[:200]} on a batch of"
                f" {len(frames)} frames (keys {', '.join(sorted(batch))}); a transform takes and"
                " returns a dict batch with 'state' and 'actions'"
            ) from exc
        if not isinstance(batch, Mapping) or ACTIONS not in batch or STATE not in batch:
            raise DataError(
                f"a transform returned {type(batch).__name__} without 'state' and 'actions'; a "
                "transform takes and returns a dict batch with both"
            )
    chunks = np.asarray(batch[ACTIONS])
    if chunks.ndim != 3 or chunks.shape[:2] != (len(frames), spec.horizon):
        raise DataError(
            f"a transform returned actions of shape {chunks.shape}; expected "
            f"({len(frames)}, {spec.horizon}, dims): one chunk per frame, the horizon kept"
        )
    states = np.asarray(batch[STATE])
    if states.ndim != 2 or len(states) != len(frames):
        raise DataError(
            f"a transform returned state of shape {states.shape}; expected ({len(frames)}, dims)"
        )
    keep = ~pad if spec.end == "truncate" else np.ones_like(pad)
    out = {STATE: states, ACTIONS: chunks[keep]}
    frame_of = np.broadcast_to(frames[:, None], pad.shape)[keep]
    row_of = rows[keep]
    if spec.per_timestep:
        for k in range(spec.horizon):
            out[spec.step_key(k)] = chunks[keep[:, k], k]
    return out, frames, frame_of, row_of


def describe(spec: ChunkTransform) -> dict:
    """The run facts of a transform (written beside the statistics)."""
    return {
        "horizon": spec.horizon,
        "chunk_end": spec.end,
        "transforms": list(spec.names),
        "per_timestep": spec.per_timestep,
    }


def check_keys(keys: Sequence[str], where: str) -> None:
    missing = [k for k in (STATE, ACTIONS) if k not in keys]
    if missing:
        raise ConfigError(
            f"{where} works on the keys state and actions (as openpi names them); "
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not computed: "
            "--keys state=observation.state,actions=action"
        )
