"""Interrupts are part of the contract (docs/cli.md, "Interrupts"): SIGINT and SIGTERM stop a
command within 2 s, print one line saying what was kept, exit 130 / 143, and leave nothing
half-written.

Why our own handler. Python turns SIGINT into `KeyboardInterrupt`, which typer catches and turns
into a *returned* exit code in the non-standalone mode the root CLI runs it in (the run then ended
with exit 0 and no word), and SIGTERM kills the process outright, leaving temporary files behind.
So while a command runs, both signals raise `Interrupted` in the main thread: a `BaseException`
that is not a `KeyboardInterrupt`, so neither typer nor any `except Exception` swallows it, while
every `finally` (atomic writes, pools, stores) still runs on its way up to `accelkit.cli.main`.

A stop must not wait on work that cannot see the exception: a worker thread finishing its queue,
the main thread inside one long native call (an XLA compile, an ONNX batch). A watchdog started
by the first signal ends the process `GRACE_S` after it, removing the temporary files still open
(`runtime.files`) first; a second signal ends it at once the same way.

Nor may the exception be raised where nothing can carry it up. A signal's Python handler runs at
the next bytecode wherever that is: inside a native module's initialisation calling back into
Python (jaxlib's nanobind init then hits a C++ exception it cannot handle and aborts the process,
exit -6, or crashes), or inside a garbage-collector callback, a weakref callback or a `__del__`
(the exception is printed as "ignored" and the run goes on). In the first case the handler
defers: it re-sends the signal to the process every `RETRY_S` until the main thread is somewhere
an exception can travel, and raises then. In the others Python hands the swallowed exception to
`sys.unraisablehook`, where ours takes it back (nothing printed) and defers the same way. The
watchdog still bounds the whole stop.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator

HANDLED = (signal.SIGINT, signal.SIGTERM)
GRACE_S = 1.6  # signal -> process gone, at the latest (the contract says 2 s)
RETRY_S = 0.02  # a deferred signal is re-sent this often until it can be raised


class Interrupted(BaseException):
    """The run was stopped by a signal; `exit_code` is 128 + the signal's number (130, 143)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


_state = {
    "signum": None,
    "reported": False,
    "active": 0,
    "timer": None,
    "deferred": False,
    "terminal": None,  # a copy of fd 2 as the command started
    "previous_hook": sys.unraisablehook,
    "finished": None,  # the command's exit code once its work is done (`finished`)
}
_lock = threading.Lock()


def message(signum: int) -> str:
    """The one line an interrupted command prints: which signal, and what it wrote before it."""
    from accelkit.runtime.files import completed_writes

    written = completed_writes()
    kept = (
        f"kept what was written before it: {', '.join(written)}" if written else "nothing written"
    )
    return f"interrupted ({signal.Signals(signum).name}); {kept}"


def report(signum: int) -> None:
    """Print the interruption line once per process (the watchdog and main may both get here)."""
    with _lock:
        if _state["reported"]:
            return
        _state["reported"] = True
    with contextlib.suppress(Exception):
        from accelkit.runtime.progress import pause

        pause(wait=0.2)  # the activity line comes down first, so the message stays on screen
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    line = message(signum)
    with contextlib.suppress(Exception):
        print(line, file=sys.stderr, flush=True)
    saved = _state["terminal"]
    if saved is not None and not _same_file(saved, 2):
        # fd 2 is pointed at a log for now (Milvus Lite's engine starting, images/store/):
        # the watchdog ended the run inside that block, so the person gets the line too
        with contextlib.suppress(OSError):
            os.write(saved, (line + "\n").encode())


def _same_file(fd: int, other: int) -> bool:
    try:
        a, b = os.fstat(fd), os.fstat(other)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def hard_exit(signum: int) -> None:
    """End the process now: temporary files removed, the line printed, no more waiting."""
    from accelkit.runtime.files import remove_pending

    remove_pending()
    report(signum)
    os._exit(128 + signum)


def _watchdog(end: Callable[[int], None], value: int, name: str) -> None:
    """`end(value)` GRACE_S from now, unless the process has ended by then."""
    timer = threading.Timer(GRACE_S, end, args=(value,))
    timer.daemon = True
    timer.name = name
    _state["timer"] = timer
    timer.start()


def finished(code: int) -> None:
    """The command's work is done and `code` is its exit code. From here a signal interrupts
    nothing: the process ends with `code` `GRACE_S` after it (a second one, at once) unless it
    has ended by itself before — so the teardown after a command (stores closing, the
    interpreter's exit, under load a second or more) is never cut into a traceback, nor into a
    silent -2 / -15 after an answer already printed as done."""
    _state["finished"] = code


def _after_finish(signum, frame) -> None:
    code = _state["finished"]
    if _state["timer"] is not None:  # a second signal, or one after an interruption's
        _exit_now(code)
    _watchdog(_exit_now, code, "accelkit-finish-watchdog")


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _handler(signum, frame) -> None:
    if _state["finished"] is not None:
        _after_finish(signum, frame)
        return
    if _state["deferred"]:  # our own re-sent signal (or a second one while we wait)
        if _unsafe(frame):
            return
        _state["deferred"] = False
        raise Interrupted(_state["signum"])
    if _state["signum"] is not None:  # a second signal: no more patience
        hard_exit(_state["signum"])
    _state["signum"] = signum
    _watchdog(hard_exit, signum, "accelkit-interrupt-watchdog")
    if _unsafe(frame):
        _defer(signum)
        return
    raise Interrupted(signum)


def _defer(signum: int) -> None:
    _state["deferred"] = True
    _resend(signum)


def _unraisable(unraisable) -> None:
    """`sys.unraisablehook` inside `handled()`: an `Interrupted` Python swallowed (raised in a
    garbage-collector or weakref callback, a `__del__`) is deferred instead of printed as
    "ignored"; anything else goes to the hook that was there before."""
    if isinstance(unraisable.exc_value, Interrupted) and _state["signum"] is not None:
        if not _state["deferred"]:
            _defer(_state["signum"])
        return
    _state["previous_hook"](unraisable)


def _unsafe(frame) -> bool:
    """Whether an exception raised in `frame` would end the process instead of travelling up the
    main thread's stack: a native module is initialising (a frame of an extension loader's
    create/exec_module below it)."""
    while frame is not None:
        code = frame.f_code
        if code.co_name in ("create_module", "exec_module") and isinstance(
            frame.f_locals.get("self"), importlib.machinery.ExtensionFileLoader
        ):
            return True
        frame = frame.f_back
    return False


def _resend(signum: int) -> None:
    """Re-send `signum` to this process every RETRY_S while the handler defers it."""

    def resend() -> None:
        while _state["deferred"]:
            time.sleep(RETRY_S)
            if _state["deferred"]:
                os.kill(os.getpid(), signum)

    threading.Thread(target=resend, name="accelkit-interrupt-resend", daemon=True).start()


def install() -> None:
    """Route SIGINT and SIGTERM to `Interrupted` (main thread only; a signal the process was
    started with ignored, as `nohup` or a background job does, stays ignored). Libraries that set
    their own handler when they start (ray.init sets SIGTERM) call this again afterwards; outside
    a `handled()` block (accelkit used as a library: a notebook, a test) it does nothing, so the
    host program's own handlers stay."""
    if threading.current_thread() is not threading.main_thread() or not _state["active"]:
        return
    for signum in HANDLED:
        if signal.getsignal(signum) is signal.SIG_IGN:
            continue
        signal.signal(signum, _handler)


@contextlib.contextmanager
def handled(process_exits: bool = True) -> Iterator[None]:
    """While the block runs, signals raise `Interrupted`; the previous handlers come back after
    (the CLI also runs inside other programs: tests, notebooks). `process_exits`: the process
    ends right after the block (the `accelkit` command), so a watchdog started by a signal keeps
    running until it does; otherwise (the CLI called in process) the block's end cancels it, and
    the host program is never ended by a signal its command already answered."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from accelkit.runtime.files import forget_writes

    previous = {signum: signal.getsignal(signum) for signum in HANDLED}
    _state.update(signum=None, reported=False, timer=None, deferred=False, finished=None)
    _state["active"] += 1
    forget_writes()
    if _state["terminal"] is None:
        with contextlib.suppress(OSError):
            _state["terminal"] = os.dup(2)
    install()
    hook_before = sys.unraisablehook
    if hook_before is not _unraisable:
        _state["previous_hook"] = hook_before
    sys.unraisablehook = _unraisable
    try:
        yield
        if _state["deferred"]:  # the block ended before a deferred signal could be raised
            raise Interrupted(_state["signum"])
    finally:
        _state["deferred"] = False
        sys.unraisablehook = hook_before
        _state["active"] -= 1
        if not _state["active"] and _state["terminal"] is not None:
            os.close(_state["terminal"])
            _state["terminal"] = None
        timer = _state["timer"]
        if timer is not None and not process_exits:
            timer.cancel()
            _state["timer"] = None
        finishing = process_exits and _state["finished"] is not None
        for signum, handler in previous.items():
            if finishing and handler is not signal.SIG_IGN:  # until the process has ended
                signal.signal(signum, _after_finish)
            elif handler is not None:
                signal.signal(signum, handler)
