"""tests/support/requirements.py: a missing requirement skips outside CI and fails under
CI=true; a broken one fails everywhere. Run on a generated test file in a pytest of its own."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROBE = '''
from tests.support.requirements import broken, require, requires

@requires(False, "the frobnicator")
def test_marked():
    pass

def test_inside():
    require(False, "the widget")

@broken("the gizmo", "it exits 3")
def test_broken():
    pass

@requires(True, "nothing")
def test_present():
    pass
'''


def _run(tmp_path, ci: bool) -> str:
    tests = tmp_path / "tests"
    tests.mkdir(exist_ok=True)
    (tests / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text())
    (tests / "test_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci:
        env["CI"] = "true"
    env["PYTHONPATH"] = str(REPO)
    env["COLUMNS"] = "400"  # whole summary lines
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "tests/test_probe.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return done.stdout


@pytest.mark.parametrize("ci", [False, True])
def test_missing_skips_outside_ci_and_fails_in_it_and_broken_fails_everywhere(tmp_path, ci):
    out = _run(tmp_path, ci)
    # A mark fails the test in its setup (ERROR), a call inside it in its body (FAILED): neither is a skip.
    if ci:
        assert "ERROR tests/test_probe.py::test_marked - Failed: CI must provide the frobnicator" in out
        assert "FAILED tests/test_probe.py::test_inside - Failed: CI must provide the widget" in out
        assert "SKIPPED" not in out
    else:
        assert "SKIPPED [1] tests/test_probe.py:4: needs the frobnicator" in out
        assert "needs the widget" in out and "FAILED tests/test_probe.py::test_inside" not in out
    assert "ERROR tests/test_probe.py::test_broken - Failed: the gizmo is installed but broken: it exits 3" in out
    assert "PASSED tests/test_probe.py::test_present" in out
