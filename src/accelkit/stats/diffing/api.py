"""`accelkit.stats.diff`: how far two statistics files are apart, key by key and dimension by
dimension, and — given the dataset they describe — why.

    import accelkit.stats as stats
    report = stats.diff("assets/pi0/norm_stats.json", "lerobot/pusht", dataset="lerobot/pusht")
    report.ok, report.verdict(), report.summary()

The comparison is the pure core in `stats/diffing/compare.py`; each side's numbers are recomputed from
the dataset in `stats/diffing/recompute.py` and the causes named in `stats/diffing/causes.py`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from accelkit.errors import ConfigError, InputError
from accelkit.stats.core import tolerance as tolerance_rule
from accelkit.stats.core.action_chunks import parse_mask
from accelkit.stats.core.tolerance import TOLERANCE
from accelkit.stats.diffing import causes as diff_causes
from accelkit.stats.diffing import compare as difference
from accelkit.stats.diffing.recompute import Recomputer, hypotheses_for
from accelkit.stats.formats import lerobot, repo_ids, stats_files
from accelkit.stats.formats.sources import DEFAULT_KEYS

__all__ = ["DiffReport", "diff"]

OPENPI_BATCH = 32  # openpi's TrainConfig.batch_size default


@dataclass
class DiffReport:
    """Two statistics files compared (`comparison`: every statistic both hold, per dimension, with
    the causes found), what each file is (`a`, `b`) and the dataset the causes were recomputed on."""

    a: stats_files.StatsFile
    b: stats_files.StatsFile
    comparison: difference.Comparison
    dataset: Path | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.comparison.ok

    @property
    def tolerance(self) -> float:
        return self.comparison.tolerance

    def verdict(self) -> str:
        return difference.verdict(self.comparison)

    def summary(self) -> list[dict]:
        """One row per (key, statistic, cause) with differing dimensions."""
        return difference.summary_rows(self.comparison)

    def document(self) -> dict:
        """The `--json` result."""
        c = self.comparison
        return {
            "a": self.a.describe(),
            "b": self.b.describe(),
            "dataset": None if self.dataset is None else str(self.dataset),
            "tolerance": c.tolerance,
            "within_tolerance": c.ok,
            "compared": c.compared,
            "differing": c.differing,
            "summary": self.summary(),
            "differences": [d.document() for d in c.differences],
            "only_in_a": c.only_in_a,
            "only_in_b": c.only_in_b,
            "not_compared": c.not_compared,
            "notes": self.notes,
        }


def diff(
    a: str | Path,
    b: str | Path,
    *,
    dataset: str | Path | None = None,
    keys: Mapping[str, str] | None = None,
    tolerance: float | None = TOLERANCE,
    action_horizon: int | None = None,
    chunk_end: str | None = None,
    delta_actions: str | None = None,
    openpi_batch_size: int = OPENPI_BATCH,
    progress: bool = False,
) -> DiffReport:
    """Compare the statistics `a` and `b` hold (each an openpi norm_stats.json, a LeRobot
    stats.json, a dataset folder — its meta/stats.json — or a repo id). `keys`: openpi keys ->
    columns where a file's sidecar does not say (default state=observation.state,
    actions=action); `tolerance`: the largest difference allowed, in stds (mean, std) or ranges
    (min, max, quantiles). With `dataset` (the one both describe), every differing number's
    cause is recomputed: `action_horizon`, `chunk_end`, `delta_actions` (openpi's mask) and
    `openpi_batch_size` describe how an openpi file without run facts was made. Bad input raises
    an `AccelkitError` naming it."""
    tolerance = tolerance_rule.given(tolerance)
    if chunk_end not in (None, "truncate", "clamp"):
        raise ConfigError(f"--chunk-end takes truncate or clamp, not {chunk_end!r}")
    if action_horizon is not None and action_horizon < 1:
        raise ConfigError(f"--action-horizon must be 1 or more, not {action_horizon}")
    if openpi_batch_size < 1:
        raise ConfigError(f"--openpi-batch-size must be 1 or more, not {openpi_batch_size}")
    mask = None
    if delta_actions is not None:
        mask = parse_mask(delta_actions)
    root = _dataset(dataset) if dataset is not None else None
    side_a = stats_files.read(a, keys=keys, what="A")
    side_b = stats_files.read(b, keys=keys, what="B")
    comparison = difference.compare_files(side_a, side_b, tolerance)
    report = DiffReport(side_a, side_b, comparison, root)
    _structural(comparison)
    if root is None:
        if not comparison.ok:
            report.notes.append(
                "causes: give --dataset DATASET (the dataset both files describe) to recompute them"
            )
        return report
    _explain(
        report,
        root,
        keys=keys,
        action_horizon=action_horizon,
        chunk_end=chunk_end,
        mask=mask,
        batch_size=openpi_batch_size,
        progress=progress,
    )
    return report


def _dataset(dataset) -> Path:

    root = Path(repo_ids.resolve(str(dataset), "--dataset")).expanduser()
    if not (root / "meta" / "info.json").is_file():
        raise InputError(
            f"--dataset {dataset} is not a LeRobot dataset (no meta/info.json); the causes are"
            " recomputed from the dataset both files describe"
        )
    return root


def _structural(comparison) -> None:
    """Causes that need no recomputation: a value that is not a number, a shape that differs."""
    for d in comparison.differences:
        if d.problem:
            d.causes[0], d.details[0] = diff_causes.DIFF_CAUSES["shape"], d.problem
            continue
        for dim in d.failing:
            found = [s for s, v in (("A", d.a[dim]), ("B", d.b[dim])) if not math.isfinite(v)]
            if found:
                d.causes[dim] = diff_causes.render([("nan", s) for s in found])
                d.details[dim] = f"A stores {d.a[dim]}, B {d.b[dim]}"


def _explain(report, root, *, keys, action_horizon, chunk_end, mask, batch_size, progress):

    sides = {"A": report.a, "B": report.b}
    mapping = dict(keys or DEFAULT_KEYS)
    for side in sides.values():  # an openpi file's own record of its columns comes first
        if side.format == "openpi" and side.facts.get("keys"):
            mapping = {**mapping, **side.facts["keys"]}
    numeric = set(lerobot.numeric_features(root) or ())  # required: None never comes back
    open_work = [d for d in report.comparison.differences if not d.problem]
    open_work = [d for d in open_work if any(dim not in d.causes for dim in d.failing)]
    if not open_work:
        return
    columns = {d.column for d in open_work}
    levels = stats_files.levels_of(
        {s for side in sides.values() for entry in side.entries.values() for s in entry}
    ) or [0.01, 0.99]
    recompute = Recomputer(
        root,
        levels,
        state=mapping.get("state", DEFAULT_KEYS["state"]),
        actions=mapping.get("actions", DEFAULT_KEYS["actions"]),
        numeric=numeric,
        columns=columns,
        progress=progress,
    )
    found: dict[tuple[str, str], list] = {}
    for name, side in sides.items():
        other = sides["B" if name == "A" else "A"]
        for key in dict.fromkeys((d.key if name == "A" else d.key_b) for d in open_work):
            wanted = [
                (d, dim, float(d.a[dim] if name == "A" else d.b[dim]))
                for d in open_work
                if (d.key if name == "A" else d.key_b) == key
                for dim in d.failing
                if dim not in d.causes
            ]
            found[(name, key)] = _until_reproduced(
                hypotheses_for(
                    recompute,
                    side,
                    key,
                    other=other,
                    action_horizon=action_horizon,
                    chunk_end=chunk_end,
                    delta_mask=mask,
                    batch_size=batch_size,
                ),
                wanted,
            )
    for d in open_work:
        for dim in d.failing:
            if dim in d.causes:
                continue
            if d.column not in numeric:
                d.causes[dim] = diff_causes.render([("unknown", "")])
                d.details[dim] = f"not recomputed: {d.column} is not a numeric column of {root}"
                continue
            causes, detail = diff_causes.explain(
                d.stat,
                dim,
                float(d.a[dim]),
                float(d.b[dim]),
                float(d.scale[dim]),
                found[("A", d.key)],
                found[("B", d.key_b)],
                report.tolerance,
            )
            d.causes[dim], d.details[dim] = diff_causes.render(causes), detail
    unknown = diff_causes.DIFF_CAUSES["unknown"]
    unexplained = any(
        d.column == recompute.actions and unknown in d.causes.values() for d in open_work
    )
    for name, side in sides.items():
        if unexplained and side.format == "openpi" and not side.facts and not action_horizon:
            report.notes.append(
                f"{name} is an openpi file without run facts: give --action-horizon (its config's"
                " model.action_horizon) to recompute its action chunks"
            )


def _until_reproduced(hypotheses, wanted) -> list:
    """The hypotheses, computed in order until every wanted number is given back (or none is
    left to try)."""
    out = []
    for hypothesis in hypotheses:
        out.append(hypothesis)
        if all(
            diff_causes.first_reproducing(out, d.stat, dim, value, float(d.scale[dim]))
            for d, dim, value in wanted
        ):
            break
    return out
