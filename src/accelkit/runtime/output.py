"""Shared output helpers: what `--json` prints (docs/cli.md), and lazily exported package APIs."""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping
from datetime import UTC
from typing import Any

ENVELOPE_KEYS = ("command", "accelkit", "ok", "result", "warnings", "run", "error")
_command = {"name": "", "started": None, "started_utc": None}


def begin(command: str) -> None:
    """A command starts: its name (`stats`, `images search`) and clock for the --json envelope."""
    import time
    from datetime import datetime

    _command.update(
        name=command,
        started=time.perf_counter(),
        started_utc=datetime.now(UTC).isoformat(timespec="seconds"),
        printed=False,
    )


def envelope(
    result: Any,
    *,
    ok: bool = True,
    run: Mapping[str, Any] | None = None,
    warnings: list[str] | None = None,
    error: Mapping[str, Any] | None = None,
) -> dict:
    """The one JSON document every `--json` prints (docs/cli.md): what ran, whether it did what
    was asked (`ok`), the command's own result, the warnings it gave, facts of the run (when, how
    long, and the command's own run facts), and, when it failed, the error."""
    import time

    from accelkit import __version__
    from accelkit.runtime.logs import recorded

    started = _command["started"]
    return {
        "command": _command["name"],
        "accelkit": __version__,
        "ok": ok,
        "result": result,
        "warnings": [*recorded.messages, *(warnings or [])],
        "run": {
            "started_utc": _command["started_utc"],
            "seconds": None if started is None else round(time.perf_counter() - started, 3),
            **(run or {}),
        },
        "error": None if error is None else dict(error),
    }


def print_json(
    result: Any,
    *,
    ok: bool = True,
    run: Mapping[str, Any] | None = None,
    warnings: list[str] | None = None,
) -> None:
    """`--json`: the command's result in the envelope, indented, on stdout (anything else goes
    to stderr)."""
    _print(envelope(result, ok=ok, run=run, warnings=warnings))
    _command["printed"] = True


def print_error_json(message: str, exit_code: int) -> None:
    """`--json` when the command failed before printing its document: the envelope with ok false
    and the error, so a script reads one shape whatever happened."""
    if _command.get("printed"):
        return
    _print(envelope(None, ok=False, error={"message": message, "exit_code": exit_code}))
    _command["printed"] = True


def _print(document: dict) -> None:
    from accelkit.runtime.progress import pause

    pause()
    print(json.dumps(document, indent=2, default=str), flush=True)


def stdout_console():
    """The console results and tables print on (stdout), after the activity line comes down: the
    terminal's width on a terminal, whole lines (140 columns) in logs and pipes."""
    import sys

    from rich.console import Console

    from accelkit.runtime.progress import pause

    pause()
    return Console(width=None if sys.stdout.isatty() else 140)


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
