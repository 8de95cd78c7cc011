"""The crash harness: crash consistency of every command that writes: each runs as a real subprocess and is killed
outright (SIGKILL, as the OOM killer does) at points spread over its run (DESIGN.md
"Crashes are part of the contract").

    python -m benchmarks.reliability.faults                   # every command, 20 kills each
    python -m benchmarks.reliability.faults --kills 5 --only stats-v30,images-insert-new

For each command: a clean run from the starting state (twice: what differs between the two is a
timing, masked in every later comparison), then for each kill point (seeded, stratified over the
clean run's duration; the other half at its file-system and store writes, just before or just
after one, inject.py) a fresh copy of the starting state, the command killed
there, and then:

* every file under the case's folder is byte-for-byte the old one or the new one (the clean
  run's, timings masked); a backup file (meta/.accelkit-backup/) is whole: the bytes some version
  of the file it copies had; temporary files (`.NAME.*.tmp`, `.NAME.*.partial`) left by the kill
  are counted;
* every store holds each item at most once, each whole (vector, metadata and thumbnail of one
  version, bit-equal to the old state's or the clean run's), every collection with its index and
  model record, and every item the command acknowledged (its progress count) is there;
* the same command run again exits as the clean run did and leaves what the clean run left
  (backups and temporary files apart). A rerun from a state already seen (the starting state, or
  one an earlier kill left, byte for byte and item for item) is not repeated: the command is
  deterministic in its state, so its outcome is known.

The cases are in cases.py, the stores' dumps in store.py, the child processes in process.py;
tests/test_faults.py runs a short version (a few kills per command) in the suite,
benchmarks/reliability/faults.py every kill (its JSON: benchmarks/results/faults.json).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelkit.runtime.environment import record
from tests.support.crash.process import injected, run
from tests.support.crash.store import compare_stores

SEED = 47
TEMPORARY = re.compile(r"(^|/)\.[^/]+\.(tmp|partial)(/|$)")
BACKUP = re.compile(r"^(.*?)meta/\.accelkit-backup/[^/]+/(.*)$")
BAK = re.compile(r"^(.*)\.\d{8}T\d{6}\.bak$")  # check --fix's copy of a --stats file
# what differs between two clean runs is masked; these keys are masked even when two runs agree
TIMING_KEYS = re.compile(r"seconds|elapsed|time|date|created|started|duration|load|_s$|per_s")
FAILURES = (
    "torn", "half", "duplicate", "unacknowledged", "source changed", "rerun failed", "rerun differs",
)  # fmt: skip


# -- what a state is ----------------------------------------------------------------------------


def files(root: Path, ignore: re.Pattern | None) -> dict[str, bytes]:
    """Every file under `root` by its relative path, but those `ignore` matches (a store's own
    files: a store is compared by what it holds)."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not path.is_symlink() and not (ignore and ignore.search(rel)):
            found[rel] = path.read_bytes()
    return found


def masked(data: bytes | None, paths: set[tuple]) -> Any:
    """JSON with the values at `paths` (and under timing-named keys) masked; other bytes as
    they are. None stays None (an absent file)."""
    if data is None:
        return None
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        return data

    def walk(node, path):
        if path in paths:
            return "<masked>"
        if isinstance(node, dict):
            return {
                k: "<masked>" if TIMING_KEYS.search(str(k)) and not isinstance(v, dict)
                else walk(v, (*path, k))
                for k, v in node.items()
            }  # fmt: skip
        if isinstance(node, list):
            return [walk(v, (*path, i)) for i, v in enumerate(node)]
        return node

    return walk(value, ())


def differing(a: Any, b: Any, path: tuple = ()) -> set[tuple]:
    """JSON paths where two values differ (a whole subtree when its shape differs)."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return set().union(*(differing(a[k], b[k], (*path, k)) for k in a)) if a else set()
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return set().union(
            *(differing(x, y, (*path, i)) for i, (x, y) in enumerate(zip(a, b, strict=True)))
        )
    return set() if a == b else {path}


def timing_paths(first: dict[str, bytes], second: dict[str, bytes]) -> dict[str, set]:
    """Per file, the JSON paths that differ between two clean runs (timings, a timestamp)."""
    paths: dict[str, set] = {}
    for rel in set(first) & set(second):
        if first[rel] != second[rel]:
            try:
                paths[rel] = differing(json.loads(first[rel]), json.loads(second[rel]))
            except (UnicodeDecodeError, ValueError):
                paths[rel] = {()}  # a binary file that differs run to run: masked whole
    return paths


def original(rel: str) -> str | None:
    """The dataset file a backup copies (`ds/meta/.accelkit-backup/STAMP/meta/x` -> `ds/meta/x`)."""
    match = BACKUP.match(rel)
    if match:
        return match.group(1) + match.group(2)
    match = BAK.match(rel)
    return match.group(1) if match else None


def compare_files(old, new, after, masks) -> tuple[Counter, list[str]]:
    """Each file after a kill: old, new, a leftover temporary file, a whole backup, or torn."""
    kinds: Counter = Counter()
    problems = []
    for rel in sorted(set(old) | set(new) | set(after)):
        if TEMPORARY.search(rel):
            if rel in after:
                kinds["temporary"] += 1
            continue
        source = original(rel)
        if source is not None:
            if rel in after:
                versions = [old.get(source), new.get(source)]
                ok = after[rel] in versions or masked(after[rel], masks.get(source, set())) == (
                    masked(new.get(source), masks.get(source, set()))
                )
                kinds["backup" if ok else "torn"] += 1
                if not ok:
                    problems.append(f"backup {rel} is no version of {source}")
            continue
        mask = masks.get(rel, set())
        now = after.get(rel)
        if now == old.get(rel):
            kinds["old"] += 1
        elif masked(now, mask) == masked(new.get(rel), mask):
            kinds["new"] += 1
        else:
            kinds["torn"] += 1
            problems.append(
                f"{rel}: neither the old file nor the new one ({len(now or b'')} bytes; old "
                f"{len(old.get(rel) or b'')}, new {len(new.get(rel) or b'')}){where(now, new.get(rel), mask)}"
            )
    return kinds, problems


def where(now: bytes | None, new: bytes | None, mask: set) -> str:
    """For two JSON files: the first paths where they differ (masked), to read in the report."""
    a, b = masked(now, mask), masked(new, mask)
    if isinstance(a, bytes) or isinstance(b, bytes) or a is None or b is None:
        return ""
    return f"; differs from the new one at {sorted(map(str, differing(a, b)))[:3]}"


def equal_files(clean, rerun, masks) -> list[str]:
    """How `rerun`'s files differ from the clean run's (backups and temporary files apart)."""
    keep = lambda rel: not TEMPORARY.search(rel) and original(rel) is None  # noqa: E731
    out = []
    for rel in sorted({r for r in (*clean, *rerun) if keep(r)}):
        mask = masks.get(rel, set())
        if masked(clean.get(rel), mask) != masked(rerun.get(rel), mask):
            out.append(
                f"{rel} differs from the clean run's{where(rerun.get(rel), clean.get(rel), mask)}"
            )
    return out


# -- kills --------------------------------------------------------------------------------------


def kill_points(
    seconds: float, events: int, kills: int, seed: int, time_share: float = 0.5
) -> list[tuple[str, float]]:
    """`kills` kill points, seeded: `time_share` of them at moments in (0, `seconds`),
    stratified over the run; the rest at write events (inject.py) in 1..`events`,
    stratified over them (every event
    once when there are fewer than that), alternately just before and just after the event.
    ("time", seconds), ("before", event number) or ("after", event number)."""
    rng = random.Random(seed)
    by_write = min(kills - round(kills * time_share), events)
    by_time = kills - by_write
    points = (
        [("time", seconds * (i + rng.random()) / by_time) for i in range(by_time)]
        if by_time
        else []
    )
    if by_write:
        step = events / by_write
        points += [
            ("before" if i % 2 == 0 else "after", float(1 + int(i * step + rng.random() * step)))
            for i in range(by_write)
        ]
    return points


@dataclass
class Case:
    """One command and its world: `prepare(folder)` makes the starting state in an empty folder
    (once; each trial gets a copy), `argv(folder)` the command. `store(folder)` (optional) dumps
    what its stores hold (see `store_state`); `ignore` matches the store's own files.
    `acknowledged(output)`: how many items the command had reported stored when it died."""

    name: str
    command: str  # as shown in the table
    prepare: Callable[[Path], None]
    argv: Callable[[Path], list[str]]
    store: Callable[[Path], dict] | None = None
    ignore: re.Pattern | None = None
    acknowledged: Callable[[str], int] | None = None
    fresh_each_trial: bool = False  # a server database: prepared anew for each trial, not copied
    rerun_codes: tuple[int, ...] = ()  # a rerun may also exit so (a delete of what is gone: 2)
    # further checks of a store after a kill and after the rerun: check(old_store, store) ->
    # problems (a migration: SRC unchanged, DST's items bit-equal to SRC's, its mark kept)
    check: Callable[[dict, dict], list[str]] | None = None


def state_key(snapshot: dict[str, bytes], store: dict | None, masks) -> str:
    digest = hashlib.sha256()
    for rel in sorted(snapshot):
        if original(rel) is None:
            digest.update(rel.encode() + b"\0")
            digest.update(repr(masked(snapshot[rel], masks.get(rel, set()))).encode())
    digest.update(json.dumps(store, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def trial_folder(case: Case, base: Path, work: Path, name: str) -> Path:
    folder = work / name
    if case.fresh_each_trial:
        folder.mkdir()
        case.prepare(folder)
    else:
        shutil.copytree(base, folder, symlinks=True)
    return folder


def measure(
    case: Case,
    kills: int,
    work: Path,
    seed: int = SEED,
    log=print,
    clean: int = 2,
    time_share: float = 0.5,
) -> dict:
    """Run `case`: `clean` clean runs (one: timings masked by key name only), then `kills` kills
    (`time_share` of them at moments, the rest at write events), each checked and rerun (see
    the module)."""
    base = work / "base"
    base.mkdir(parents=True)
    case.prepare(base)
    old = files(base, case.ignore)
    old_store = case.store(base) if case.store else None
    clean_runs = []
    events_log = work / "events.txt"
    for i in range(clean):
        folder = trial_folder(case, base, work, f"clean{i}")
        counting = {"ACCELKIT_FAULTS_EVENTS": str(events_log)} if i == clean - 1 else {}
        result = run(injected(case.argv(folder)), folder, env=counting)
        if result.code != 0:
            raise RuntimeError(
                f"{case.name}: the clean run exited {result.code}:\n{result.output[-3000:]}"
            )
        clean_runs.append(
            (result, files(folder, case.ignore), case.store(folder) if case.store else None)
        )
    (first, new, new_store), (second, again, _) = clean_runs[0], clean_runs[-1]
    masks = timing_paths(new, again)  # counted in the last run: caches are warm by then
    seconds = min(first.seconds, second.seconds)
    events = events_log.read_text().splitlines() if events_log.exists() else []
    log(f"{case.name}: clean run {seconds:.1f} s, {len(events)} write events; {kills} kills")
    known = {state_key(old, old_store, masks): "the starting state"}
    trials = []
    for k, (kind, at) in enumerate(kill_points(seconds, len(events), kills, seed, time_share)):
        folder = trial_folder(case, base, work, f"kill{k}")
        if kind == "time":
            killed = run(case.argv(folder), folder, kill_at=at)
        else:
            variable = (
                "ACCELKIT_FAULTS_KILL_AT" if kind == "before" else "ACCELKIT_FAULTS_KILL_AFTER"
            )
            at_event = {variable: str(int(at))}
            killed = run(injected(case.argv(folder)), folder, env=at_event)
        after = files(folder, case.ignore)
        after_store = case.store(folder) if case.store else None
        kinds, problems = compare_files(old, new, after, masks)
        trial: dict[str, Any] = {
            "kill": {"at_s": round(at, 2)}
            if kind == "time"
            else {f"{kind}_write": int(at), "event": short(events[int(at) - 1], folder)},
            "killed": killed.killed_at is not None,
            "exit": killed.code,
            "files": dict(kinds),
            "lingering_children": len(killed.lingering),
        }
        if case.store:
            acked = case.acknowledged(killed.output) if case.acknowledged else 0
            trial["acknowledged"] = acked
            outcome, store_problems = compare_stores(old_store, new_store, after_store, acked)
            trial["store"] = outcome
            problems += store_problems
            if case.check:
                problems += case.check(old_store, after_store)
        key = state_key(after, after_store, masks)
        if key in known:
            trial["rerun"] = f"not repeated: same state as {known[key]}"
        else:
            known[key] = f"kill {k}'s"
            again_run = run(case.argv(folder), folder)
            trial["rerun"] = "ran"
            if again_run.code != first.code and again_run.code not in case.rerun_codes:
                problems.append(f"rerun failed: exit {again_run.code}: {again_run.output[-600:]}")
            else:
                problems += [
                    f"rerun differs: {p}"
                    for p in equal_files(new, files(folder, case.ignore), masks)
                ]
                if case.store:
                    rerun_store = case.store(folder)
                    _, differ = compare_stores(new_store, new_store, rerun_store, 0, exact=True)
                    differ += case.check(old_store, rerun_store) if case.check else []
                    problems += [f"rerun differs: {p}" for p in differ]
        trial["outcome"] = outcome_of(trial, problems)
        trial["problems"] = problems
        trials.append(trial)
        log(
            f"  kill {k} {trial['kill']}: {trial['outcome']}" + (f" {problems}" if problems else "")
        )
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "command": case.command,
        "clean_run_s": round(seconds, 2),
        "write_events": len(events),
        "masked": {rel: sorted(map(str, p)) for rel, p in masks.items()},
        "trials": trials,
        "outcomes": dict(Counter(t["outcome"] for t in trials)),
        "failures": sum(bool(t["problems"]) for t in trials),
        "measured": record(()),  # the machine record (accelkit.runtime.environment)
    }


def short(event: str, folder: Path) -> str:
    """An event line with the trial's folder left out of its path."""
    kind, _, path = event.partition(" ")
    for prefix in (str(folder.parent / "clean1") + "/", str(folder.parent / "clean1")):
        path = path.replace(prefix, "")
    return f"{kind} {path}"


def outcome_of(trial: dict, problems: list[str]) -> str:
    if problems:
        return "FAIL: " + problems[0].split(":")[0]
    if not trial["killed"]:
        return "finished before the kill"
    kinds = trial["files"]
    store = trial.get("store")
    parts = []
    if kinds.get("new") and not kinds.get("old"):
        parts.append("files new")
    elif kinds.get("new"):
        parts.append("files mixed (each whole)")
    else:
        parts.append("files old")
    if store:
        parts.append(f"store {store}")
    if kinds.get("temporary"):
        parts.append("temporary left")
    return ", ".join(parts)
