"""The command-line pieces every capability shares: a typer group with accelkit's settings and
the options written the same way on every command (`--endpoint-url`, `--ray`; their help text
also serves a settings field's description, `runtime/options.py`)."""

from __future__ import annotations


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


ENDPOINT_HELP = (
    "s3:// paths: an S3-compatible store's URL, e.g. http://127.0.0.1:9000"
    " (default: AWS_ENDPOINT_URL; credentials from the AWS environment variables)."
)


def ray_help(what: str, note: str = "") -> str:
    """The help of `--ray ADDRESS|auto|local`, the same on every command that runs on Ray."""
    return (
        f"Run {what} on a Ray cluster: its ADDRESS (host:port, ray://host:port), auto (the"
        f" cluster this machine joined) or local (a private one on this machine).{note}"
    )


def endpoint_option():
    """`--endpoint-url`, the same on every command that takes s3:// paths."""
    import typer

    return typer.Option("--endpoint-url", help=ENDPOINT_HELP)


def ray_option(what: str, note: str = ""):
    """`--ray ADDRESS|auto|local`, the same on every command that runs on a Ray cluster."""
    import typer

    return typer.Option("--ray", help=ray_help(what, note))
