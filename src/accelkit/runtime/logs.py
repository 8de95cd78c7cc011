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


def configure(debug: bool = False, verbose: bool = False) -> None:
    global _debug
    _debug = debug
    level = logging.DEBUG if debug else logging.INFO if verbose else logging.WARNING
    logging.basicConfig(
        level=level, format="%(levelname)s: %(message)s", stream=sys.stderr, force=True
    )
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
