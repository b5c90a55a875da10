"""Specification of reused sandboxes (gdpo_nemo.sandbox.SandboxWorker, SandboxPool(reuse=True)):
one sandbox serves program after program, and no program finds a trace of the one before."""

from __future__ import annotations

import json
import os
import signal

import pytest
from sandbox_support import SMALL, inet_sandbox, sandbox  # noqa: F401  (fixtures)

from gdpo_nemo.sandbox import Case, Limits, SandboxPool, SandboxWorker
from gdpo_nemo.sandbox.values import decode_values

LIST_TMP = "import os\nprint(sorted(os.listdir('/tmp')))"
# PIDs other than the driver (1), its job process (the program's parent) and the program itself.
OTHER_PIDS = (
    "import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, os.getppid(), os.getpid())))"
)
SYSV_SHM = "import ctypes\nprint(ctypes.CDLL(None).shmget(4321, 4096, 0o1600) >= 0)"  # IPC_CREAT | 0600
SYSV_LIST = "print(open('/proc/sysvipc/shm').read().count('\\n'))"


@pytest.fixture
def worker(sandbox):
    kept = SandboxWorker(sandbox, SMALL.tmp_bytes)
    yield kept
    kept.close()


def run(worker, source, stdin="", limits=SMALL):
    [result] = worker.run_cases(source, [Case(stdin=stdin)], limits)
    return result


def test_one_sandbox_serves_many_programs(worker):
    outputs = [run(worker, "print(int(input()) + 1)", f"{k}\n").stdout for k in range(5)]
    assert outputs == ["1\n", "2\n", "3\n", "4\n", "5\n"]
    assert worker.started == 1


def test_files_a_program_leaves_are_gone_for_the_next(worker):
    run(worker, "import os\nos.makedirs('a/b')\nopen('a/b/f', 'w').write('x')\nopen('/tmp/g', 'w').write('y')\nos.chmod('a', 0)")
    assert run(worker, LIST_TMP).stdout == "['main.py']\n"
    # Files made moved tmpfs's inode counter: the sandbox retired rather than let the next
    # program read that in its own inode numbers (test_sandbox_integrity.py).
    assert worker.started == 2


def test_a_daemon_is_gone_before_the_next_program(worker):
    daemon = "import os, time\nif os.fork() == 0:\n    os.setpgid(0, 0)\n    time.sleep(60)\nprint('left one')"
    assert run(worker, daemon).status == "stray_process"
    assert run(worker, OTHER_PIDS).stdout == "[]\n"


def test_system_v_ipc_cannot_be_created_so_none_is_left_behind(worker):
    assert run(worker, SYSV_SHM).stdout == "False\n"  # shmget: EPERM from the seccomp filter
    assert run(worker, SYSV_LIST).stdout == "1\n"  # the header line only
    assert worker.started == 1


def test_a_socket_left_in_time_wait_retires_the_sandbox(inet_sandbox):
    worker = SandboxWorker(inet_sandbox, SMALL.tmp_bytes)  # TCP needs Sandbox(inet=True)
    try:
        _time_wait_retires(worker)
    finally:
        worker.close()


def _time_wait_retires(worker):
    # The client closes first, so its side of the connection stays in TIME_WAIT for a minute.
    source = (
        "import socket\nserver = socket.socket()\nserver.bind(('127.0.0.1', 0))\nserver.listen()\n"
        "client = socket.create_connection(server.getsockname())\nconnection, _ = server.accept()\n"
        "client.close()\nconnection.close()\nserver.close()\n"
        "print(open('/proc/net/tcp').read().count('\\n') > 1)"
    )
    assert run(worker, source).stdout == "True\n"
    assert run(worker, "print(open('/proc/net/tcp').read().count('\\n'))").stdout == "1\n"
    assert worker.started == 2


def test_posix_message_queues_cannot_be_created(worker):
    source = "import ctypes, os\nprint(ctypes.CDLL(None).mq_open(b'/q', os.O_CREAT | os.O_RDWR, 0o600, None))"
    assert run(worker, source).stdout == "-1\n"


def test_a_timeout_does_not_retire_the_sandbox(worker):
    assert run(worker, "while True:\n    pass").status == "timeout"
    assert run(worker, "print('next')").stdout == "next\n"
    assert worker.started == 1


def test_each_program_gets_the_limits_of_its_own_job(worker):
    small, large = Limits(memory_bytes=64 << 20, tmp_bytes=SMALL.tmp_bytes), Limits(memory_bytes=512 << 20, tmp_bytes=SMALL.tmp_bytes)
    allocate = "x = bytearray(200 << 20)\nprint('ok')"
    assert [run(worker, allocate, limits=lim).status for lim in (small, large, small)] == ["memory_limit", "ok", "memory_limit"]


def test_a_job_asking_for_another_tmp_size_runs_in_a_sandbox_of_its_own(worker):
    source = "import os\nst = os.statvfs('/tmp')\nprint(st.f_blocks * st.f_frsize >> 20)"
    assert run(worker, source, limits=Limits(tmp_bytes=16 << 20)).stdout == "16\n"
    assert worker.started == 0


def test_the_pool_reuses_sandboxes_and_reports_like_fresh_ones(sandbox):
    # (what differs by design is not asked: a one-off sandbox's driver is the program's parent)
    jobs = [(OTHER_PIDS, [Case()]), (LIST_TMP, [Case()]), ("import os\nprint(os.getuid(), os.getpgid(0) == os.getpid())", [Case()])] * 4
    with SandboxPool(workers=2, sandbox=sandbox, limits=SMALL) as reused, SandboxPool(
        workers=2, sandbox=sandbox, limits=SMALL, reuse=False
    ) as fresh:
        kept = [r[0].stdout for r in reused.run_many(jobs)]
        made = [r[0].stdout for r in fresh.run_many(jobs)]
        # A reused sandbox runs as its worker's own host uid (when the harness is root), each
        # one-off sandbox as one of its own: everything else reads the same.
        uids = [uid for worker in reused._kept for uid in worker.uids_used]
        assert [line.split(" ", 1)[-1] for line in kept] == [line.split(" ", 1)[-1] for line in made]
        if os.geteuid() == 0:  # root harness
            # which worker takes which job is the scheduler's choice (on a loaded machine one
            # may take them all): each reused program ran as the uid its worker's start leased
            assert {int(line.split()[0]) for line in kept[2::3]} <= set(uids)
            assert len(set(uids)) == len(uids) == sum(worker.started for worker in reused._kept)
            one_off = [int(line.split()[0]) for line in made[2::3]]
            assert len(set(one_off)) == len(one_off) == 4 and not set(one_off) & set(uids)
        assert 1 <= sum(worker.started for worker in reused._kept) <= 2  # 12 jobs, one sandbox start per worker used


def test_the_pool_passes_call_and_eval_cases_through(sandbox):
    with SandboxPool(workers=1, sandbox=sandbox, limits=SMALL) as reused:
        [results] = reused.run_many([("def f(x):\n    return [x, x]", [Case(call="f", args=[3]), Case(evaluate=("f(1)",))])])
    assert (json.loads(results[0].value), decode_values(results[1].value, 1)) == ([3, 3], [[1, 1]])


def test_a_sandbox_that_died_between_jobs_is_replaced(worker):
    assert run(worker, "print(1)").stdout == "1\n"
    os.killpg(worker._process.pid, signal.SIGKILL)  # as the OOM killer or an operator would
    worker._process.wait()
    assert run(worker, "print(2)").stdout == "2\n"
    assert worker.started == 2
