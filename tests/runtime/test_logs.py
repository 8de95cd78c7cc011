"""Logging set-up that never closes or replaces anyone else's streams or handlers.

The suite once failed on a fresh machine (815 errors): pymilvus' import-time `dictConfig` closed
every handler of the xdist worker, absl's handler closed its stream — the worker's capture file —
and every later test on that worker errored with "I/O operation on closed file".
"""

import logging
import logging.config
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from accelkit.runtime import logs

ROOT = Path(__file__).resolve().parents[2]
PYMILVUS_LIKE_CONFIG = {  # what pymilvus runs when it is imported: its own loggers only
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"library_x": {"handlers": ["console"], "propagate": False}},
}


class ClosesItsStream(logging.StreamHandler):
    """absl's PythonHandler: close() closes the stream unless it is the current sys.stderr."""

    def close(self):
        if self.stream not in (sys.stderr, sys.stdout):
            self.stream.close()
        super().close()


def test_dict_config_inside_handlers_kept_closes_nothing(tmp_path):
    for kept in (False, True):
        stream = open(tmp_path / f"stream{kept}.log", "w")  # noqa: SIM115
        handler = ClosesItsStream(stream)
        try:
            if kept:
                with logs.handlers_kept():
                    logging.config.dictConfig(PYMILVUS_LIKE_CONFIG)
            else:
                logging.config.dictConfig(PYMILVUS_LIKE_CONFIG)
            # without the guard the stream is closed: the test can tell
            assert stream.closed is (not kept)
            assert logging.config._clearExistingHandlers.__name__ == "_clearExistingHandlers"
        finally:
            handler.close()
            stream.close()


def test_configure_keeps_other_root_handlers_and_follows_stderr(capsys):
    root = logging.getLogger()
    other = logging.NullHandler()
    root.addHandler(other)
    level = root.level
    try:
        logs.configure()
        logs.configure(verbose=True)
        assert other in root.handlers  # not removed, not closed
        ours = [h for h in root.handlers if isinstance(h, logs.CurrentStderr)]
        assert len(ours) == 1  # added once, however often the CLI runs in this process
        logging.getLogger("accelkit.test").warning("seen %d", 1)
        assert "WARNING: seen 1" in capsys.readouterr().err
        assert logs.recorded.messages == ["seen 1"]  # what --json lists under "warnings"
    finally:
        root.removeHandler(other)
        root.setLevel(level)


def test_a_test_that_opens_the_store_under_capsys_leaves_the_worker_intact(tmp_path):
    """The failing order, end to end in a fresh pytest: absl imported first (its handler bound to
    the capture file), then a store opened inside a test that captures its own output."""
    (tmp_path / "test_order.py").write_text(
        textwrap.dedent(
            """

            def test_1_absl_first():
                import absl.logging  # noqa: F401

            def test_2_store_under_capsys(capsys, tmp_path):
                from accelkit.images.store import StoreConfig, VectorStore

                with VectorStore(StoreConfig(uri=str(tmp_path / "x.db"))) as store:
                    assert store.list_collections() == []

            def test_3_later_tests_still_run():
                print("the capture file is open")
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},  # this checkout's accelkit
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "3 passed" in done.stdout, done.stdout[-3000:] + done.stderr
