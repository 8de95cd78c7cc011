"""One corpus of filters over metadata covering the whole JSON value domain (booleans,
integers, floats, strings, null, a missing key, lists, objects; 0/1 against false/true, 1 against
1.0, the empty string, large integers), run on every engine (Milvus Lite 2.5 here, Lite 3 in
tests/images/store/test_engines.py's pass, the Milvus server where the fixtures start one). A
search, a count and a delete by each filter select exactly the items ONE evaluator written here
names, or the engine refuses the filter in one line (only where docs/images.md says it does: Lite
2.5 refuses `not (...)`, Lite 3 the filters `filters.for_lite3` cannot write exactly) and a
delete by it removes nothing.

The evaluator follows Milvus' rules, written once in tests/support/milvus_rules.py (measured on
Lite 2.5.1 and the server 2.3)."""

import numpy as np
import pytest

from accelkit.errors import InputError
from accelkit.images.settings.config import StoreConfig
from accelkit.images.settings.filters import Literal, parse
from accelkit.images.store import FilterError, VectorStore
from accelkit.images.store.errors import FilterNotOnEngine
from tests.support.milvus_rules import (
    MISSING,
    agreed_literal,
    compare,
    contains,
    contains_all,
    like_prefix,
    member,
)
from tests.support.require import not_applicable

VALUES = {
    "true": True,
    "false": False,
    "int0": 0,
    "int1": 1,
    "float0": 0.0,
    "float1": 1.0,
    "int2": 2,
    "float25": 2.5,
    "neg": -3,
    "big": 2**53,
    "big_1": 2**53 - 1,
    "huge": 2**62,
    "str": "a",
    "str1": "1",
    "empty": "",
    "strtrue": "true",
    "null": None,
    "list": [1, 2],
    "listbool": [True],
    "liststr": ["a", "b"],
    "listempty": [],
    "object": {"x": 1},
    "objectempty": {},
}
# "k" holds every kind; "flag" only booleans (or another kind than numbers), "num" only numbers
# (or strings): Lite 3 tells true from 1 only where a key never holds both
FLAGS, NUMBERS = [True, False, MISSING, "yes", None, True], [0, 1, 2, 1.0, MISSING, "1", 0.0]
STRINGS = ["a", "b", MISSING, "", None, "ab", 3]  # "s": strings, or another kind


def item(i: int, value) -> dict:
    doc = {
        "k": value,
        "n": i,
        "flag": FLAGS[i % len(FLAGS)],
        "num": NUMBERS[i % len(NUMBERS)],
        "s": STRINGS[i % len(STRINGS)],
    }
    return {key: v for key, v in doc.items() if v is not MISSING}


ITEMS = {f"v-{name}": item(i, value) for i, (name, value) in enumerate(VALUES.items())}
ITEMS["v-missing"] = {"n": 99}

# The same corpus in a collection that declares filter fields (store.fields) for every
# key but "k", whose values of another kind than the declared one are left out (a declared field
# refuses them at insert: tests/images/store/test_declared_fields.py). Every filter runs on it
# too, judged by the same evaluator over these items.
FIELDS = {"n": "int64", "flag": "bool", "num": "double", "s": "varchar"}
KINDS = {"int64": (int,), "bool": (bool,), "double": (int, float), "varchar": (str,)}


def storable(kind: str, value) -> bool:
    return value is None or (
        isinstance(value, KINDS[kind]) and (kind == "bool" or not isinstance(value, bool))
    )


TYPED = {
    item_id: {k: v for k, v in doc.items() if k not in FIELDS or storable(FIELDS[k], v)}
    for item_id, doc in ITEMS.items()
}
COLLECTIONS = {"domain": ({}, ITEMS), "declared": (FIELDS, TYPED)}

FILTERS = [
    # chains past Milvus' plan depth (~60 operands were refused): sent as balanced trees
    " or ".join(f'metadata["k"] == {i}' for i in range(2, 72)),  # no 0/1: Lite 3 reads those
    " and ".join(f'metadata["k"] != {i}' for i in range(3, 73)),
    # one kind against another: 0/1 and false/true, 1 and 1.0
    'metadata["k"] == 1',
    'metadata["k"] == 1.0',
    'metadata["k"] == 0',
    'metadata["k"] == true',
    'metadata["k"] == false',
    'metadata["k"] != 1',
    'metadata["k"] != true',
    'metadata["k"] != false',
    'metadata["k"] == 2',
    'metadata["k"] == 2.0',
    'metadata["k"] != 2',
    'metadata["k"] == -3',
    'metadata["k"] != 2.5',
    # strings: the empty one, a number written as a string
    'metadata["k"] == "a"',
    'metadata["k"] == "1"',
    'metadata["k"] == ""',
    'metadata["k"] != "a"',
    'metadata["k"] != ""',
    'metadata["k"] == "true"',
    # order
    'metadata["k"] < 2',
    'metadata["k"] >= 0',
    'metadata["k"] > 2.4',
    'metadata["k"] <= -3',
    'metadata["k"] > 1',
    'metadata["k"] >= 2',
    'metadata["k"] < "b"',
    'metadata["k"] >= ""',
    # large integers
    'metadata["k"] == 9007199254740992',
    'metadata["k"] == 9007199254740991',
    'metadata["k"] > 9007199254740991',
    # decimal literals written otherwise than Lite 3's parser reads them (it refused `.5`)
    'metadata["k"] == 25e-1',
    'metadata["k"] != 2.50',
    'metadata["num"] < .5',
    'metadata["num"] >= 1.',
    'metadata["num"] in [.0, 2e0]',
    'metadata["num"] not in [1e0]',
    # in / not in
    'metadata["k"] in [1, 2]',
    'metadata["k"] in [2, 3]',
    'metadata["k"] not in [2, 3]',
    'metadata["k"] not in [1, 2]',
    'metadata["k"] in ["a", ""]',
    'metadata["k"] not in ["a"]',
    'metadata["k"] in [true]',
    'metadata["k"] not in [false]',
    # like
    'metadata["k"] like "a%"',
    'metadata["k"] like "t%"',
    # arrays
    'json_contains(metadata["k"], 1)',
    'json_contains(metadata["k"], 2)',
    'json_contains(metadata["k"], 2.0)',
    'json_contains(metadata["k"], true)',
    'json_contains(metadata["k"], "a")',
    'json_contains_any(metadata["k"], [2, 3])',
    'json_contains_all(metadata["k"], ["a", "b"])',
    'json_contains_all(metadata["k"], [1, 2])',
    # objects, a missing nested key
    'metadata["k"]["x"] == 1',
    'metadata["k"]["x"] == 2',
    'metadata["k"]["x"] != 2',
    'metadata["k"]["x"] != 1',
    # negations and their combinations
    'not (metadata["k"] == "a")',
    'not (metadata["k"] == 2)',
    'not (metadata["k"] == 1)',
    'not (metadata["k"] < 2)',
    'not (metadata["k"] like "a%")',
    'not (json_contains(metadata["k"], "a"))',
    'not (metadata["k"] in ["a", "1"])',
    'not (metadata["k"] not in ["a"])',
    'not (metadata["k"] != "a" and metadata["n"] > 3)',
    'not (metadata["k"] == "a" or metadata["k"] == 2)',
    'not (not (metadata["k"] != ""))',
    'metadata["k"] != "a" and metadata["n"] < 10',
    'metadata["k"] != 2 or metadata["n"] == 4',
    'metadata["nokey"] != "a"',
    'metadata["nokey"] not in ["a", "b"]',
    # keys of one kind: booleans, numbers (a delete by == false deleted more on Lite 3)
    'metadata["flag"] == false',
    'metadata["flag"] == true',
    'metadata["flag"] != true',
    'metadata["flag"] in [false]',
    'metadata["flag"] not in [true]',
    'not (metadata["flag"] == false)',
    'metadata["num"] == 1',
    'metadata["num"] == 0',
    'metadata["num"] != 1',
    'metadata["num"] < 1',
    'metadata["num"] >= 1',
    'metadata["num"] in [0, 2]',
    'metadata["num"] not in [1]',
    'metadata["flag"] == true and metadata["num"] == 1',
    'metadata["flag"] != false or metadata["num"] != 0',
    # id
    'id == "v-str"',
    'id != "v-str" and metadata["k"] == "a"',
    'id in ["v-null", "v-missing"] and metadata["k"] != "a"',
    'not (id like "v-s%")',
    # keys a collection may declare (store.fields): each kind of literal, missing keys and null
    'metadata["s"] == "a"',
    'metadata["s"] != "a"',
    'metadata["s"] < "b"',
    'metadata["s"] >= ""',
    'metadata["s"] like "a%"',
    'not (metadata["s"] like "a%")',
    'metadata["s"] in ["a", ""]',
    'metadata["s"] not in ["b", "c"]',
    'metadata["s"] == 3',
    'metadata["s"] != 3',
    'metadata["n"] == 2.0',
    'metadata["n"] < 2.5',
    'metadata["n"] in [2.0, 3.0]',
    'metadata["n"] in ["3", "4"]',
    'metadata["n"] not in [4, 5]',
    'metadata["n"] == "3"',
    'metadata["n"] like "1%"',
    'json_contains(metadata["n"], 1)',
    'metadata["n"]["x"] == 1',
    'metadata["num"] > 0 and metadata["flag"] != true',
    'metadata["s"] == "a" or metadata["k"] == "a"',
    'not (metadata["n"] >= 3 and metadata["s"] != "b")',
]

# refused on every engine before it runs, naming the literal: a non-integer
# literal beyond 2^53, where the engines disagree (milvus_rules.agreed_literal)
REFUSED = {
    'metadata["k"] == 9007199254740992.0': "9007199254740992.0",
    'metadata["k"] > 4.611686018427388e18': "4.611686018427388e18",
    'metadata["k"] in [1, -9007199254740994.0]': "9007199254740994.0",
    'json_contains(metadata["k"], 1e300)': "1e300",
    'metadata["k"] != 2.5 and metadata["n"] <= 1e16': "1e16",
}


# -- the evaluator: Milvus' rules ----------------------------------------------------------------


def value_of(literal):
    return [value_of(v) for v in literal] if isinstance(literal, list) else literal.value


def lookup(item_id: str, doc: dict, field: str):
    if field == "id":
        return item_id
    value = doc
    for key in field[len('metadata["') : -len('"]')].split('"]["'):
        if not isinstance(value, dict) or key not in value:
            return MISSING
        value = value[key]
    return value


def evaluate(node: tuple, item_id: str, doc: dict) -> bool:
    op = node[0]
    if op == "and":
        return all(evaluate(part, item_id, doc) for part in node[1:])
    if op == "or":
        return any(evaluate(part, item_id, doc) for part in node[1:])
    if op == "not":
        return not evaluate(node[1], item_id, doc)
    if op == "call":
        array, value = lookup(item_id, doc, node[2]), value_of(node[3])
        if node[1] == "json_contains":
            return contains(array, [value])
        return (contains_all if node[1] == "json_contains_all" else contains)(array, value)
    field = lookup(item_id, doc, node[1])
    if op == "cmp":
        return compare(node[2], field, value_of(node[3]))
    if op in ("in", "not in"):
        found = member(field, value_of(node[2]))
        return found if op == "in" else not found
    assert op == "like" and isinstance(node[2], Literal)
    return like_prefix(field, node[2].value[:-1])


def named(text: str, items: dict = ITEMS) -> set[str]:
    tree = parse(text)
    return {item for item, doc in items.items() if evaluate(tree, item, doc)}


def test_the_evaluator_reads_milvus_rules():
    """The rules the corpus is judged by, on the items that tell them apart."""
    assert named('metadata["k"] == 1') == {"v-int1", "v-float1"}
    assert named('metadata["k"] == false') == {"v-false"}
    assert "v-missing" in named('metadata["k"] != "a"') and "v-null" in named('metadata["k"] != 2')
    assert "v-true" in named('metadata["k"] != 1') and "v-int1" in named('metadata["k"] != true')
    assert "v-str" in named('not (metadata["k"] < 2)')


# -- the engines -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(store_settings):
    with VectorStore(StoreConfig(**store_settings)) as s:
        for collection, (fields, _) in COLLECTIONS.items():
            if fields and s.lite == 3:  # refused in one line (test_declared_fields.py)
                continue
            s.create_collection(collection, dim=4, fields=fields)
            s.upsert(collection, *corpus(collection))
        yield s


def corpus(collection: str = "domain"):
    items = COLLECTIONS[collection][1]
    ids = sorted(items)
    vectors = np.random.default_rng(56).standard_normal((len(ids), 4)).astype(np.float32)
    return ids, vectors, [items[i] for i in ids]


def refusal_allowed(store, text: str, exc: FilterError) -> bool:
    """Where docs/images.md says this engine refuses the filter."""
    if store.lite == 3:
        return isinstance(exc, FilterNotOnEngine)
    return store.lite == 2 and "not (" in text


@pytest.mark.parametrize("collection", COLLECTIONS)
@pytest.mark.parametrize("text", FILTERS)
def test_search_count_and_delete_select_what_milvus_names(store, text, collection):
    """With and without declared filter fields: the same evaluator judges both."""
    if COLLECTIONS[collection][0] and store.lite == 3:
        not_applicable("declared filter fields: Milvus Lite 3 refuses them")
    truth = named(text, COLLECTIONS[collection][1])
    try:
        hits = store.search(collection, np.ones(4, np.float32), len(ITEMS), text)[0]
    except FilterError as exc:
        message = str(exc)
        assert "\n" not in message and text in message, message
        assert refusal_allowed(store, text, exc), (text, message)
        with pytest.raises(FilterError):
            store.delete_matching(collection, text)
        assert len(store.get(collection, list(ITEMS))) == len(ITEMS)  # nothing deleted
        return
    assert {h.id for h in hits} == truth, text
    counted = store.delete_matching(collection, text)  # counts (count(*) by the filter), deletes
    left = {item["id"] for item in store.get(collection, list(ITEMS), consistency="Strong")}
    try:
        assert counted == len(truth), text
        assert left == set(ITEMS) - truth, (text, sorted(set(ITEMS) - left))
    finally:
        ids, vectors, metadata = corpus(collection)
        gone = [i for i, item in enumerate(ids) if item not in left]
        if gone:
            store.upsert(
                collection, [ids[i] for i in gone], vectors[gone], [metadata[i] for i in gone]
            )


def test_the_declared_collection_reads_its_fields_and_returns_the_metadata_whole(store):
    """The declared keys are in scalar fields of their own (a filter on them is sent to the
    fields, not to the JSON), and every read returns the metadata as it was written."""
    if store.lite == 3:
        not_applicable("declared filter fields: Milvus Lite 3 refuses them")
    assert store.describe("declared")["fields"] == FIELDS
    assert "field_s" in store._engine_filter("declared", 'metadata["s"] == "a"')
    got = {item["id"]: item["metadata"] for item in store.get("declared", list(TYPED))}
    assert got == TYPED
    hits = store.search("declared", np.ones(4, np.float32), len(TYPED), 'metadata["s"] == "a"')
    assert all(h.metadata == TYPED[h.id] for h in hits[0]) and hits[0]


def test_lite_3_refuses_only_what_it_cannot_read_as_milvus_does(store):
    """On Lite 3 a filter comparing true/false or 0/1 is answered where the key holds one kind
    (booleans, or numbers) and refused where it holds both: a delete by
    `metadata["k"] == false` (it deleted more items on Lite 3 than Milvus deletes) is
    refused, not run; every other filter of the corpus is answered."""
    if store.lite != 3:
        not_applicable("Lite 3's rewrite: this store is not on Milvus Lite 3")
    refused = set()
    for text in FILTERS:
        try:
            store.search("domain", np.ones(4, np.float32), 1, text)
        except FilterNotOnEngine:
            refused.add(text)
    ambiguous = {"true", "false", "0", "1", "1.0", "2]", "< 2", ">= 0", "[1, 2]"}
    for text in refused:  # on "k", with true/false, 0/1 or a bound that 0 or 1 satisfies, or
        on_k = 'metadata["k"]' in text and any(a in text for a in ambiguous)
        negated_order = "not (" in text and any(op in text for op in "<>")  # a negated order
        # 0/1 or true/false inside an array: Lite 3 cannot tell them apart there on any key
        in_array = text.startswith("json_contains") and any(a in text for a in ambiguous)
        assert on_k or negated_order or in_array, text
    assert 'not (metadata["k"] < 2)' in refused  # a negated order: unknown on strings in Lite 3
    with pytest.raises(FilterNotOnEngine, match="true is 1"):
        store.delete_matching("domain", 'metadata["k"] == false')
    assert len(store.get("domain", list(ITEMS))) == len(ITEMS)


@pytest.mark.parametrize("text", REFUSED)
def test_literals_the_engines_disagree_on_are_refused_naming_them(store, text):
    literal = REFUSED[text]
    assert not agreed_literal(float(literal))
    for method, args in (
        (store.search, ("domain", np.ones(4, np.float32), len(ITEMS), text)),
        (store.delete_matching, ("domain", text)),
    ):
        with pytest.raises(InputError) as caught:  # the grammar's refusal, before any engine
            method(*args)
        message = str(caught.value)
        assert "\n" not in message and literal in message and "within ±2^53" in message, message
    assert len(store.get("domain", list(ITEMS))) == len(ITEMS)  # nothing deleted


def test_the_corpus_holds_only_literals_the_engines_agree_on():
    def literals(node):
        if isinstance(node, Literal):
            yield node.value
        elif isinstance(node, (tuple, list)):
            for part in node:
                yield from literals(part)

    assert all(agreed_literal(v) for text in FILTERS for v in literals(parse(text)))
