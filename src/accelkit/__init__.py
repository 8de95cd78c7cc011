"""accelkit: fast, exact ML pipeline tools for accelerators, correct on a plain CPU."""

__all__ = ["__version__"]
__version__: str  # declared for type checkers; its value comes from `__getattr__` on first use


def __getattr__(name: str) -> str:
    # read from the installed metadata on first use: importlib.metadata costs a command's
    # start-up a tenth of a second, and most commands never print the version
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("accelkit")
        except PackageNotFoundError:  # running from a source tree that was never installed
            found = "0.0.0+source"
        globals()["__version__"] = found
        return found
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
