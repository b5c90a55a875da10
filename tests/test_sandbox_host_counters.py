"""Issue 46: host-wide counters a sandboxed program could signal through, hidden where the
kernel lets us (gdpo_nemo.sandbox.isolation.HIDDEN_PROC, the seccomp filter's setsid)."""

from __future__ import annotations

import json
import os

import pytest
from sandbox_support import SMALL, sandbox  # noqa: F401  (fixture)

from gdpo_nemo.sandbox.isolation import HIDDEN_PROC

PROBE = """
import json, os, subprocess, sys
seen = {}
for name in %r:
    try:
        with open("/proc/" + name, "rb") as handle:
            seen[name] = len(handle.read())
    except FileNotFoundError:
        seen[name] = None
try:
    os.setsid()
    setsid = "ok"
except PermissionError:
    setsid = "EPERM"
os.setpgid(0, 0)  # a process group of its own is still allowed
child = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout.strip()
print(json.dumps({"sizes": seen, "setsid": setsid, "cpus": os.cpu_count(), "child": child,
                  "last_pid": int(open("/proc/sys/kernel/ns_last_pid").read())}))
""" % (HIDDEN_PROC,)


def test_host_wide_counters_read_empty_and_a_new_session_is_refused(sandbox):
    result = sandbox.run_program(PROBE, "", SMALL)
    assert result.status == "ok", result.stderr[-2000:]
    seen = json.loads(result.stdout)
    present = {name for name in HIDDEN_PROC if os.path.exists(f"/proc/{name}")}
    assert {name for name, size in seen["sizes"].items() if size is not None} == present
    assert all(seen["sizes"][name] == 0 for name in present), seen["sizes"]  # e.g. vmstat, stat, loadavg
    assert {"vmstat", "stat", "loadavg"} <= present
    assert seen["setsid"] == "EPERM"  # the autogroup counter cannot be moved (or read anew)
    # what programs do use still works: the CPU count, a child interpreter, their own PIDs
    assert seen["cpus"] == os.cpu_count() and seen["child"] == "42" and seen["last_pid"] > 1


@pytest.mark.parametrize("name", ["vmstat", "loadavg"])
def test_the_host_has_what_the_sandbox_hides(name):
    """The control: outside the sandbox these files are the host's counters."""
    with open(f"/proc/{name}", "rb") as handle:
        assert len(handle.read()) > 0
