"""The filter grammar: what it accepts is one whole Milvus expression; what Milvus would read
only in part (and so filter or delete more than written) is refused with the position."""

import pytest

from accelkit.images.settings.filters import FilterSyntaxError, check_syntax, for_lite3, tokenize
from tests.support.search import ACCEPTED

REFUSED = [
    # Milvus would read these only up to the point shown, silently
    ('id != "zzz" (metadata["tag"] == "drop")', "expected the end of the filter"),
    ('metadata["n"] >= 0 AND metadata["tag"] == "drop"', "expected the end of the filter"),
    ('id == "x" id == "q"', "expected the end of the filter"),
    ('id != "zzz") and (metadata["tag"] == "drop"', "expected the end of the filter"),
    ('id != "nothing" and["k"] == ["j"]', "directly followed by '\\['"),
    ('id in["i3"]', "directly followed by '\\['"),
    ('metadata["n"] > 0x10', "expected the end of the filter"),
    ('metadata["a"] == 08', "leading zero"),
    ('metadata ["a"] == 1', 'as in metadata\\["album"\\]'),
    ('metadata["a"] == 1; DROP TABLE c', "';' at character 19"),
    # escapes Milvus skips or does not decode
    ('id == "\\z\'d0\' or id != " or id == "nothing"', "never closed"),
    ('metadata["s"] == "\\x41"', "never closed"),
    ('metadata["s"] == "a\\nb"', "never closed"),
    ('id like "i\\_%"', "never closed"),
    # keys Milvus splits or misses
    ('metadata["x][y"] == 1', "write keys as"),
    ('metadata["k\'k"] == 1', "write keys as"),
    # arithmetic: wraps at 64 bits, and a division by zero kills Milvus Lite
    ('metadata["n"] == 1 / 0', "no arithmetic"),
    ('metadata["n"] == 1 % 0', "no arithmetic"),
    ('metadata["n"] > 9007199254740992 + 1', "no arithmetic"),
    ('metadata["a"] ** 2 == 4', "no arithmetic"),
    # read differently by Milvus, or fatal to its engine
    ('not metadata["a"] == 1', "after not"),
    ('1 < metadata["a"] < 3', "a field first"),
    ("id like 1", "prefix pattern after like"),
    ("id like true", "prefix pattern after like"),
    ('id like "d_"', "prefix pattern after like"),
    ('id like "%d%"', "prefix pattern after like"),
    ("{a}", "'\\{' at character 1"),
    ("id IN ['a']", "expected a comparison"),
    ("ID == 'a'", "is not a field"),
    ("nosuch > 1", "'nosuch' at character 1 is not a field"),
    ("exists metadata['a']", "is not a field"),
    ("metadata['a'] is null", "expected a comparison"),
    ('metadata["n"] > 99999999999999999999', "beyond 2\\^53"),
    ('json_contains(metadata["t"])', "expected ','"),
    ('json_contains("a", metadata["t"])', "a field first"),
    ('r"x" == id', "'r' at character 1 is not a field"),
    ('"a\nb" == id', "never closed"),
    ('id == "open', "never closed"),
    ("metadata[", "write keys as"),
    ("metadata['n'] == - - 1", "a number after '-'"),
    ("(" * 3000 + "id == 'a'" + ")" * 3000, "nested too deeply"),
    # a fourth round, on Milvus Lite: read the other way round, fatal, wrapped or rounded
    ('"i3" == id', "a field first"),
    ("5 == metadata['n']", "a field first"),
    ("1 in [1]", "a field first"),
    ('(id == "i3") in [true]', "expected the end of the filter"),
    ('metadata["tags"][18446744073709551616] == "x"', "as an array index and as an object key"),
    ('metadata["l"]["18446744073709551616"] == 10', "as an array index and as an object key"),
    ('metadata["18446744073709551616"] == 10', "more than 6 digits"),
    # an integer step matches an array's element and an object's key alike
    ('metadata["arr"][0] == "x"', "as an array index and as an object key"),
    ('metadata["arr"]["0"] == "x"', "as an array index and as an object key"),
    ("metadata['arr']['12'] == 'x'", "as an array index and as an object key"),
    ('metadata["a"]["b"][3] in ["x"]', "as an array index and as an object key"),
    ('json_contains(metadata["a"][1], "x")', "as an array index and as an object key"),
    ("metadata[0] == 'x'", "quote the key"),
    # every list has a cap
    ("id in [" + ", ".join(f'"i{i}"' for i in range(257)) + "]", "more than 256 values"),
    ('json_contains_any(metadata["t"], [' + ",".join("1" * 300) + "])", "more than 256 values"),
    ('id like "%"', "prefix pattern"),
    ('metadata["n"] == 9223372036854775808.0', "not exactly a double"),
    ('metadata["n"] == 9007199254740993', "beyond 2\\^53"),
    ('metadata["n"] == 1e-400', "not exactly a double"),
    ('metadata["n"] == 5.0000000000000001', "not exactly a double"),
    ("metadata['a'] == metadata['b']", "a value"),
]


@pytest.mark.parametrize("expr", ACCEPTED)
def test_whole_expressions_pass(expr):
    check_syntax(expr)


@pytest.mark.parametrize(("expr", "why"), REFUSED)
def test_partial_or_dangerous_expressions_are_refused(expr, why):
    with pytest.raises(FilterSyntaxError, match=why):
        check_syntax(expr)


def test_metadata_keys_are_one_token_as_milvus_lexes_them():
    kinds = [(t.kind, t.text) for t in tokenize('metadata["a b"]["-12"] >= -1.5e3')]
    assert kinds == [
        ("json", 'metadata["a b"]["-12"]'),
        ("op", ">="),
        ("op", "-"),
        ("number", "1.5e3"),
        ("end", ""),
    ]


def test_a_control_character_is_refused_with_its_position():
    """Found by generated filters: the refusal said "contains a control character" without
    saying where, the one refusal of a filter that named no position."""
    from accelkit.errors import InputError
    from accelkit.images.settings.schema import check_filter

    for text, position in (('\x00id == "a"', 1), ('id == "a\x1b"', 9), ("id == 'a'\x7f", 10)):
        with pytest.raises(InputError, match=rf"control character \(.+\) at character {position};"):
            check_filter(text)


@pytest.mark.parametrize(
    ("literal", "written"),
    [(".5", "0.5"), ("5.", "5.0"), ("1e3", "1000.0"), ("-2.5e-3", "-0.0025"), ("7", "7")],
)
def test_lite3_is_sent_decimal_literals_as_its_parser_reads_them(literal, written):
    """Lite 3 refused `.5` as unparsable where Lite 2.5 answered it: the
    rewrite writes each number out in full, the same value (the engines' corpus checks answers)."""
    assert for_lite3(f'metadata["s"] == {literal}') == f'metadata["s"] == {written}'
    assert float(written) == float(literal)
