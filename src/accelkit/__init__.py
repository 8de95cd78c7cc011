"""accelkit: fast, exact ML pipeline tools for accelerators, correct on a plain CPU."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("accelkit")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"

__all__ = ["__version__"]
