"""Searches cut and steered (`ImageIndex.search` with a `Steering`), and words with a metadata
filter, on the real store with the two-tower test model: every answer against a brute-force
search in numpy over the same stored vectors (the filter applied in Python), with the query's
vectors from the model's own PyTorch towers. The filter test runs on Milvus Lite and on the real
Milvus server; the rest on Milvus Lite."""

import numpy as np
import pytest
from PIL import Image

from accelkit.images.index import ranking
from accelkit.images.index.base import ImageInput, Steering, TextQuery
from accelkit.images.testing import altered
from tests.support import two_tower

# one xdist worker runs this module (pyproject: --dist loadgroup), so
# its model and store are made once
pytestmark = pytest.mark.xdist_group("search-steering")

SKY = {"rocket", "rocket_top", "moon", "hubble_deep_field"}
TOL = 1e-4  # the ONNX text tower against PyTorch's, in float32


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return two_tower.build(tmp_path_factory.mktemp("two-tower"))


def filled_index(base, files, photos, store: dict):
    """A LocalIndex over `store` holding the 25 photos and their altered copies, and the stored
    (ids, vectors, metadata) read back for the reference."""
    from accelkit.images.index.local import open_local_index
    from accelkit.images.settings.config import load_settings

    config = base / "config.yaml"
    text = two_tower.config_yaml(files, store["uri"])
    text += "".join(f"  {k}: {store[k]}\n" for k in ("db_name", "timeout") if k in store)
    config.write_text(text)
    index = open_local_index(load_settings(str(config)))
    items = []
    for name in sorted(photos):
        path = base / f"{name}.png"
        Image.fromarray(photos[name]).save(path)
        group = "sky" if name in SKY else "earth"
        for kind, data in (("original", str(path)), ("copy", altered(photos[name]))):
            meta = {"name": name, "kind": kind, "group": group, "size": len(name)}
            items.append(ImageInput(data, id=f"{name}.{kind}", metadata=meta))
    stored = index.insert(items, create_collection=True)
    assert not stored.failures and len(stored.ids) == 2 * len(photos)
    rows = index.store.get("pics", stored.ids, with_vectors=True)
    reference = (
        [r["id"] for r in rows],
        np.stack([r["vector"] for r in rows]).astype(np.float64),
        [r["metadata"] for r in rows],
    )
    return index, reference


def brute(reference, query, keep=lambda meta: True):
    """(id, cosine) of every stored item the filter keeps, best first, in float64."""
    ids, vectors, metas = reference
    q = np.asarray(query, np.float64)
    scores = vectors @ q / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(q))
    order = np.argsort(-scores, kind="stable")
    return [(ids[i], float(scores[i])) for i in order if keep(metas[i])]


def assert_same(hits, expected, k):
    """The hits are the top k of the reference: the same scores, each id's own score (order
    within a tie of TOL is free)."""
    assert len(hits) == min(k, len(expected))
    score_of = dict(expected)
    np.testing.assert_allclose([h.score for h in hits], [s for _, s in expected[:k]], atol=TOL)
    for hit in hits:
        assert abs(score_of[hit.id] - hit.score) <= TOL, hit.id


FILTERS = [
    ('metadata["group"] == "sky"', lambda m: m["group"] == "sky"),
    (
        'metadata["kind"] == "copy" and metadata["size"] > 5',
        lambda m: m["kind"] == "copy" and m["size"] > 5,
    ),
    (
        'metadata["name"] in ["chelsea", "coffee", "moon"]',
        lambda m: m["name"] in ("chelsea", "coffee", "moon"),
    ),
    ('metadata["group"] == "nowhere"', lambda m: False),
]


def test_words_with_a_filter_equal_brute_force_on_each_store(
    tmp_path_factory, model, photos, store_settings
):
    torch_model, files = model
    index, reference = filled_index(
        tmp_path_factory.mktemp("filtered"), files, photos, store_settings
    )
    with index:
        for text in ("a photo of a cat", "red rocket at night", "coffee cup"):
            query = two_tower.text_vector(torch_model, text)
            for expression, keep in FILTERS:
                hits = index.search(TextQuery(text), 7, expression)
                assert_same(hits, brute(reference, query, keep), 7)
                assert all(keep(h.metadata) for h in hits)


@pytest.fixture(scope="module")
def lite(tmp_path_factory, model, photos):
    base = tmp_path_factory.mktemp("steering")
    index, reference = filled_index(base, model[1], photos, {"uri": str(base / "lite.db")})
    with index:
        yield index, reference, model[0]


def test_min_score_keeps_exactly_the_results_at_or_above_it(lite):
    index, reference, torch_model = lite
    text = "a photo of a dog"
    expected = brute(reference, two_tower.text_vector(torch_model, text))
    cut_at = (expected[3][1] + expected[4][1]) / 2  # between the 4th and 5th
    hits = index.search(TextQuery(text), 10, steering=Steering.checked(min_score=cut_at))
    assert_same(hits, expected, 4)
    assert hits.cut.kept == 4 and hits.cut.dropped == 6 and hits.cut.message is None
    np.testing.assert_allclose(hits.cut.scores, [s for _, s in expected[:10]], atol=TOL)
    above = round(expected[0][1] + 0.01, 3)
    none = index.search(TextQuery(text), 10, steering=Steering.checked(min_score=above))
    assert list(none) == [] and none.cut.message.startswith(f"no photo scores above {above:g}")
    auto = index.search(TextQuery(text), 10, steering=Steering.checked(auto_cut=True))
    wanted = ranking.gap_cut([s for _, s in expected[:10]])
    assert len(auto) == (10 if wanted is None else sum(s >= wanted - TOL for _, s in expected[:10]))


def test_negative_terms_rank_by_similarity_minus_weighted_negatives(lite):
    index, reference, torch_model = lite
    p, n = (two_tower.text_vector(torch_model, t) for t in ("cat", "dog"))
    for weight in (0.5, 0.9):
        steering = Steering.checked(negative_weight=weight)
        hits = index.search(TextQuery("cat -dog"), 8, steering=steering)
        ids, vectors, _ = reference
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        difference = unit @ p - weight * (unit @ n)  # the documented score, written out
        scale = np.linalg.norm(p - weight * n)
        expected = sorted(zip(ids, difference / scale, strict=True), key=lambda x: -x[1])
        assert_same(hits, expected, 8)
    # the same as a negative given apart, and the quoted literal is a positive term
    apart = index.search(TextQuery("cat"), 8, steering=Steering.checked(negatives=["dog"]))
    assert [h.id for h in apart] == [h.id for h in index.search(TextQuery("cat -dog"), 8)]
    literal = index.search(TextQuery('"-dog" cat'), 5)
    assert_same(literal, brute(reference, two_tower.text_vector(torch_model, "-dog cat")), 5)


def less_like(reference, query, marked, weight, keep=lambda meta: True, candidates=100):
    """ "Less like this" written out in float64: the centre μ of the query's best `candidates`
    (under the filter), the marked items' directions n_i - μ, and the query q minus 2w times
    its projection onto their span (the pseudo-inverse, not an SVD as the code does)."""
    ids, vectors, _ = reference
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    q = np.asarray(query, np.float64) / np.linalg.norm(query)
    best = brute(reference, q, keep)[:candidates]  # 100: the documented STEER_CANDIDATES
    around = unit[[ids.index(i) for i, _ in best]].mean(axis=0)
    directions = np.stack([unit[ids.index(i)] - around for i in marked])
    projected = directions.T @ np.linalg.pinv(directions @ directions.T) @ (directions @ q)
    return q - 2 * weight * projected, around


def test_a_stored_image_as_a_negative(lite, monkeypatch):
    index, reference, torch_model = lite
    p = two_tower.text_vector(torch_model, "rocket")
    sky = ('metadata["group"] == "sky"', lambda m: m["group"] == "sky")
    for marked, weight, (expression, keep) in (
        (["moon.original"], 0.5, (None, lambda m: True)),
        (["moon.original", "coffee.copy"], 0.8, (None, lambda m: True)),
        (["moon.original"], 0.3, sky),  # the filter over the whole collection, and for μ
    ):
        steering = Steering.checked(negative_ids=marked, negative_weight=weight)
        hits = index.search(TextQuery("rocket"), 6, expression, steering=steering)
        steered, around = less_like(reference, p, marked, weight, keep)
        assert_same(hits, brute(reference, steered, keep), 6)
        assert all(keep(h.metadata) for h in hits)
        # each marked item's lead over the candidates' mean is (1 - 2w) times what it was
        ids, vectors, _ = reference
        for item in marked:
            n = vectors[ids.index(item)] / np.linalg.norm(vectors[ids.index(item)])
            lead, after = (n - around) @ (p / np.linalg.norm(p)), (n - around) @ steered
            assert after == pytest.approx((1 - 2 * weight) * lead, abs=1e-9)
    # the centre from fewer candidates than the collection holds (a clear gap at the 12th)
    ranked = brute(reference, p)
    assert ranked[11][1] - ranked[12][1] > 1e-3
    monkeypatch.setattr(ranking, "STEER_CANDIDATES", 12)
    hits = index.search(TextQuery("rocket"), 6, steering=Steering.checked(negative_ids=["moon.original"]))  # fmt: skip
    steered, _ = less_like(reference, p, ["moon.original"], 0.5, candidates=12)
    assert_same(hits, brute(reference, steered), 6)


def test_less_like_the_best_result_pushes_it_and_its_copy_down(lite):
    """The modality gap: w·cos(x, n) for the best photo n is nearly the same for every photo, so
    the former q = p - w·n left "coffee cup"'s best result first; pushed from the candidates'
    centre, it and its altered copy leave the top 10, and the rest is the formula's ranking. (The
    text negatives keep their form: `test_negative_terms_rank_by_similarity_minus_weighted_…`.)"""
    index, reference, torch_model = lite
    p = two_tower.text_vector(torch_model, "coffee cup")
    ranked = brute(reference, p)
    best = ranked[0][0]
    copy = best.rsplit(".", 1)[0] + (".original" if best.endswith(".copy") else ".copy")
    ids, vectors, _ = reference
    n = vectors[ids.index(best)] / np.linalg.norm(vectors[ids.index(best)])
    former = p - 0.5 * n  # p is unit
    assert brute(reference, former)[0][0] == best  # what main did: the best stayed first
    hits = index.search(TextQuery("coffee cup"), 10, steering=Steering.checked(negative_ids=[best]))  # fmt: skip
    assert best not in [h.id for h in hits] and copy not in [h.id for h in hits], hits
    steered, _ = less_like(reference, p, [best], 0.5)
    assert_same(hits, brute(reference, steered), 10)
    order = [i for i, _ in brute(reference, steered)]
    assert order.index(best) >= 15 and order.index(copy) >= 15  # an average candidate, or below


def test_folding_returns_k_distinct_results_with_their_duplicates(lite):
    index, reference, torch_model = lite
    from tests.support.search import brute_fold

    q = two_tower.text_vector(torch_model, "a photo of a coffee cup")
    ranked = brute(reference, q)
    ids, vectors, _ = reference
    in_order = np.stack([vectors[ids.index(i)] for i, _ in ranked])
    scanned = []
    # (0.98, 10): this random model's vectors are alike, so fewer than 10 distinct ones exist
    # among the 50, and the search fetches past 4 x 10 candidates to the whole collection
    for threshold, k in ((0.999, 6), (0.99, 8), (0.9, 5), (0.98, 10)):
        steering = Steering.checked(fold=threshold)
        hits = index.search(TextQuery("a photo of a coffee cup"), k, steering=steering)
        expected = brute_fold(in_order, threshold, k)
        assert [h.id for h in hits] == [ranked[h][0] for h, _ in expected]
        assert [h.similar for h in hits] == [[ranked[j][0] for j in u] for _, u in expected]
        scanned.append(sum(1 + len(u) for _, u in expected))
    assert max(scanned) > ranking.FOLD_OVERFETCH * 10 and any(h.similar for h in hits)


def test_cuts_need_a_similarity_and_bad_steering_is_one_line(lite):
    from accelkit.errors import InputError

    index, reference, _ = lite
    index.create_collection("distances", metric_type="L2", exist_ok=True)
    vector = reference[1][0].astype(np.float32)
    index.store.upsert("distances", ["a"], vector[None], [{}])
    assert len(index.search(vector, 3, collection="distances")) == 1  # no cut: searched as before
    for steering in (Steering.checked(min_score=0.1), Steering.checked(auto_cut=True)):
        with pytest.raises(InputError, match="ranks by L2 distance"):
            index.search(vector, 3, collection="distances", steering=steering)
    for bad, says in (
        (dict(min_score=float("nan")), "min_score nan"),
        (dict(negative_weight=0), "negative_weight 0"),
        (dict(fold=1.5), "fold_duplicates 1.5"),
        (dict(negative_ids=["no such id"]), "id"),
        (dict(negatives=["x"] * 9, negative_ids=["a"] * 8), "at most 16"),
    ):
        with pytest.raises(InputError, match=says):
            Steering.checked(**bad)
    with pytest.raises(InputError, match="only negative terms"):
        index.search(TextQuery("-cat"), 3)
