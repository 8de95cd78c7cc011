"""Lazily exported package APIs: a capability's public names listed once, imported on first use.

The one list is the package's `if TYPE_CHECKING:` block of `from module import name as name`
imports: pyright and editors read it as it stands (the redundant alias marks a name exported),
and at run time `lazy_exports` reads the same block from the package's source, so the names
make `__all__` and each is imported from its module on first use. Importing the package stays
cheap: nothing below it is imported until a name is asked for."""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def exported_names(source: str) -> dict[str, str]:
    """name -> module, from the `if TYPE_CHECKING:` block of a package's source."""
    names: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for item in node.body:
                if not isinstance(item, ast.ImportFrom) or not item.module or item.level:
                    raise TypeError(f"not an absolute `from … import`: {ast.unparse(item)}")
                for alias in item.names:
                    names[alias.asname or alias.name] = item.module
    return names


def lazy_exports(
    package: str,
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """For package `package`: a module `__getattr__` that imports an exported name from its module
    on first use, a module `__dir__` that lists the exported names beside what the package module
    itself holds, and `__all__` (the exported names, sorted)."""
    module = sys.modules[package]
    exports = exported_names(Path(str(module.__file__)).read_text(encoding="utf-8"))

    def __getattr__(name: str) -> Any:
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
            setattr(module, name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(exports))

    return __getattr__, __dir__, sorted(exports)
