"""Filter expressions, checked before Milvus sees them: a strict subset of Milvus' grammar that
must be read as one expression from the first character to the last.

Why a parser of our own: Milvus (2.3 and Lite 2.5) parses a filter as "an expression" and
silently ignores whatever follows the first complete one. Found by attacking our own service:
`id != "zzz" (metadata["tag"] == "drop")` and `metadata["n"] >= 0 AND metadata["tag"] == "drop"`
(upper-case AND is an identifier there) both filtered on their first half only, and a delete by
either emptied the collection. `id like 1` killed the Milvus Lite engine until restart, and
`{placeholders}` made its parser retry until the call timed out.

So a filter passes only if every token belongs to this grammar and the whole text is consumed:

    expr       := and ("or" | "||") and ...
    and        := comparison (("and" | "&&") comparison)*
    comparison := sum [ ("==" | "!=" | "<" | "<=" | ">" | ">=") sum | ["not"] "in" list ]
    sum        := product (("+" | "-") product)*
    product    := unary (("*" | "/" | "%") unary)*
    unary      := ("+" | "-") unary | ("not" | "!") "(" expr ")" | atom
    atom       := NUMBER | STRING | "true" | "false" | list | "(" expr ")"
                | field ["like" STRING] | FUNCTION "(" expr "," expr ")"
    field      := "id" | METADATA
    list       := "[" [expr ("," expr)*] "]"

It is a strict subset of Milvus' `Plan.g4` with the same precedence wherever both accept a
sentence, and it leaves out what reads differently there or is a trap: `not` only before
parentheses (Milvus binds `not a == b` as `(not a) == b`), one comparison per operand (no
`a < b < c`), no `**`, keywords in lower case (Milvus 2.3 reads `AND` as a field name), `like`
only between a field and a string (anything else killed the Lite engine). METADATA is one
token, as Milvus lexes it: `metadata["key"]` or `metadata["a"][0]` with no spaces. Numbers are
decimal without leading zeros (Milvus lexes `08` as `0` followed by `8`), integers within int64;
strings are single- or double-quoted with backslash escapes and no raw line breaks. FUNCTION is
json_contains, json_contains_all or json_contains_any, with two arguments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FUNCTIONS = ("json_contains", "json_contains_all", "json_contains_any")
KEYWORDS = ("and", "or", "not", "in", "like", "true", "false")
_STRING = r"""(?:"(?:[^"\\\r\n]|\\[^\r\n])*"|'(?:[^'\\\r\n]|\\[^\r\n])*')"""
_TOKEN = re.compile(
    rf"""
    (?P<space>[ \t\r\n]+)
  | (?P<string>{_STRING})
  | (?P<json>metadata(?:\[(?:{_STRING}|0|[1-9][0-9]*)\])+)
  | (?P<number>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|0|[1-9][0-9]*)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>==|!=|<=|>=|&&|\|\||[-+*/%<>!()\[\],])
    """,
    re.VERBOSE,
)
_COMPARE = ("==", "!=", "<", "<=", ">", ">=")


class FilterSyntaxError(ValueError):
    """Why a filter is not one expression of the grammar above (with the character position)."""


@dataclass(frozen=True)
class Token:
    kind: str  # string, number, name, op, end
    text: str
    position: int  # 1-based character


def tokenize(expr: str) -> list[Token]:
    tokens, position = [], 0
    while position < len(expr):
        found = _TOKEN.match(expr, position)
        if found is None:
            ch = expr[position]
            if ch in "\"'":
                raise FilterSyntaxError(
                    f"the string at character {position + 1} is never closed (or holds a line break)"
                )
            if expr.startswith("metadata", position):
                raise FilterSyntaxError(
                    f'metadata at character {position + 1}: write keys as metadata["key"], '
                    "with no spaces and a quoted key or a plain index"
                )
            raise FilterSyntaxError(f"{ch!r} at character {position + 1} is not part of a filter")
        kind = found.lastgroup
        if kind == "number" and found.end() < len(expr) and expr[found.end()].isdigit():
            raise FilterSyntaxError(
                f"the number at character {position + 1} has a leading zero; write it without"
            )
        if kind != "space":
            tokens.append(Token(kind, found.group(), position + 1))
        position = found.end()
    tokens.append(Token("end", "", len(expr) + 1))
    return tokens


class _Parser:
    """Recursive descent over the grammar in the module docstring; `whole()` or an error."""

    def __init__(self, tokens: list[Token]):
        self.tokens, self.at = tokens, 0

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

    def whole(self) -> None:
        self.expr()
        if self.token.kind != "end":
            raise self._fail("the end of the filter, or and/or between two conditions")

    def expr(self) -> None:
        self._and()
        while self._is("or", "||"):
            self.at += 1
            self._and()

    def _and(self) -> None:
        self._comparison()
        while self._is("and", "&&"):
            self.at += 1
            self._comparison()

    def _comparison(self) -> None:
        self._sum()
        if self._is("==", "!=", "<", "<=", ">", ">="):
            self.at += 1
            self._sum()
        elif self._is("in") or (self._is("not") and self.tokens[self.at + 1].text == "in"):
            self.at += 2 if self._is("not") else 1
            self._list()

    def _sum(self) -> None:
        self._product()
        while self._is("+", "-"):
            self.at += 1
            self._product()

    def _product(self) -> None:
        self._unary()
        while self._is("*", "/", "%"):
            self.at += 1
            self._unary()

    def _unary(self) -> None:
        if self._is("+", "-"):
            self.at += 1
            self._unary()
        elif self._is("not", "!"):
            self.at += 1
            if not self._is("("):
                raise self._fail("'(' after not: write not (condition)")
            self._atom()
        else:
            self._atom()

    def _atom(self) -> None:
        token = self.token
        if token.kind == "number":
            if token.text.isdigit() and int(token.text) >= 2**63:
                raise FilterSyntaxError(
                    f"the number at character {token.position} is beyond 64-bit integers"
                )
            self.at += 1
        elif token.kind == "string":
            self.at += 1
        elif token.kind == "json" or (token.kind == "name" and token.text == "id"):
            self.at += 1
            if self._is("like"):
                self.at += 1
                if self.token.kind != "string":
                    raise self._fail("a quoted pattern after like")
                self.at += 1
        elif self._is("("):
            self.at += 1
            self.expr()
            self._take(")")
        elif self._is("["):
            self._list()
        elif token.kind == "name":
            self._name(token)
        else:
            raise self._fail("a value, a field or '('")

    def _name(self, token: Token) -> None:
        if token.text in ("true", "false"):
            self.at += 1
        elif token.text in FUNCTIONS:
            self.at += 1
            self._take("(")
            self.expr()
            self._take(",")
            self.expr()
            self._take(")")
        elif token.text.lower() in KEYWORDS or token.text.lower() in FUNCTIONS:
            raise FilterSyntaxError(
                f"{token.text!r} at character {token.position}: write keywords and functions in"
                " lower case (and, or, not, in, like, true, false, json_contains)"
            )
        elif token.text == "metadata":
            raise FilterSyntaxError(
                f'metadata at character {token.position}: name a key, as in metadata["album"]'
            )
        else:
            raise FilterSyntaxError(
                f"{token.text[:30]!r} at character {token.position} is not a field; the fields are "
                'id and metadata["key"] (functions: ' + ", ".join(FUNCTIONS) + ")"
            )

    def _list(self) -> None:
        self._take("[")
        if not self._is("]"):
            self.expr()
            while self._is(","):
                self.at += 1
                self.expr()
        self._take("]")


def check_syntax(expr: str) -> None:
    """Raise `FilterSyntaxError` unless `expr` is one whole expression of the grammar above."""
    try:
        _Parser(tokenize(expr)).whole()
    except RecursionError:
        raise FilterSyntaxError("it is nested too deeply") from None
