"""The environment the suite runs in is the locked one, and the lock covers what we declare.

scripts/setup.sh installs `requirements/lock-py<X.Y>.txt` (written by scripts/lock.sh); these
tests fail when the lock misses a declared dependency, pins a version outside its declared
range, or when the running .venv drifted from the lock (a package upgraded by hand).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from gdpo_nemo.engines.local.models import cache_dir
from tests.support.requirements import requires

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / f"lock-py{sys.version_info[0]}.{sys.version_info[1]}.txt"
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)")


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(line) for line in project["dependencies"] + project["optional-dependencies"]["dev"]]


def _locked() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        match = PIN.match(line.strip())
        if match:
            pins[canonicalize_name(match.group(1))] = match.group(2)
    return pins


needs_lock = requires(LOCK.is_file(), f"a lock for this Python: {LOCK.name} (scripts/lock.sh)")


@needs_lock
def test_every_declared_dependency_is_locked_within_its_declared_range():
    pins = _locked()
    for requirement in _declared():
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is declared in pyproject.toml but not pinned in {LOCK.name}"
        assert requirement.specifier.contains(Version(pins[name]), prereleases=True), (
            f"{LOCK.name} pins {requirement.name}=={pins[name]} outside pyproject.toml's {requirement.specifier}")


@needs_lock
def test_the_running_environment_has_exactly_the_locked_versions():
    drifted = []
    for name, pinned in _locked().items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            drifted.append(f"{name}: locked {pinned}, not installed")
            continue
        # torch's local label (+cpu) is dropped in the lock: compare public versions.
        if Version(installed).public != Version(pinned).public:
            drifted.append(f"{name}: locked {pinned}, installed {installed}")
    assert not drifted, "the environment is not the locked one (re-run scripts/setup.sh):\n" + "\n".join(drifted)


def test_the_local_engine_cache_is_a_folder_of_this_test_run_not_the_users():
    cache = cache_dir().resolve()
    assert cache == Path(os.environ["GDPO_NEMO_CACHE"]).resolve()
    assert not cache.is_relative_to(Path.home().resolve() / ".cache")
    assert cache.name.startswith("gdpo-nemo-test-cache-")
