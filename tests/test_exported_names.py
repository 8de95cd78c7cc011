"""The public names of each package, pinned (as httpx's tests/test_exported_members.py does) and
visible to tools: `__all__` is the list below, `dir()` shows every name, each name resolves to the
object its module defines, and the `if TYPE_CHECKING:` imports that pyright and editors read name
exactly the same objects from the same modules."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

PUBLIC = {
    "accelkit.stats": [
        "BatchStream",
        "CheckReport",
        "Column",
        "ComputeResult",
        "DiffReport",
        "FixResult",
        "KeyStats",
        "RunSummary",
        "StatsResult",
        "StatsSettings",
        "Stream",
        "check",
        "compute",
        "compute_stats",
        "diff",
        "episode_stats",
        "fix",
        "open_source",
        "read_norm_stats",
        "write_sample_dataset",
        "write_stats",
    ],
    "accelkit.images": [
        "EmbedReport",
        "EmbeddingPipeline",
        "EmbeddingResult",
        "HealthReport",
        "Hit",
        "HostImagePreprocessor",
        "ImageDecodeError",
        "ImageEmbeddingPipeline",
        "ImageIndex",
        "ImageInput",
        "ImportReport",
        "IndexSpec",
        "InsertReport",
        "InsertResult",
        "JAXImagePreprocessor",
        "LocalIndex",
        "ModelConfig",
        "PreprocessConfig",
        "RemoteIndex",
        "SearchReport",
        "ServerConfig",
        "ServiceConfig",
        "Steering",
        "StoreConfig",
        "VectorStore",
        "create_collection",
        "decode_image",
        "delete_collection",
        "describe_collection",
        "embed",
        "flush_collection",
        "health",
        "import_model",
        "index_collection",
        "insert",
        "list_collections",
        "load_settings",
        "make_preprocessor",
        "open_index",
        "search",
        "serve",
        "set_model",
    ],
    "accelkit.quant": [
        "ApplyResult",
        "EvalResult",
        "EvalRow",
        "LayerSpec",
        "QuantConfig",
        "QuantLinear",
        "QuantReport",
        "apply",
        "evaluate",
        "load_config",
        "load_quantized",
        "model_factory",
        "quantize",
        "quantize_with_report",
        "save_quantized",
    ],
    "accelkit.bench": [
        "BenchRun",
        "Check",
        "EXPERIMENTS",
        "Result",
        "Timing",
        "defaults",
        "run",
        "validate",
    ],
}


def type_checking_imports(package: str) -> dict[str, str]:
    """name -> module, from the package's `if TYPE_CHECKING:` block."""
    path = SRC.joinpath(*package.split(".")) / "__init__.py"
    names = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for item in node.body:
                assert isinstance(item, ast.ImportFrom), ast.unparse(item)
                for alias in item.names:
                    names[alias.asname or alias.name] = item.module
    return names


LAZY_PACKAGES = [
    "accelkit.stats",
    "accelkit.images",
    "accelkit.images.service",
    "accelkit.images.store",
    "accelkit.quant",
    "accelkit.bench",
    "accelkit.bench.experiments.train",
]


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_public_names_are_pinned(package):
    assert importlib.import_module(package).__all__ == sorted(PUBLIC[package])


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_public_name_is_visible_and_resolves(package):
    module = importlib.import_module(package)
    assert set(module.__all__) <= set(dir(module))
    seen = type_checking_imports(package)
    assert sorted(seen) == sorted(module.__all__), "TYPE_CHECKING imports differ from __all__"
    for name in module.__all__:
        value = getattr(module, name)
        source = importlib.import_module(seen[name])
        assert getattr(source, name) is value, f"{package}.{name} is not {seen[name]}.{name}"


def test_unknown_names_are_attribute_errors():
    import accelkit.stats as stats

    with pytest.raises(AttributeError, match="no attribute 'computee'"):
        stats.computee  # noqa: B018


def test_importing_a_package_stays_cheap():
    """Listing the names for tools imports nothing heavy: no jax, torch, pyarrow, pymilvus."""
    code = (
        "import sys, accelkit.stats, accelkit.images, accelkit.quant, accelkit.bench\n"
        "for package in (accelkit.stats, accelkit.images, accelkit.quant, accelkit.bench):\n"
        "    dir(package)\n"
        "heavy = [m for m in ('jax', 'torch', 'pyarrow', 'pymilvus', 'onnxruntime') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
