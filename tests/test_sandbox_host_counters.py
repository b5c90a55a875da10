"""Issue 46: host-wide counters a sandboxed program could signal through, hidden where the
kernel lets us (gdpo_nemo.sandbox.isolation.HIDDEN_PROC, the seccomp filter's setsid)."""

from __future__ import annotations

import errno
import json
import os

import pytest
from sandbox_support import MODES, SMALL, run_as, sandbox  # noqa: F401  (fixture)

from gdpo_nemo.sandbox import Case
from gdpo_nemo.sandbox.isolation import HIDDEN_PROC, HIDDEN_PROC_DIRS

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
last = "/proc/sys/kernel/ns_last_pid"
print(json.dumps({"sizes": seen, "setsid": setsid, "cpus": os.cpu_count(), "child": child, "pid": os.getpid(),
                  "last_pid": int(open(last).read()) if os.path.exists(last) else None,
                  "listing": sorted(os.listdir("/proc"))}))
""" % (HIDDEN_PROC,)


@pytest.mark.parametrize("mode", MODES)
def test_host_wide_counters_read_empty_and_a_new_session_is_refused(sandbox, mode):
    [result] = run_as(mode, sandbox, PROBE)
    assert result.status == "ok", result.stderr[-2000:]
    seen = json.loads(result.stdout)
    present = {name for name in HIDDEN_PROC if os.path.exists(f"/proc/{name}")}
    assert {"vmstat", "stat", "loadavg"} <= present
    if mode == "reused":  # the full /proc, each host-wide file covered by an empty one
        assert {name for name, size in seen["sizes"].items() if size is not None} == present
        assert all(seen["sizes"][name] == 0 for name in present), seen["sizes"]  # e.g. vmstat, stat, loadavg
        assert seen["last_pid"] > 1
    else:  # a /proc of its own processes alone (subset=pid): no host-wide file at all
        assert all(size is None for size in seen["sizes"].values()), seen["sizes"]
        assert [name for name in seen["listing"] if not name.isdigit()] == ["self", "thread-self"], seen["listing"]
        assert seen["last_pid"] is None
    assert seen["setsid"] == "EPERM"  # the autogroup counter cannot be moved (or read anew)
    # what programs do use still works: the CPU count, a child interpreter, their own PIDs
    assert seen["cpus"] == os.cpu_count() and seen["child"] == "42" and seen["pid"] > 1


def test_a_one_off_sandbox_holds_no_capability_and_cannot_uncover_the_full_proc(sandbox):
    """The driver of a one-off sandbox mounted its /proc (subset=pid) with capabilities that
    bubblewrap gave it for that alone, in the sandbox's user namespace: none is left to the
    program, in any set, and the mount cannot be undone or made again."""
    source = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print([line.split()[1] for line in open('/proc/self/status') if line.startswith('Cap')])\n"
        "print(libc.umount2(b'/proc', 2), ctypes.get_errno())\n"
        "print(libc.mount(b'proc', b'/tmp', b'proc', 0, None), ctypes.get_errno())\n"
        "print(sorted(n for n in os.listdir('/proc') if not n.isdigit()))\n"
    )
    [result] = run_as("one-off", sandbox, source)
    assert result.status == "ok", result.stderr[-2000:]
    caps, umount, mount, listing = result.stdout.splitlines()
    assert caps == str(["0000000000000000"] * 5)  # CapInh, CapPrm, CapEff, CapBnd, CapAmb
    assert umount == mount == f"-1 {errno.EPERM}"
    assert listing == str(["self", "thread-self"])


@pytest.mark.parametrize("name", ["vmstat", "loadavg"])
def test_the_host_has_what_the_sandbox_hides(name):
    """The control: outside the sandbox these files are the host's counters."""
    with open(f"/proc/{name}", "rb") as handle:
        assert len(handle.read()) > 0


SCAN = """
import json, os, time
def read_all(directory, depth=0):
    seen = {}
    try:
        names = os.listdir(directory)
    except PermissionError:  # root's alone (tty/driver)
        return seen
    for name in names:
        path = os.path.join(directory, name)
        if name.isdigit() or name in ("self", "thread-self") or os.path.islink(path):
            continue  # the program's own processes (and /proc/net, a link to its own network's)
        if os.path.isdir(path):
            if depth < 6:
                seen.update(read_all(path, depth + 1))
            continue
        try:
            with open(path, "rb") as handle:
                seen[path] = handle.read(1 << 16)
        except OSError:
            pass  # root's alone (kcore, kmsg, kpage*) or not readable
    return seen
time.sleep(0.3)  # the busy program is at work
before = read_all("/proc")
time.sleep(2.0)
after = read_all("/proc")
print(json.dumps({"read": len(before), "moved": sorted(p for p in before if after.get(p) != before[p]),
                  "hidden_dirs": {name: os.listdir("/proc/" + name) for name in %r if os.path.isdir("/proc/" + name)}}))
""" % (HIDDEN_PROC_DIRS,)

BUSY = """
import mmap, os, socket, threading, time
end = time.time() + 2.8
while time.time() < end:
    for _ in range(5):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    for _ in range(100):
        r, w = os.pipe()
        os.close(r)
        os.close(w)
    memory = mmap.mmap(-1, 32 << 20)
    memory.write(b"x" * (32 << 20))
    memory.close()
    with open("/tmp/f", "wb") as handle:
        handle.write(b"y" * (4 << 20))
    os.unlink("/tmp/f")
    threads = [threading.Thread(target=time.sleep, args=(0.01,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    a, b = socket.socketpair()
    a.send(b"x" * 100000)
    a.close()
    b.close()
print("done")
"""


@pytest.mark.parametrize("mode", MODES)
def test_no_file_under_proc_outside_the_programs_own_moves_while_another_sandbox_works(sandbox, mode):
    """Every /proc file a program can read, but those of its own processes and network, is the
    same 2 s later while a program in another sandbox forks, makes pipes, threads and sockets,
    takes memory and writes files (the host's own work moves host-wide counters too): only a
    random UUID differs. Before: uptime (idle time of every CPU), pressure/ (stall times of the
    whole machine) and fs/ext4 (the host disk's free blocks) moved."""
    from gdpo_nemo.sandbox import Limits, SandboxPool

    limits = Limits(cpu_seconds=6, wall_seconds=10, memory_bytes=512 << 20, max_processes=8, tmp_bytes=8 << 20)
    with SandboxPool(workers=2, sandbox=sandbox, limits=limits, reuse=mode == "reused") as pool:
        [[scan], [busy]] = pool.run_many([(SCAN, [Case()]), (BUSY, [Case()])])
    assert scan.status == "ok" and busy.stdout == "done\n", (scan.stderr[-2000:], busy.status, busy.stderr[-2000:])
    seen = json.loads(scan.stdout)
    if mode == "reused":
        assert seen["read"] > 100  # /proc is there: cpuinfo, sys/..., the namespace's own files
        assert seen["moved"] == ["/proc/sys/kernel/random/uuid"], seen["moved"]
        assert all(listing == [] for listing in seen["hidden_dirs"].values()), seen["hidden_dirs"]
    else:  # nothing but its own processes to read
        assert (seen["read"], seen["moved"], seen["hidden_dirs"]) == (0, [], {}), seen


def test_where_the_driver_cannot_mount_proc_one_off_sandboxes_hide_its_files_one_by_one(monkeypatch):
    """On a kernel that refuses the driver's mount (here: bubblewrap started without the
    capabilities it needs for it), the driver stops before anything runs and says why, and
    the Sandbox falls back, with a warning, to the full /proc with each host-wide file
    covered, as reused sandboxes have it."""
    import dataclasses

    from gdpo_nemo.sandbox import Sandbox, isolation, notices

    real = isolation.Isolation.launch

    def without_capabilities(self, *args, **kwargs):
        launch = real(self, *args, **kwargs)
        argv = list(launch.argv)
        while "--cap-add" in argv:
            at = argv.index("--cap-add")
            del argv[at : at + 2]
        return dataclasses.replace(launch, argv=argv)

    monkeypatch.setattr(isolation.Isolation, "launch", without_capabilities)
    monkeypatch.setattr(notices, "_warned", set())
    box = Sandbox(backend="bwrap")
    with pytest.warns(RuntimeWarning, match="subset=pid"):
        assert box.active_backend == "bwrap"
    chosen = box._get_isolation()
    assert chosen.proc_subset is False
    [result] = box.run_cases(PROBE, [Case()], SMALL)
    seen = json.loads(result.stdout)
    present = {name for name in HIDDEN_PROC if os.path.exists(f"/proc/{name}")}
    assert {name for name, size in seen["sizes"].items() if size is not None} == present
    assert all(seen["sizes"][name] == 0 for name in present) and seen["last_pid"] > 1
    chosen.proc_subset = True  # what the probe met: the driver's own words
    problem = box._probe(chosen)
    assert "did not start" in problem and "gdpo-sandbox driver: /proc/sys/user/max_user_namespaces" in problem, problem
