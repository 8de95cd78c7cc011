"""Filter expressions, checked before Milvus sees them: a small, strict subset of Milvus' grammar
that Milvus must read exactly as written, from the first character to the last.

Why a parser of our own. Three rounds of attacks on our own service found that Milvus (2.3, and
Lite 2.5 above all) reads many filters differently from their text, and says nothing:
* it parses "an expression" and drops whatever follows the first complete one:
  `id != "zzz" (metadata["tag"] == "drop")`, `… AND …` (upper-case AND is a field name to 2.3)
  and `… and["k"] == …` (a word followed by `[` is lexed as a JSON field) each filtered on their
  first half, so a delete by any of them emptied the collection;
* its lexer skips an unknown string escape together with the text before it, so
  `id == "\\z'd0' or id != " or id == "nothing"` matched everything; known escapes (`\\x41`, `\\n`)
  are not decoded either: they match the letters after the backslash;
* `08` is lexed as `0` then `8`; integer arithmetic on constants wraps at 64 bits, and a
  division by zero (`1 / 0`, `1 % 0`) or `id like 1` kills the Lite engine until a restart;
* `like` is a prefix match whatever the pattern says (`"d_"` deleted d0, d10 and d20), and keys
  holding `][` or quotes are split or missed.

A fourth round found Lite flipping `"i3" == id` into `id != "i3"`, dying on a constant before
`in`, wrapping array indexes modulo 2^64, matching nothing with `like "%"`, and comparing long
numbers as rounded doubles. So a filter passes only if every token belongs to this grammar and
the whole text is consumed:

    expr      := and (("or" | "||") and)*
    and       := condition (("and" | "&&") condition)*
    condition := "(" expr ")" | ("not" | "!") "(" expr ")"
               | field ("==" | "!=" | "<" | "<=" | ">" | ">=") value
               | field ["not"] "in" list
               | field "like" PREFIX
               | FUNCTION "(" field "," value ")"
    value     := ["-"] NUMBER | STRING | "true" | "false" | list
    list      := "[" [value ("," value)*] "]"
    field     := "id" | METADATA

A condition always reads field, operator, literal. Lexical rules, each closing one of the gaps
above: keywords (`and or not in like true false`) are lower case and never directly followed by
`[`; METADATA is one token as Milvus lexes it, `metadata["key"]` or `metadata["a"]["b"]`, keys
without quotes, brackets, backslashes or control characters; strings are single- or double-quoted, with no escapes but `\\\\`, `\\"` and `\\'`
and no line breaks; PREFIX is a string of at least one plain character ending in one `%`
(`"2026-%"`); numbers are decimal without leading zeros, integers within ±2^53 (where a double is
exact), other numbers exactly a double's shortest decimal (no more digits than a double holds)
and below 2^53 in magnitude (`9007199254740992.0` matched 2^53 + 1 on Milvus Lite 2.5 and the
server, not on Lite 3).
FUNCTION is json_contains, json_contains_all or json_contains_any. A list holds at most
`MAX_LIST_VALUES` values (the service's `server.max_filter_values`).

**No integer steps below the first.** Milvus turns `metadata["a"][0]` into the JSON pointer
`/a/0`, which reads element 0 of an array *and* the key "0" of an object, and so does
`metadata["a"]["0"]`: a filter on an array's first element also deleted `{"a": {"0": "x"}}`, on
Milvus Lite and on the server. The grammar cannot know which of the two a stored value is, so a
step after the first that is an integer (`[0]`, `[12]`, `["0"]`, `["12"]`) is refused; other keys
that look numeric ("-1", "01", "+1", "1.0") are only ever object keys to Milvus and pass. The first
step may be an integer-looking key when quoted (`metadata["2024"]`): metadata is always a JSON
object (every write checks it), so it names a key and nothing else. Arrays are filtered with
json_contains(metadata["tags"], "a") and its _all/_any forms.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

FUNCTIONS = ("json_contains", "json_contains_all", "json_contains_any")
KEYWORDS = ("and", "or", "not", "in", "like", "true", "false")
_ESCAPE = r"\\[\\\"']"  # the only escapes Milvus reads as written
_STRING = rf"""(?:"(?:[^"\\\r\n]|{_ESCAPE})*"|'(?:[^'\\\r\n]|{_ESCAPE})*')"""
_KEY = r"""(?:"[^"'\\\[\]\x00-\x1f\x7f]+"|'[^"'\\\[\]\x00-\x1f\x7f]+')"""
_INDEX_LIMIT = 6  # digits: Milvus Lite wraps longer integers modulo 2^64
MAX_LIST_VALUES = 256  # values in one list: `id in [...]` of thousands of ids once ran for minutes
_TOKEN = re.compile(
    rf"""
    (?P<space>[ \t\r\n]+)
  | (?P<string>{_STRING})
  | (?P<json>metadata(?:\[(?:{_KEY}|0|[1-9][0-9]*)\])+)
  | (?P<number>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|0|[1-9][0-9]*)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>==|!=|<=|>=|&&|\|\||[-<>!()\[\],])
    """,
    re.VERBOSE,
)
_PREFIX = re.compile(r"""(?:"[^"%_\\]+%"|'[^'%_\\]+%')""")
_INTEGER_STEP = re.compile(r"0|[1-9][0-9]*")  # what Milvus may read as an array index
_SUBSCRIPT = re.compile(r"""\[(?:"([^"]*)"|'([^']*)'|([0-9]+))\]""")
_COMPARE = ("==", "!=", "<", "<=", ">", ">=")


class FilterSyntaxError(ValueError):
    """Why a filter is not one expression of the grammar above (with the character position)."""


class FilterListTooLong(FilterSyntaxError):
    """A list in the filter holds more values than allowed."""


@dataclass(frozen=True)
class Literal:
    """A literal as written (`text`, a negative number with its sign) and its JSON value."""

    text: str

    @property
    def value(self) -> bool | int | float | str:
        if self.text in ("true", "false"):
            return self.text == "true"
        if self.text[0] in "\"'":
            return re.sub(r"\\(.)", r"\1", self.text[1:-1])
        number = self.text.replace(" ", "")
        return int(number) if re.fullmatch(r"-?[0-9]+", number) else float(number)


@dataclass(frozen=True)
class Token:
    kind: str  # string, json, number, name, op, end
    text: str
    position: int  # 1-based character


def _lex_error(expr: str, position: int) -> FilterSyntaxError:
    ch, where = expr[position], f"at character {position + 1}"
    if ch in "\"'":
        return FilterSyntaxError(
            f"the string {where} is never closed, holds a line break, or has an escape other than"
            " \\\\, \\\" or \\'"
        )
    if expr.startswith("metadata", position):
        return FilterSyntaxError(
            f'metadata {where}: write keys as metadata["key"], with no spaces, and keys without'
            " quotes, brackets or backslashes"
        )
    if ch in "+*/%":
        return FilterSyntaxError(f"{ch!r} {where}: filters have no arithmetic")
    return FilterSyntaxError(f"{ch!r} {where} is not part of a filter")


def _check_number(text: str, position: int) -> None:
    """Numbers Milvus compares as written: integers within ±2^53 (beyond, it compares them as
    rounded doubles), other numbers exactly a double's shortest decimal (5.0000000000000001
    matched 5, 1e-400 matched 0), and below 2^53 in magnitude (beyond, a double cannot tell
    neighbouring integers apart and the engines differ)."""
    where = f"the number at character {position}"
    if text.isdigit():
        if int(text) > 2**53:
            raise FilterSyntaxError(f"{where} is beyond 2^53, where Milvus compares it rounded")
        return
    value = float(text)
    if not math.isfinite(value) or Decimal(text) != Decimal(repr(value)):
        raise FilterSyntaxError(
            f"{where} is not exactly a double; write it with at most the digits a double holds"
            f" (e.g. {value!r})"
        )
    if math.isfinite(value) and abs(value) >= 2**53:
        raise FilterSyntaxError(
            f"the number {text[:30]} at character {position} is not an integer and lies beyond"
            " 2^53, where a double cannot tell neighbouring integers apart (the engines disagree"
            " on what it matches); write an integer within ±2^53, or a range (>= and <)"
        )


def _check_field(text: str, position: int) -> None:
    """Integer steps: none below the first (Milvus reads them as an array index and as an object
    key alike), and the first only as a quoted key of at most 6 digits (Milvus Lite wraps longer
    integers modulo 2^64)."""
    for step, (quoted, single, index) in enumerate(_SUBSCRIPT.findall(text[len("metadata") :])):
        key = quoted or single or index
        if not _INTEGER_STEP.fullmatch(key):
            continue
        shown = f"[{key[:20]}]" if index else f'["{key[:20]}"]'
        where = f"the step {shown} in the field at character {position}"
        if step > 0:
            raise FilterSyntaxError(
                f"{where}: Milvus reads an integer step as an array index and as an object key"
                " alike, so it would also match an object with that key; filter arrays with"
                ' json_contains(metadata["key"], value), and name objects\' keys with non-integers'
            )
        if index:
            raise FilterSyntaxError(
                f'{where}: metadata is an object; quote the key, as in metadata["{key[:20]}"]'
            )
        if len(key) > _INDEX_LIMIT:
            raise FilterSyntaxError(f"{where} has more than {_INDEX_LIMIT} digits")


def tokenize(expr: str) -> list[Token]:
    tokens, position = [], 0
    while position < len(expr):
        found = _TOKEN.match(expr, position)
        if found is None:
            raise _lex_error(expr, position)
        kind, end = str(found.lastgroup), found.end()  # each alternative of _TOKEN is named
        following = expr[end : end + 1]
        if kind == "number" and following.isdigit():
            raise FilterSyntaxError(
                f"the number at character {position + 1} has a leading zero; write it without"
            )
        if kind == "name" and found.group() == "metadata" and following == "[":
            raise _lex_error(expr, position)  # a key this grammar does not take
        if kind == "name" and following == "[":  # Milvus lexes `and[...]` as one field name
            raise FilterSyntaxError(
                f"{found.group()!r} at character {position + 1} is directly followed by '[';"
                " put a space between them"
            )
        if kind == "number":
            _check_number(found.group(), position + 1)
        if kind == "json":
            _check_field(found.group(), position + 1)
        if kind != "space":
            tokens.append(Token(kind, found.group(), position + 1))
        position = end
    tokens.append(Token("end", "", len(expr) + 1))
    return tokens


class _Parser:
    """Recursive descent over the grammar in the module docstring; `whole()` or an error."""

    def __init__(self, tokens: list[Token], max_values: int = MAX_LIST_VALUES):
        self.tokens, self.at, self.max_values = tokens, 0, max_values

    @property
    def token(self) -> Token:
        return self.tokens[self.at]

    def _fail(self, what: str) -> FilterSyntaxError:
        token = self.token
        shown = "the end" if token.kind == "end" else f"{token.text[:20]!r}"
        return FilterSyntaxError(f"expected {what} at character {token.position}, found {shown}")

    def _is(self, *texts: str) -> bool:
        return self.token.kind in ("op", "name") and self.token.text in texts

    def _take(self, *texts: str) -> None:
        if not self._is(*texts):
            raise self._fail(" or ".join(repr(t) for t in texts))
        self.at += 1

    def _is_field(self) -> bool:
        return self.token.kind == "json" or (self.token.kind == "name" and self.token.text == "id")

    def whole(self) -> tuple:
        tree = self.expr()
        if self.token.kind != "end":
            raise self._fail("the end of the filter, or and/or between two conditions")
        return tree

    def expr(self) -> tuple:
        parts = [self._and()]
        while self._is("or", "||"):
            self.at += 1
            parts.append(self._and())
        return parts[0] if len(parts) == 1 else ("or", *parts)

    def _and(self) -> tuple:
        parts = [self._condition()]
        while self._is("and", "&&"):
            self.at += 1
            parts.append(self._condition())
        return parts[0] if len(parts) == 1 else ("and", *parts)

    def _condition(self) -> tuple:
        negated = self._is("not", "!")
        if negated:
            self.at += 1
            if not self._is("("):
                raise self._fail("'(' after not: write not (condition)")
        if self._is("("):
            self.at += 1
            inner = self.expr()
            self._take(")")
            return ("not", inner) if negated else inner
        if self.token.kind == "name" and self.token.text in FUNCTIONS:
            name = self.token.text
            self.at += 1
            self._take("(")
            field = self._field(f'a field first, as in {FUNCTIONS[0]}(metadata["tags"], "a")')
            self._take(",")
            value = self._value()
            self._take(")")
            return ("call", name, field, value)
        field = self._field(
            'a field first: id or metadata["key"] (then the operator, then the value)'
        )
        if self._is("==", "!=", "<", "<=", ">", ">="):
            op = self.token.text
            self.at += 1
            return ("cmp", field, op, self._value())
        if self._is("in") or (self._is("not") and self.tokens[self.at + 1].text == "in"):
            negated = self._is("not")
            self.at += 2 if negated else 1
            return ("not in" if negated else "in", field, self._list())
        if self._is("like"):
            self.at += 1
            if not (self.token.kind == "string" and _PREFIX.fullmatch(self.token.text)):
                raise self._fail('a prefix pattern after like, as in "2026-%" (no _ or other %)')
            self.at += 1
            return ("like", field, Literal(self.tokens[self.at - 1].text))
        raise self._fail("a comparison (== != < <= > >=), in, not in or like")

    def _field(self, what: str) -> str:
        if self._is_field():
            self.at += 1
            return self.tokens[self.at - 1].text
        if self.token.kind == "name" and self.token.text not in ("true", "false"):
            raise self._unknown(self.token)
        raise self._fail(what)

    def _value(self) -> Literal | list:
        sign = ""
        if self._is("-"):
            self.at += 1
            sign = "-"
            if self.token.kind != "number":
                raise self._fail("a number after '-'")
        if self.token.kind in ("number", "string") or self._is("true", "false"):
            self.at += 1
            return Literal(sign + self.tokens[self.at - 1].text)
        elif self._is("["):
            return self._list()
        elif self.token.kind == "name" and self.token.text != "id":
            raise self._unknown(self.token)
        else:
            raise self._fail("a value: a number, a quoted string, true, false or a [list]")

    def _unknown(self, token: Token) -> FilterSyntaxError:
        if token.text.lower() in KEYWORDS or token.text.lower() in FUNCTIONS:
            return FilterSyntaxError(
                f"{token.text!r} at character {token.position}: write keywords and functions in"
                " lower case, in their place (and, or, not, in, like, true, false, json_contains)"
            )
        if token.text == "metadata":
            return FilterSyntaxError(
                f'metadata at character {token.position}: name a key, as in metadata["album"]'
            )
        return FilterSyntaxError(
            f"{token.text[:30]!r} at character {token.position} is not a field; the fields are "
            'id and metadata["key"] (functions: ' + ", ".join(FUNCTIONS) + ")"
        )

    def _list(self) -> list:
        start = self.token.position
        self._take("[")
        values = []
        if not self._is("]"):
            values.append(self._value())
            count = 1
            while self._is(","):
                count += 1
                if count > self.max_values:
                    raise FilterListTooLong(
                        f"the list at character {start} holds more than {self.max_values:,}"
                        " values, the limit for one list"
                    )
                self.at += 1
                values.append(self._value())
        self._take("]")
        return values


def check_syntax(expr: str, max_values: int = MAX_LIST_VALUES) -> None:
    """Raise `FilterSyntaxError` unless `expr` is one whole expression of the grammar above whose
    lists hold at most `max_values` values each."""
    parse(expr, max_values)


def parse(expr: str, max_values: int = MAX_LIST_VALUES) -> tuple:
    """The tree of a filter of the grammar (or `FilterSyntaxError`): ("or"|"and", *parts),
    ("not", part), ("cmp", field, op, value), ("in"|"not in", field, [values]),
    ("like", field, pattern), ("call", function, field, value); a field is its text, a value a
    `Literal` or a list of values."""
    try:
        return _Parser(tokenize(expr), max_values).whole()
    except RecursionError:
        raise FilterSyntaxError("it is nested too deeply") from None


class NotOnLite3(ValueError):
    """A filter Milvus Lite 3 would read otherwise than Milvus does: why, and the way on."""


_BOOLS_AS_NUMBERS = (
    "Milvus Lite 3 compares JSON values as Python does, where true is 1 and false is 0, so it"
    " cannot compare true/false or 0/1 with a key that holds both booleans and the numbers 0 or 1,"
    ' nor inside an array, nor order booleans (metadata["k"] == 1 would also match'
    ' {"k": true}); keep one kind per key (booleans or numbers), or use Milvus Lite 2.5 or a'
    " server"
)
_NEGATED_ORDER = (
    "Milvus Lite 3 reads not (a < b) as false where the key is missing or holds another type"
    ' (Milvus: true); on Lite 3 write the opposite comparison (not (metadata["k"] < 2) as'
    ' metadata["k"] >= 2) if such items should not match, or use Milvus Lite 2.5 or a server'
)
_NESTED_LIST = (
    "Milvus Lite 3 has no comparison with a list; on Lite 3 filter arrays with"
    ' json_contains(metadata["k"], value) and its _all/_any forms'
)
_FLIP = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
_NEVER = '(id like "%" and not (id like "%"))'  # id is a string on every item
_ALWAYS = 'id like "%"'


def _order_holds(op: str, left, right) -> bool:
    return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op]


def _ambiguous(value, ordering: str | None = None) -> str | None:
    """The kind of stored value Lite 3 would confuse with this literal: "number" (0 and 1) for
    true/false, "bool" for 0 and 1 (with `ordering`: a bound that 0 or 1 satisfies); None."""
    literal = value.value
    if isinstance(literal, bool):
        return "number"
    if isinstance(literal, str):
        return None
    if ordering is None:
        return "bool" if literal in (0, 1) else None
    return "bool" if any(_order_holds(ordering, b, literal) for b in (0, 1)) else None


def _lite3_scalar(value, field: str, kinds, ordering: str | None = None) -> None:
    """Refuse a literal Lite 3 cannot compare as Milvus does with the values at `field`: a list,
    true/false where the field also holds 0 or 1 as numbers, 0 or 1 (or a bound they satisfy)
    where it also holds booleans, and any of these where `kinds` (the kinds of the values equal
    to 0 or 1 at each field, `lite3_ambiguous_fields`) was not looked up."""
    if isinstance(value, list):
        raise NotOnLite3(_NESTED_LIST)
    if ordering is not None and isinstance(value.value, bool):
        raise NotOnLite3(_BOOLS_AS_NUMBERS)
    confused = _ambiguous(value, ordering)
    if confused and (kinds is None or field not in kinds or confused in kinds[field]):
        raise NotOnLite3(_BOOLS_AS_NUMBERS)


def json_path(field: str) -> list[str]:
    """The keys of a metadata field of the grammar: `metadata["a"]["b"]` -> ["a", "b"]."""
    return [quoted or single or index for quoted, single, index in _SUBSCRIPT.findall(field)]


def lite3_ambiguous_fields(expr: str) -> list[str]:
    """The metadata fields that `expr` (already checked) compares with true/false, 0 or 1 (or a
    bound 0 or 1 satisfies): `for_lite3` needs the kinds of the values equal to 0 or 1 there."""
    fields: dict[str, None] = {}

    def walk(node: tuple) -> None:
        if node[0] in ("and", "or", "not"):
            for part in node[1:]:
                walk(part)
        elif node[0] in ("cmp", "in", "not in") and node[1] != "id":
            values = node[2] if node[0] != "cmp" else [node[3]]
            ordering = node[2] if node[0] == "cmp" and node[2] not in ("==", "!=") else None
            for value in values:
                if isinstance(value, Literal) and _ambiguous(value, ordering):
                    fields[node[1]] = None

    walk(parse(expr, max_values=2**31))
    return list(fields)


def _lite3_text(value: Literal) -> str:
    """A literal as Lite 3's parser reads it: a number not an integer written out in full
    (`.5` as 0.5, `5.` as 5.0, `1e3` as 1000.0; Lite 3 refused `.5` as unparsable), the rest as
    written. Exact: the grammar admits only a double's shortest decimal, below 2^53."""
    number = value.value
    if isinstance(number, bool) or not isinstance(number, float):
        return value.text
    text = format(Decimal(repr(number)), "f")
    return text if "." in text else f"{text}.0"


# Milvus nests its plan one level per operand of an and/or chain and refuses ~60 of them ("unsupported
# expr proto node"); a chain longer than this is sent as a balanced tree (the same answers: and,
# or are associative), log2(n) deep
LONG_CHAIN = 16


def joined(op: str, parts: list[str]) -> str:
    """`parts` joined by `op` (and, or) as a balanced tree: Milvus' plan nests once per operand."""
    if len(parts) <= 2:
        return "(" + f" {op} ".join(parts) + ")"
    mid = len(parts) // 2
    return f"({joined(op, parts[:mid])} {op} {joined(op, parts[mid:])})"


def _lite3(node: tuple, positive: bool, kinds) -> str:
    """`node` (positive) or its negation as Milvus Lite 3 must be sent it to select what Milvus
    selects: negations pushed down to the conditions, each condition true or false on every item
    (never Lite 3's "unknown", which a `not` above it would keep false)."""
    kind = node[0]
    if kind in ("and", "or"):
        joiner = kind if positive else {"and": "or", "or": "and"}[kind]
        return joined(joiner, [_lite3(part, positive, kinds) for part in node[1:]])
    if kind == "not":
        return _lite3(node[1], not positive, kinds)
    field = node[1]
    if kind == "cmp":
        op, value = node[2], node[3]
        op = op if positive else _FLIP[op]
        if field == "id":  # a string on every item: Lite 3 reads it as Milvus does
            return (
                f"{field} {op} {_lite3_text(value)}" if isinstance(value, Literal) else _fail_list()
            )
        if op in ("==", "!="):
            _lite3_scalar(value, field, kinds)
            return (
                f"{field} == {_lite3_text(value)}"
                if op == "=="
                else _not_equal(field, _lite3_text(value))
            )
        if not positive:
            raise NotOnLite3(_NEGATED_ORDER)
        _lite3_scalar(value, field, kinds, op)
        return f"{field} {op} {_lite3_text(value)}"
    if kind in ("in", "not in"):
        member = (kind == "in") == positive
        if field == "id":
            return f"{field} {'in' if member else 'not in'} [{', '.join(_lite3_text(v) for v in node[2])}]"
        for value in node[2]:
            _lite3_scalar(value, field, kinds)
        if not node[2]:
            return _NEVER if member else _ALWAYS
        if member:
            return "(" + " or ".join(f"{field} == {_lite3_text(v)}" for v in node[2]) + ")"
        return "(" + " and ".join(_not_equal(field, _lite3_text(v)) for v in node[2]) + ")"
    if kind == "like":
        condition = f"{field} like {_lite3_text(node[2])}"
        if positive:
            return condition
        return f"not ({condition})" if field == "id" else f"({field} is null or not ({condition}))"
    name, value = node[1], node[3]  # json_contains(field, value): false, never unknown, off arrays
    field = node[2]
    for element in value if isinstance(value, list) and name != FUNCTIONS[0] else [value]:
        _lite3_scalar(element, field, None)  # the elements of arrays: never looked up
    written = (
        _lite3_text(value)
        if isinstance(value, Literal)
        else f"[{', '.join(_lite3_text(v) for v in value)}]"
    )
    condition = f"{name}({field}, {written})"
    return condition if positive else f"not ({condition})"


def _not_equal(field: str, literal: str) -> str:
    return f"({field} is null or {field} != {literal})"  # null: the key missing or JSON null


def _fail_list() -> str:
    raise NotOnLite3(_NESTED_LIST)


def for_lite3(expr: str, kinds: Mapping[str, set[str]] | None = None) -> str:
    """`expr` (already checked) as Milvus Lite 3 must be sent it to select the items Milvus
    (Lite 2.5, the server) selects, or `NotOnLite3` where it cannot. Lite 3 evaluates a filter on
    JSON in Python with three-valued logic: a comparison on a missing key or JSON null, or across
    types (`"a" < 1`), is unknown, which `not` keeps unknown and the answer counts as false,
    where Milvus reads such a comparison as false and `!=`, `not in` and `not (...)` as true; and
    Python's true is 1. So negations are pushed down to the conditions (`not (a and b)` is
    `not a or not b`), a negated condition is written to be true where the key is missing or null
    (`metadata["k"] != 1` is `(metadata["k"] is null or metadata["k"] != 1)`, `not (... like p)`
    likewise), `in` becomes `==` joined by or (its parser takes `in` after `id` only), and what
    Python cannot tell apart is refused: true/false compared with a field that also holds 0 or 1
    as numbers, 0 or 1 (or bounds they satisfy) with one that also holds booleans (`kinds`: the
    kinds, "bool" or "number", of the values equal to 0 or 1 at each of the
    `lite3_ambiguous_fields`, which the store looks up first; a field not in it is refused), the
    same inside json_contains, and a negated `<`, `<=`, `>`, `>=` (unknown on a string,
    a list or an object, which no condition of Lite 3 tests for)."""
    return _lite3(parse(expr, max_values=2**31), True, kinds)
