"""A command interrupted in a terminal (a signal once some output has been shown), and what an
interrupted write may leave behind."""

from __future__ import annotations

import signal

from tests.support.terminal import run_in_terminal


def leftovers(folder) -> list[str]:
    """Temporary files and folders an atomic write or a staged folder would leave."""
    return sorted(
        p.name
        for p in folder.iterdir()
        if p.name.endswith((".tmp", ".partial")) or p.name.startswith(".")
    )


def interrupt(argv, when: str, signum=signal.SIGINT, **kwargs):
    """Run `argv` in a terminal and send `signum` once `when` has been shown."""
    return run_in_terminal(
        argv,
        signal_when=lambda text, seconds: when in text,
        signum=signum,
        timeout=600,
        **kwargs,
    )
