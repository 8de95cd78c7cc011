"""The JSON document `--json` writes, version `accelkit.bench/1`, and a validator for it.

The schema is stable: fields are only ever added in a new version (`accelkit.bench/2`), so a
reader that checks `schema` can rely on every field below. Times are seconds; a non-finite number
is written as null.

    {"schema": "accelkit.bench/1",
     "environment": {"time_utc", "python", "platform", "machine", "cpu_count", "load_average",
                     "dtype", "versions": {package: version|null}, "threads": {...}, ...},
     "results": [{"experiment", "params": {...}, "passed": bool,
                  "timings": [{"name", "backend", "device", "size": int|null, "synchronized": bool,
                               "compile_s": num|null, "first_s": num|null, "median_s", "min_s",
                               "iqr_s", "repeats": int, "times_s": [num, ...]}],
                  "checks": [{"name", "value": num|null, "expected": num|null,
                              "tolerance": num|null, "passed": bool, "detail": str}],
                  "facts": {...}, "notes": [str], "series": [{"label", "x": [...], "y": [...],
                                                              "xlabel", "ylabel", optional "linestyle": "dashed"}]}]}
"""

from __future__ import annotations

from accelkit.bench.harness import SCHEMA

_NUM = (int, float)
_OPT_NUM = (int, float, type(None))

ENVIRONMENT = {
    "time_utc": str,
    "python": str,
    "platform": str,
    "machine": str,
    "cpu_count": int,
    "load_average": (list, type(None)),
    "dtype": (str, type(None)),
    "versions": dict,
    "threads": dict,
}
RESULT = {
    "experiment": str,
    "params": dict,
    "passed": bool,
    "timings": list,
    "checks": list,
    "facts": dict,
    "notes": list,
    "series": list,
}
TIMING = {
    "name": str,
    "backend": str,
    "device": str,
    "size": (int, type(None)),
    "synchronized": bool,
    "compile_s": _OPT_NUM,
    "first_s": _OPT_NUM,
    "median_s": _NUM,
    "min_s": _NUM,
    "iqr_s": _NUM,
    "repeats": int,
    "times_s": list,
}
CHECK = {
    "name": str,
    "value": _OPT_NUM,
    "expected": _OPT_NUM,
    "tolerance": _OPT_NUM,
    "passed": bool,
    "detail": str,
}
SERIES = {"label": str, "x": list, "y": list, "xlabel": str, "ylabel": str}


class SchemaError(ValueError):
    """The document does not follow `accelkit.bench/1`; the message gives the path of the fault."""


def _fields(obj, spec: dict, where: str) -> None:
    if not isinstance(obj, dict):
        raise SchemaError(f"{where}: expected an object, got {type(obj).__name__}")
    for key, kind in spec.items():
        if key not in obj:
            raise SchemaError(f"{where}: missing field {key!r}")
        value = obj[key]
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            raise SchemaError(f"{where}.{key}: expected {kind}, got a boolean")
        if not isinstance(value, kind):
            raise SchemaError(f"{where}.{key}: expected {kind}, got {type(value).__name__}")


def validate(doc) -> None:
    """Raise SchemaError naming the first field that breaks the schema; return None when valid."""
    _fields(doc, {"schema": str, "environment": dict, "results": list}, "$")
    if doc["schema"] != SCHEMA:
        raise SchemaError(f"$.schema: expected {SCHEMA!r}, got {doc['schema']!r}")
    _fields(doc["environment"], ENVIRONMENT, "$.environment")
    for i, result in enumerate(doc["results"]):
        where = f"$.results[{i}]"
        _fields(result, RESULT, where)
        for j, timing in enumerate(result["timings"]):
            _fields(timing, TIMING, f"{where}.timings[{j}]")
            times = timing["times_s"]
            if (
                len(times) != timing["repeats"]
                or not times
                or not all(isinstance(t, _NUM) and t >= 0 for t in times)
            ):
                raise SchemaError(
                    f"{where}.timings[{j}].times_s: expected {timing['repeats']} non-negative numbers"
                )
            if not min(times) <= timing["median_s"] <= max(times) or timing["min_s"] != min(times):
                raise SchemaError(f"{where}.timings[{j}]: median_s/min_s disagree with times_s")
        for j, check in enumerate(result["checks"]):
            _fields(check, CHECK, f"{where}.checks[{j}]")
        if result["passed"] != all(c["passed"] for c in result["checks"]):
            raise SchemaError(f"{where}.passed: disagrees with its checks")
        for j, series in enumerate(result["series"]):
            _fields(series, SERIES, f"{where}.series[{j}]")
            if len(series["x"]) != len(series["y"]):
                raise SchemaError(f"{where}.series[{j}]: x and y differ in length")
