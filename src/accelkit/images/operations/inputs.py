"""What the commands take as inputs, resolved before a model or a store opens: image files,
folders (searched recursively), globs and s3:// / gs:// URIs expanded into (path, name) pairs; a
mistyped path or a file that is not an image refused from its first bytes; metadata per image;
the sidecar files an embedding run writes beside its output."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from accelkit.errors import DataError, InputError
from accelkit.images.embedding.decode import FORMATS, header_cost
from accelkit.runtime import storage

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"}


def expand_named(paths: list[str], endpoint_url: str | None = None) -> list[tuple[str, str]]:
    """(path, name) for every input: files as given (named by their file name), folders searched
    recursively for image files (named by their path inside the folder), globs expanded (named by
    their path below the glob's fixed part); all sorted. The same for s3:// and gs:// URIs (a
    prefix is a folder). A path or glob that finds nothing stays in the list so it is reported as
    a failure."""
    import glob

    found: list[tuple[str, str]] = []
    for text in paths:
        if storage.is_uri(text) and not text.lower().startswith("file:"):
            found.extend(_expand_uri(text, endpoint_url))
            continue
        if storage.is_uri(text):
            text = str(storage.as_path(text))
        path = Path(text)
        if path.is_dir():
            files = sorted(
                p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES
            )
            found.extend((str(p), p.relative_to(path).as_posix()) for p in files)
        elif any(ch in text for ch in "*?["):
            fixed = Path(
                glob.escape(text[: min(text.find(ch) for ch in "*?[" if ch in text)])
            ).parent
            matches = sorted(m for m in glob.glob(text, recursive=True) if Path(m).is_file())
            found.extend((m, _relative(m, fixed)) for m in matches) if matches else found.append(
                (text, text)
            )
        else:
            found.append((text, path.name))
    seen: set[str] = set()
    return [(p, n) for p, n in found if not (p in seen or seen.add(p))]


def _expand_uri(text: str, endpoint_url: str | None) -> list[tuple[str, str]]:
    """`expand_named` for one object-storage URI: one listing of its fixed prefix."""
    import fnmatch

    wild = [text.find(ch) for ch in "*?[" if ch in text]
    if not wild:
        path = storage.as_path(text, endpoint_url)
        assert isinstance(path, storage.ObjectPath)  # `text` is a URI
        if path.is_dir():
            return [
                (str(p), p.relative_to(path).as_posix())
                for p in path.rglob("*")
                if p.suffix.lower() in IMAGE_SUFFIXES
            ]
        return [(text, path.name)]
    fixed = storage.as_path(text[: min(wild)], endpoint_url).parent
    assert isinstance(fixed, storage.ObjectPath)  # `text` is a URI
    pattern = str(storage.as_path(text, endpoint_url))
    matches = [p for p in fixed.rglob("*") if fnmatch.fnmatchcase(str(p), pattern)]
    return [(str(p), p.relative_to(fixed).as_posix()) for p in matches] or [(text, text)]


def open_items(items: list[str], endpoint_url: str | None = None) -> list:
    """What the decoder reads: local paths as they are, URIs as `storage.ObjectPath`s."""
    return [storage.as_path(i, endpoint_url) if storage.is_uri(i) else i for i in items]


def _relative(path: str, base: Path) -> str:
    try:
        return Path(path).relative_to(base).as_posix()
    except ValueError:
        return Path(path).name


def expand_inputs(paths: list[str]) -> list[str]:
    """The paths of `expand_named`."""
    return [path for path, _ in expand_named(paths)]


def missing_inputs(items: list[str]) -> dict[int, str]:
    """Inputs that are not readable files, found before any model or store is opened."""
    missing = {}
    for i, item in enumerate(items):
        if storage.is_uri(item):  # read (and reported) by the decoder: no request per object here
            continue
        path = Path(item)
        if not path.exists():
            missing[i] = f"{item}: no such file; check the path"
        elif not path.is_file():
            missing[i] = f"{item}: not a file"
        elif not os.access(path, os.R_OK):
            missing[i] = f"{item}: cannot read (permission denied)"
    return missing


HEADER_BYTES = 1 << 20  # enough for any image header, EXIF included


def check_image_header(item: str) -> None:
    """A local query that is not an image is refused from its first bytes, before the model or
    the store opens (objects on s3:// are read, and refused, by the decoder)."""
    if storage.is_uri(item):
        return
    with open(item, "rb") as handle:
        head = handle.read(HEADER_BYTES)
    if header_cost(head)[0] == 0:
        raise DataError(
            f"{item}: not an image this tool reads ({', '.join(FORMATS)}); give an image file"
        )


def sidecar_paths(output: Path) -> tuple[Path, Path]:
    """embeddings.npy -> (embeddings.inputs.txt, embeddings.failures.json)."""
    stem = output.with_suffix("") if output.suffix == ".npy" else output
    return stem.with_name(stem.name + ".inputs.txt"), stem.with_name(stem.name + ".failures.json")


def parse_metadata(text: str | dict | list | None, count: int) -> list[dict | None] | None:
    """Metadata for `count` images: one JSON object (for every image), a list (one per image), or
    as text (the CLI's `--metadata`, whose name its messages carry) JSON or a file holding it."""
    if text is None:
        return None
    if not isinstance(text, str):
        return _per_image(text, count, "metadata")
    source = text
    if not text.lstrip().startswith(("{", "[")):
        path = Path(text)
        if not path.is_file():
            raise InputError(f"--metadata {text!r} is neither JSON nor a file")
        source = path.read_text(encoding="utf-8")
    try:
        value = json.loads(source)
    except ValueError as exc:
        raise InputError(f"--metadata is not valid JSON ({exc})") from exc
    return _per_image(value, count, "--metadata")


def _per_image(value: Any, count: int, where: str) -> list[dict | None]:
    if isinstance(value, dict):
        return [dict(value) for _ in range(count)]
    if (
        isinstance(value, list)
        and len(value) == count
        and all(isinstance(v, dict) or v is None for v in value)
    ):
        return value
    raise InputError(
        f"{where} must be one JSON object or a list of {count} objects (one per image)"
    )
