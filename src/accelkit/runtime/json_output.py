"""What `--json` prints (docs/cli.md): one envelope per command, on stdout, whatever happened."""

from __future__ import annotations

import json
from collections.abc import Mapping
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
