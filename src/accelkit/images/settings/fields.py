"""Filter fields a collection declares (`store.fields`, e.g. `{"album": "varchar", "year":
"int64"}`): top-level metadata keys also kept in scalar fields of their own, which a filter reads
as fast as Milvus reads a column, where the JSON `metadata` field is parsed row by row (150 ns a
row against 33 ns for an INT64 field on Milvus 2.3; docs/images.md).

The metadata stays whole in the JSON field: every read returns it as before, and any part of a
filter this module does not rewrite still reads the JSON, so the answers cannot differ. A
declared key is written to two fields: `field_<key>` (its value, of the declared type) and
`has_<key>` (whether the item holds it). Two, because Milvus 2.3 (the PyPI server) has no
nullable fields: an item without the key, or with JSON null, holds the type's zero there and
`has_<key> == false`, so every rewritten condition is true or false on every item (never
unknown), and `not`, `and`, `or` keep Milvus' two-valued reading of the JSON form.

A value of another type than the declared one cannot be kept in the field and is refused at
insert (`scalar_values`), in one line naming the key and the type: an int64 takes integers, a
double numbers (integers within ±2^53, where a double is exact), a varchar strings, a bool
booleans. Missing keys and null are taken (has_<key> false).

`scalar_filter` rewrites each condition on a declared key to the fields, with Milvus' rules for
the JSON form (tests/support/milvus_rules.py): a comparison between values of different kinds is
false (`!=`: true), on a missing key or null false (`!=`, `not in`: true), `like` matches strings
only. What it does not rewrite keeps the JSON form, exact by construction: json_contains, nested
keys (`metadata["k"]["x"]`), an order on booleans, a non-integer literal against an int64 field.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from accelkit.images.settings.filters import LONG_CHAIN, Literal, joined, parse

FIELD_TYPES = ("int64", "double", "varchar", "bool")
TYPE_ALIASES = {
    "int": "int64",
    "int64": "int64",
    "float": "double",
    "double": "double",
    "varchar": "varchar",
    "string": "varchar",
    "str": "varchar",
    "bool": "bool",
    "boolean": "bool",
}
MAX_FIELDS = 16
VALUE_PREFIX, PRESENCE_PREFIX = "field_", "has_"
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_KIND = {"int64": "number", "double": "number", "varchar": "string", "bool": "bool"}
_ZERO: dict[str, Any] = {"int64": 0, "double": 0.0, "varchar": "", "bool": False}
NEVER, ALWAYS = 'id == ""', 'id != ""'  # ids are never empty; no `not` (Lite 2.5 refuses it)


def check_fields(value: Any) -> dict[str, str]:
    """`store.fields` as {key: type} with each type's canonical name, or `ValueError` naming the
    entry and the rule."""
    if value is None:
        return {}
    if isinstance(value, str):  # an environment variable: JSON, or "album:varchar,year:int64"
        text = value.strip()
        try:
            value = (
                json.loads(text, object_pairs_hook=_unique)
                if text.startswith(("{", "["))
                else _unique([pair.split(":") for pair in _pairs(text)])
            )
        except _DuplicateKey as exc:
            raise ValueError(f"declares {exc} twice; declare each key once") from None
        except ValueError:
            raise ValueError(
                'must be JSON such as {"album": "varchar"}, or album:varchar,year:int64'
            ) from None
    if not isinstance(value, Mapping):
        raise ValueError('must map metadata keys to types, as in {"album": "varchar"}')
    if len(value) > MAX_FIELDS:
        raise ValueError(f"declares {len(value)} fields; at most {MAX_FIELDS}")
    fields = {}
    for key, kind in value.items():
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise ValueError(
                f"key {key!r}: declare top-level metadata keys of 1-64 letters, digits and"
                " underscores, starting with a letter or _"
            )
        canonical = TYPE_ALIASES.get(str(kind).strip().lower())
        if canonical is None:
            raise ValueError(
                f"{key}: type {kind!r} is not one of {', '.join(FIELD_TYPES)} (or int, float,"
                " string)"
            )
        fields[key] = canonical
    return fields


class _DuplicateKey(ValueError):
    pass


def _pairs(text: str) -> list[str]:
    """ "album:varchar,year:int64" as its "key:type" parts."""
    pairs = [part for part in text.split(",") if part.strip()]
    if any(part.count(":") != 1 for part in pairs):
        raise ValueError(text)
    return pairs


def _unique(pairs) -> dict:
    """Key-type pairs as a dict, refusing a key given twice (which one was meant?)."""
    fields: dict = {}
    for key, kind in pairs:
        key = key.strip() if isinstance(key, str) else key
        if key in fields:
            raise _DuplicateKey(json.dumps(key))
        fields[key] = kind.strip() if isinstance(kind, str) else kind
    return fields


def value_field(key: str) -> str:
    return VALUE_PREFIX + key


def presence_field(key: str) -> str:
    return PRESENCE_PREFIX + key


def declared_from_schema(schema_fields: list[dict[str, Any]]) -> dict[str, str]:
    """The declaration read back from a collection's fields (pymilvus' `describe_collection`)."""
    kinds = {f["name"]: str(getattr(f["type"], "name", f["type"])).lower() for f in schema_fields}
    return {
        name.removeprefix(VALUE_PREFIX): {"float": "double"}.get(kind, kind)
        for name, kind in kinds.items()
        if name.startswith(VALUE_PREFIX)
        and presence_field(name.removeprefix(VALUE_PREFIX)) in kinds
    }


def _kind(value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return None


def _storable(kind: str, value: Any) -> bool:
    if kind == "int64":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "double":
        if isinstance(value, int) and not isinstance(value, bool):
            return abs(value) <= 2**53
        return isinstance(value, float)
    return _kind(value) == _KIND[kind]


_HINT = {
    "int64": "an integer",
    "double": "a number (an integer within ±2^53)",
    "varchar": "a string",
    "bool": "true or false",
}


def unstorable(fields: Mapping[str, str], metadata: Mapping[str, Any]) -> tuple[str, str] | None:
    """(the key, why) where `metadata` cannot be kept under the declaration `fields` (its first
    declared key holding a value of another type, shown as JSON writes it), or None."""
    for key, kind in fields.items():
        value = metadata.get(key)
        if value is not None and not _storable(kind, value):
            written = json.dumps(value, ensure_ascii=False, default=str)  # as the user sent it
            shown = written if len(written) <= 30 else written[:27] + "..."
            return key, (
                f'key "{key}" holds {shown}, which its declared field ({key}: {kind},'
                " store.fields) cannot store"
            )
    return None


def scalar_values(fields: Mapping[str, str], metadata: Mapping[str, Any], where: str) -> dict:
    """The scalar fields of one item's metadata, or `ValueError` naming the key, the value and
    the declared type where the value cannot be kept there."""
    problem = unstorable(fields, metadata)
    if problem is not None:
        key, why = problem
        raise ValueError(f"{where}: {why}; send {_HINT[fields[key]]}, null or no {key}")
    row: dict[str, Any] = {}
    for key, kind in fields.items():
        value = metadata.get(key)
        present = value is not None
        row[value_field(key)] = (
            (float(value) if kind == "double" else value) if present else _ZERO[kind]
        )
        row[presence_field(key)] = present
    return row


def _text(node: Any) -> str:
    """A value or list as written."""
    if isinstance(node, Literal):
        return node.text
    return "[" + ", ".join(_text(v) for v in node) + "]"


def _declared_key(field: str, fields: Mapping[str, str]) -> str | None:
    found = re.fullmatch(r'metadata\["([A-Za-z_][A-Za-z0-9_]*)"\]', field) or re.fullmatch(
        r"metadata\['([A-Za-z_][A-Za-z0-9_]*)'\]", field
    )
    return found.group(1) if found and found.group(1) in fields else None


def _scalar(kind: str, value: Any) -> str | None:
    """`value` (a literal) as the declared field's literal, or None where no stored value of
    that type can equal it (another kind, a list) or it is a non-integer against an int64."""
    if not isinstance(value, Literal) or _kind(value.value) != _KIND[kind]:
        return None
    number = value.value
    if kind == "int64" and isinstance(number, float):
        return str(int(number)) if number.is_integer() else None
    if kind == "double" and isinstance(number, int):
        return repr(float(number))
    return value.text


def _condition(node: tuple, key: str, kind: str) -> str | None:
    """One condition on a declared key as the fields read it (None: keep the JSON form)."""
    value_name, has = value_field(key), presence_field(key)
    op = node[0]
    if op == "cmp":
        _, _, compare, value = node
        if _kind(getattr(value, "value", None)) != _KIND[kind] or not isinstance(value, Literal):
            return ALWAYS if compare == "!=" else NEVER  # across kinds: false, != true
        written = _scalar(kind, value)
        if written is None or (kind == "bool" and compare not in ("==", "!=")):
            return None  # a non-integer against int64, an order on booleans: the JSON form
        if compare == "!=":
            return f"({has} == false or {value_name} != {written})"
        return f"({has} == true and {value_name} {compare} {written})"
    if op in ("in", "not in"):
        if any(
            isinstance(v, Literal) and _kind(v.value) == _KIND[kind] and _scalar(kind, v) is None
            for v in node[2]
        ):
            return None
        written = [w for w in (_scalar(kind, v) for v in node[2]) if w is not None]
        if not written:
            return NEVER if op == "in" else ALWAYS
        listed = "[" + ", ".join(written) + "]"
        if op == "in":
            return f"({has} == true and {value_name} in {listed})"
        return f"({has} == false or {value_name} not in {listed})"
    if op == "like":
        if kind != "varchar":
            return NEVER  # like matches strings only
        return f"({has} == true and {value_name} like {node[2].text})"
    return None  # json_contains on a scalar: the JSON form (false) as written


def _longest_chain(node: tuple) -> int:
    if node[0] in ("and", "or"):
        return max(len(node) - 1, *(_longest_chain(part) for part in node[1:]))
    return _longest_chain(node[1]) if node[0] == "not" else 1


def _rewrite(node: tuple, fields: Mapping[str, str]) -> str:
    op = node[0]
    if op in ("and", "or"):
        return joined(op, [_rewrite(part, fields) for part in node[1:]])
    if op == "not":
        return f"not ({_rewrite(node[1], fields)})"
    field = node[2] if op == "call" else node[1]
    key = _declared_key(field, fields)
    rewritten = _condition(node, key, fields[key]) if key is not None else None
    if rewritten is not None:
        return rewritten
    if op == "cmp":
        return f"{node[1]} {node[2]} {_text(node[3])}"
    if op in ("in", "not in"):
        return f"{node[1]} {op} {_text(node[2])}"
    if op == "like":
        return f"{node[1]} like {node[2].text}"
    return f"{node[1]}({node[2]}, {_text(node[3])})"


def uses_fields(expr: str, fields: Mapping[str, str]) -> bool:
    """Whether `expr` (already checked) names a declared key at the top level."""
    return any(
        re.search(rf"""metadata\[["']{re.escape(key)}["']\](?!\[)""", expr) for key in fields
    )


def scalar_filter(expr: str, fields: Mapping[str, str]) -> str:
    """`expr` (already checked) as the engine takes it: each condition on a declared key
    rewritten to its scalar fields, selecting the items the JSON form selects, and an and/or
    chain of more than `LONG_CHAIN` conditions as a balanced tree; else unchanged."""
    declared = bool(fields) and uses_fields(expr, fields)
    tree = parse(expr, max_values=2**31)
    if not declared and _longest_chain(tree) <= LONG_CHAIN:
        return expr
    return _rewrite(tree, fields if declared else {})
