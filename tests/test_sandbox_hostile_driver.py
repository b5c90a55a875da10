"""Issue 23: hostile programs against the driver, their siblings and the harness's memory.

Each test runs a real hostile program through the real sandbox (bubblewrap, reused workers
as the pool uses them) and fails on the design before issue 23 (checked by running this
file against that commit).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tracemalloc

import pytest
from sandbox_support import SMALL, needs_bwrap, pool, sandbox  # noqa: F401  (fixtures)

from gdpo_nemo.rewards.code import parse_tests, score_code_batch
from gdpo_nemo.sandbox import Case, Limits, SandboxPool
from gdpo_nemo.sandbox.worker import SandboxWorker
from tests.support.requirements import requires

pytestmark = needs_bwrap

fenced = "```python\n{}\n```".format


@pytest.fixture
def worker(sandbox):
    kept = SandboxWorker(sandbox, SMALL.tmp_bytes)
    yield kept
    kept.close()


# --- 1. no program changes or reads the state of a process outside its case ----------------

# Hostile programs below print, per call, "<name> done" or "<name> <errno>".
ATTEMPT = """
def attempt(name, call):
    try:
        call()
        print(name, 'done')
    except OSError as error:
        print(name, error.errno)
"""

# Every call aims at PID 1 (the driver) or the program's parent (the job process).
TOUCHES_THE_DRIVER = ATTEMPT + """
import ctypes, os, resource
libc = ctypes.CDLL(None, use_errno=True)
for pid in (1, os.getppid()):
    attempt('prlimit nofile', lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE, (64, 64)))
    attempt('prlimit data', lambda: resource.prlimit(pid, resource.RLIMIT_DATA, (64 << 20, 64 << 20)))
    attempt('prlimit read', lambda: resource.prlimit(pid, resource.RLIMIT_NOFILE))
    attempt('setpriority', lambda: os.setpriority(os.PRIO_PROCESS, pid, 19))
    attempt('getpriority', lambda: os.getpriority(os.PRIO_PROCESS, pid))
    attempt('sched_setaffinity', lambda: os.sched_setaffinity(pid, {0}))
    attempt('sched_getaffinity', lambda: os.sched_getaffinity(pid))
    attempt('sched_setscheduler', lambda: os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0)))
    attempt('sched_getscheduler', lambda: os.sched_getscheduler(pid))
    def ioprio():
        if libc.syscall(251, 1, pid, (3 << 13) | 0) != 0:  # ioprio_set(IOPRIO_WHO_PROCESS, pid, IDLE)
            raise OSError(ctypes.get_errno(), 'ioprio_set')
    attempt('ioprio_set', ioprio)
attempt('setpriority user', lambda: os.setpriority(os.PRIO_USER, 0, 19))
attempt('setpriority group', lambda: os.setpriority(os.PRIO_PGRP, 0, 19))
# its own settings stay its own to change
attempt('own nofile', lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128)))
attempt('own nice', lambda: os.nice(1))
attempt('own cpus', lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
"""
# What an honest program needs: 100 open files, 250 MiB of data, its usual priority and CPUs.
HONEST = """
import os, resource
files = [open('/dev/null') for _ in range(100)]
data = bytearray(250 << 20)
print(len(files), len(data) >> 20, os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)),
      os.sched_getscheduler(0), resource.getrlimit(resource.RLIMIT_NOFILE), resource.getrlimit(resource.RLIMIT_DATA))
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="ioprio_set's number is x86_64's")
def test_no_program_can_change_or_read_the_state_of_the_driver_or_its_job_process(sandbox, worker):
    limits = Limits(memory_bytes=512 << 20, tmp_bytes=SMALL.tmp_bytes)
    [fresh] = sandbox.run_cases(HONEST, [Case()], limits)
    [hostile] = worker.run_cases(TOUCHES_THE_DRIVER, [Case()], limits)
    after = worker.run_cases(HONEST, [Case()] * 2, limits)
    lines = hostile.stdout.splitlines()
    assert lines[:-3] == [line.rsplit(" ", 1)[0] + f" {errno.EPERM}" for line in lines[:-3]], hostile.stdout
    assert len(lines) == 2 * 10 + 2 + 3
    assert lines[-3:] == ["own nofile done", "own nice done", "own cpus done"]
    assert fresh.status == "ok" and fresh.stdout.startswith("100 250 0 ")
    # The next program in the same worker finds everything as a fresh sandbox has it.
    assert [(r.status, r.stdout) for r in after] == [("ok", fresh.stdout)] * 2
    assert worker.started == 1


# --- 2. nothing a program does is visible to the next one ---------------------------------

# Makes `count` x 2000 page faults and spends the CPU time they take.
FAULTS = """
count = {count:3d}
for _ in range(count):
    block = bytearray(2000 * 4096)
    for at in range(0, len(block), 4096):
        block[at] = 1
"""
# The fields of /proc/1/stat that a program's activity moved (faults and CPU time, own and
# of reaped children), and those of /proc/1/status that count context switches.
READ_PID_1 = (
    "fields = open('/proc/1/stat').read().rsplit(')', 1)[1].split()\n"
    "print([int(fields[i]) for i in (7, 8, 9, 10, 13, 14)])\n"  # minflt cminflt majflt cmajflt cutime cstime
)


def test_pid_1_counters_do_not_carry_what_the_previous_program_did(sandbox):
    seen = {}
    for count in (0, 40):
        kept = SandboxWorker(sandbox, SMALL.tmp_bytes)
        try:
            [earlier] = kept.run_cases(FAULTS.format(count=count), [Case()], SMALL)
            assert earlier.status == "ok"
            seen[count] = kept.run_cases(READ_PID_1, [Case()], SMALL)[0].stdout
            assert kept.started == 1
        finally:
            kept.close()
    quiet, busy = json.loads(seen[0]), json.loads(seen[40])
    # PID 1 never reaps a program's process (the job process does, and goes): no counter of
    # reaped children moves. Its own faults move by a few with how the harness's bytes
    # arrive, not by the 80,000 the earlier program made.
    for seen_pid_1 in (quiet, busy):
        assert [seen_pid_1[k] for k in (1, 3, 4, 5)] == [0, 0, 0, 0], seen_pid_1  # cminflt cmajflt cutime cstime
    # (A major fault or two of PID 1 itself comes from the host's page cache, not a program.)
    assert abs(quiet[0] - busy[0]) < 40 and abs(quiet[2] - busy[2]) < 5, (quiet, busy)


MAKES_FILES = "import os\nfor n in range({count}):\n    open(f'f{{n}}', 'w').close()\nos.mkdir('d')\n"
# Inode numbers, link counts and sizes a program can read of its /tmp.
READ_NUMBERING = (
    "import os\ntmp, me, vfs = os.stat('/tmp'), os.stat(__file__), os.statvfs('/tmp')\n"
    "print(me.st_ino, tmp.st_ino, tmp.st_nlink, tmp.st_size, vfs.f_ffree, vfs.f_bfree)"
)


def numbering_after(sandbox, earlier: str | None) -> tuple[str, int]:
    kept = SandboxWorker(sandbox, SMALL.tmp_bytes)
    try:
        if earlier is not None:
            kept.run_cases(earlier, [Case()] * 2, SMALL)
        return kept.run_cases(READ_NUMBERING, [Case()], SMALL)[0].stdout, kept.started
    finally:
        kept.close()


def test_the_next_program_cannot_learn_from_tmpfs_numbering_what_an_earlier_program_made(sandbox):
    # tmpfs numbers inodes from one counter per mount: files made move it. A program that made
    # none leaves numbering that depends on the harness's data only (cases run); one that made
    # some retires the sandbox, and the next program sees a fresh one.
    quiet = numbering_after(sandbox, "print(1)")
    busy = numbering_after(sandbox, MAKES_FILES.format(count=30))
    busier = numbering_after(sandbox, MAKES_FILES.format(count=300))
    fresh = numbering_after(sandbox, None)
    assert quiet[1] == 1 and quiet == numbering_after(sandbox, "def (")  # 2 cases, whether run or not
    assert busy == busier == (fresh[0], 2)
    assert quiet[0].split()[2:] == fresh[0].split()[2:]  # link count, size and free space of /tmp come back


# --- 3. no locks or watches on shared host files; 4. no host-wide AIO ---------------------

SHARED_FILE_CALLS = ATTEMPT + """
import ctypes, fcntl, os, struct
libc = ctypes.CDLL(None, use_errno=True)
shared = os.open(os.__file__, os.O_RDONLY)  # the same inode in every sandbox
own = os.open('own', os.O_RDWR | os.O_CREAT)
lock = struct.pack('hhqqi', fcntl.F_RDLCK, 0, 0, 0, 0)
attempt('flock', lambda: fcntl.flock(shared, fcntl.LOCK_SH | fcntl.LOCK_NB))
attempt('F_SETLK', lambda: fcntl.fcntl(shared, fcntl.F_SETLK, lock))
attempt('F_GETLK', lambda: fcntl.fcntl(shared, fcntl.F_GETLK, lock))
attempt('F_OFD_SETLK', lambda: fcntl.fcntl(shared, 37, lock))
attempt('F_SETLEASE', lambda: fcntl.fcntl(own, fcntl.F_SETLEASE, fcntl.F_RDLCK))
attempt('F_NOTIFY', lambda: fcntl.fcntl(os.open('/usr', os.O_RDONLY), fcntl.F_NOTIFY, fcntl.DN_ACCESS))
attempt('lockf own file', lambda: fcntl.lockf(own, fcntl.LOCK_EX | fcntl.LOCK_NB))
def raw(name, number, *args):
    def call():
        if libc.syscall(number, *[ctypes.c_long(a) for a in args]) < 0:
            raise OSError(ctypes.get_errno(), name)
    attempt(name, call)
raw('inotify_init1', 294, 0)
context = ctypes.c_ulong(0)
raw('io_setup', 206, 1, ctypes.addressof(context))
raw('io_submit', 209, 0, 0, 0)
raw('io_getevents', 208, 0, 0, 0, 0, 0)
raw('io_destroy', 207, 0)
attempt('F_GETFL still works', lambda: fcntl.fcntl(shared, fcntl.F_GETFL))
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="system call numbers of x86_64")
def test_locks_watches_and_native_aio_are_refused(sandbox):
    result = sandbox.run_program(SHARED_FILE_CALLS, "", SMALL)
    names = ["flock", "F_SETLK", "F_GETLK", "F_OFD_SETLK", "F_SETLEASE", "F_NOTIFY", "lockf own file",
             "inotify_init1", "io_setup", "io_submit", "io_getevents", "io_destroy"]
    assert result.stdout.splitlines() == [f"{name} {errno.EPERM}" for name in names] + ["F_GETFL still works done"]


HOLDS_LOCK = "import fcntl, os, time\nfd = os.open(os.__file__, os.O_RDONLY)\ntry:\n    fcntl.flock(fd, fcntl.LOCK_EX)\nexcept OSError as e:\n    print(e.errno)\ntime.sleep(0.6)\n"
PROBES_LOCK = (
    "import fcntl, os, time\ntime.sleep(0.2)\nfd = os.open(os.__file__, os.O_RDONLY)\n"
    "try:\n    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)\n    print('free')\nexcept OSError as e:\n    print(e.errno)\n"
)


def test_a_lock_on_a_shared_system_file_carries_nothing_between_concurrent_programs(sandbox):
    with SandboxPool(workers=2, sandbox=sandbox, limits=SMALL) as pool:
        holder, prober = pool.run_many([(HOLDS_LOCK, [Case()]), (PROBES_LOCK, [Case()])])
    assert (holder[0].stdout, prober[0].stdout) == (f"{errno.EPERM}\n", f"{errno.EPERM}\n")


# --- 5. harness memory bounded by workers x one case's output, whatever the batch ----------

def test_harness_memory_does_not_grow_with_the_batch_and_garbage_output_is_a_bug(sandbox):
    garbage = fenced("import sys\nsys.stdout.write('x' * (7 << 20))\nprint(input())")
    completions = [garbage] * 12
    tests = [{"inputs": ["1\n", "2\n"], "outputs": ["1\n", "2\n"]}] * 12
    limits = Limits(max_output_bytes=4 << 20)
    with SandboxPool(workers=2, sandbox=sandbox, limits=limits) as pool:
        tracemalloc.start()
        try:
            scores = score_code_batch(completions, tests, components=["pass", "bug"], limits=limits, pool=pool)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        honest = score_code_batch([fenced("print(input())")], tests[:1], components=["pass", "bug"], limits=limits, pool=pool)
    # 12 programs x 2 cases x 4 MiB kept would be ~100 MiB held (more once decoded); judged as
    # they arrive, the harness holds a few copies of one case's output per worker.
    assert peak < 2 * 6 * limits.max_output_bytes, f"peak {peak >> 20} MiB"
    # Output past what the harness keeps is an output limit: no pass, and a bug.
    assert scores == {"pass": [0.0] * 12, "bug": [0.0] * 12}
    assert honest == {"pass": [1.0], "bug": [1.0]}


# --- 6. big test sets: each case reads its own input; the tests are not the program's memory -

def test_a_correct_program_passes_a_big_test_set_within_its_own_memory_limit(pool):
    limits = Limits(memory_bytes=256 << 20, tmp_bytes=SMALL.tmp_bytes, cpu_seconds=4, wall_seconds=20)
    size = 24 << 20
    inputs = [chr(ord("a") + k) * size + "\n" for k in range(6)]  # 144 MiB of tests in all
    source = "import sys\ndata = sys.stdin.buffer.read()\nheld = bytearray(120 << 20)\nprint(len(data), data[:1].decode())"
    [results] = pool.run_many([(source, [Case(stdin=text) for text in inputs])], limits)
    assert [(r.status, r.stdout) for r in results] == [("ok", f"{size + 1} {text[0]}\n") for text in inputs]


# --- 7. cleanup is charged; assert constants are budgeted; output as CPython prints it ------

def test_what_emptying_tmp_after_a_case_costs_is_charged_to_that_case(sandbox):
    limits = Limits(cpu_seconds=1, wall_seconds=8, tmp_bytes=SMALL.tmp_bytes)
    made = "import os\nn = 0\nwhile sum(os.times()[:2]) < 0.6:\n    for _ in range(100):\n        {make}\n        n += 1\nprint(sum(os.times()[:2]))"
    [files] = sandbox.run_cases(made.format(make="open(f'f{n}', 'w').close()"), [Case()], limits)
    [deep] = sandbox.run_cases(made.format(make="os.mkdir('d'); os.chdir('d')"), [Case()], limits)
    own = float(files.stdout)
    assert files.cpu_s > own + 0.1, (files.cpu_s, own)  # ~40k files: ~0.3 s of cleanup
    assert deep.status == "timeout"  # ~100k nested directories: seconds of cleanup, past the limit


def test_an_expensive_constant_in_an_assert_test_is_a_data_error_not_a_stuck_harness():
    statement = "assert f(1) == sum([[0]*1000]*100000, [])"
    code = f"from gdpo_nemo.rewards.code import parse_tests\ntry:\n    parse_tests([{statement!r}])\nexcept ValueError as e:\n    print(e)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "costs more than" in done.stdout and "sum()" in done.stdout, done.stdout + done.stderr
    assert len(parse_tests(["assert f(1) == sorted([3, 1, 2] * 10000)", "assert f(2) == [[0] * 100] * 100"])) == 2


CPYTHON_ENDINGS = {
    "atexit _exit after print": "import atexit, os\nprint('hello')\natexit.register(os._exit, 0)",
    "atexit _exit after SystemExit": "import atexit, os\nprint('hello')\natexit.register(os._exit, 3)\nraise SystemExit(5)",
    "atexit _exit after an exception": "import atexit, os\nprint('hello')\natexit.register(os._exit, 0)\n1 / 0",
    "atexit _exit after a thread printed": (
        "import atexit, os, threading, time\ndef late():\n    time.sleep(0.1)\n    print('thread')\n"
        "threading.Thread(target=late).start()\nprint('main')\natexit.register(os._exit, 0)"
    ),
    "atexit prints": "import atexit\natexit.register(print, 'at exit')\nprint('main')",
}


@pytest.mark.parametrize("source", list(CPYTHON_ENDINGS.values()), ids=list(CPYTHON_ENDINGS))
def test_a_program_prints_what_plain_cpython_prints(sandbox, tmp_path, source):
    path = tmp_path / "main.py"
    path.write_text(source)
    plain = subprocess.run([sandbox.python, "-S", str(path)], capture_output=True, text=True, env={}, timeout=30)
    [boxed] = sandbox.run_cases(source, [Case()], SMALL)
    assert (boxed.stdout, boxed.returncode) == (plain.stdout, plain.returncode)


# --- the filter's system-call numbers, against the kernel's own headers ---------------------

HEADERS = {
    "x86_64": ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", r"#define __NR_(\w+) (\d+)"),
    "aarch64": ("/usr/include/asm-generic/unistd.h", r"#define __NR(?:3264)?_(\w+) (\d+)"),
}


@requires(all(os.path.exists(path) for path, _ in HEADERS.values()), "linux-libc-dev's headers (Debian package linux-libc-dev)")
@pytest.mark.parametrize("machine", list(HEADERS))
def test_every_system_call_number_of_the_filter_is_the_kernels(machine):
    import re

    from gdpo_nemo.sandbox import seccomp

    path, pattern = HEADERS[machine]
    numbers = {}
    for line in open(path, encoding="utf-8"):
        found = re.match(pattern, line)
        if found:
            numbers[found.group(1)] = int(found.group(2))
    table = seccomp.MACHINES[machine][1]
    known = {name: number for name, number in table.items() if name in numbers}
    assert known == {name: numbers[name] for name in known}
    # Calls newer than these headers, or under another macro name, are the only ones unchecked.
    # futex_wake/wait/requeue: 454-456 since Linux 6.7 (asm-generic/unistd.h, every architecture).
    assert set(table) - set(known) <= {"setxattrat", "open_tree_attr", "file_setattr", "name_to_handle_at", "open_by_handle_at",
                                       "futex_wake", "futex_wait", "futex_requeue"}
    assert {"prlimit64", "kill", "fcntl", "flock", "io_setup", "inotify_add_watch", "sched_setaffinity"} <= set(known)


def test_judged_results_match_the_results_and_a_failing_judge_leaves_the_worker_usable(sandbox, worker):
    source = "import sys\nprint(input() * 2)\nsys.exit(int(input()))"
    cases = [Case(stdin="a\n0\n"), Case(stdin="b\n3\n"), Case(stdin="c\n0\n")]
    plain = worker.run_cases(source, cases, SMALL)
    judged = worker.run_cases(source, cases, SMALL, judge=lambda index, result: (index, result.status, result.stdout))
    assert judged == [(k, r.status, r.stdout) for k, r in enumerate(plain)] == [
        (0, "ok", "aa\n"), (1, "error", "bb\n"), (2, "ok", "cc\n")]

    def broken(index, result):
        raise KeyError("judge failed")

    with pytest.raises(KeyError):
        worker.run_cases(source, cases, SMALL, judge=broken)
    assert [r.stdout for r in worker.run_cases(source, cases, SMALL)] == ["aa\n", "bb\n", "cc\n"]
    with SandboxPool(workers=2, sandbox=sandbox, limits=SMALL) as pool:
        verdicts = pool.run_many([(source, cases)] * 3, judge=lambda job, index, result: (job, index, result.ok))
    assert verdicts == [[(job, 0, True), (job, 1, False), (job, 2, True)] for job in range(3)]


SIGNALS_THE_JOB_PROCESS = ATTEMPT + """
import fcntl, os, signal
parent = os.getppid()
attempt('setpgid into its group', lambda: os.setpgid(0, parent))
attempt('kill', lambda: os.kill(parent, signal.SIGSTOP))
attempt('kill its group', lambda: os.kill(-parent, signal.SIGSTOP))
attempt('kill every process', lambda: os.kill(-1, signal.SIGSTOP))
attempt('pidfd_open', lambda: os.pidfd_open(parent))
directory = os.open(f'/proc/{parent}', os.O_RDONLY | os.O_DIRECTORY)
attempt('pidfd_send_signal on /proc/<pid>', lambda: signal.pidfd_send_signal(directory, signal.SIGSTOP))
reader, writer = os.pipe()
attempt('F_SETOWN', lambda: fcntl.fcntl(reader, fcntl.F_SETOWN, parent))
attempt('F_SETOWN its group', lambda: fcntl.fcntl(reader, fcntl.F_SETOWN, -parent))
attempt('kill(0) stays in its own group', lambda: os.kill(0, 0))
"""


def test_no_program_can_signal_or_stop_its_job_process(worker):
    results = worker.run_cases(SIGNALS_THE_JOB_PROCESS, [Case(), Case()], SMALL)
    refused = ["setpgid into its group", "kill", "kill its group", "kill every process", "pidfd_open",
               "pidfd_send_signal on /proc/<pid>", "F_SETOWN", "F_SETOWN its group"]
    expected = "".join(f"{name} {errno.EPERM}\n" for name in refused) + "kill(0) stays in its own group done\n"
    assert [(r.status, r.stdout) for r in results] == [("ok", expected)] * 2
    assert [r.status for r in worker.run_cases("print(1)", [Case()], SMALL)] == ["ok"]
