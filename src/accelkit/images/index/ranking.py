"""Relevance you can cut and steer: pure functions over the scores and vectors of a search's
candidates (no store, no model), shared by every backend.

* `parse_terms`: "cat -glasses" -> positive "cat", negatives ["glasses"]. A term that starts
  with `-` after a space (or at the start) is negative; `-"two words"` is a negative phrase; a
  double-quoted phrase is literal text, so `"-5 degrees"` searches for those words, minus and
  all. Nothing else in the text has a meaning: the words go to the text tower as they are.
* `steer`: the query vector pushed away from negative texts, q = unit(p - w·mean(n)) with p and
  n unit vectors, so for unit stored vectors cos(x, q) = (cos(x, p) - w·mean cos(x, n)) /
  |p - w·n̄|: the ranking is exactly "similarity to the positive minus w times similarity to the
  negatives" (Qdrant's `average_vector` recommendation is p + (p - n̄), the same direction with
  w = 1/2), and the store searches it as one query: filters and the whole collection as for any
  query. Words against words: both come from the text tower, so their similarities to the
  photos spread alike and w weighs one against the other as it says.
* `push_away`: "less like this" on stored items (`negative_ids`), which the form above cannot
  do: a photo's similarities to the photos spread nothing like the words' do (the modality
  gap: in one model the photos lie in a narrow cone, image-image cosines ~0.97, and w·cos(x,
  n) is nearly the same for every photo, so the marked best result often stays first; in
  another it swamps the words and scrambles the ranking; docs/images.md has the measurements).
  What the query likes about a photo is measured from
  the centre instead: μ = the mean unit vector of the query's `STEER_CANDIDATES` best
  candidates (the same filter), the query's lead of photo x over them s(x) - s̄ = (x - μ)·q, and
  of a marked item e_i = (n_i - μ)·q. With P the orthogonal projection onto the span of the
  n_i - μ, the query becomes q' = unit(q - 2w·P q): for each marked item (n_i - μ)·q' ∝ (1 -
  2w)·e_i, so w = 1/2 (the default) makes each an average candidate, w = 1 puts it as far below
  the average as it was above (q' is q reflected), and any photo x loses 2w·(P(x - μ))·q: in
  proportion to how far it goes from the centre towards the marked items, so their
  near-duplicates go down with them. The strength comes from the query's own scores, so it is
  the same whatever the models' cones; q' is again one exact search over the whole collection
  (the candidates only place μ), and every score is cos(x, q').
* `fold`: near-duplicates (cosine >= threshold to a higher-ranked result) folded under it.
* `gap_cut`: the automatic cut where the scores show a clear gap (off by default).
* `cut`: min-score and the automatic cut applied; what is left, and what the page draws.
"""

from __future__ import annotations

import math
import numbers
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from accelkit.errors import InputError

DEFAULT_NEGATIVE_WEIGHT = 0.5  # Qdrant's average_vector: p + (p - n) = 2(p - n/2)
DEFAULT_FOLD = 0.95  # cosine at which a result is folded under a higher-ranked one
FOLD_OVERFETCH = 4  # candidates fetched per result asked for, when folding
MAX_NEGATIVES = 16
STEER_CANDIDATES = 100  # the query's best candidates whose centre "less like this" measures from
# The automatic cut (`gap_cut`): after rank j when the gap s_j - s_{j+1} is the largest, at
# least GAP_SHARE of the spread s_1 - s_n, GAP_OVER_MEAN times the mean of the other gaps and
# GAP_MIN (a cosine) — among at least GAP_MIN_SCORES scores
GAP_SHARE, GAP_OVER_MEAN, GAP_MIN, GAP_MIN_SCORES = 0.4, 4.0, 0.02, 4


@dataclass(frozen=True)
class Terms:
    """A text query split: `positive` (the words searched for) and `negatives` (pushed away)."""

    positive: str
    negatives: tuple[str, ...] = ()


def parse_terms(text: str, name: str = "text") -> Terms:
    """Split words and negative terms (see the module's doc). An unbalanced quote, an empty
    negative, no words to search for (only empty quotes, or only negatives) are an
    `InputError` naming `name`: the words are empty when they hold nothing but white space and
    invisible format characters (U+200B), as `schema.check_text` counts a text."""
    positive: list[str] = []
    negatives: list[str] = []
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
            continue
        negative = text[i] == "-" and i + 1 < n and not text[i + 1].isspace()
        start = i + 1 if negative else i
        if start < n and text[start] == '"':
            end = text.find('"', start + 1)
            if end < 0:
                raise InputError(
                    f"{name}: a quote opened at character {start + 1} is not closed; close it"
                    ' (a literal leading "-" is written inside quotes: "-word")'
                )
            term, i = text[start + 1 : end].strip(), end + 1
        else:
            end = start
            while end < n and not text[end].isspace():
                end += 1
            term, i = text[start:end], end
        if not term:
            if negative:
                raise InputError(f"{name}: an empty negative term ('-\"\"'); remove it")
            continue
        (negatives if negative else positive).append(term)
    if not negatives and _blank(" ".join(positive)):  # '""': nothing for the text tower
        raise InputError(f"{name}: only empty quotes ('\"\"'); give a few words to search for")
    if negatives and not positive:
        raise InputError(
            f"{name}: only negative terms ({', '.join(negatives)}); give words to search for"
            ' too, or quote a literal leading "-" ("-word")'
        )
    if len(negatives) > MAX_NEGATIVES:
        raise InputError(f"{name}: at most {MAX_NEGATIVES} negative terms, not {len(negatives)}")
    return Terms(" ".join(positive), tuple(negatives))


def _blank(text: str) -> bool:
    return all(ch.isspace() or unicodedata.category(ch) == "Cf" for ch in text)


def _unit(vector: np.ndarray) -> np.ndarray:
    vector = np.asarray(vector, np.float64)
    norm = float(np.linalg.norm(vector))
    if not math.isfinite(norm) or norm == 0:
        raise InputError("a query vector of length zero cannot be searched by direction")
    return vector / norm


def steer(positive: np.ndarray, negatives: Sequence[np.ndarray], weight: float) -> np.ndarray:
    """unit(unit(p) - weight·mean(unit(n_i))), in float64 then float32: see the module's doc."""
    p = _unit(positive)
    if not len(negatives):
        return p.astype(np.float32)
    n = np.mean([_unit(v) for v in negatives], axis=0)
    steered = p - weight * n
    if float(np.linalg.norm(steered)) < 1e-6:
        raise InputError("the negative terms cancel the query (the same direction); drop one")
    return _unit(steered).astype(np.float32)


def centre(vectors: Sequence[np.ndarray] | np.ndarray) -> np.ndarray | None:
    """The mean of the rows made unit length, in float64 (None when there are none)."""
    if not len(vectors):
        return None
    rows = np.asarray(vectors, np.float64)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.mean(rows / np.where(norms == 0, 1, norms), axis=0)


def push_away(
    query: np.ndarray, items: Sequence[np.ndarray], around: np.ndarray | None, weight: float
) -> np.ndarray:
    """unit(q - 2·weight·P q), q = unit(query), P the orthogonal projection onto the span of
    unit(n_i) - `around` (the candidates' `centre`), in float64 then float32: see the module's
    doc. No centre (no candidates) or no direction (every item is the centre): unit(q)."""
    q = _unit(query)
    if around is None or not len(items):
        return q.astype(np.float32)
    directions = np.stack([_unit(n) - around for n in items])
    _, sizes, rows = np.linalg.svd(directions, full_matrices=False)
    basis = rows[sizes > max(sizes.max(initial=0.0), 1e-12) * 1e-9]  # orthonormal rows
    pushed = q - 2 * weight * (basis.T @ (basis @ q))
    if float(np.linalg.norm(pushed)) < 1e-6:
        raise InputError(
            "the items marked 'less like this' hold the whole query; drop one or lower"
            " negative_weight"
        )
    return _unit(pushed).astype(np.float32)


def check_weight(weight: Any, name: str = "negative_weight") -> float:
    if isinstance(weight, bool) or not isinstance(weight, numbers.Real):
        raise InputError(f"{name} {weight!r} must be a number between 0 and 1")
    if not (math.isfinite(weight) and 0 < float(weight) <= 1):
        raise InputError(f"{name} {weight!r} must be a number greater than 0 and at most 1")
    return float(weight)


def check_min_score(value: Any, name: str = "min_score") -> float | None:
    """A finite score in [-1, 1] (a COSINE or IP similarity of unit vectors), or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{name} {value!r} must be a number between -1 and 1")
    if not (math.isfinite(value) and -1 <= float(value) <= 1):
        raise InputError(
            f"{name} {value!r} must be a finite number between -1 and 1 (a cosine similarity)"
        )
    return float(value)


def check_fold(value: Any, name: str = "fold_cosine") -> float | None:
    """A cosine threshold in (0, 1], or None (no folding)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{name} {value!r} must be a cosine between 0 and 1")
    if not (math.isfinite(value) and 0 < float(value) <= 1):
        raise InputError(f"{name} {value!r} must be a cosine greater than 0 and at most 1")
    return float(value)


def fold(vectors: np.ndarray, threshold: float, topk: int) -> list[tuple[int, list[int]]]:
    """Walk the candidates best first: one whose cosine with a result already kept is at least
    `threshold` is folded under the best-ranked such result, else it is kept; stop at the
    `topk`-th kept one. Returns (candidate position, positions folded under it) per kept one."""
    unit = np.asarray(vectors, np.float64)
    norms = np.linalg.norm(unit, axis=1, keepdims=True)
    unit = unit / np.where(norms == 0, 1, norms)
    kept: list[tuple[int, list[int]]] = []
    for i in range(len(unit)):
        if kept:
            heads = [k for k, _ in kept]
            likeness = unit[heads] @ unit[i]
            close = np.nonzero(likeness >= threshold)[0]
            if len(close):
                kept[int(close[0])][1].append(i)
                continue
        if len(kept) == topk:
            break
        kept.append((i, []))
    return kept


def gap_cut(scores: Sequence[float]) -> float | None:
    """The automatic cut: the score of the last result kept, or None when the scores show no
    clear gap. Sorted best first s_1 >= ... >= s_n (n >= GAP_MIN_SCORES), gaps g_j = s_j -
    s_{j+1}: cut after the largest gap g_j (the first, on a tie) when g_j >= GAP_SHARE·(s_1 -
    s_n), g_j >= GAP_OVER_MEAN·(the mean of the other gaps) and g_j >= GAP_MIN."""
    s = np.sort(np.asarray(scores, np.float64))[::-1]
    if len(s) < GAP_MIN_SCORES:
        return None
    gaps = s[:-1] - s[1:]
    j = int(np.argmax(gaps))
    spread = float(s[0] - s[-1])
    others = float(np.mean(np.delete(gaps, j)))
    if gaps[j] < max(GAP_SHARE * spread, GAP_OVER_MEAN * others, GAP_MIN):
        return None
    return float(s[j])


@dataclass
class Cut:
    """What the cut did: `scores` of the results before it (best first: the distribution the
    page draws), the `min_score` asked, the `auto` cut's score (None: none or not asked), the
    `threshold` applied (the higher of the two), `kept` and `dropped` results, and a `message`
    when nothing passed."""

    scores: list[float] = field(default_factory=list)
    min_score: float | None = None
    auto: bool = False
    auto_score: float | None = None
    threshold: float | None = None
    kept: int = 0
    dropped: int = 0

    @property
    def message(self) -> str | None:
        if self.kept or not self.scores or self.threshold is None:
            return None
        return f"no photo scores above {self.threshold:g} (the best scores {self.scores[0]:.4f})"

    def document(self) -> dict[str, Any]:
        return {
            "min_score": self.min_score,
            "auto": self.auto,
            "auto_score": self.auto_score,
            "threshold": self.threshold,
            "kept": self.kept,
            "dropped": self.dropped,
            "scores": self.scores,
            "message": self.message,
        }


def cut(scores: Sequence[float], min_score: float | None, auto: bool) -> Cut:
    """Keep the results (best first) scoring at least `min_score` and, with `auto`, at least
    the automatic cut's score; `Cut.kept` of them are kept, a prefix."""
    scores = [float(s) for s in scores]
    auto_score = gap_cut(scores) if auto else None
    limits = [x for x in (min_score, auto_score) if x is not None]
    threshold = max(limits) if limits else None
    kept = len(scores) if threshold is None else sum(1 for s in scores if s >= threshold)
    return Cut(scores, min_score, auto, auto_score, threshold, kept, len(scores) - kept)
