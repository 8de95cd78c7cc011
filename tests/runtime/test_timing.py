"""runtime/timing: interleaved rounds (measure and iqr are tested in tests/bench/test_harness.py,
where bench re-exports them)."""

import time

import numpy as np
import pytest

from accelkit.runtime.timing import interleaved


def test_interleaved_rotates_the_start_and_warms_up_only_what_it_is_told():
    calls: list[str] = []
    runs = {name: (lambda name=name: calls.append(name) or name) for name in "abc"}
    seen: list[tuple[str, int]] = []
    timed = interleaved(runs, 3, warmup={"b"}, before=lambda n, r: seen.append((n, r)))
    assert calls == ["b", "a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert seen[0] == ("b", -1) and [r for _, r in seen[1:]] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert set(timed.first) == {"b"} and timed.outputs == {"a": "a", "b": "b", "c": "c"}
    assert all(len(v) == 3 for v in timed.wall.values())
    assert all(c >= 0 for v in timed.cpu.values() for c in v)


def test_ratio_is_taken_within_each_round():
    fast, slow = 0.002, 0.006
    timed = interleaved(
        {"ours": lambda: time.sleep(fast), "base": lambda: time.sleep(slow)}, 4, warmup=False
    )
    ratio = timed.ratio("ours", "base")
    expected = [b / a for a, b in zip(timed.wall["ours"], timed.wall["base"], strict=True)]
    assert ratio["rounds"] == expected and ratio["min"] <= ratio["median"] <= ratio["max"]
    assert ratio["median"] > 1.0  # 6 ms of sleep against 2 ms
    assert timed.medians()["base"] == pytest.approx(np.median(timed.wall["base"]))
