"""Run the accelkit CLI in-process, as a user would from a shell."""

import pytest

from accelkit.cli import main


def run_cli(args, capsys):
    """(exit code, stdout, stderr) of `accelkit ARGS`."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err
