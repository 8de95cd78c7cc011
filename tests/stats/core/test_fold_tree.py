"""The fixed tree that adds up block sums: the same bits however the blocks are cut and joined."""

import itertools
import math

import numpy as np
import pytest

from accelkit.stats.core import fold_tree as ft


def reference(blocks: np.ndarray) -> np.ndarray:
    """The definition, written out: groups of FANOUT from position 0, each added left to right
    from its first member, level after level, until one value is left."""
    level = [np.array(b) for b in blocks]
    if not level:
        return np.zeros(blocks.shape[1:])
    while len(level) > 1:
        parents = []
        for i in range(0, len(level), ft.FANOUT):
            value = level[i]
            for child in level[i + 1 : i + ft.FANOUT]:
                value = value + child
            parents.append(value)
        level = parents
    return level[0]


def adversarial_blocks(rng, n: int, dim: int = 3) -> np.ndarray:
    """Sums whose total depends on the order: huge values that cancel, tiny ones, signed zeros."""
    blocks = rng.standard_normal((n, 2, dim)) * 10.0 ** rng.integers(-300, 300, (n, 2, dim))
    blocks[:, :, 0] = rng.choice([1e16, -1e16, 1.0, -1.0, 3e-310], (n, 2))
    blocks[:, :, -1] = -0.0  # a column of -0.0 (x == -0.0 with a shift of +0.0)
    return blocks


def pieces(rng, n: int) -> list[int]:
    cuts = sorted(set(rng.integers(0, n + 1, rng.integers(0, 12)).tolist()) | {0, n})
    return cuts


def join_any_order(rng, spans: list) -> ft.Span:
    """Adjacent spans joined in a random bracketing (as a tree of Ray merge tasks would)."""
    spans = list(spans)
    while len(spans) > 1:
        i = int(rng.integers(0, len(spans) - 1))
        spans[i : i + 2] = [ft.join(spans[i], spans[i + 1])]
    return spans[0]


@pytest.mark.parametrize("n", [0, 1, 2, 15, 16, 17, 255, 256, 257, 300, 4095, 4096, 4097, 70_000])
def test_any_cut_and_any_joining_gives_the_definitions_bits(n):
    rng = np.random.default_rng(n)
    blocks = adversarial_blocks(rng, n)
    expected = reference(blocks)
    whole = ft.total(ft.from_blocks(0, blocks), 3)
    assert whole.tobytes() == expected.tobytes()
    for _ in range(5):
        cuts = pieces(rng, n)
        spans = [ft.from_blocks(a, blocks[a:b]) for a, b in itertools.pairwise(cuts)]
        joined = join_any_order(rng, spans) if spans else ft.empty()
        assert (joined.start, joined.stop) == (0, n)
        assert ft.total(joined, 3).tobytes() == expected.tobytes()
    folder = ft.Folder()  # a local run's batches, in order
    for a, b in itertools.pairwise(cuts):
        folder.add(blocks[a:b, 0], blocks[a:b, 1])
    sums = folder.sums(3)
    assert np.stack([sums.s1, sums.s2]).tobytes() == expected.tobytes()


def test_the_order_matters_and_is_the_trees():
    """A test that a sequential fold would pass is no test: here the two differ."""
    blocks = np.zeros((33, 2, 1))
    blocks[0], blocks[16:32] = 1e16, 1.0  # one by one, each 1.0 is lost against 1e16
    tree = ft.total(ft.from_blocks(0, blocks), 1)
    sequential = np.add.accumulate(blocks, axis=0)[-1]
    assert tree[0, 0] == 1e16 + 16 and sequential[0, 0] == 1e16
    assert tree.tobytes() == reference(blocks).tobytes()


def test_accurate_and_signed_zero_kept():
    rng = np.random.default_rng(7)
    blocks = rng.standard_normal((5000, 2, 2)) * 1e3 + 1e6
    got = ft.total(ft.from_blocks(0, blocks), 2)
    for i in range(2):
        for d in range(2):
            exact = math.fsum(blocks[:, i, d])
            assert abs(got[i, d] - exact) <= 1e-13 * abs(exact)
    zeros = np.full((40, 2, 1), -0.0)
    assert np.signbit(ft.total(ft.from_blocks(0, zeros), 1)).all()


def test_a_span_stays_small_whatever_its_length():
    """What a task sends and the driver adds: at most FANOUT - 1 nodes per level at each end."""
    rng = np.random.default_rng(1)
    for _ in range(20):
        start = int(rng.integers(0, 10**6))
        n = int(rng.integers(0, 200_000))
        span = ft.from_blocks(start, np.zeros((n, 2, 1)))
        levels = max(1, math.ceil(math.log(max(n, 2), ft.FANOUT)) + 1)
        assert len(span.nodes) <= 2 * (ft.FANOUT - 1) * levels
        covered = sum(ft.FANOUT**level for level, _, _ in span.nodes)
        assert covered == n


def test_joining_spans_that_do_not_touch_is_refused():
    a = ft.from_blocks(0, np.zeros((3, 2, 1)))
    b = ft.from_blocks(4, np.zeros((3, 2, 1)))
    with pytest.raises(ValueError, match=r"\[0, 3\) and \[4, 7\)"):
        ft.join(a, b)
    for left, right in ((a, ft.empty(5)), (ft.empty(2), b)):  # empty, but not where it joins
        with pytest.raises(ValueError, match="blocks"):
            ft.join(left, right)
    assert ft.join(a, ft.empty(3)) is a and ft.join(ft.empty(4), b) is b
    with pytest.raises(ValueError, match="start at 0"):
        ft.total(b, 1)


def test_a_folder_drops_the_last_batchs_padding():
    rng = np.random.default_rng(3)
    blocks = adversarial_blocks(rng, 40, 1)
    folder = ft.Folder()
    folder.add(blocks[:32, 0], blocks[:32, 1])
    folder.limit = 37
    padded = np.concatenate([blocks[32:37], np.zeros((27, 2, 1))])
    folder.add(padded[:, 0], padded[:, 1])
    sums = folder.sums(1)
    assert np.stack([sums.s1, sums.s2]).tobytes() == reference(blocks[:37]).tobytes()
