"""Fixtures and limits shared by the sandbox and code-reward tests (imported by them)."""

from __future__ import annotations

import shutil

import pytest

from gdpo_nemo.sandbox import Limits, Sandbox, SandboxPool
from tests.support.requirements import require, requires

# Small limits keep hostile programs cheap: this machine is shared with other people.
SMALL = Limits(
    cpu_seconds=1,
    wall_seconds=2,
    memory_bytes=256 << 20,
    max_processes=8,
    max_file_bytes=4 << 20,
    max_output_bytes=256 << 10,
    tmp_bytes=8 << 20,
)

needs_bwrap = requires(shutil.which("bwrap") is not None, "bubblewrap (Debian package `bubblewrap`), which CI installs")


@pytest.fixture(scope="session")
def sandbox() -> Sandbox:
    """The bubblewrap sandbox; fails (does not skip) if bwrap is installed but broken."""
    require(shutil.which("bwrap") is not None, "bubblewrap (Debian package `bubblewrap`), which CI installs")
    box = Sandbox(backend="bwrap")
    assert box.active_backend == "bwrap"
    return box


@pytest.fixture(scope="session")
def inet_sandbox() -> Sandbox:
    """The bubblewrap sandbox with AF_INET/AF_INET6 allowed (`Sandbox(inet=True)`): what a
    task whose tests need TCP or UDP gets; its network namespace is still its own."""
    require(shutil.which("bwrap") is not None, "bubblewrap (Debian package `bubblewrap`), which CI installs")
    box = Sandbox(backend="bwrap", inet=True)
    assert box.active_backend == "bwrap"
    return box


@pytest.fixture(scope="session")
def pool(sandbox: Sandbox):
    with SandboxPool(workers=4, sandbox=sandbox, limits=SMALL) as running:
        yield running


# How a program's sandbox is made: a one-off sandbox of its own (Sandbox.run_cases; its /proc
# holds only its processes and its driver runs the job itself) or a reused one (a pool
# worker's, after another program ran in it: full /proc with the host-wide files hidden one
# by one, and a job process per program).
MODES = ("one-off", "reused")


def run_as(mode: str, box: Sandbox, source: str, cases=None, limits: Limits = SMALL) -> list:
    """`source` run on `cases` (default: one empty Case) in a sandbox made the `mode` way."""
    from gdpo_nemo.sandbox import Case, SandboxWorker

    cases = [Case()] if cases is None else cases
    if mode == "one-off":
        return box.run_cases(source, cases, limits)
    worker = SandboxWorker(box, limits.tmp_bytes)
    try:
        [warm] = worker.run_cases("print(1)", [Case()], limits)
        assert warm.stdout == "1\n", warm
        results = worker.run_cases(source, cases, limits)
        assert worker.started == 1  # the second program ran in the first one's sandbox
        return results
    finally:
        worker.close()
