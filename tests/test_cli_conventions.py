"""Every command follows docs/cli.md: `--help` works, `--json` is a flag on every command that
produces a result, `--output` always takes a path, and the exit codes are the documented ones."""

import pytest
import typer

from accelkit.cli import app, main
from accelkit.errors import AccelkitError, CheckFailed, ConfigError, DataError
from tests.support.cli import documented_result_keys, envelope_of, run_cli

NO_RESULT = {("images", "serve")}  # runs until stopped


def commands(command=None, path=()):
    command = command or typer.main.get_command(app)
    subcommands = getattr(command, "commands", None)
    if subcommands:
        for name, sub in sorted(subcommands.items()):
            # a hidden subcommand is its group's default (`stats DATASET` runs `stats compute`)
            yield from commands(sub, path if getattr(sub, "hidden", False) else (*path, name))
    else:
        yield path, command


ALL = list(commands())


def option(command, name):
    return next((p for p in command.params if name in getattr(p, "opts", ())), None)


def test_every_capability_is_mounted():
    tops = {path[0] for path, _ in ALL}
    assert {"stats", "images", "quant", "bench", "devices", "sample-dataset"} <= tops
    assert len(ALL) >= 20


@pytest.mark.parametrize(("path", "command"), ALL, ids=[" ".join(p) for p, _ in ALL])
def test_conventions(path, command, capsys):
    with pytest.raises(SystemExit) as done:
        main([*path, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip()
    json_flag = option(command, "--json")
    if path not in NO_RESULT:
        assert json_flag is not None, f"{' '.join(path)} has no --json"
    if json_flag is not None:
        assert json_flag.is_flag, f"{' '.join(path)}: --json must print to stdout, not take a path"
    output = option(command, "--output")
    if output is not None:
        assert not output.is_flag, f"{' '.join(path)}: --output must take a path"


def test_every_json_command_is_in_the_documented_result_table():
    documented = documented_result_keys()
    with_json = {" ".join(p) for p, c in ALL if option(c, "--json") is not None}
    assert with_json == set(documented), with_json ^ set(documented)


@pytest.mark.parametrize(
    "path",
    [p for p, c in ALL if option(c, "--json") is not None],
    ids=lambda p: " ".join(p),
)
def test_every_json_command_prints_the_envelope_when_it_fails(path, capsys):
    """A failure (here an unknown option) prints the envelope with ok false and the one-line
    error on stdout, as a success prints it with the result."""
    code, out, err = run_cli([*path, "--json", "--no-such-option"], capsys)
    assert code == 2 and err.startswith("error: ")
    document = envelope_of(out)
    assert document["command"] == " ".join(path) and document["ok"] is False
    assert document["result"] is None and document["error"]["exit_code"] == 2
    assert document["error"]["message"] in err


def test_exit_codes_are_the_documented_ones():
    assert AccelkitError.exit_code == 2
    assert ConfigError.exit_code == DataError.exit_code == 2
    assert CheckFailed.exit_code == 3


def test_long_work_says_what_runs_and_quiet_silences_it(capsys):
    from accelkit.runtime import progress

    try:
        with pytest.raises(SystemExit) as done:
            main(["bench", "scipy", "numpy", "--repeats", "2"])
        assert done.value.code in (0, None)
        assert "bench scipy: running" in capsys.readouterr().err
        with pytest.raises(SystemExit) as done:
            main(["--quiet", "bench", "scipy", "numpy", "--repeats", "2"])
        assert done.value.code in (0, None)
        assert "running" not in capsys.readouterr().err
    finally:
        progress.set_quiet(False)


def test_status_line_in_a_log_is_timed_lines(capsys):
    from accelkit.runtime.progress import end_command, start_command, status

    start_command("test")
    try:
        with status("loading…") as update:
            update("step 1")
            update("step 2")  # within a second of the last line: held back, then shown at the end
    finally:
        end_command()
    err = capsys.readouterr().err.splitlines()
    assert err[0].endswith("] loading…") and err[-1].endswith("] step 2")


def test_outside_a_command_the_activity_line_is_silent(capsys):
    """Library calls (a benchmark's `timing.measure`, a notebook) print no progress of ours."""
    from accelkit.runtime.progress import Steps, activity

    activity("working")
    Steps(3, "steps").advance("one")
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],  # typer's help: rich's console meets the closed pipe
        ["stats", "check", "tests/stats/fixtures/lerobot_v30"],  # our table (exit 3 otherwise)
        ["stats", "diff", "{a}", "{a}"],
    ],
)
def test_a_closed_stdout_ends_quietly_with_141_never_1(args, tmp_path):
    """`accelkit … | head -1` once exited 1 (an "internal error") with nothing said: the reader
    of stdout going away is the user's doing and ends like a Unix tool's SIGPIPE, 141."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    stats = tmp_path / "a.json"
    if "{a}" in args:
        subprocess.run(
            [sys.executable, "-m", "accelkit", "stats", "tests/stats/fixtures/lerobot_v30", "-o",
             str(stats)], cwd=root, check=True, capture_output=True,
        )  # fmt: skip
    read, write = os.pipe()
    os.close(read)  # the reader has gone before anything is written
    try:
        done = subprocess.run(
            [sys.executable, "-m", "accelkit", *[a.replace("{a}", str(stats)) for a in args]],
            cwd=root,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    finally:
        os.close(write)
    assert done.returncode == 141, (done.returncode, done.stderr)
    assert "error" not in done.stderr.lower() and "Traceback" not in done.stderr, done.stderr
