"""Run the accelkit CLI in-process, as a user would from a shell."""

import pytest

from accelkit.cli import main


def run_cli(args, capsys):
    """(exit code, stdout, stderr) of `accelkit ARGS`."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


ENVELOPE_KEYS = {"command", "accelkit", "ok", "result", "warnings", "run", "error"}


def envelope_of(printed: str) -> dict:
    """The --json document every command prints (docs/cli.md), checked for its shape."""
    import json

    document = json.loads(printed)
    assert set(document) == ENVELOPE_KEYS, sorted(document)
    assert isinstance(document["ok"], bool) and isinstance(document["warnings"], list)
    assert isinstance(document["run"], dict) and "seconds" in document["run"]
    assert (document["error"] is None) == (document["ok"] or document["result"] is not None)
    return document


def result_of(printed: str):
    """The command's own result inside the --json envelope."""
    return envelope_of(printed)["result"]
