"""What the user sees of logs: ours at WARNING (INFO with --verbose, DEBUG with --debug), and the
libraries' own chatter hidden unless --debug.

Libraries we call print things that look like errors but are not: torchao's "Failed to load …so"
and "Detected no triton" on CPU builds, torch's pytree deprecation notes, transformers' weight
"LOAD REPORT" and tqdm bars, JAX/absl INFO lines, pymilvus' own ERROR lines before the exception
we turn into a one-line message. `configure` is called once by the root CLI, before any of them
is imported.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings

QUIET_LOGGERS = (
    "jax._src",
    "absl",
    "torchao",
    "torch.utils._pytree",
    "torch._dynamo",
    "torch._inductor",
    "transformers",
    "huggingface_hub",
    "pymilvus",
    "milvus_lite",
    "onnxruntime",
    "ray",  # connect() passes this level on to ray.init, which would set its own
)
QUIET_ENVIRONMENT = {
    "TRANSFORMERS_VERBOSITY": "error",  # "LOAD REPORT … UNEXPECTED pooler" and friends
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TQDM_DISABLE": "1",  # transformers' "Loading weights" bar; our own bars are rich, not tqdm
    "TF_CPP_MIN_LOG_LEVEL": "2",
}


_debug = False


def third_party_level() -> int:
    """The level for a library that configures its own loggers when it starts (Ray): WARNING with
    --debug, else CRITICAL. Call after importing it."""
    return logging.WARNING if _debug else logging.CRITICAL


def quiet_after_import(*names: str) -> None:
    """Set `names`' loggers to `third_party_level()` again (libraries that reset them)."""
    for name in names:
        logging.getLogger(name).setLevel(third_party_level())


class CurrentStderr(logging.StreamHandler):
    """Writes to whatever `sys.stderr` is when a record is emitted. A handler bound to the stream
    of the moment (what `logging.basicConfig` does) keeps writing to it after it is replaced and
    closed: a test's captured stream, a redirect that ended."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ assigns one; the property wins
        pass


class WarningRecorder(logging.Handler):
    """The warnings our own loggers gave during a command, for its --json document."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            if len(self.messages) < 100:
                self.messages.append(record.getMessage())


_stderr_handler = CurrentStderr()
recorded = WarningRecorder()


def configure(debug: bool = False, verbose: bool = False) -> None:
    """Our logs on stderr at the chosen level, the libraries' quiet unless --debug. Called once per
    command; it adds its own handler to the root logger once and never removes or closes anyone
    else's (the CLI also runs inside other programs: a test's handlers stay where they are)."""
    global _debug
    _debug = debug
    level = logging.DEBUG if debug else logging.INFO if verbose else logging.WARNING
    root = logging.getLogger()
    root.setLevel(level)
    if _stderr_handler not in root.handlers:
        root.addHandler(_stderr_handler)
    ours = logging.getLogger("accelkit")
    recorded.messages.clear()
    if recorded not in ours.handlers:
        ours.addHandler(recorded)
    if debug:
        return
    for name in QUIET_LOGGERS:  # what matters reaches us as an exception, which we report
        logging.getLogger(name).setLevel(logging.CRITICAL)
    for name, value in QUIET_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    for module in ("torchao", "torch", "transformers", "jax", "pymilvus", "onnxruntime", "ray"):
        warnings.filterwarnings("ignore", module=module)


@contextlib.contextmanager
def root_logger_untouched():
    """Run a block without letting a library configure the root logger: absl (under orbax and JAX
    extensions) calls `logging.basicConfig()` on any log line while the root logger has no
    handler, binding a handler to whatever `sys.stderr` is at that moment (a test's captured
    stream, closed later). Handlers the block adds to the root logger are removed again."""
    root = logging.getLogger()
    before = list(root.handlers)
    try:
        yield
    finally:
        for handler in root.handlers[:]:
            if handler not in before:
                root.removeHandler(handler)


@contextlib.contextmanager
def handlers_kept():
    """While the block runs, `logging.config.dictConfig` configures the loggers it names and
    leaves every other handler open.

    Why: a non-incremental dictConfig first closes every handler of the process
    (`logging.config._clearExistingHandlers`), and pymilvus runs one when it is imported. absl's
    handler, closed, closes its stream unless that is the current sys.stderr: in a pytest worker
    that stream was the worker's capture file, so the import of pymilvus inside a test that
    captured its own output ended every later test on that worker ("I/O operation on closed
    file"); in a user's program it closes whatever absl was writing to."""
    import logging.config

    # typeshed lists no private names of logging.config: the attribute is there (see above)
    original = logging.config._clearExistingHandlers  # pyright: ignore[reportAttributeAccessIssue]
    logging.config._clearExistingHandlers = lambda: None  # pyright: ignore[reportAttributeAccessIssue]
    try:
        yield
    finally:
        logging.config._clearExistingHandlers = original  # pyright: ignore[reportAttributeAccessIssue]


def import_library(module: str, extra: str):
    """`require(module, extra)` for a library that configures logging when it is imported
    (pymilvus): other handlers stay open (`handlers_kept`)."""
    from accelkit.errors import require

    with handlers_kept():
        return require(module, extra)
