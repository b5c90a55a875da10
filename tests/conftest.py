"""Shared test settings: quiet, offline, deterministic, and no state from outside the run."""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# No test may reach a hub or a W&B server: everything here is offline by construction.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# One OpenMP thread per process (torch's intra-op pool and oneMKL's follow it), inherited by
# every process the tests start: the suite runs two pytest-xdist workers on two cores, and a
# torch process on torch's default (a thread per core) beside the other worker spins its
# threads at every parallel region against a busy core. Measured on SmolLM2's eval end to end
# (benchmarks/bench_suite_threads.py): several times the CPU time for the same work. A run
# config that names gdpo.local.num_threads still gets it (torch.set_num_threads wins over
# the variable), so no number a test compares changes. A value given to the suite is kept.
for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

# The CPU code paths (gdpo_nemo.runs.cpu_pins): the suite runs on torch's native kernels, twice
# as fast for its SmolLM2 steps as the pins, which it needs only where a test checks what a
# user's run computes by default; those tests start their processes in
# tests.support.numerics.user_environment(), where the pins hold. Set before any test runs a
# torch kernel, and inherited by every process the tests start. A GDPO_NEMO_CPU_NUMERICS given
# to the suite is kept (=pinned runs the whole suite pinned).
from gdpo_nemo.runs import cpu_pins  # noqa: E402

os.environ.setdefault(cpu_pins.MODE_ENV, "native")
cpu_pins.pin()

# The local engine's caches (the embedded model's conversion, warm-starts) live in a folder
# this test run makes and removes, never in ~/.cache: a conversion cached by an earlier
# install must not stand in for a missing install step (e.g. a package the conversion
# needs). Set unconditionally, so a user's GDPO_NEMO_CACHE is not read either. Subprocesses,
# Slurm jobs included, inherit it. Under pytest-xdist (scripts/test.sh runs the suite on
# two workers) the controller makes the folder and its workers, which inherit its
# environment, share it: a model converted or warm-started by one is found by the other
# (the cache's writes are renames of finished folders), and only its maker removes it.
_SHARED = "GDPO_NEMO_TEST_CACHE"
_OWNER = _SHARED not in os.environ
if _OWNER:
    os.environ[_SHARED] = tempfile.mkdtemp(prefix="gdpo-nemo-test-cache-")
TEST_CACHE = os.environ[_SHARED]
os.environ["GDPO_NEMO_CACHE"] = TEST_CACHE



@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown without xdist (.venv-nemo's inner run)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadgroup (scripts/test.sh) by folder. xdist's own loadgroup reads an
    "@<group>" that its xdist_group marker appends to `item._nodeid`, which pytest 9 no longer
    reads (the node id is `item._id`): every group was split over the workers, so the NeMo RL
    tier's inner run and the Slurm journey ran once on each worker. Units go out longest first
    (tests/support/groups.py's COST)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    from tests.support.groups import longest_first, xdist_scope  # the outer run's (`tests` may be another package in .venv-nemo)

    class FolderGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

        def _assign_work_unit(self, node) -> None:
            longest_first(self.workqueue)  # the next unit a worker gets is the longest left
            super()._assign_work_unit(node)

    return FolderGroups(config, log)


_TIER_DURATIONS: list = []  # handed over by the worker that ran the NeMo RL tier


@pytest.hookimpl(optionalhook=True)  # an xdist hook
def pytest_testnodedown(node, error):
    _TIER_DURATIONS.extend(getattr(node, "workeroutput", {}).get("nemo_tier_durations") or [])


def pytest_terminal_summary(terminalreporter):
    """Under xdist, the durations inside .venv-nemo of the NeMo RL tier's inner run
    (tests/nemo_tier/conftest.py prints them itself when the suite runs in one process)."""
    if _TIER_DURATIONS:
        terminalreporter.write_sep("=", "NeMo RL tier: durations inside .venv-nemo")
        for line in _TIER_DURATIONS:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session, exitstatus):
    if _OWNER:
        shutil.rmtree(TEST_CACHE, ignore_errors=True)


def pytest_configure(config):
    config.addinivalue_line("markers", "requires_ok: a requirement of tests/support/requirements.py that is met")
    config.addinivalue_line("markers", "requires_missing(message): a requirement missing under CI, or broken (fails)")


def pytest_runtest_setup(item):
    missing = item.get_closest_marker("requires_missing")
    if missing is not None:  # tests/support/requirements.py: missing under CI, or broken
        import pytest

        pytest.fail(missing.args[0], pytrace=False)
