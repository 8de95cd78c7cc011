"""`accelkit.images.index.ranking`: the query syntax of negative terms, the steered vector against
the score-difference form it stands for, folding and the cuts against brute force in numpy."""

import math

import numpy as np
import pytest

from accelkit.errors import InputError
from accelkit.images.index import ranking
from accelkit.images.index.ranking import Terms, parse_terms
from tests.support.search import brute_fold


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("cat -glasses", Terms("cat", ("glasses",))),
        ("red  bicycle -night -dog", Terms("red bicycle", ("night", "dog"))),
        ('cat -"red glasses" at night', Terms("cat at night", ("red glasses",))),
        ('"-5 degrees" ice', Terms("-5 degrees ice", ())),  # a literal leading minus, quoted
        ("t-shirt - dash", Terms("t-shirt - dash", ())),  # a minus inside a word or alone
        ('-"-glasses" cat', Terms("cat", ("-glasses",))),
        ("  cat  ", Terms("cat", ())),
        ('cat ""', Terms("cat", ())),
    ],
)
def test_terms_are_parsed_as_documented(text, terms):
    assert parse_terms(text) == terms


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("-glasses", "only negative terms"),
        ('cat "open', "not closed"),
        ('cat -"', "not closed"),
        ('cat -""', "empty negative"),
        ('""', "only empty quotes"),  # as negative_texts [""] is refused, not searched as ""
        ('" "  ""', "only empty quotes"),
        ('"\u200b"', "only empty quotes"),  # invisible, as check_text counts it
        ("cat " + " ".join(f"-w{i}" for i in range(17)), "at most 16"),
    ],
)
def test_bad_term_syntax_is_one_line_naming_the_field(text, says):
    with pytest.raises(InputError, match=says) as raised:
        parse_terms(text, "--text")
    assert str(raised.value).startswith("--text") and "\n" not in str(raised.value)


def test_the_steered_vector_ranks_by_similarity_minus_weighted_negatives(rng):
    stored = rng.normal(size=(200, 24))
    stored /= np.linalg.norm(stored, axis=1, keepdims=True)
    p, n1, n2 = rng.normal(size=(3, 24)) * [[3.0], [0.5], [2.0]]  # not unit: steer makes them so
    for weight in (0.5, 0.2, 1.0):
        q = ranking.steer(p, [n1, n2], weight).astype(np.float64)
        assert math.isclose(np.linalg.norm(q), 1, rel_tol=1e-6)
        unit = [v / np.linalg.norm(v) for v in (p, n1, n2)]
        difference = stored @ unit[0] - weight * (stored @ unit[1] + stored @ unit[2]) / 2
        scaled = (stored @ q) * np.linalg.norm(unit[0] - weight * (unit[1] + unit[2]) / 2)
        np.testing.assert_allclose(scaled, difference, atol=1e-6)
        assert list(np.argsort(-(stored @ q))[:20]) == list(np.argsort(-difference)[:20])
    np.testing.assert_allclose(ranking.steer(p, [], 0.5), p / np.linalg.norm(p), atol=1e-7)
    with pytest.raises(InputError, match="cancel"):
        ranking.steer(p, [p], 1.0)


def test_pushing_away_from_stored_items_equals_its_formula(rng):
    """`push_away` against the formula written out with a pseudo-inverse, in a narrow cone (the
    photos' vectors): each marked item's lead over the centre becomes (1 - 2w) times its own,
    and the marked items are no longer the best (the real model's case, where the former
    p - w·n left the best first: tests/images/index/test_search_steering.py)."""
    axis = rng.normal(size=24)
    stored = axis / np.linalg.norm(axis) + 0.05 * rng.normal(size=(300, 24))  # cosines ~0.94
    stored /= np.linalg.norm(stored, axis=1, keepdims=True)
    p = rng.normal(size=24)
    p /= np.linalg.norm(p)
    around = ranking.centre(stored * rng.uniform(0.5, 2, size=(300, 1)))  # any length: unit rows
    np.testing.assert_allclose(around, stored.mean(axis=0), atol=1e-12)
    best = int(np.argmax(stored @ p))
    for marked, weight in (([best], 0.5), ([best, 7], 0.3), ([best, 7, 40], 1.0)):
        q = ranking.push_away(p * 3, [stored[i] * 2 for i in marked], around, weight)
        directions = stored[marked] - around
        projected = directions.T @ np.linalg.pinv(directions @ directions.T) @ (directions @ p)
        expected = p - 2 * weight * projected
        np.testing.assert_allclose(q, expected / np.linalg.norm(expected), atol=1e-6)
        scale = np.linalg.norm(expected)
        np.testing.assert_allclose(
            directions @ q.astype(np.float64) * scale,
            (1 - 2 * weight) * (directions @ p),
            atol=1e-6,
        )
        assert int(np.argmax(stored @ q)) not in marked
    # nothing to measure from: the query as it is; no direction (the item is the centre) too
    np.testing.assert_allclose(ranking.push_away(p, [stored[best]], None, 0.5), p, atol=1e-7)
    centred = around / np.linalg.norm(around)
    np.testing.assert_allclose(ranking.push_away(p, [around], centred, 0.5), p, atol=1e-7)
    assert ranking.centre(np.empty((0, 24))) is None
    with pytest.raises(InputError, match="hold the whole query"):
        ranking.push_away(stored[best] - around, [stored[best]], around, 0.5)


def test_folding_equals_brute_force(rng):
    base = rng.normal(size=(30, 16))
    copies = base[rng.integers(0, 30, 40)] + rng.normal(scale=0.05, size=(40, 16))
    vectors = np.concatenate([base, copies])[rng.permutation(70)]
    for threshold, topk in ((0.99, 10), (0.95, 30), (0.5, 5), (1.0, 70)):
        assert ranking.fold(vectors, threshold, topk) == brute_fold(vectors, threshold, topk)
    folded = ranking.fold(vectors, 0.95, 30)
    assert len(folded) == 30 and sum(len(u) for _, u in folded) > 0


@pytest.mark.parametrize(
    ("scores", "cut_at"),
    [
        ([0.9, 0.88, 0.87, 0.5, 0.49, 0.48, 0.47], 0.87),  # a clear gap after three
        ([0.9, 0.8, 0.7, 0.6, 0.5, 0.4], None),  # evenly spread: no gap
        ([0.31, 0.30, 0.30, 0.29, 0.29], None),  # the narrow band of an absent subject
        ([0.9, 0.5, 0.49], None),  # too few scores to tell
        ([0.7, 0.7, 0.7, 0.7], None),  # all equal
    ],
)
def test_the_automatic_cut(scores, cut_at):
    assert ranking.gap_cut(scores) == cut_at


def test_cut_keeps_the_scores_at_or_above_the_higher_threshold(rng):
    scores = sorted(rng.uniform(-1, 1, 50), reverse=True)
    for min_score in (None, -1.0, 0.0, 0.3, scores[7], 1.0):
        done = ranking.cut(scores, min_score, False)
        expected = sum(s >= min_score for s in scores) if min_score is not None else 50
        assert (done.kept, done.dropped) == (expected, 50 - expected)
        assert done.scores == scores
    nothing = ranking.cut([0.2, 0.1], 0.25, False)
    assert (
        nothing.kept == 0
        and nothing.message == "no photo scores above 0.25 (the best scores 0.2000)"
    )
    assert ranking.cut([0.2, 0.1], 0.1, False).message is None
    both = ranking.cut([0.9, 0.88, 0.87, 0.5, 0.49, 0.48, 0.47], 0.2, True)
    assert (both.threshold, both.kept, both.auto_score) == (0.87, 3, 0.87)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.5, 2, "0.3", True])
def test_bad_min_scores_are_refused(bad):
    with pytest.raises(InputError, match="min_score"):
        ranking.check_min_score(bad)


def test_the_docs_table_is_the_evaluation_json():
    """docs/images.md's automatic-cut table is what benchmarks/research/search_cut_eval.py renders
    from benchmarks/results/search_cut.json (never typed), through the docs engine."""
    from tests.support.docs_numbers import engine_check

    done = engine_check("--block", "search-cut", "--block", "search-steering")
    assert done.returncode == 0, done.stdout + done.stderr


def test_numpy_numbers_are_numbers():
    assert ranking.check_min_score(np.float32(0.25)) == 0.25
    assert ranking.check_fold(np.float64(0.9)) == 0.9 and ranking.check_weight(np.int64(1)) == 1.0
