"""Milvus' rules for a filter over JSON metadata, written here as the reference the filter tests
judge every engine by (docs/images.md, Filters; seen on Lite 2.5 and the server): a comparison
is true only between values of one kind (a boolean with a boolean, a number with a number, 1
equal to 1.0, a string with a string) and false across kinds, on a missing key and on JSON null;
`!=` and `not in` are the negations of `==` and `in`, so they match items that lack the key or
hold another kind; `like` matches strings; json_contains looks into arrays only; `not`, `and`
and `or` are two-valued."""

from __future__ import annotations

MISSING = object()  # a key the item does not hold


def kind(value) -> str | None:
    """ "bool", "number" or "string"; None for null, a missing key, a list or an object."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


def equal(left, right) -> bool:
    return kind(left) is not None and kind(left) == kind(right) and left == right


def compare(op: str, left, right) -> bool:
    if op == "==":
        return equal(left, right)
    if op == "!=":
        return not equal(left, right)
    if kind(left) is None or kind(left) != kind(right):
        return False
    return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]


def member(left, values) -> bool:
    return any(equal(left, v) for v in values)


def contains(array, values) -> bool:
    """Whether `array` (an array, else False) holds one of `values`."""
    return isinstance(array, list) and any(equal(a, v) for a in array for v in values)


def contains_all(array, values) -> bool:
    return isinstance(array, list) and all(contains(array, [v]) for v in values)


def like_prefix(field, prefix: str) -> bool:
    return isinstance(field, str) and field.startswith(prefix)


def agreed_literal(value) -> bool:
    """A number literal every engine compares alike: an integer within ±2^53, or a non-integer
    literal (a float) below 2^53 in magnitude. Beyond, a double cannot tell neighbouring integers
    apart and the engines differ (`== 9007199254740992.0` matched 2^53 + 1 on Lite 2.5 and the
    server, not on Lite 3; `> 4.611686018427388e18` missed 2^62 + 1 on Lite 2.5 and the server):
    such literals are refused by the grammar, not judged."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return True
    return abs(value) <= 2**53 if isinstance(value, int) else abs(value) < 2**53
