"""The mutation check (benchmarks/mutation_check.py) stays applicable: each curated mutant's
line is in its file exactly once, and the tests it names exist. A refactor that moved a line
left three mutants "not applied" (issue 47's round), which the check reports but no test saw."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _mutants():
    spec = importlib.util.spec_from_file_location("mutation_check", REPO / "benchmarks" / "mutation_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("mutation_check", module)  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module.MUTANTS


@pytest.mark.parametrize("mutant", _mutants(), ids=lambda m: m.name)
def test_each_mutant_applies_once_and_names_tests_that_exist(mutant):
    text = (REPO / mutant.path).read_text()
    assert text.count(mutant.old) == 1, f"{mutant.path}: the line to mutate is there {text.count(mutant.old)} times"
    assert mutant.new != mutant.old and mutant.tests
    assert [t for t in mutant.tests if not (REPO / t.split("::")[0]).is_file()] == []
