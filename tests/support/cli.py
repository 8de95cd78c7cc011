"""Run the accelkit CLI in-process, as a user would from a shell."""

from pathlib import Path

import pytest

from accelkit.cli import main


def run_cli(args, capsys):
    """(exit code, stdout, stderr) of `accelkit ARGS`."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


ENVELOPE_KEYS = {"command", "accelkit", "ok", "result", "warnings", "run", "error"}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def documented_result_keys() -> dict[str, set[str]]:
    """docs/cli.md's table: the keys each command's --json `result` always has."""
    import re

    table = {}
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        commands = re.findall(r"`([a-z][a-z -]*)`", cells[0])
        keys = set(re.findall(r"`([a-z_]+)`", cells[1].split("(")[0]))
        for command in commands:
            table[command] = keys
    return table


def envelope_of(printed: str) -> dict:
    """The --json document every command prints (docs/cli.md), checked for its shape and, on
    success, for the result keys the docs promise for that command."""
    import json

    document = json.loads(printed)
    assert set(document) == ENVELOPE_KEYS, sorted(document)
    assert isinstance(document["ok"], bool) and isinstance(document["warnings"], list)
    assert isinstance(document["run"], dict) and "seconds" in document["run"]
    if document["error"] is not None:
        assert set(document["error"]) == {"message", "exit_code"} and not document["ok"]
    if document["result"] is not None:
        promised = documented_result_keys()[document["command"]]
        assert promised <= set(document["result"]), (document["command"], sorted(promised))
    return document


def result_of(printed: str):
    """The command's own result inside the --json envelope."""
    return envelope_of(printed)["result"]
