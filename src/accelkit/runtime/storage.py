"""Paths on object storage (`s3://`, `gs://`) beside local ones, through pyarrow's filesystems.

`as_path(text)` turns what the user typed into something with the part of `pathlib.Path`'s API that
the readers use: a plain `Path` for a local path or a `file://` URI (so the local path is exactly
what it always was), an `ObjectPath` for `s3://bucket/key` or `gs://bucket/key`. Credentials come
from the usual places (for S3: `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN`,
`~/.aws`, an instance role; for GCS: `GOOGLE_APPLICATION_CREDENTIALS` or the metadata server). An
S3-compatible store (MinIO, Ceph, moto) is reached with the standard `AWS_ENDPOINT_URL` (or
`AWS_ENDPOINT_URL_S3`), or an explicit `endpoint_url` (a flag or config entry), which wins: pyarrow
itself ignores those variables.

An `ObjectPath` pickles (filesystem and key), so Ray tasks can read the same objects; each worker
resolves credentials from its own environment.
"""

from __future__ import annotations

import fnmatch
import io
import os
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from accelkit.errors import InputError

SCHEMES = ("s3", "gs", "gcs")
LISTING_THREADS = 16  # footers and listings read concurrently from object storage
ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")


def is_uri(text: object) -> bool:
    """True for `s3://`, `gs://`, `gcs://` and `file://` strings."""
    if not isinstance(text, str) or "://" not in text:
        return False
    return urlsplit(text).scheme.lower() in (*SCHEMES, "file")


def endpoint_from_env(env=None) -> str | None:
    env = os.environ if env is None else env
    return next((env[name] for name in ENDPOINT_VARIABLES if env.get(name)), None)


def filesystem(scheme: str, endpoint_url: str | None = None):
    """A pyarrow filesystem for `scheme` (s3 or gs), credentials from the environment."""
    from pyarrow import fs

    if scheme == "s3":
        endpoint = endpoint_url or endpoint_from_env()
        options = {}
        if endpoint:
            parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise InputError(
                    f"S3 endpoint {endpoint!r} is not a URL like http://host:port; fix "
                    "--endpoint-url or AWS_ENDPOINT_URL"
                )
            options["endpoint_override"] = f"{parts.scheme}://{parts.netloc}"
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region:
            options["region"] = region
        return fs.S3FileSystem(**options)
    return fs.GcsFileSystem()


def as_path(text: str | os.PathLike, endpoint_url: str | None = None):
    """A local `Path`, or an `ObjectPath` for an object-storage URI."""
    if not is_uri(text):
        return Path(text).expanduser()
    parts = urlsplit(str(text))
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise InputError(f"{text} names host {parts.netloc!r}; file:// URIs are local paths")
        return Path(parts.path)
    if not parts.netloc:
        raise InputError(f"{text} names no bucket; write {scheme}://BUCKET/PATH")
    scheme = "gs" if scheme == "gcs" else scheme
    key = f"{parts.netloc}/{parts.path.strip('/')}".rstrip("/")
    return ObjectPath(scheme, key, filesystem(scheme, endpoint_url))


class ObjectPath:
    """`bucket/key` on one pyarrow filesystem, with the Path methods the readers use."""

    __slots__ = ("fs", "key", "scheme")

    def __init__(self, scheme: str, key: str, fs):
        self.scheme, self.key, self.fs = scheme, key.strip("/"), fs

    # --- names ---
    def __str__(self) -> str:
        return f"{self.scheme}://{self.key}"

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, ObjectPath) and (self.scheme, self.key) == (
            other.scheme,
            other.key,
        )

    def __hash__(self) -> int:
        return hash((self.scheme, self.key))

    def __lt__(self, other: ObjectPath) -> bool:
        return self.key < other.key

    def __truediv__(self, part) -> ObjectPath:
        return ObjectPath(self.scheme, f"{self.key}/{PurePosixPath(str(part))}", self.fs)

    @property
    def _pure(self) -> PurePosixPath:
        return PurePosixPath(self.key)

    @property
    def name(self) -> str:
        return self._pure.name

    @property
    def suffix(self) -> str:
        return self._pure.suffix

    @property
    def stem(self) -> str:
        return self._pure.stem

    @property
    def parent(self) -> ObjectPath:
        return ObjectPath(self.scheme, str(self._pure.parent), self.fs)

    def expanduser(self) -> ObjectPath:
        return self

    def resolve(self) -> ObjectPath:
        return self

    def relative_to(self, other: ObjectPath) -> PurePosixPath:
        return self._pure.relative_to(other._pure)

    # --- queries ---
    def _info(self):
        from pyarrow import fs

        try:
            return self.fs.get_file_info(self.key)
        except OSError as exc:
            raise InputError(f"cannot reach {self}: {exc}; check the URI and credentials") from exc
        except Exception:  # a malformed key
            return fs.FileInfo(self.key, fs.FileType.NotFound)

    def exists(self) -> bool:
        from pyarrow import fs

        return self._info().type != fs.FileType.NotFound

    def is_file(self) -> bool:
        from pyarrow import fs

        return self._info().type == fs.FileType.File

    def is_dir(self) -> bool:
        from pyarrow import fs

        return self._info().type == fs.FileType.Directory

    def rglob(self, pattern: str) -> list[ObjectPath]:
        """Files below this folder whose name matches `pattern` (files only: object stores
        have no folders of their own)."""
        from pyarrow import fs

        try:
            infos = self.fs.get_file_info(fs.FileSelector(self.key, recursive=True))
        except OSError as exc:
            raise InputError(f"cannot list {self}: {exc}; check the URI and credentials") from exc
        return sorted(
            ObjectPath(self.scheme, info.path, self.fs)
            for info in infos
            if info.type == fs.FileType.File
            and fnmatch.fnmatch(PurePosixPath(info.path).name, pattern)
        )

    # --- reading and writing ---
    def read_bytes(self) -> bytes:
        try:
            with self.fs.open_input_stream(self.key) as handle:
                return handle.read()
        except FileNotFoundError as exc:
            raise InputError(f"{self} does not exist; check the URI") from exc
        except OSError as exc:
            raise InputError(f"cannot read {self}: {exc}; check the URI and credentials") from exc

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def open_binary(self):
        """A seekable file object (numpy's np.load reads it)."""
        return io.BytesIO(self.read_bytes())

    def write_bytes(self, data: bytes) -> None:
        """One upload: the object appears whole when it completes, or not at all."""
        try:
            with self.fs.open_output_stream(self.key) as handle:
                handle.write(data)
        except OSError as exc:
            raise InputError(f"cannot write {self}: {exc}; check the URI and credentials") from exc

    def __reduce__(self):
        return (ObjectPath, (self.scheme, self.key, self.fs))


def arrow_source(path) -> tuple[str | Path, object | None]:
    """(source, filesystem) for pyarrow readers: a local path as it is, an object by its key."""
    if isinstance(path, ObjectPath):
        return path.key, path.fs
    return path, None


def files_under(root, pattern: str) -> list:
    """Files (not folders) below `root` whose name matches `pattern`, sorted."""
    if isinstance(root, ObjectPath):
        return root.rglob(pattern)
    return sorted(p for p in root.rglob(pattern) if p.is_file())
