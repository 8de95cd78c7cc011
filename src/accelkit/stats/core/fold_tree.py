"""The order in which block sums are added up: a fixed tree over the blocks' positions.

The moments' sums are float64, so their bits depend on the order of additions. Each block of
`BLOCK_ROWS` rows is summed in a fixed order (`moments.block_sums`); this module fixes the order
in which the blocks' sums are added: a tree of fan-out `FANOUT` laid over the block positions
0, 1, 2, ... of the stream. A node's value is its children's values added left to right, starting
from the first child (a node with one child has that child's value); the leaves are the blocks;
the result is the root's value. A node cut off by the end of the stream adds the children it has.

The tree depends on the positions only, not on who added what, so any contiguous piece of the
stream can be reduced on its own and joined with its neighbours later: a `Span` holds a range of
blocks as the fewest whole nodes that cover it (at most FANOUT - 1 per level at each end) — the
same bits whether one process folded every block in order, devices folded their batches, or Ray
tasks folded their groups and merge tasks joined their spans. A Span of a range of any length is a
few dozen [2, D] arrays: what crosses the network from a task does not grow with its rows, and
the driver of a cluster run adds up a handful of nodes instead of every block of the dataset.

Pure numpy; values are [2, D] float64 (the sums of w(x - shift) and of w(x - shift)^2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from accelkit.stats.core.moments import Sums

FANOUT = 16


@dataclass
class Span:
    """Blocks [start, stop) as whole tree nodes in position order: (level, index, value [2, D])
    where a node (level, i) covers blocks [i * FANOUT**level, (i + 1) * FANOUT**level)."""

    start: int
    stop: int
    nodes: list = field(default_factory=list)

    def __len__(self) -> int:
        return self.stop - self.start


def _fold(values: np.ndarray, axis: int) -> np.ndarray:
    """Left to right from the first element along `axis` (numpy's accumulate is sequential)."""
    return np.add.accumulate(values, axis=axis).take(-1, axis=axis)


def empty(start: int = 0) -> Span:
    return Span(start, start)


def from_blocks(first: int, blocks: np.ndarray) -> Span:
    """A Span of blocks `first`, `first + 1`, ...: `blocks` [N, 2, D] float64."""
    blocks = np.asarray(blocks, np.float64)
    return Span(first, first + len(blocks), _cover(0, first, blocks))


def _cover(level: int, first: int, values: np.ndarray) -> list:
    """Nodes of `level` starting at node `first`, reduced into the fewest whole nodes."""
    n = len(values)
    head = min(n, (-first) % FANOUT)
    whole = (n - head) // FANOUT
    body = head + whole * FANOUT
    nodes = [(level, first + i, values[i]) for i in range(head)]
    if whole:
        parents = _fold(values[head:body].reshape(whole, FANOUT, *values.shape[1:]), axis=1)
        nodes += _cover(level + 1, (first + head) // FANOUT, parents)
    nodes += [(level, first + i, values[i]) for i in range(body, n)]
    return nodes


def join(left: Span, right: Span) -> Span:
    """The Span of `left` followed by `right` (adjacent: left.stop == right.start, empty spans
    included: one that sits elsewhere is a caller's bookkeeping error, not nothing to add)."""
    if left.stop != right.start:
        raise ValueError(f"blocks [{left.start}, {left.stop}) and [{right.start}, {right.stop})")
    if len(left) == 0:
        return right
    if len(right) == 0:
        return left
    stack = list(left.nodes)
    for node in right.nodes:
        stack.append(node)
        _reduce_top(stack)
    return Span(left.start, right.stop, stack)


def _reduce_top(stack: list) -> None:
    """While the last FANOUT nodes are all the children of one node, replace them by it."""
    while len(stack) >= FANOUT:
        level, index, _ = stack[-1]
        if index % FANOUT != FANOUT - 1:
            return
        children = stack[-FANOUT:]
        if any(c[0] != level or c[1] != index - FANOUT + 1 + i for i, c in enumerate(children)):
            return
        value = _fold(np.stack([c[2] for c in children]), axis=0)
        del stack[-FANOUT:]
        stack.append((level + 1, index // FANOUT, value))


def total(span: Span, dim: int) -> np.ndarray:
    """The root's value [2, D] of a Span of the whole stream (blocks [0, N)); zeros when N = 0."""
    if span.start != 0:
        raise ValueError(f"the stream's blocks start at 0, not {span.start}")
    nodes = list(span.nodes)
    if not nodes:
        return np.zeros((2, dim), np.float64)
    # Reduced from the end: the lowest level's nodes are the last ones, children of one node
    # cut off by the end of the stream; that node takes their place, one level up.
    while len(nodes) > 1:
        lowest = min(node[0] for node in nodes)
        parent = nodes[-1][1] // FANOUT
        count = 0
        while (
            count < len(nodes)
            and nodes[-1 - count][0] == lowest
            and nodes[-1 - count][1] // FANOUT == parent
        ):
            count += 1
        children = nodes[len(nodes) - count :]
        value = _fold(np.stack([c[2] for c in children]), axis=0)
        del nodes[len(nodes) - count :]
        nodes.append((lowest + 1, parent, value))
    return nodes[0][2]


class Folder:
    """Block sums arriving in stream order (a local run's batches), kept as one Span. `limit`:
    the stream's block count, once known; blocks past it (the last batch's padding) are dropped."""

    def __init__(self):
        self.span = empty()
        self.limit: int | None = None

    def add(self, s1: np.ndarray, s2: np.ndarray) -> None:
        blocks = np.stack([np.asarray(s1, np.float64), np.asarray(s2, np.float64)], axis=1)
        if self.limit is not None:
            blocks = blocks[: max(0, self.limit - self.span.stop)]
        self.span = join(self.span, from_blocks(self.span.stop, blocks))

    def sums(self, dim: int):

        s1, s2 = total(self.span, dim)
        return Sums(s1, s2)
