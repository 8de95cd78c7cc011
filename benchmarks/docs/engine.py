"""The docs' generated numbers, all of them: every `<!-- generated: NAME -->` block of every page
rendered again from the benchmark JSON it cites (blocks.py says the syntax; `tables()` which
function of which benchmark renders each name).

    python -m benchmarks.docs                      # rewrite every block of every page
    python -m benchmarks.docs --check              # exit 1 when a page differs from its JSON
    python -m benchmarks.docs --check --page docs/quant.md --block kernels

The tests run `--check` (tests/quant/test_docs_numbers.py, tests/images/test_docs_numbers.py); a
JSON not there leaves its blocks as they are."""

from __future__ import annotations

import json
import sys
from functools import cache
from pathlib import Path

from benchmarks.common import DOCS, REPO, ArgumentParser, fail, write_atomic
from benchmarks.docs.blocks import MARKER, Table, render

PAGES = (DOCS / "quant.md", DOCS / "images.md", DOCS / "performance.md")


def tables() -> dict[str, Table]:
    """Block name -> its table, from every benchmark that renders one."""
    from benchmarks.docs import lite, quant, service
    from benchmarks.images import filtered_fields_bench, resample_bench
    from benchmarks.machine import limits_bench
    from benchmarks.research import images_int8, search_cut_eval

    return {
        **quant.TABLES,
        **lite.TABLES,
        **service.TABLES,
        **resample_bench.TABLES,
        **filtered_fields_bench.TABLES,
        **search_cut_eval.TABLES,
        **limits_bench.TABLES,
        **images_int8.TABLES,
    }


@cache
def load(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check; exit 1 on a difference")
    parser.add_argument("--page", action="append", type=Path, help="only this page (repeatable)")
    parser.add_argument("--block", action="append", help="only this block (repeatable)")
    args = parser.parse_args(argv)
    valid = ", ".join(str(p.relative_to(REPO)) for p in PAGES)
    pages = [(REPO / p).resolve() for p in args.page] if args.page else list(PAGES)
    for given, page in zip(args.page or (), pages, strict=False):
        if page not in PAGES:
            fail(f"argument --page: {given} is not a page with generated blocks; give {valid}")
    every = tables()
    if args.block and set(args.block) - set(every):
        unknown = ", ".join(sorted(set(args.block) - set(every)))
        fail(f"argument --block: no table renders {unknown}; give one of {', '.join(every)}")
    seen: set[str] = set()
    status = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        names = {m.group("name") for m in MARKER.finditer(text)}
        seen |= names
        unknown = names - set(every)
        if unknown:
            print(f"{page.relative_to(REPO)}: no table renders {sorted(unknown)}", file=sys.stderr)
            return 1
        new = render(text, every, load, set(args.block) if args.block else None)
        if new == text:
            continue
        if args.check:
            print(f"{page.relative_to(REPO)} differs from the JSON; run python -m benchmarks.docs")
            status = 1
        else:
            write_atomic(page, new)
    if not args.page and not args.block and set(every) - seen:
        print(f"on no page: {sorted(set(every) - seen)}", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
