"""What a test does when a real component it needs is missing here.

Locally it skips with the reason (a laptop without root has no Milvus server namespace, one
without Debian's chromium no browser). In CI the suite promises those components, so `.ci/run`
sets ACCELKIT_TEST_REQUIRE_ALL=1 and a missing one *fails* the test that needed it: a green CI
never hides a browser or server test that did not run.

tests/conftest.py applies the rule to every skip, however it was raised (`pytest.skip`,
`importorskip`, `skipif`), so a skip added later cannot slip past it either. The only skips a
required run keeps are the ones that say the case does not apply here (`not_applicable`): a
parameter combination a backend does not have, not a component that is missing."""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

SWITCH = "ACCELKIT_TEST_REQUIRE_ALL"


def required() -> bool:
    """Whether this run promised every real component (CI)."""
    return os.environ.get(SWITCH, "") not in ("", "0")


def absent(component: str, reason: str) -> NoReturn:
    """Skip the test, or fail it where the run promised `component`."""
    if required():
        pytest.fail(
            f"{component} is required in this run ({SWITCH}=1) but: {reason}", pytrace=False
        )
    pytest.skip(f"{component} missing: {reason}")


NOT_APPLICABLE = "not applicable: "


def not_applicable(reason: str) -> NoReturn:
    """Skip a case that does not exist here (kept as a skip in every run)."""
    pytest.skip(NOT_APPLICABLE + reason)


def failure_for_skip(reason: str) -> str | None:
    """What a required run reports instead of this skip, or None where the skip stands."""
    if not required() or reason.startswith(NOT_APPLICABLE):
        return None
    return f"skipped in a run that requires every real component ({SWITCH}=1): {reason}"


def module(name: str, reason: str) -> ModuleType:
    """`pytest.importorskip`, under the same rule."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        absent(name, f"{reason} ({exc})")
