"""The `accelkit` command: one root, each capability mounts its commands here.

Heavy libraries (jax, torch, pyarrow) are imported inside the commands that need them, so
`accelkit --help` answers at once. Errors a user can fix print `error: …` on one line and exit 2;
`--debug` shows the traceback; anything else is an internal failure and exits 1.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from accelkit import __version__
from accelkit.errors import AccelkitError
from accelkit.runtime.output import command_group

app = command_group(
    "accelkit",
    "Fast, exact ML pipeline tools for accelerators, correct on a plain CPU.",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"accelkit {__version__}")
        raise typer.Exit()


@app.callback()
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


@app.command()
def devices(
    platform: Annotated[
        str | None, typer.Option("--platform", help="Ask for cpu or gpu, as a command would.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """What JAX and PyTorch see, and which platform accelkit would choose and why."""
    from accelkit.runtime.devices import describe_devices
    from accelkit.runtime.output import print_json

    info = describe_devices(platform)
    if as_json:
        print_json(info)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="accelkit devices")
    table.add_column("framework")
    table.add_column("what it sees")
    table.add_column("choice")
    jax_info, torch_info = info["jax"], info["torch"]
    if "error" in jax_info:
        table.add_row("jax", jax_info["error"], "-")
    else:
        seen = "; ".join(
            f"{p}: {', '.join(d) if d else 'none'}" for p, d in jax_info["backends"].items()
        )
        table.add_row(
            f"jax {jax_info['version']}", seen, f"{jax_info['chosen']} ({jax_info['reason']})"
        )
    if "error" in torch_info:
        table.add_row("torch", torch_info["error"], "-")
    else:
        cuda = ", ".join(torch_info["cuda_devices"]) or "no CUDA device"
        table.add_row(f"torch {torch_info['version']}", cuda, torch_info["chosen"])
    Console().print(table)


CAPABILITIES = ("stats", "images", "quant", "bench")


def _mount_capabilities() -> None:
    """Each capability's `accelkit.<name>.cli.register(app)` adds its commands.

    Those modules import only typer at module level, so `accelkit --help` stays fast.
    """
    import importlib

    for name in CAPABILITIES:
        importlib.import_module(f"accelkit.{name}.cli").register(app)


_mount_capabilities()


def _is_usage_error(exc: BaseException) -> bool:
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
    args = _boolean_flags(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        app(args=args, prog_name="accelkit", standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except AccelkitError as exc:
        if debug:
            import traceback

            traceback.print_exc()
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:
        if (
            type(exc).__name__ == "NoArgsIsHelpError"
        ):  # bare `accelkit`: show the help, as --help does
            typer.echo(exc.format_message())
            sys.exit(0)
        if _is_usage_error(exc):
            typer.echo(f"error: {exc.format_message()} (see accelkit --help)", err=True)
            sys.exit(2)
        if debug:
            raise
        typer.echo(
            f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
            err=True,
        )
        sys.exit(1)
    sys.exit(0)
