"""The statistics engine for a mixture of datasets (`stats/mixture/ranks.py` says what a mixture is).

`compute_mixture_stats` runs each pass of exact mode once per member, each member on a runner of
its own (the local one, or a Ray one over its files), with the passes a single dataset makes:
pass 1 (moments, extremes, the top key digit and, on the host kernel, the windows near each
level), then radix passes over the digits still unknown. Between passes the targets are located
across the members (`mixture.advance`, `mixture.resolve_windows`); every member then counts the
same prefixes. Each member's states are its own integers, so they are the same bits locally, on
any device count and batch size, and on Ray; the few float steps that join them (the moments)
run in the members' order on the host. Every member's moments are taken about one shift (the
first member's first chunk, as a single run takes it), so the union's sums simply add.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from contextlib import ExitStack

import numpy as np

from accelkit.errors import ConfigError, DataError
from accelkit.runtime.devices import peak_device_memory_bytes, peak_rss_bytes
from accelkit.stats.core import histograms
from accelkit.stats.core import moments as mom
from accelkit.stats.core import quantiles as qt
from accelkit.stats.core.weights import parse_weights
from accelkit.stats.engine.driver import (
    DEFAULT_QUANTILES,
    EXACT_FIRST_DIGIT,
    TABLE_BUDGET_BYTES,
    _center_of,
    _check_nonfinite,
    _known,
    _require_rows,
    open_runner,
    select_pass,
)
from accelkit.stats.engine.ray_runner import RayRunner
from accelkit.stats.engine.replay import Recording
from accelkit.stats.engine.runner import choose_devices, x64_for
from accelkit.stats.kernel import windows
from accelkit.stats.kernel.state import PassSpec, init
from accelkit.stats.mixture import ranks as mx
from accelkit.stats.types import BatchStream, KeyStats, RunSummary, StatsResult, Stream

log = logging.getLogger(__name__)


def compute_mixture_stats(
    members: Sequence[Stream | Iterable[Mapping[str, object]]],
    *,
    weights=None,
    keys: Mapping[str, str] | None = None,
    quantiles: Iterable[float] = DEFAULT_QUANTILES,
    fast: bool = False,
    skip_nonfinite: bool = False,
    batch_size: int | None = None,
    platform: str | None = None,
    devices=None,
    progress: bool = False,
    cache_bytes: int | None = None,
    ray: str | None = None,
    ray_tasks: int | None = None,
) -> StatsResult:
    """Exact statistics of the union of `members` (every counted value once; quantiles equal
    `numpy.quantile` of the concatenated rows), or with `weights` (one positive number per member:
    decimals, fractions, ints) of the weighted mixture, where a counted value of member m weighs
    w_m / (sum of w * N_m): quantiles equal `numpy.quantile(rows, q, weights=…,
    method="inverted_cdf")`, decided in exact rational arithmetic (see `stats/mixture/ranks.py`).

    Members are `Stream`s (`open_source`) or re-iterables of dict batches (their `keys` as in
    `compute_stats`); every member must give the same keys with the same widths and types.
    `fast=True` (one pass, a sketch) works for the union only. The other options are
    `compute_stats`'.
    """
    streams = [m if isinstance(m, Stream) else BatchStream(m, keys) for m in members]
    if not streams:
        raise ConfigError("a mixture needs at least one dataset")
    shares = parse_weights(weights, len(streams))
    requested = list(quantiles)
    levels = np.asarray(sorted({float(q) for q in requested}), np.float64)
    if len(levels) == 0 or not np.all((levels >= 0) & (levels <= 1)):
        raise DataError(f"quantile levels must be given and lie in [0, 1]; got {requested}")
    if fast and shares is not None:
        raise ConfigError(
            "--fast estimates ranks of counted rows, and a weighted mixture's quantiles are"
            " located across its datasets exactly: drop --fast or --weights"
        )
    if devices is None:
        devices = choose_devices(platform, host=ray is None and not fast)
    started = time.perf_counter()
    with x64_for(devices):
        runners = [
            open_runner(s, devices, batch_size, progress, skip_nonfinite, ray, ray_tasks)
            for s in streams
        ]
        run = _Mixture(streams, runners, levels, shares, cache_bytes)
        stats, pass_times = run.fast() if fast else run.exact()
    summary = RunSummary(
        mode="fast" if fast else "exact",
        platform=devices[0].platform,
        devices=[str(d) for d in devices]
        if ray is None
        else [d for r in runners if isinstance(r, RayRunner) for d in r.describe_devices()],
        batch_size=max((max(r.batch_sizes.values(), default=0) for r in runners), default=0),
        passes=len(pass_times),
        rows=run.rows,
        seconds=time.perf_counter() - started,
        peak_rss_bytes=peak_rss_bytes(),
        peak_device_bytes=peak_device_memory_bytes(devices),
        partial=False,
        compiles=len(set().union(*(r.compiled for r in runners))),
        pass_seconds=pass_times,
        cluster=None
        if ray is None
        else {"members": [r.traffic() for r in runners if isinstance(r, RayRunner)]},
    )
    return StatsResult(stats, summary)


class _Mixture:
    """One mixture run: the members' streams and runners, the levels and weights."""

    def __init__(self, streams, runners, levels, shares, cache_bytes):
        self.streams, self.runners, self.levels, self.shares = streams, runners, levels, shares
        self.cache_bytes = cache_bytes
        self.centers: dict = {}  # key -> the moments' shift, from the first member's first chunk
        self.rows = 0

    def label(self, what: str, m: int) -> str:
        return f"{what}, dataset {m + 1}/{len(self.streams)}"

    def center(self, key: str, column, m: int) -> np.ndarray:
        if key not in self.centers:
            self.centers[key] = _center_of(column)
        center = self.centers[key]
        width = column.values.shape[1]
        if len(center) != width:  # before any pass reads on: the widths differ
            seen = [(0, f"{len(center)} values per row"), (m, f"{width} values per row")]
            raise _shape_error(self.streams, key, seen)
        return center

    def first_pass(self, label, spec_for, init_for, sources) -> list:
        """Pass 1 over every member; their keys, widths and types checked to agree."""
        outcomes = []
        for m, (runner, source) in enumerate(zip(self.runners, sources, strict=True)):
            outcome = runner.run_pass(self.label(label, m), spec_for, init_for(m), stream=source)
            source.freeze()
            _check_nonfinite(self.streams[m], outcome.states, runner.skip_nonfinite)
            if not outcome.states:
                raise DataError(f"{_name(self.streams, m)} holds no rows; check the path")
            outcomes.append(outcome)
            self.rows += outcome.rows
        _check_agree(self.streams, [o.states for o in outcomes])
        # what the mixture holds: a dimension empty in one member is the others' (weighted: the
        # others' weights, renormalized); empty in all, its statistics are NaN, with a warning
        merged = {
            key: state._replace(extremes=_merged_extremes([o.states[key] for o in outcomes]))
            for key, state in outcomes[0].states.items()
        }
        _require_rows(self.streams[0], merged)
        return outcomes

    # --- exact mode ---

    def exact(self) -> tuple[dict, list[float]]:

        with ExitStack() as stack:
            sources, speculate = [], []
            budget = None if self.cache_bytes is None else self.cache_bytes // len(self.streams)
            for stream, runner in zip(self.streams, self.runners, strict=True):
                guess = runner.speculates and windows.worth_trying(self.levels)
                speculate.append(guess)
                if not runner.replays or (guess and stream.rereadable):
                    sources.append(stream)  # read again where a later pass is needed
                else:
                    recording = Recording(stream, budget)
                    stack.callback(recording.close)
                    sources.append(recording)
            return self._exact_passes(sources, speculate)

    def _exact_passes(self, sources, speculate):

        levels = self.levels

        def init_for(m):
            def first_init(key, spec, column):
                near = None
                if speculate[m]:
                    near = windows.start(levels, spec.dim, spec.integer, sources[m].total_rows)
                zeros = np.zeros((spec.dim, 1), np.uint64)
                return init(spec, zeros, self.center(key, column, m), near)

            return first_init

        first = self.first_pass(
            "pass 1 (moments, top digit)",
            lambda key, dim, integer: PassSpec(dim, 1, 0, EXACT_FIRST_DIGIT, True, integer=integer),
            init_for,
            sources,
        )
        plans, targets, guessed = {}, {}, {}
        for key in first[0].states:
            states = [o.states[key] for o in first]
            counted = np.stack([np.asarray(s.extremes.count, np.int64) for s in states])
            bits = 64 if states[0].extremes.min_key.dtype == np.uint64 else 32
            plan, targets[key] = mx.start_plan(counted, levels, bits, self.shares)
            plan = mx.advance(
                plan,
                [s.counts for s in states],
                np.zeros(plan.prefixes.shape, np.int64),
                EXACT_FIRST_DIGIT,
            )
            merged = _merged_extremes(states)
            plan = mx.with_prefixes(
                plan, qt.skip_common_prefix(mx.view(plan), merged.min_key, merged.max_key)
            )
            if all(s.windows is not None for s in states):
                found, covered = mx.resolve_windows(
                    plan, [s.windows for s in states], [s.counts for s in states]
                )
                guessed[key] = (found, covered)
                plan = mx.with_prefixes(plan, _known(mx.view(plan), found, covered, merged.count))
            for o in first:
                o.states[key] = o.states[key]._replace(windows=None)  # their buffers go
            plans[key] = plan
        if guessed:
            missed = [key for key, plan in plans.items() if plan.prefix_bits < plan.key_bits]
            log.info(
                "quantiles found in pass 1 for %d of %d keys", len(plans) - len(missed), len(plans)
            )
        pass_times: list[float] = [sum(o.seconds for o in first)]
        while any(plan.prefix_bits < plan.key_bits for plan in plans.values()):
            views = {key: mx.view(plan) for key, plan in plans.items()}
            groups, digits, spec_for, init_for_pass = select_pass(views)
            label = f"pass {len(pass_times) + 1} (exact select)"
            outcomes = [
                runner.run_pass(self.label(label, m), spec_for, init_for_pass, stream=sources[m])
                for m, runner in enumerate(self.runners)
            ]
            pass_times.append(sum(o.seconds for o in outcomes))
            for key in groups:
                counts = [o.states[key].counts for o in outcomes]
                plans[key] = mx.advance(plans[key], counts, groups[key][1], digits[key])
        for key, (found, covered) in guessed.items():  # what a window found, the passes found too
            plan = plans[key]
            if np.any(covered & (plan.prefixes != found) & (plan.inside.sum(axis=0) > 0)):
                raise DataError(
                    "the data changed between passes (a value kept in pass 1 is not the one read "
                    "again); exact quantiles need data that stays the same while they are computed"
                )
        stats = {}
        for key in first[0].states:
            states = [o.states[key] for o in first]
            values = mx.finish(plans[key], targets[key])
            stats[key] = self._key_stats(states, [o.sums[key] for o in first], values, None)
        return stats, pass_times

    # --- fast mode (the union only) ---

    def fast(self) -> tuple[dict, list[float]]:

        def spec_for(key, dim, integer):
            bits = qt.FAST_DIGIT_BITS
            while bits > 12 and dim * (4 << bits) > TABLE_BUDGET_BYTES:
                bits -= 1
            return PassSpec(dim, 1, 0, bits, True, centered=True, integer=integer)

        def init_for(m):  # one center for every member: their sketches then add up
            return lambda key, spec, column: init(
                spec, np.zeros((spec.dim, 1), np.uint32), self.center(key, column, m)
            )

        outcomes = self.first_pass("fast pass", spec_for, init_for, self.streams)
        stats = {}
        for key in outcomes[0].states:
            states = [o.states[key] for o in outcomes]
            merged = _merged_extremes(states)
            counts = states[0].counts.astype(np.int64)
            for s in states[1:]:
                counts = counts + s.counts.astype(np.int64)
            est, bound = qt.sketch_quantiles(
                counts,
                np.asarray(states[0].center, np.float64),
                np.asarray(merged.count),
                qt.keys_to_values(merged.min_key).astype(np.float64),
                qt.keys_to_values(merged.max_key).astype(np.float64),
                self.levels,
            )
            stats[key] = self._key_stats(states, [o.sums[key] for o in outcomes], est, bound)
        return stats, [sum(o.seconds for o in outcomes)]

    # --- the result ---

    def _key_stats(self, states, sums, values, bound) -> KeyStats:
        merged = _merged_extremes(states)
        center = states[0].center
        total = mom.Sums(
            sum(
                (np.asarray(s.s1, np.float64) for s in sums[1:]), np.asarray(sums[0].s1, np.float64)
            ),
            sum(
                (np.asarray(s.s2, np.float64) for s in sums[1:]), np.asarray(sums[0].s2, np.float64)
            ),
        )
        base = mom.finalize(merged, total, center)
        counted = np.stack([np.asarray(s.extremes.count, np.int64) for s in states])
        if self.shares is not None:
            base["mean"], base["std"] = mx.weighted_moments(counted, sums, center, self.shares)
        counts = mx.display_counts([s.counts for s in states], counted, self.shares)
        if bound is None:
            buckets = histograms.from_exact_pass(counts, base["min"], base["max"])
        else:
            buckets = histograms.from_fast_pass(counts, center, base["min"], base["max"])
        return KeyStats(
            count=base["count"],
            mean=base["mean"],
            std=base["std"],
            min=base["min"],
            max=base["max"],
            quantiles={float(q): values[:, i] for i, q in enumerate(self.levels)},
            nonfinite=np.sum([np.asarray(s.nonfinite, np.int64) for s in states], axis=0),
            rank_error_bound=None
            if bound is None
            else {float(q): bound[:, i] for i, q in enumerate(self.levels)},
            histogram=histograms.summarize(buckets),
        )


def _merged_extremes(states) -> mom.Extremes:
    merged = states[0].extremes
    for state in states[1:]:
        merged = mom.merge(merged, state.extremes)
    return merged


def _name(streams, m: int) -> str:
    return getattr(streams[m], "name", None) or f"dataset {m + 1}"


def _shape_error(streams, key: str, seen: list) -> DataError:
    """`seen`: two (member index, what its key holds) that disagree."""
    (a, what_a), (b, what_b) = seen
    return DataError(
        f"key {key!r} holds {what_a} in {_name(streams, a)} (column"
        f" {streams[a].column_name(key)!r}) but {what_b} in {_name(streams, b)} (column"
        f" {streams[b].column_name(key)!r}); the datasets of a mixture must agree in shape:"
        " choose matching columns with --keys"
    )


def describe_key(state) -> str:
    """`6 float32 values per row`, `2 int64 values per row`: what a member's key holds."""
    kind = "int64" if state.extremes.min_key.dtype == np.uint64 else "float32"
    return f"{state.counts.shape[0]} {kind} values per row"


def _check_agree(streams, member_states: list[dict]) -> None:
    """Every member gives the same keys, with the same width and type."""
    names = list(member_states[0])
    for m, states in enumerate(member_states[1:], start=1):
        if set(states) != set(names):
            missing = sorted(set(names) ^ set(states))
            raise DataError(
                f"{_name(streams, m)} gives keys {sorted(states)} but {_name(streams, 0)} gives"
                f" {sorted(names)} ({', '.join(missing)} in one only); give every dataset the same"
                " output keys with --keys"
            )
        for key in names:
            here, there = describe_key(member_states[0][key]), describe_key(states[key])
            if here != there:
                raise _shape_error(streams, key, [(0, here), (m, there)])
