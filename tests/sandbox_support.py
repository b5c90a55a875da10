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
