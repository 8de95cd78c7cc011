"""The one marker syntax of the docs' generated numbers, and what reads and writes it.

A generated block of a page sits between `<!-- generated: NAME -->` and `<!-- end generated: NAME -->`
(each on a line of its own; an empty block, whose JSON was never written, is the two lines alone);
its body is made by a `Table`: a function of one benchmark JSON
(benchmarks/results/*.json), never typed. `python -m benchmarks.docs` renders every block of
every page (engine.py); a benchmark that rewrites its own block after a run calls `rewrite`."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import write_atomic

MARKER = re.compile(
    r"(<!-- generated: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(\n?<!-- end generated: (?P=name) -->)",
    re.S,
)


@dataclass(frozen=True)
class Table:
    """A block's body: `make(json)` of the JSON at `source`."""

    source: Path
    make: Callable[[dict], str]


def found(text: str) -> dict[str, str]:
    """Every generated block of `text`: name -> body."""
    return {m.group("name"): m.group("body") for m in MARKER.finditer(text)}


def render(
    text: str,
    tables: dict[str, Table],
    load: Callable[[Path], dict | None],
    only: set[str] | None = None,
) -> str:
    """`text` with every block (of the names in `only`, when given) rendered again by its table
    from `load(source)`; a block whose JSON is not there stays as it is. A block no table names is
    an error: it would never be checked."""

    def fill(m: re.Match) -> str:
        name = m.group("name")
        if name not in tables:
            raise KeyError(f"no table renders the generated block {name!r}")
        if only is not None and name not in only:
            return m.group(0)
        doc = load(tables[name].source)
        if doc is None:  # not measured here (yet): the block stays, empty or not
            return m.group(0)
        return m.group(1) + tables[name].make(doc) + "\n" + m.group(4).lstrip("\n")

    return MARKER.sub(fill, text)


def rewrite(page: Path, name: str, body: str) -> None:
    """Replace the body of `page`'s block `name` (appended at the end when the page has none),
    atomically."""
    text = page.read_text(encoding="utf-8")
    block = f"<!-- generated: {name} -->\n{body}\n<!-- end generated: {name} -->"
    if name in found(text):
        text = MARKER.sub(lambda m: block if m.group("name") == name else m.group(0), text)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    write_atomic(page, text)
