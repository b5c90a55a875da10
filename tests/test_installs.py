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
    # scripts/test.sh: -n 2 --dist loadgroup, with tests/conftest.py's scheduler (xdist's own
    # scheduling class, scoped by folder). Driven here as xdist's controller drives it, with two
    # stand-in workers that finish whatever they are sent, one test at a time.
    from types import SimpleNamespace

    from tests.conftest import pytest_xdist_make_scheduler
    from tests.support.groups import xdist_scope

    assert xdist_scope("tests/nemo_tier/test_entry_point.py::test_a[x]") == "nemo_tier"
    assert xdist_scope("tests/nemo_tier/test_release.py::test_d") == "nemo_tier_release"
    assert xdist_scope("tests/slurm/test_journey_on_slurm.py::test_b") == "slurm"
    assert xdist_scope("tests/test_run_id.py::test_c") == "tests/test_run_id.py"  # a file stays whole

    class Config:
        option = SimpleNamespace(loadscopereorder=True)

        def __init__(self, dist):
            self.dist = dist

        def getvalue(self, name):
            return {"dist": self.dist, "tx": ["2*popen"]}[name]

    class Worker:
        def __init__(self, name):
            self.gateway, self.shutting_down, self.sent = SimpleNamespace(id=name), False, []

        def send_runtest_some(self, indices):
            self.sent.extend(indices)
            handed.append(xdist_scope(collection[indices[0]]))

        def shutdown(self):
            self.shutting_down = True

    assert pytest_xdist_make_scheduler(Config("load"), None) is None  # other --dist modes: xdist's own
    collection = [f"tests/nemo_tier/test_{i % 3}.py::t{i}" for i in range(9)] + \
                 [f"tests/slurm/test_{i % 2}.py::t{i}" for i in range(6)] + [f"tests/test_x{i}.py::t" for i in range(12)] + \
                 [f"tests/nemo_tier/test_release.py::t{i}" for i in range(3)] + [f"tests/test_many.py::t{i}" for i in range(4)] + \
                 [f"tests/test_regeneration.py::t{i}" for i in range(2)]
    handed: list = []  # the units in the order the scheduler sent them out
    scheduler = pytest_xdist_make_scheduler(Config("loadgroup"), None)
    workers = [Worker("gw0"), Worker("gw1")]
    for worker in workers:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    ran_on, done = {}, {w: 0 for w in workers}
    while any(done[w] < len(w.sent) for w in workers):
        for worker in workers:
            if done[worker] < len(worker.sent):
                index = worker.sent[done[worker]]
                done[worker] += 1
                ran_on[collection[index]] = worker.gateway.id
                scheduler.mark_test_complete(worker, index)
    assert sorted(ran_on) == sorted(collection)
    for folder in ("tests/nemo_tier/test_", "tests/slurm/", "tests/nemo_tier/test_release.py"):
        group = [n for n in collection if n.startswith(folder) and (n.startswith("tests/nemo_tier/test_release") ==
                                                                     folder.endswith("test_release.py"))]
        assert len({ran_on[n] for n in group}) == 1, (folder, ran_on)
    assert {ran_on[n] for n in collection[15:27]} == {"gw0", "gw1"}  # the rest is shared out, file by file
    assert len({ran_on[n] for n in collection if n.startswith("tests/test_many.py")}) == 1  # a file's tests on one worker
    # Longest first (groups.COST): xdist's own order (most tests first) would send the
    # regeneration run's two tests after every other file, to start while the other worker idles.
    assert handed[:4] == ["nemo_tier", "slurm", "nemo_tier_release", "tests/test_regeneration.py"], handed
    assert sorted(handed) == sorted({xdist_scope(n) for n in collection})  # each unit once
