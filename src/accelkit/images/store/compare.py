"""Two stores' items of one collection compared by content, as `accelkit images migrate`
verifies a copy: every item's vector bytes and metadata, hashed (BLAKE2b, 16 bytes an item) and
read in batches, so a claim of "verified" holds for every item, and items that differ (written
to SRC or DST since they were copied) are counted and named, never written over silently."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from accelkit.errors import CheckFailed, InputError
from accelkit.images.settings.fields import unstorable


def items_text(count: int) -> str:
    return f"{count:,} item{'s' if count != 1 else ''}"


def digest(row: dict[str, Any]) -> bytes:
    """An item's content as 16 bytes: its vector's float32 bytes and its metadata (JSON, keys
    sorted), hashed."""
    vector = np.ascontiguousarray(row["vector"], np.float32).tobytes()
    hashed = hashlib.blake2b(vector, digest_size=16)
    hashed.update(json.dumps(row["metadata"], sort_keys=True, separators=(",", ":")).encode())
    return hashed.digest()


def digests(store, name: str) -> dict[str, bytes]:
    """Every item of `name`, id (ascending) -> `digest` of its content, read in batches."""
    return {row["id"]: digest(row) for rows in store.iterate(name, 1000) for row in rows}


@dataclass
class Difference:
    """SRC's and DST's items of one collection compared by content: SRC's ids (ascending),
    those DST lacks, how many DST holds that SRC lacks, and the ids both hold with another
    vector or metadata."""

    ids: list[str]
    missing: list[str]
    extra: int
    changed: list[str]


def compare(src, dst, name: str) -> Difference:
    """Every item of `name` in SRC and DST compared: ids, vector bytes and metadata."""
    theirs, ours = digests(src, name), digests(dst, name)
    missing = [i for i in theirs if i not in ours]
    changed = [i for i, d in theirs.items() if i in ours and ours[i] != d]
    return Difference(list(theirs), missing, len(ours) - (len(theirs) - len(missing)), changed)


def such_as(ids: Sequence[str]) -> str:
    shown = ", ".join(repr(i) for i in ids[:3])
    return f"{shown}{', …' if len(ids) > 3 else ''}"


def changed_refusal(name: str, changed: list[str], total: int, replace_hint: str) -> CheckFailed:
    """The refusal of items that differ between SRC and DST: how many, a few ids, and only the
    ways that keep them (`replace_hint`: SRC's version replaces DST's, said how many)."""
    count = items_text(len(changed))
    failed = CheckFailed(
        f"collection {name!r}: {count} of SRC's {total:,} differ in DST (vector or metadata;"
        f" such as {such_as(changed)}): SRC or DST was written to since they were copied;"
        " nothing was overwritten or dropped, and the copy is not marked verified; keep DST's"
        f" versions as they are, or take SRC's with `{replace_hint}` (replaces those {count} in"
        " DST)"
    )
    failed.advised = True  # rerunning as it is cannot help: no "again to resume"
    return failed


def refuse_changed_ahead(src, dst, name, after, batch_size, total, replace_hint) -> None:
    """Before a resumed copy writes past its mark: DST's items there (the batch in flight when
    it stopped, or items written to DST since) that SRC holds otherwise are refused, not
    written over."""
    ahead = {r["id"]: digest(r) for rows in dst.iterate(name, batch_size, after=after) for r in rows}  # fmt: skip
    ids = list(ahead)
    theirs = {
        r["id"]: digest(r)
        for start in range(0, len(ids), batch_size)
        for r in src.get(name, ids[start : start + batch_size], with_vectors=True)
    }
    changed = [i for i, d in ahead.items() if i in theirs and theirs[i] != d]
    if changed:
        raise changed_refusal(name, changed, total, replace_hint)


def refuse_undeclarable(src, name: str, fields: dict[str, str], info: dict[str, Any]) -> None:
    """Refuse a copy whose declared filter fields (DST's store.fields, when they are not SRC's
    own) cannot hold some of SRC's items: the copy would stop at the first of them on every
    run. One read of SRC's metadata, only when the declarations differ."""
    if not fields or fields == (info.get("fields") or {}):
        return  # none, or SRC's own: its items were checked against them when inserted
    found: list[str] = []
    for rows in src.iterate(name, 1000):
        for row in rows:
            problem = unstorable(fields, row["metadata"] or {})
            if problem is not None:
                found.append(f"{row['id']!r}: {problem[1]}")
        if len(found) >= 3:
            break
    if found:
        more = f" (and {len(found) - 1} more at least)" if len(found) > 1 else ""
        raise InputError(
            f"collection {name!r}: DST declares the filter fields {json.dumps(fields)}"
            f" (store.fields), which cannot hold SRC's items: item {found[0]}{more}; nothing of"
            f" {name!r} was copied: declare types that hold SRC's values in DST's store.fields,"
            " or leave those keys undeclared (filters on them read the metadata, with the same"
            " answers)"
        )
