"""What a test needs from this machine, and what happens when it is missing.

Outside CI a missing requirement skips the test, with the step that would provide it. Under
CI=true (`.ci/run` sets it) every requirement that CI installs itself must be there: a
missing one fails the test instead, so a broken install step can never turn into a quiet
skip. The only expected skips in CI are the `gpu` tests (no GPU there).

    needs_bwrap = requires(shutil.which("bwrap") is not None, "bubblewrap (Debian package `bubblewrap`)")

Each reason says what is missing, not merely "skipped": "missing" (not installed) and
"broken" (installed but failing) are told apart by the callers' conditions.
"""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def requires(present: bool, what: str):
    """A mark for a test that needs `what`: skipped without it outside CI, failing under CI."""
    if present:
        return pytest.mark.requires_ok
    if IN_CI:
        return pytest.mark.requires_missing(_missing_in_ci(what))
    return pytest.mark.skipif(True, reason=f"needs {what}")


def require(present: bool, what: str) -> None:
    """The same, inside a test or fixture: skip outside CI, fail under CI=true."""
    if present:
        return
    if IN_CI:
        pytest.fail(_missing_in_ci(what))
    pytest.skip(f"needs {what}")


def _missing_in_ci(what: str) -> str:
    return f"CI must provide {what}, which is missing here (CI=true: a missing requirement fails)"


def broken(what: str, problem: str):
    """A mark for a test whose requirement is installed but does not work: it fails, in CI
    and outside (a broken install is never a skip)."""
    return pytest.mark.requires_missing(f"{what} is installed but broken: {problem}")
