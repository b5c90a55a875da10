"""Reward integrity, round 3 (issue 35): judging is bounded whatever a program returns.

Real hostile programs run in the bubblewrap sandbox and are scored by the real code reward:
- values built to collide in the harness's hashing (class 3): 100,000 ints that all hash to
  0 turned into a set cost the harness 102 s with the GIL held; they are refused before
  anything is built, and the program that sent them is a bug;
- an output of many short lines (class 6): the harness walks it line by line instead of
  holding a list of its lines (33 times its size before).
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from sandbox_support import SMALL, inet_sandbox, needs_bwrap, sandbox  # noqa: F401  (fixtures)

from gdpo_nemo.rewards.code import score_code_batch
from gdpo_nemo.sandbox import Case, Limits, SandboxPool
from gdpo_nemo.sandbox.values import MAX_BUCKET_COLLISIONS, HostileValue, decode_values

pytestmark = needs_bwrap

MERSENNE = 2**61 - 1  # CPython's int hash is the value modulo this prime: every multiple hashes to 0


def fenced(source: str) -> str:
    return f"Solution:\n```python\n{source}\n```\n"


COLLIDING = fenced(f"def pairs(n):\n    return {{k * {MERSENNE} for k in range(20000)}}\n")
COLLIDING_LIST = fenced(f"def pairs(n):\n    return [k * {MERSENNE} for k in range(20000)]\n")
HONEST_BIG = fenced("def pairs(n):\n    return set(range(20000))\n")


def test_values_with_colliding_hashes_are_refused_and_their_program_is_a_bug(sandbox):
    # Room for 20,000 values of 20 digits (SMALL's output limit would refuse them as too big).
    limits = Limits(cpu_seconds=2, wall_seconds=10, memory_bytes=256 << 20, max_processes=8,
                    max_output_bytes=4 << 20, tmp_bytes=SMALL.tmp_bytes)
    tests = [["assert len(pairs(1)) == 20000"], ["assert len(set(pairs(1))) == 20000"],
             ["assert len(pairs(1)) == 20000"]]
    with SandboxPool(workers=2, sandbox=sandbox, limits=limits) as workers:
        scores = score_code_batch([COLLIDING, COLLIDING_LIST, HONEST_BIG], tests, components=["pass", "bug"],
                                  limits=limits, pool=workers)
    # The last release built these sets (6.7 s of harness CPU for the two at 20,000 values,
    # 102 s for one at 100,000) and gave both pass=1, bug=1. Refused before anything is built.
    assert scores == {"pass": [0.0, 0.0, 1.0], "bug": [0.0, 0.0, 1.0]}


def test_the_collision_budget_is_linear_and_lets_ordinary_values_through():
    import json

    # A bucket of more than MAX_BUCKET_COLLISIONS unequal values is refused, however they nest.
    hostile = [["tuple", [["frozenset", [k * MERSENNE for k in range(MAX_BUCKET_COLLISIONS + 1)]]]]]
    try:
        decode_values(json.dumps(hostile), 1)
    except HostileValue as err:
        assert "colliding hashes" in str(err)
    else:
        raise AssertionError("colliding frozenset accepted")
    # Equal values, CPython's own -1/-2 collision and 1 == 1.0 == True are ordinary values.
    ordinary = [["list", [0] * 50000], ["set", [-1, -2, 3]], ["list", [1, 1.0, True, -1, -2]],
                ["dict", [[k, k % 7] for k in range(50000)]]]
    decoded = decode_values(json.dumps(ordinary), 4)
    assert decoded[1] == {-1, -2, 3} and len(decoded[3]) == 50000


@pytest.mark.parametrize("padding", [[0] * 200_000, list(range(200_000)) * 2, ["ab"] * 200_000, []])
def test_colliding_values_hidden_among_many_ordinary_ones_are_still_refused(padding):
    """The collision check counts hashes at C speed and passes a bucket of one repeated value
    whole (benchmarks/bench_rewards.py times a returned list of 4 million zeros): colliding
    unequal values among them, in one bucket or beside other shared hashes, are still found."""
    import json

    colliding = [k * MERSENNE for k in range(1, MAX_BUCKET_COLLISIONS + 2)]  # hash 0, like 0 itself
    for body in (padding + colliding, colliding + padding, padding[:1000] + colliding + padding[1000:]):
        for kind in ("list", "set", "frozenset", "tuple"):
            with pytest.raises(HostileValue, match="colliding hashes"):
                decode_values(json.dumps([[kind, body]]), 1)
    # the same values without the collision decode as they are; 1, 1.0 and True stay apart
    decoded = decode_values(json.dumps([["list", padding + [1, 1.0, True]], ["tuple", padding]]), 2)
    assert decoded[0] == padding + [1, 1.0, True] and decoded[1] == tuple(padding)
    assert [type(v) for v in decoded[0][-3:]] == [int, float, bool]


def test_an_output_of_short_lines_is_judged_without_holding_its_lines(sandbox):
    size = 8 << 20
    flood = fenced(f"import sys\nsys.stdout.write('a\\n' * {size // 2})\n")
    honest = fenced("print(input())")
    limits = Limits(max_output_bytes=size + 1024, cpu_seconds=4, wall_seconds=20, memory_bytes=256 << 20)
    tests = [{"inputs": ["1\n"], "outputs": ["b\n"]}]
    with SandboxPool(workers=1, sandbox=sandbox, limits=limits) as workers:
        tracemalloc.start()
        try:
            scores = score_code_batch([flood], tests, components=["pass", "bug"], limits=limits, pool=workers)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert score_code_batch([honest], [{"inputs": ["7\n"], "outputs": ["7\n"]}], components=["pass"],
                                limits=limits, pool=workers) == {"pass": [1.0]}
    assert scores == {"pass": [0.0], "bug": [1.0]}  # a wrong answer, not a crash
    # The program's output costs a few copies of itself (its bytes and its text), not the 33
    # that a list of its 4 million lines took.
    assert peak < 5 * size, f"peak {peak >> 20} MiB"


def test_settling_the_pid_counter_ends_when_the_counter_would_wrap():
    """Class 7 (latent here: this kernel gives the sandbox its own pid_max): a target past
    pid_max cannot be reached by forking, so the driver retires the sandbox at once instead of
    forking until the job's deadline (hours for a large test set)."""
    import subprocess
    import sys

    from gdpo_nemo.sandbox import __file__ as package

    # The driver is a script that runs itself when loaded: its functions without that last call.
    source = (Path(package).parent / "_driver.py").read_text()
    assert source.rstrip().endswith("\nmain()")
    script = (
        source.rstrip()[: -len("main()")]
        + "\ntop = _pid_max()\n"
        + "print(_settle_pid_counter(top - 2, 5), _settle_pid_counter(_last_pid() + 10, 0))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    # Past pid_max: retired. A counter already below its start (it wrapped): retired.
    assert done.stdout.split() == ["False", "False"]


FUTEX_PROBE = r"""
import ctypes, errno, mmap, os, threading
libc = ctypes.CDLL(None, use_errno=True)
SYS_futex = {"x86_64": 202, "aarch64": 98}[os.uname().machine]
fd = os.open("/usr/bin/env", os.O_RDONLY)  # the host's inode, the same in every sandbox
shared = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ)
word = ctypes.c_uint32.from_buffer_copy(shared[:4]).value
address = None
# The shared mapping's address: ctypes cannot take it from a read-only mmap, so ask /proc.
for line in open("/proc/self/maps"):
    if line.rstrip().endswith("/usr/bin/env") and " r--s " in line:
        address = int(line.split("-")[0], 16)
timeout = (ctypes.c_long * 2)(0, 50_000_000)
def futex(op, value, tp=None):
    result = libc.syscall(SYS_futex, ctypes.c_void_p(address), op, value, tp, None, 0)
    return result if result >= 0 else -ctypes.get_errno()
wait_shared = futex(0, word, ctypes.byref(timeout))          # FUTEX_WAIT
wake_shared = futex(1, 1)                                      # FUTEX_WAKE
private = ctypes.c_uint32(0)
wake_private = libc.syscall(SYS_futex, ctypes.byref(private), 1 | 128, 1, None, None, 0)  # FUTEX_WAKE_PRIVATE
done = []
thread = threading.Thread(target=done.append, args=(1,)); thread.start(); thread.join()
print(wait_shared, wake_shared, wake_private, done)
"""


def test_a_shared_futex_on_a_system_file_is_refused_and_private_ones_work(sandbox):
    """Class 1: a correct program parked futex waiters on a word of a read-only shared
    mapping of a file under /usr; programs in concurrent sandboxes woke them (the wake's count
    is the bit) and read its answers. Shared futex ops are refused now; threads still work."""
    import errno

    [result] = sandbox.run_cases(FUTEX_PROBE, [Case()], Limits(cpu_seconds=2, wall_seconds=10, memory_bytes=256 << 20,
                                                                max_processes=8, tmp_bytes=SMALL.tmp_bytes))
    assert result.status == "ok", result.stderr[-2000:]
    wait_shared, wake_shared, wake_private, threads = result.stdout.split(maxsplit=3)
    # The last release: the wait timed out (-ETIMEDOUT) and the wake counted its waiters (0).
    assert (int(wait_shared), int(wake_shared)) == (-errno.EPERM, -errno.EPERM)
    assert int(wake_private) == 0 and threads.strip() == "[1]"


# --- class 2: namespace-wide state that outlives a program in a reused sandbox -------------

MOVES_NET_COUNTERS = (
    "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "for _ in range(37):\n    s.sendto(b'x' * 100, ('127.0.0.1', 9))\ns.close()\n"
)
READS_NET_COUNTERS = "print(open('/proc/net/snmp').read().split('Udp:')[2].split()[3:5], open('/proc/net/dev').read().split('lo:')[1].split()[:2])"
MOVES_AUTOGROUP = (
    "import ctypes\nctypes.CDLL(None).prctl(4, 1, 0, 0, 0)\n"  # PR_SET_DUMPABLE: /proc/self/autogroup is writable then
    "open('/proc/self/autogroup', 'w').write('7')\n"
)
READS_AUTOGROUP = "print(open('/proc/self/autogroup').read().split()[-1])"
MOVES_TMP_FLAGS = (
    "import fcntl, os, struct\nfd = os.open('/tmp', os.O_RDONLY)\n"
    "fcntl.ioctl(fd, 0x40086602, struct.pack('l', 0x40))\n"  # FS_IOC_SETFLAGS: nodump on /tmp itself
)
READS_TMP_FLAGS = (
    "import fcntl, os, struct\nfd = os.open('/tmp', os.O_RDONLY)\n"
    "print(struct.unpack('l', fcntl.ioctl(fd, 0x80086601, b'\\0' * 8))[0])"
)


def after(sandbox, earlier: str | None, reader: str) -> tuple[str, int, str]:
    """What `reader` sees in a reused sandbox after `earlier` ran there (None: a fresh one),
    how many sandboxes the worker started, and how `earlier` ended."""
    from gdpo_nemo.sandbox.worker import SandboxWorker

    kept = SandboxWorker(sandbox, SMALL.tmp_bytes)
    try:
        status = ""
        if earlier is not None:
            [ran] = kept.run_cases(earlier, [Case()], SMALL)
            status = ran.status + ran.stderr[-300:]
        [read] = kept.run_cases(reader, [Case()], SMALL)
        return read.stdout, kept.started, status
    finally:
        kept.close()


def test_state_a_program_moves_in_its_namespaces_never_reaches_the_next_program(sandbox, inet_sandbox):
    """Class 2: loopback and UDP counters, the session's autogroup nice value and the inode
    flags of /tmp survived the cleanup, so the sandbox was kept and every later program read
    them (the carrier of a copied answer). Moved, they retire the sandbox now. (UDP needs a
    Sandbox(inet=True); by default a program makes no such socket at all.)"""
    for box, mover, reader in ((inet_sandbox, MOVES_NET_COUNTERS, READS_NET_COUNTERS),
                               (sandbox, MOVES_AUTOGROUP, READS_AUTOGROUP)):
        fresh, _, _ = after(box, None, reader)
        seen, started, status = after(box, mover, reader)
        assert status.startswith("ok"), status
        assert (seen, started) == (fresh, 2), mover
    quiet = after(inet_sandbox, "print(1)", READS_NET_COUNTERS)
    assert quiet[1] == 1  # a program that moves nothing keeps its sandbox
    fresh, _, _ = after(sandbox, None, READS_TMP_FLAGS)
    seen, started, status = after(sandbox, MOVES_TMP_FLAGS, READS_TMP_FLAGS)
    if status.startswith("ok"):  # tmpfs takes inode flags since Linux 6.0
        assert (seen, started) == (fresh, 2)


MOVES_TMP_OFFSETS = (  # renames and a hard link: new directory entries in /tmp, no new inode
    "import os\nfor _ in range(9):\n    os.rename('main.py', 'x.py')\n    os.rename('x.py', 'main.py')\n"
    "os.link('main.py', 'y.py')\nos.unlink('y.py')\n"
)
READS_TMP_OFFSETS = """
import ctypes, os, platform
libc = ctypes.CDLL(None, use_errno=True)
open('probe', 'w').close()
fd = os.open('.', os.O_RDONLY | os.O_DIRECTORY)
buffer = ctypes.create_string_buffer(8192)
count = libc.syscall({'x86_64': 217, 'aarch64': 61}[platform.machine()], fd, buffer, 8192)
entries, at = [], 0
while at < count:  # linux_dirent64: each entry's d_off is the offset of the entry after it
    length = int.from_bytes(buffer.raw[at + 16:at + 18], 'little')
    entries.append((buffer.raw[at + 19:at + length].split(b'\\0')[0], int.from_bytes(buffer.raw[at + 8:at + 16], 'little')))
    at += length
names = [name for name, _ in entries]
print(entries[names.index(b'probe') - 1][1])
"""


def test_directory_entries_a_program_made_in_tmp_never_reach_the_next_program(sandbox):
    """Class 2, tmpfs directory offsets: since Linux 6.6 each new entry of a tmpfs directory
    (a file, a hard link, a rename's new name) takes the next offset of a counter that
    emptying /tmp keeps. Renames and links make no inode, so the inode probe missed them:
    the next program read the count in the offset of its own file. Moved, it retires the
    sandbox now; a program that makes nothing keeps it."""
    import os

    from tests.support.requirements import require

    release = tuple(int(part) for part in os.uname().release.split("-")[0].split(".")[:2])
    require(release >= (6, 6), "Linux >= 6.6 (tmpfs directory offsets from a counter)")
    fresh, _, _ = after(sandbox, None, READS_TMP_OFFSETS)
    seen, started, status = after(sandbox, MOVES_TMP_OFFSETS, READS_TMP_OFFSETS)
    assert status.startswith("ok"), status
    # The last release kept the sandbox, and the reader's offset was 20 past a fresh one's.
    assert (seen, started) == (fresh, 2)
    quiet, started, _ = after(sandbox, "print(1)", READS_TMP_OFFSETS)
    assert started == 1 and int(quiet) > int(fresh)  # kept: the probes and main.py moved it, by rule


# --- classes 4 and 5: TCP memory and the host's ephemeral ports, closed by construction ------

SOCKETS = """
import errno, socket
for family in (socket.AF_INET, socket.AF_INET6):
    try:
        socket.socket(family, socket.SOCK_STREAM)
        print("made")
    except OSError as error:
        print(errno.errorcode[error.errno])
a, b = socket.socketpair()
a.sendall(b"local ipc works")
print(b.recv(64).decode())
"""


def test_by_default_a_program_makes_no_tcp_or_udp_socket_and_local_ipc_works(sandbox):
    """Class 4: 18 unread loopback TCP connections held 365 MiB of the host's TCP memory
    outside the sandbox's cgroup; class 5: 1,500 connects in one sandbox moved another's next
    source port by ~13,500. With no AF_INET/AF_INET6 socket neither exists; AF_UNIX (which
    buffers in memory charged to the sandbox) is what test programs use for IPC."""
    [result] = sandbox.run_cases(SOCKETS, [Case()], SMALL)
    assert result.stdout.split("\n")[:3] == ["EAFNOSUPPORT", "EAFNOSUPPORT", "local ipc works"], result.stderr[-500:]


FILLS_PER_UID_TABLES = """
import errno, fcntl, os, socket, time
pipes, raised, refused = [], 0, "none"
for _ in range(110):  # pipe buffer pages are counted per uid (fs.pipe-user-pages-soft)
    r, w = os.pipe()
    pipes.append((r, w))
    try:
        fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ: 256 pages
        raised += 1
    except OSError as error:
        refused = errno.errorcode[error.errno]
        break
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
a.setblocking(False)
sent, stop = 0, "none"
for _ in range(400):  # file descriptors in flight over unix sockets, per uid
    try:
        socket.send_fds(a, [b"x"], [pipes[0][0]])
        sent += 1
    except OSError as error:
        stop = errno.errorcode[error.errno]
        break
held = time.time()
time.sleep(3)
print(raised, refused, sent, stop, held, time.time())
"""
USES_PER_UID_TABLES = """
import errno, fcntl, os, socket, time
def attempt():
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, 1031, 1 << 20)
        pipe = "ok"
    except OSError as error:
        pipe = errno.errorcode[error.errno]
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        socket.send_fds(a, [b"x"], [r])
        fds = "ok"
    except OSError as error:
        fds = errno.errorcode[error.errno]
    for fd in (r, w):
        os.close(fd)
    a.close(), b.close()
    return pipe, fds
end = time.time() + 6
while time.time() < end:  # every 50 ms for 6 s: some attempts fall while the filler holds
    print(time.time(), *attempt())
    time.sleep(0.05)
"""


@pytest.mark.parametrize("how", ["pool", "one-off"])
def test_a_program_that_fills_the_per_uid_tables_leaves_a_concurrent_one_unharmed(sandbox, how):
    """Class 5, with real programs side by side: one program takes every pipe page and every
    in-flight file descriptor its uid may have and holds them; a program in the other worker's
    sandbox, meanwhile, still gets 1 MiB pipes and sends descriptors. When every sandbox ran as
    uid 65534 the second got EPERM and ETOOMANYREFS (checked with one uid for both workers)."""
    import os

    from tests.support.requirements import require

    require(os.geteuid() == 0, "a harness running as root (CI's), which can give each sandbox its own uid")
    limits = Limits(cpu_seconds=3, wall_seconds=12, memory_bytes=256 << 20, max_processes=8,
                    max_output_bytes=1 << 20, tmp_bytes=SMALL.tmp_bytes)
    jobs = [(FILLS_PER_UID_TABLES, [Case()]), (USES_PER_UID_TABLES, [Case()])]
    if how == "pool":  # two workers' reused sandboxes
        with SandboxPool(workers=2, sandbox=sandbox, limits=limits) as workers:
            [[filler], [user]] = workers.run_many(jobs)
    else:  # two one-off sandboxes started from two threads
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as threads:
            [[filler], [user]] = threads.map(lambda job: sandbox.run_cases(*job, limits), jobs)
    assert filler.status == "ok" and user.status == "ok", (filler.stderr[-500:], user.stderr[-500:])
    raised, refused, sent, stop, held, released = filler.stdout.split()
    # the filler did fill both tables (its own next request was refused)...
    assert int(raised) > 0 and refused == "EPERM" and int(sent) > 0 and stop == "ETOOMANYREFS"
    # ... and what the other program got while the filler held them
    during = [line.split()[1:] for line in user.stdout.splitlines() if float(held) < float(line.split()[0]) < float(released)]
    if not during:
        pytest.skip("the two programs did not run at the same time (a very loaded machine)")
    assert all(result == ["ok", "ok"] for result in during), during[:5]


def test_each_reused_sandbox_runs_as_a_host_uid_of_its_own(sandbox):
    """Class 5 (per-uid tables: pipe buffer pages, fds in flight over unix sockets): every
    sandbox ran as uid 65534, so one program could fill a table another program's calls
    fail on. Each worker of a pool now has a host uid of its own (the harness is root here;
    otherwise every sandbox runs as the harness's uid and docs/sandbox.md says so)."""
    import os

    from tests.support.requirements import require

    require(os.geteuid() == 0, "a harness running as root (CI's), which can give each worker its own uid")
    program = "import os, time\ntime.sleep(0.3)\nprint(os.getuid())"
    with SandboxPool(workers=2, sandbox=sandbox, limits=SMALL) as workers:
        results = workers.run_many([(program, [Case()])] * 6)
        uids = {int(r[0].stdout) for r in results}
        kept = [uid for worker in workers._kept for uid in worker.uids_used]
        starts = sum(worker.started for worker in workers._kept)
    assert uids == set(kept) and len(kept) == starts and 65534 not in uids


def test_the_host_channel_benchmark_runs_two_real_programs_side_by_side():
    """benchmarks/bench_host_channel.py, whose figures docs/sandbox.md quotes for the host-wide
    channels, at toy size: the fork counter and the idle time read as closed (hidden), the inode counter that
    remains runs and reports what the receiver decoded."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "benchmarks/bench_host_channel.py", "--trials", "1", "--bits", "4"],
                          cwd=repo, capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(repo)})
    assert done.returncode == 0, done.stderr[-2000:]
    forks, idle, trial, summary = done.stdout.strip().splitlines()[-4:]
    assert forks == "forks: closed (the counter reads empty inside the sandbox)", done.stdout  # /proc/stat hidden
    assert idle == "idle: closed (the counter reads empty inside the sandbox)", done.stdout  # /proc/uptime hidden
    assert trial.startswith("inodes trial 0: sent ") and " received " in trial and "(nothing" not in trial, trial
    assert summary.startswith("inodes: raw rate 10 bits/s; bit errors "), summary
