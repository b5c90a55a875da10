"""How a bubblewrap sandbox enters its cgroup (gdpo_nemo.sandbox.runner.start_sandbox): its
first process waits until the harness has moved it there, so every process of the sandbox,
the driver included, is in the cgroup from its start; a sandbox that cannot be put there never
runs. (Issue 46: this replaced a `/bin/sh` per sandbox start.)"""

from __future__ import annotations

import json
import os
import re
import tempfile

import pytest
from sandbox_support import SMALL, sandbox  # noqa: F401  (fixture)

from gdpo_nemo.sandbox import Case, SandboxError
from gdpo_nemo.sandbox.runner import start_sandbox
from gdpo_nemo.sandbox.worker import SandboxWorker
from tests.support.requirements import require

WHERE = """
import json
def cgroups(pid):
    lines = open(f"/proc/{pid}/cgroup").read().splitlines()
    return {line.split(":")[1]: line.split(":", 2)[2] for line in lines if line.split(":")[1] in ("memory", "pids", "cpu", "")}
print(json.dumps({"driver": cgroups(1), "program": cgroups("self")}))
"""
SANDBOX_PATH = re.compile(r"/gdpo-sandbox-\d+/[0-9a-f]{16}")


def where(result) -> dict:
    assert result.status == "ok", result.stderr[-2000:]
    return json.loads(result.stdout)


def bounded(sandbox):
    require(sandbox.bounded_per_sandbox, "a cgroup per sandbox (cgroup v1 as root, or a delegated v2 directory)")


def test_the_driver_and_the_program_of_a_fresh_sandbox_are_in_its_cgroup_named_by_chance(sandbox):
    bounded(sandbox)
    first, second = (where(sandbox.run_program(WHERE, "", SMALL)) for _ in range(2))
    for seen in (first, second):
        assert seen["driver"] == seen["program"], seen
        controllers = {name: path for name, path in seen["program"].items() if name}  # v1's; v2 has one line ("")
        paths = set(controllers.values()) if controllers else {seen["program"][""]}
        assert len(paths) == 1 and SANDBOX_PATH.fullmatch(paths.pop()), seen
    # a sandbox's cgroup is its own, and its name says nothing of how many ran before
    assert first["program"] != second["program"]


def test_a_reused_sandbox_keeps_its_processes_in_its_cgroup(sandbox):
    bounded(sandbox)
    worker = SandboxWorker(sandbox, SMALL.tmp_bytes)
    try:
        seen = [where(worker.run_cases(WHERE, [Case()], SMALL)[0]) for _ in range(2)]
    finally:
        worker.close()
    assert worker.started == 1
    assert seen[0] == seen[1] and seen[0]["driver"] == seen[0]["program"]
    assert any(SANDBOX_PATH.fullmatch(path) for path in seen[0]["program"].values()), seen


def bwrap_processes() -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if b"--block-fd" in handle.read():
                        found.add(int(entry))
            except OSError:
                pass
    return found


def test_a_sandbox_whose_cgroup_is_gone_never_runs_and_leaves_no_process(sandbox):
    bounded(sandbox)
    isolation = sandbox._get_isolation()
    root = isolation.take_root()
    cgroup = sandbox.new_cgroup(SMALL)
    before = bwrap_processes()
    try:
        for directory in cgroup.directories.values():
            directory.rmdir()  # empty: nothing has entered it yet
        launch = isolation.launch(SMALL.tmp_bytes, None, uid=None, root=root)
        with tempfile.TemporaryFile() as stderr, pytest.raises(SandboxError, match="cannot put the sandbox in its cgroup"):
            start_sandbox(launch.argv, cgroup, stderr=stderr, cwd=None, env=launch.env)
    finally:
        if root is not None:
            root.release()
    assert bwrap_processes() - before == set()  # killed and waited for, not left blocked


def test_bubblewrap_that_fails_before_its_sandbox_exists_is_reported_with_its_words(sandbox, tmp_path):
    """No PID on --info-fd (bubblewrap refused its arguments): the process is returned as it
    ends, and what it said is the caller's to report; nothing is moved into the cgroup."""
    bounded(sandbox)
    cgroup = sandbox.new_cgroup(SMALL)
    try:
        with tempfile.TemporaryFile() as stderr:
            process = start_sandbox(["bwrap", "--no-such-option", "--", "true"], cgroup, stderr=stderr, cwd=None,
                                    env={"PATH": "/usr/bin:/bin"})
            process.stdin.close()
            assert process.stdout.read() == b""
            assert process.wait(timeout=30) != 0
            process.stdout.close()
            stderr.seek(0)
            assert b"no-such-option" in stderr.read()
        assert all(not (directory / "cgroup.procs").read_text().strip() for directory in cgroup.directories.values())
    finally:
        cgroup.remove(wait=True)


def test_without_a_cgroup_no_descriptor_is_added():
    """Where there is no cgroup (no root, no delegated v2 directory) the command runs as given."""
    with tempfile.TemporaryFile() as stderr:
        process = start_sandbox(["sh", "-c", "echo \"$@\"", "sh", "a"], None, stderr=stderr, cwd=None, env={"PATH": "/usr/bin:/bin"})
        process.stdin.close()
        assert process.stdout.read() == b"a\n"
        process.stdout.close()
        assert process.wait(timeout=30) == 0
