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


def test_the_suite_s_workers_share_this_cache_and_only_its_maker_removes_it():
    # scripts/test.sh runs the suite on pytest-xdist workers: each worker (and every pytest
    # started under this one) imports tests/conftest.py again; it must take this run's cache,
    # not make another, or a worker would convert and warm-start everything anew.
    import subprocess

    probe = "import os, tests.conftest as c; print(c.TEST_CACHE, c._OWNER, os.environ['GDPO_NEMO_CACHE'])"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    cache, owner, engine_cache = done.stdout.split()
    assert cache == engine_cache == os.environ["GDPO_NEMO_CACHE"] and owner == "False"
    fresh = {k: v for k, v in os.environ.items() if k != "GDPO_NEMO_TEST_CACHE"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**fresh, "PYTHONPATH": str(ROOT)})
    mine, owner, _ = done.stdout.split()
    try:
        assert mine != cache and owner == "True"
    finally:
        os.rmdir(mine)


def test_under_loadgroup_each_group_s_folder_runs_whole_on_one_xdist_worker():
    # scripts/test.sh: -n 2 --dist loadgroup, grouped by folder in tests/conftest.py. Here a
    # real two-worker run over the Slurm tests that only read the cluster and two cheap files:
    # every Slurm test on one worker, the rest shared out test by test.
    import subprocess

    from tests.conftest import xdist_scope

    assert xdist_scope("tests/nemo_tier/test_entry_point.py::test_a[x]") == "nemo_tier"
    assert xdist_scope("tests/slurm/test_journey_on_slurm.py::test_b") == "slurm"
    assert xdist_scope("tests/test_run_id.py::test_c") == "tests/test_run_id.py::test_c"
    paths = ["tests/slurm/test_sweep_slurm_commands.py", "tests/test_run_id.py", "tests/test_seed_statistics.py"]
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v", "-p", "no:cacheprovider",
                           *paths], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    ran = re.findall(r"^\[(gw\d+)\] .*?(?:PASSED|SKIPPED|FAILED) (\S+)", done.stdout, flags=re.M)
    workers = {node.startswith("tests/slurm/"): set() for _, node in ran}
    for worker, node in ran:
        workers[node.startswith("tests/slurm/")].add(worker)
    assert len(ran) > 20 and len(workers[True]) == 1, ran
