"""The store's errors, each one line without engine internals: pymilvus' messages carry C++
operator names, plan node ids, source paths and temporary sockets that say nothing to the user
(and too much to an attacker)."""

from __future__ import annotations

import re

from accelkit.errors import AccelkitError, InputError, NoSpaceError


class StoreError(AccelkitError):
    """The vector store cannot be reached or refused an operation."""


class StoreFullError(StoreError, NoSpaceError):
    """The file system under a Milvus Lite database has no room for a write: refused before it is
    sent, since Milvus Lite answers a write it cannot persist as done and loses it on close."""


class CollectionNotFoundError(InputError):
    """The named collection does not exist."""


class ForeignCollectionError(InputError):
    """The named collection was made by another program, with a schema accelkit does not read
    or write (its id, vector and metadata fields)."""


class CollectionExistsError(InputError):
    """A collection of that name exists already."""


class StoreTimeoutError(StoreError):
    """A store call ran past `store.timeout`."""


class StoreUnavailableError(StoreTimeoutError):
    """A store call ran past `store.timeout` because the store does not answer at all (a server
    down or restarting, a collection it has not loaded again yet): unavailable (HTTP 503), not
    slow (504)."""


class FilterError(InputError):
    """Milvus refused a filter expression: one line, without the engine's internals."""

    def __init__(self, filter_expr: str, cause: BaseException):
        shown = filter_expr if len(filter_expr) <= 80 else filter_expr[:77] + "..."
        super().__init__(
            f"filter {shown!r} was refused: {_filter_reason(str(cause))}; "
            'write it like metadata["album"] == "2026" (docs/images.md: What the store accepts)'
        )


class FilterNotOnEngine(FilterError):
    """A filter this engine would read otherwise than Milvus does (Milvus Lite 3:
    `filters.for_lite3`)."""

    def __init__(self, filter_expr: str, reason: str):
        shown = filter_expr if len(filter_expr) <= 80 else filter_expr[:77] + "..."
        InputError.__init__(self, f"filter {shown!r} is refused on this engine: {reason}")


_FILTER_REASONS = (  # (what Milvus says, what we say): its other messages are engine internals
    (r"field (\S+) not exist", 'there is no field {0}; filter on id or metadata["key"]'),
    (r"token recognition error at: '(.{0,20}?)'", "it cannot read {0!r}"),
    (
        r"(?:mismatched|extraneous|no viable alternative at) input '(.{0,20}?)'",
        "it did not expect {0!r}",
    ),
    (
        r"type check failed|not a boolean|ColumnVector|must be bool",
        "it is not a true/false condition on values of one type",
    ),
    (r"unsupported", "it uses an operation this Milvus does not support"),
)


def _filter_reason(text: str) -> str:
    """What was wrong with a filter, in our words: Milvus' messages carry C++ operator names,
    plan node ids and source paths that say nothing to the user (and too much to an attacker)."""
    for pattern, phrase in _FILTER_REASONS:
        found = re.search(pattern, text, re.S)
        if found:
            groups = [g.strip() for g in found.groups()]
            return phrase.format(*groups)
    return "Milvus could not parse or evaluate it"


def _unreachable(exc: BaseException) -> bool:
    """The store itself is down (not the filter's fault): its error must stay a 503."""
    text = str(exc).lower()
    return "fail connecting" in text or "unavailable" in text or "is closed" in text


def _collection_gone(exc: BaseException) -> bool:
    """Milvus answered that the collection a call named does not exist (a server: "collection
    not found[...]"; Milvus Lite 2.5: "Can not find NAME's schema: collection not found"; Milvus
    Lite 3's describe: "collection 'NAME' does not exist")."""
    text = str(exc)
    return bool(
        re.search(r"collection not (?:found|exist)", text, re.I)
        or re.search(r"collection '[^']*' does not exist", text, re.I)
    )


def _timed_out(exc: BaseException) -> bool:
    text = f"{type(exc).__name__} {exc}".lower()
    return "deadline" in text or "timeout" in text or "timed out" in text


def _reason(exc: BaseException) -> str:
    """pymilvus' exception text without its wrapper: `<MilvusException: (code=1, message=...)>` -> message."""
    text = str(exc)
    found = re.search(r"message=(.*)\)>?$", text, re.S)
    text = found.group(1) if found else text
    text = re.sub(r"\s+at /\S+", "", text)  # C++ source locations
    text = re.sub(r"unix:[^\s,]+", "the Milvus Lite engine", text)  # its socket: a temporary path
    text = re.sub(r"(?<![\w.])/(?:[\w.-]+/)+[\w.-]*", "<path>", text)  # this machine's paths
    return " ".join(text.split()) or type(exc).__name__
