"""The public names of each package, listed once — the package's `if TYPE_CHECKING:` block
(runtime/exports.py) — and visible to tools: `__all__` is that list, `dir()` shows every name,
each name resolves at run time to the object its module defines, and pyright reads each as
exported (`name as name`). As httpx's tests/test_exported_members.py, the test reads the list
rather than repeating it."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def lazy_packages() -> list[str]:
    """Every package whose __init__ exports its names lazily."""
    return sorted(
        ".".join(path.relative_to(SRC).parent.parts)
        for path in SRC.rglob("__init__.py")
        if "lazy_exports(__name__)" in path.read_text()
    )


def type_checking_block(package: str) -> list[ast.ImportFrom]:
    path = SRC.joinpath(*package.split(".")) / "__init__.py"
    blocks = [
        node
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1, f"{package}: one `if TYPE_CHECKING:` block of exports"
    return blocks[0].body  # type: ignore[return-value]


def test_the_lazy_packages_are_found():
    assert {"accelkit.stats", "accelkit.images", "accelkit.quant", "accelkit.bench"} <= set(
        lazy_packages()
    )


@pytest.mark.parametrize("package", lazy_packages())
def test_every_public_name_is_exported_once_visible_and_resolves(package):
    module = importlib.import_module(package)
    block = type_checking_block(package)
    listed = []
    for item in block:
        assert isinstance(item, ast.ImportFrom), ast.unparse(item)
        for alias in item.names:
            assert alias.asname == alias.name, f"{package}: write `{alias.name} as {alias.name}`"
            listed.append((alias.name, item.module))
    names = [name for name, _ in listed]
    assert len(names) == len(set(names)), f"{package}: a name listed twice"
    assert module.__all__ == sorted(names)
    assert set(module.__all__) <= set(dir(module))
    for name, source in listed:
        assert not name.startswith("_"), name
        value = getattr(module, name)
        assert getattr(importlib.import_module(source), name) is value, f"{package}.{name}"
    star: dict = {}
    exec(f"from {package} import *", star)
    assert set(star) - {"__builtins__"} == set(names)


def test_unknown_names_are_attribute_errors():
    import accelkit.stats as stats

    with pytest.raises(AttributeError, match="no attribute 'computee'"):
        stats.computee  # noqa: B018


def test_importing_a_package_stays_cheap():
    """Listing the names for tools imports nothing heavy: no jax, torch, pyarrow, pymilvus."""
    code = (
        "import sys, accelkit.stats, accelkit.images, accelkit.quant, accelkit.bench\n"
        "for package in (accelkit.stats, accelkit.images, accelkit.quant, accelkit.bench):\n"
        "    dir(package), package.__all__\n"
        "heavy = [m for m in ('jax', 'torch', 'pyarrow', 'pymilvus', 'onnxruntime') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
