"""Host-wide leases (gdpo_nemo.sandbox.leases): sandbox uids and cgroup names that no two
harness processes hold at once, whatever their PID namespaces."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sandbox_support import needs_bwrap

from gdpo_nemo.sandbox import leases

REPO = Path(__file__).resolve().parents[1]

HOLDER = """
import sys
from pathlib import Path
from gdpo_nemo.sandbox import leases
lease = leases.take("uid", 1, directory=Path(sys.argv[1]))
print(lease.number, flush=True)
sys.stdin.read()
"""


def test_a_lease_is_exclusive_across_processes_and_ends_with_its_holder(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "0"
        assert leases.is_held("uid", 0, directory=tmp_path)
        with pytest.raises(leases.LeaseError, match="no free uid lease"):
            leases.take("uid", 1, directory=tmp_path)  # the span's only number is held
    finally:
        holder.send_signal(signal.SIGKILL)  # no release: the kernel drops the lock with the process
        holder.wait()
    assert not leases.is_held("uid", 0, directory=tmp_path)
    mine = leases.take("uid", 1, directory=tmp_path)
    assert (mine.number, leases.is_held("uid", 0, directory=tmp_path)) == (0, True)
    mine.release()
    mine.release()  # idempotent
    assert not mine.path.exists() and not leases.is_held("uid", 0, directory=tmp_path)


def test_many_leases_of_one_process_are_distinct_and_come_back_when_released(tmp_path):
    taken = [leases.take("cgroup", 40, directory=tmp_path) for _ in range(40)]
    assert sorted(lease.number for lease in taken) == list(range(40))
    with pytest.raises(leases.LeaseError):
        leases.take("cgroup", 40, directory=tmp_path)
    [seventh] = [lease for lease in taken if lease.number == 7]
    seventh.release()
    again = leases.take("cgroup", 40, directory=tmp_path)
    assert again.number == 7
    for lease in [*taken, again]:
        lease.release()
    assert list(tmp_path.iterdir()) == []


# One harness in a PID namespace of its own (it is pid 1 there, as in a container): a pool of
# two reused sandboxes and one-off runs, each program printing its uid while the other harness
# runs; then the harness's cgroup directory name.
HARNESS = """
import json, os, sys
from gdpo_nemo.sandbox import Case, Limits, Sandbox, SandboxPool
assert os.getpid() == 1, os.getpid()
limits = Limits(cpu_seconds=2, wall_seconds=5, memory_bytes=256 << 20, max_processes=8, tmp_bytes=8 << 20)
box = Sandbox(backend="bwrap")
program = "import os, time\\ntime.sleep(0.5)\\nprint(os.getuid())"
print("ready", flush=True)
sys.stdin.readline()
with SandboxPool(workers=2, sandbox=box, limits=limits) as pool:
    reused = [int(r[0].stdout) for r in pool.run_many([(program, [Case()])] * 4)]
    started = sum(worker.started for worker in pool._kept)
one_off = [int(box.run_program(program, "", limits).stdout) for _ in range(2)]
root = box._cgroup_root
names = sorted({parent.name for parent in root.parents.values()}) if root is not None else []
print(json.dumps({"reused": reused, "started": started, "one_off": one_off, "cgroups": names}), flush=True)
"""


@needs_bwrap
def test_two_harnesses_that_are_each_pid_1_of_their_namespace_share_no_uid_and_no_cgroup():
    """Issue 46: uids came from a counter starting at pid x 4096, so two harnesses that were
    each pid 1 of their own PID namespace handed out the same uids (and named their cgroups
    alike), and a program in one reached a program in the other through the per-uid tables."""
    from tests.support.requirements import require

    require(os.geteuid() == 0, "a harness running as root (CI's), which gives each sandbox a host uid of its own")
    command = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", HARNESS]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    harnesses = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env) for _ in range(2)]
    try:
        for harness in harnesses:
            assert harness.stdout.readline().strip() == "ready", harness.stderr.read()[-3000:]
        for harness in harnesses:  # both pools at once
            harness.stdin.write("go\n")
            harness.stdin.flush()
        seen = []
        for harness in harnesses:
            out, err = harness.communicate(timeout=120)
            assert harness.returncode == 0, err[-3000:]
            seen.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for harness in harnesses:
            if harness.poll() is None:
                harness.kill()
    first, second = ({*s["reused"], *s["one_off"]} for s in seen)
    assert not first & second, seen
    for s in seen:  # one uid per sandbox start: a reused sandbox's jobs share it, one-off runs each have one
        assert len(set(s["reused"])) == s["started"] and len(set(s["one_off"])) == 2
        assert not set(s["reused"]) & set(s["one_off"])
    if seen[0]["cgroups"]:
        assert seen[0]["cgroups"] != seen[1]["cgroups"]


def test_files_left_by_killed_holders_are_swept_and_held_ones_kept(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "0"
        for number in (5, 6, 7):  # what killed harnesses leave: files nobody holds
            (tmp_path / f"uid-{number}").write_text("")
        leases._SWEPT.discard((tmp_path, "uid"))
        mine = leases.take("uid", 100, directory=tmp_path)
        left = sorted(p.name for p in tmp_path.iterdir())
        assert left == sorted({"uid-0", f"uid-{mine.number}"}), left  # the holder's stays
        mine.release()
    finally:
        holder.kill()
        holder.wait()
