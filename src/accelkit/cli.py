"""The `accelkit` command: one root, each capability mounts its commands here.

Heavy libraries (jax, torch, pyarrow) are imported inside the commands that need them, so
`accelkit --help` answers at once; a capability's command (`accelkit stats …`) mounts only that
capability, so it imports nothing of the others (no images config, no quant models). Errors a
user can fix print `error: …` on one line and exit 2; `--debug` shows the traceback; anything
else is an internal failure and exits 1.
"""

from __future__ import annotations

import functools
import signal
import sys
from typing import Annotated, Protocol, TypeGuard

import typer

from accelkit.errors import AccelkitError, one_line
from accelkit.runtime.cli_options import command_group


def _version(value: bool) -> None:
    if value:
        from accelkit import __version__  # read from the installed metadata: only when asked

        typer.echo(f"accelkit {__version__}")
        raise typer.Exit()


def root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks and debug logs.")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show informational logs.")
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option(
            "--quiet", "-q", help="No progress bars or status lines (results and errors only)."
        ),
    ] = False,
) -> None:
    from accelkit.runtime import logs, progress

    logs.configure(debug=debug, verbose=verbose)  # third-party chatter hidden unless --debug
    progress.set_quiet(quiet)


def devices(
    platform: Annotated[
        str | None, typer.Option("--platform", help="Ask for cpu or gpu, as a command would.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """What JAX and PyTorch see, and which platform accelkit would choose and why."""
    from accelkit.runtime.devices import describe_devices
    from accelkit.runtime.json_output import print_json

    info = describe_devices(platform)
    if as_json:
        print_json(info)
        return
    from accelkit.runtime.tables import print_table

    rows = []
    jax_info, torch_info = info["jax"], info["torch"]
    if "error" in jax_info:
        rows.append(["jax", jax_info["error"], "-"])
    else:
        seen = "; ".join(
            f"{p}: {', '.join(d) if d else 'none'}" for p, d in jax_info["backends"].items()
        )
        rows.append(
            [f"jax {jax_info['version']}", seen, f"{jax_info['chosen']} ({jax_info['reason']})"]
        )
    if "error" in torch_info:
        rows.append(["torch", torch_info["error"], "-"])
    else:
        cuda = ", ".join(torch_info["cuda_devices"]) or "no CUDA device"
        rows.append([f"torch {torch_info['version']}", cuda, torch_info["chosen"]])
    print_table("accelkit devices", ["framework", "what it sees", "choice"], rows)


CAPABILITIES = ("stats", "images", "quant", "bench")
# The top-level commands each capability's `register` adds (tests/test_cli.py holds it to what
# they add): `accelkit COMMAND …` mounts only COMMAND's capability.
COMMANDS = {
    "stats": ("stats", "sample-dataset"),
    "images": ("images",),
    "quant": ("quant",),
    "bench": ("bench",),
}


@functools.cache
def root_group(capabilities: tuple[str, ...] = CAPABILITIES) -> typer.Typer:
    """The `accelkit` group with `capabilities` mounted: each one's `accelkit.<name>.cli.register`
    adds its commands. Those modules import only typer and their settings at module level, so
    `accelkit --help` stays fast."""
    import importlib

    group = command_group(
        "accelkit",
        "Fast, exact ML pipeline tools for accelerators, correct on a plain CPU.",
    )
    group.callback()(root)
    group.command()(devices)
    for name in CAPABILITIES:
        if name in capabilities:
            importlib.import_module(f"accelkit.{name}.cli").register(group)
    return group


def capabilities_for(args: list[str]) -> tuple[str, ...]:
    """The capabilities a command line needs: the one owning its command (root options are flags
    and come first), or all of them (`accelkit --help`, `devices`, a mistyped name)."""
    for arg in args:
        if arg == "--help":  # `accelkit --help …`: the root's help lists every command
            break
        if not arg.startswith("-"):
            owner = [name for name, names in COMMANDS.items() if arg in names]
            return tuple(owner) or CAPABILITIES
    return CAPABILITIES


def __getattr__(name: str):
    if name == "app":  # the whole root, as `accelkit --help` shows it (tests, docs)
        return root_group()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _UsageError(Protocol):
    exit_code: int

    def format_message(self) -> str: ...


def _is_usage_error(exc: BaseException) -> TypeGuard[_UsageError]:
    # typer vendors its own click; its usage errors carry `format_message` and `exit_code`
    return hasattr(exc, "format_message") and hasattr(exc, "exit_code")


# Boolean flags that the tools people come from spell with a value (openpi's tyro:
# `--use-fast-stats=True`); each becomes --flag or --no-flag.
VALUED_BOOLEAN_FLAGS = ("--use-fast-stats",)
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _boolean_flags(args: list[str]) -> list[str]:
    out = []
    for arg in args:
        flag, sep, value = arg.partition("=")
        if sep and flag in VALUED_BOOLEAN_FLAGS:
            if value.strip().lower() in _TRUE:
                arg = flag
            elif value.strip().lower() in _FALSE:
                arg = "--no-" + flag[2:]
            else:
                typer.echo(f"error: {flag} takes True or False, not {value!r}", err=True)
                sys.exit(2)
        out.append(arg)
    return out


def main(argv: list[str] | None = None) -> None:
    from accelkit.runtime import interrupts

    args = _boolean_flags(sys.argv[1:] if argv is None else argv)
    # argv given: called in process (tests, notebooks), so the host program goes on after it
    try:
        with interrupts.handled(process_exits=argv is None):
            code = _run(root_group(capabilities_for(args)), args, debug="--debug" in args)
            interrupts.finished(code)
    except interrupts.Interrupted as exc:  # before the command ran: mounting it, building it
        interrupts.report(exc.signum)
        code = exc.exit_code
    sys.exit(code)


def _command_name(command, args: list[str]) -> str:
    """`images search` for `accelkit -q images search q.jpg --json`: the subcommands named."""
    names = []
    for arg in args:
        if arg.startswith("-"):
            continue
        sub = getattr(command, "commands", {}).get(arg)
        if sub is None:
            break
        names.append(arg)
        command = sub
    return " ".join(names)


def _run(app: typer.Typer, args: list[str], debug: bool) -> int:
    """The exit code of one command (docs/cli.md): 0 done, 1 internal error, 2 user error, 3 a
    failed check, 130/143 interrupted. With --json, a failure prints the envelope too."""
    from accelkit.runtime import json_output, progress

    command = typer.main.get_command(app)  # typer builds every command first: a moment
    name = _command_name(command, args)
    json_output.begin(name)
    progress.start_command(name if "--help" not in args else "")
    try:
        code, message = _invoke(command, args, debug)
    finally:
        progress.end_command()
    if code and message and "--json" in args:
        json_output.print_error_json(message, code)
    return code


def _full_disk(exc: BaseException):
    """The NoSpaceError for a full file system anywhere in `exc`'s chain, or None."""
    from accelkit.runtime.files import FULL, no_space

    seen = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in FULL:
            return no_space(seen.filename, seen, unchanged=False)
        seen = seen.__cause__ or seen.__context__
    return None


# the exit code of a command whose standard output's reader went away (`| head -1`): what a
# shell shows for a process SIGPIPE ends, which is how other Unix tools end there
STDOUT_GONE = 128 + 13


def _invoke(command, args: list[str], debug: bool) -> tuple[int, str | None]:
    """(exit code, the one-line message printed for a failure)."""
    from accelkit.runtime import interrupts
    from accelkit.runtime.tables import stdout_is_null, stdout_reader_gone

    null_before = stdout_is_null()  # `> /dev/null` from the start: nothing went away

    try:
        # standalone_mode=False: click returns an `Exit`'s code (and typer's 130 for a
        # KeyboardInterrupt) instead of exiting, and passes every other exception up to us
        code = command(args=args, prog_name="accelkit", standalone_mode=False)
    except interrupts.Interrupted as exc:
        interrupts.report(exc.signum)
        return exc.exit_code, interrupts.message(exc.signum)
    except typer.Exit as exc:
        return exc.exit_code, None
    except SystemExit as exc:
        # stdout's reader went away (`| head -1`): typer exits 1 on the EPIPE, rich's consoles
        # exit 1 after pointing stdout at /dev/null; neither is an internal error
        gone = stdout_reader_gone() or (stdout_is_null() and not null_before)
        if exc.code == 1 and gone:
            return STDOUT_GONE, None
        raise
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 130, "aborted"
    except AccelkitError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        message = one_line(str(exc))
        typer.echo(f"error: {message}", err=True)
        return exc.exit_code, message
    except KeyboardInterrupt:
        interrupts.report(signal.SIGINT)
        return 130, interrupts.message(signal.SIGINT)
    except Exception as exc:
        # bare `accelkit`: show the help, as --help does
        if type(exc).__name__ == "NoArgsIsHelpError" and _is_usage_error(exc):
            typer.echo(exc.format_message())
            return 0, None
        if _is_usage_error(exc):
            message = f"{exc.format_message()} (see accelkit --help)"
            typer.echo(f"error: {message}", err=True)
            return 2, message
        if debug:
            raise
        full = _full_disk(exc)
        if full is not None:  # a full disk met outside an atomic write (a store, a cache)
            typer.echo(f"error: {full}", err=True)
            return full.exit_code, str(full)
        message = one_line(
            f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)"
        )
        typer.echo(message, err=True)
        return 1, message
    if type(code) is not int:  # a command's own return value (None when it finished)
        return 0, None
    if code == 130:  # typer's translation of a KeyboardInterrupt it caught
        interrupts.report(signal.SIGINT)
        return 130, interrupts.message(signal.SIGINT)
    return code, None
