"""Errors that speak to the user.

Every error a user can fix is an `AccelkitError`: its message names the input, says what is wrong
and what to do, on one line. The CLI prints it as `error: …` and exits with `exit_code` (2; 3 for a
failed check, `CheckFailed`). Anything else is an internal failure and exits 1. See docs/cli.md.
"""

from typing import Any


class AccelkitError(Exception):
    """Bad input or configuration; the message tells the user what to change."""

    exit_code = 2
    # where a remote accelkit service answered with this error (accelkit.images.index.remote):
    # its machine-readable code and detail
    code: str | None = None
    detail: Any = None


class InputError(AccelkitError):
    """A file, folder or value given by the user cannot be used as it is."""


class DataError(InputError):
    """The data itself is unusable: missing column, ragged rows, NaN/Inf, empty, corrupt file."""


class NoSpaceError(InputError):
    """The file system holding an output is full (or over its quota): exit 2, the output named and
    left as it was (docs/reliability.md)."""


class ConfigError(AccelkitError):
    """A config file, environment variable or option is invalid."""


class DeviceError(AccelkitError):
    """No usable device for the requested work."""


class CheckFailed(AccelkitError):
    """A check or target the command was asked to verify failed (a correctness check, a health
    check): exit code 3, so scripts can tell it from bad input (2) and internal errors (1)."""

    exit_code = 3
    # True where the message already says how to go on: a caller adds no "run it again" of its own
    advised: bool = False


class MissingDependencyError(AccelkitError):
    """An optional dependency of a capability is not installed."""

    def __init__(self, module: str, extra: str):
        super().__init__(
            f"{module} is not installed; install it with: pip install 'accelkit[{extra}]'"
        )


def require(module: str, extra: str):
    """Import an optional dependency, or raise an error that says which extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(module, extra) from exc


def one_line(message: str) -> str:
    """`message` on one line: a library's text quoted inside it (pyarrow's, Milvus') may end in or
    hold line breaks; each break and the blanks around it become one space, and any other
    control character is shown escaped (\\x0f), never sent to the terminal."""
    import re

    flat = re.sub(r"\s*[\r\n]+\s*", " ", message).strip()
    return re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", flat)
