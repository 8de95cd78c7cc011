"""Lazily exported package APIs: a capability's public names listed once, imported on first use.

A package sets `__getattr__, __dir__ = lazy_exports(__name__, EXPORTS)` and repeats the same
names under `if TYPE_CHECKING:` as plain imports, so `dir()`, `help()`, pyright and editors see
every public name while importing the package stays cheap (tests/test_exported_names.py keeps the
two lists equal)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module `__getattr__` that imports `name` from `exports[name]` on first use, and a module
    `__dir__` that lists the exported names beside what the package module itself holds."""
    module = importlib.import_module(package)

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            setattr(module, name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(exports))

    return __getattr__, __dir__
