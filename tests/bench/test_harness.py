"""The timing harness, the JSON schema and the result plumbing (no timing assertions)."""

import copy
import json

import numpy as np
import pytest

from accelkit.bench.harness import (
    Protocol,
    Result,
    Timing,
    check_below,
    check_close,
    document,
    environment,
    fix_threads,
    iqr,
    measure,
    measure_unsynchronized,
    merge_results,
)
from accelkit.bench.schema import SchemaError, validate


@pytest.mark.parametrize(
    "values", [[1.0], [3.0, 1.0], [5.0, 1.0, 4.0, 2.0, 3.0], list(np.linspace(0, 1, 10) ** 2)]
)
def test_iqr_matches_numpy(values):
    want = 0.0 if len(values) < 2 else float(np.percentile(values, 75) - np.percentile(values, 25))
    assert iqr(values) == pytest.approx(want)


def test_measure_calls_first_warmup_and_repeats_and_blocks_jax():
    import jax.numpy as jnp

    calls = []

    def work():
        calls.append(1)
        return jnp.arange(10.0) * 2

    timing, out = measure("double", "jax", work, Protocol(repeats=4, warmup=2), size=10)
    assert len(calls) == 1 + 2 + 4
    assert len(timing.times_s) == 4 and timing.min_s <= timing.median_s
    assert timing.first_s > 0 and timing.synchronized
    np.testing.assert_array_equal(np.asarray(out), np.arange(10.0) * 2)
    unsynced = measure_unsynchronized("double", "jax", work, Protocol(3, 0))
    assert not unsynced.synchronized and len(unsynced.times_s) == 3


def test_threads_fixed_and_recorded():
    import torch

    assert fix_threads(1) == 1 and torch.get_num_threads() == 1
    env = environment("float32")
    assert env["threads"]["torch_intra_op"] == 1
    fix_threads(None)
    assert env["cpu_count"] >= 1 and env["versions"]["numpy"] and env["dtype"] == "float32"


def _doc():
    result = Result("demo", {"n": 3})
    result.timings.append(Timing("op", "numpy", "cpu", 0.5, (0.1, 0.3, 0.2), 3, None))
    result.timings.append(
        Timing("op", "jax", "cpu", float("nan"), (0.001,), 3, None, synchronized=False)
    )
    result.checks.append(check_close("close", 1.0, 1.05, 0.1))
    result.checks.append(check_below("small", 1e-9, 1e-6))
    result.facts["ratio"] = float("inf")
    result.series.append(
        {"label": "s", "x": [1, 2], "y": [0.5, 0.25], "xlabel": "n", "ylabel": "t"}
    )
    return document([result], environment("float64"))


def test_document_is_valid_json_with_the_schema():
    doc = json.loads(json.dumps(_doc(), allow_nan=False))  # no NaN/Infinity leaks into JSON
    validate(doc)
    timing = doc["results"][0]["timings"][0]
    assert timing["median_s"] == 0.2 and timing["min_s"] == 0.1 and timing["repeats"] == 3
    assert (
        doc["results"][0]["timings"][1]["first_s"] is None
        and doc["results"][0]["facts"]["ratio"] is None
    )
    back = Result.from_json(doc["results"][0])
    assert back.timings[0].times_s == (0.1, 0.3, 0.2) and back.passed


@pytest.mark.parametrize(
    ("breaker", "needle"),
    [
        (lambda d: d.update(schema="accelkit.bench/0"), "$.schema"),
        (lambda d: d["environment"].pop("cpu_count"), "cpu_count"),
        (lambda d: d["results"][0]["timings"][0].update(repeats=2), "times_s"),
        (lambda d: d["results"][0]["timings"][0].update(median_s=9.0), "median_s"),
        (lambda d: d["results"][0]["checks"][0].update(passed="yes"), "passed"),
        (lambda d: d["results"][0].update(passed=False), "passed"),
        (lambda d: d["results"][0]["series"][0].update(y=[1]), "series"),
    ],
)
def test_schema_rejects_broken_documents(breaker, needle):
    doc = copy.deepcopy(_doc())
    breaker(doc)
    with pytest.raises(SchemaError) as info:
        validate(doc)
    assert needle in str(info.value)


def test_merge_pools_repeats_and_keeps_failures():
    a, b = Result("x", {}), Result("x", {})
    a.timings.append(Timing("op", "numpy", "cpu", 1.0, (0.1, 0.2), 5))
    b.timings.append(Timing("op", "numpy", "cpu", 2.0, (0.3,), 5))
    b.timings.append(Timing("op", "jax", "cpu", 2.0, (0.4,), 5))
    a.checks.append(check_below("c", 0.0, 1.0))
    b.checks.append(check_below("c", 5.0, 1.0))
    merged = merge_results([a, b])
    assert [t.times_s for t in merged.timings] == [(0.1, 0.2, 0.3), (0.4,)]
    assert merged.timings[0].first_s == 1.0
    assert len(merged.checks) == 1 and not merged.passed
