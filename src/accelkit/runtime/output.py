"""Shared output helpers: what `--json` prints (docs/cli.md), and lazily exported package APIs."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from typing import Any


def print_json(value: Any) -> None:
    """`--json`: the command's result as indented JSON on stdout (anything else goes to stderr)."""
    print(json.dumps(value, indent=2, default=str), flush=True)


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` that imports `name` from `exports[name]` on first use, so importing
    a capability's package stays cheap while its public API is listed in one place."""

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def command_group(name: str, help: str):
    """A typer group with the settings every accelkit command shares: help without arguments, no
    shell-completion options, our own one-line errors instead of typer's tracebacks, plain help."""
    import typer

    return typer.Typer(
        name=name,
        help=help,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )


def endpoint_option():
    """`--endpoint-url`, the same on every command that takes s3:// paths."""
    import typer

    return typer.Option(
        "--endpoint-url",
        help="s3:// paths: an S3-compatible store's URL, e.g. http://127.0.0.1:9000"
        " (default: AWS_ENDPOINT_URL; credentials from the AWS environment variables).",
    )


def ray_option(what: str, note: str = ""):
    """`--ray ADDRESS|auto|local`, the same on every command that runs on a Ray cluster."""
    import typer

    return typer.Option(
        "--ray",
        help=f"Run {what} on a Ray cluster: its ADDRESS (host:port, ray://host:port), auto (the"
        f" cluster this machine joined) or local (a private one on this machine).{note}",
    )
