"""Hostile programs run through the sandbox: each is contained, earns pass 0 and bug 0, and
leaves the harness and the machine as they were.

Every program here is bounded by small limits (tests/sandbox_support.SMALL: 1 s CPU, 2 s
wall, 256 MiB, 8 processes, 4 MiB files, 8 MiB /tmp). Network attempts use loopback and a
documentation-only address (192.0.2.1, TEST-NET-1), which the sandbox's empty network
namespace refuses before anything is sent.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

import pytest
from sandbox_support import MODES, SMALL, inet_sandbox, pool, run_as, sandbox  # noqa: F401  (fixtures)

from gdpo_nemo.rewards.code import score_code_batch
from gdpo_nemo.sandbox import Case

MARKER = f"86399.{random.randrange(10**6, 10**7)}"  # a `sleep` argument no other process has
SECRETS = {"HF_TOKEN": "hf_sandboxleak", "WANDB_API_KEY": "wandbsandboxleak", "AWS_SECRET_ACCESS_KEY": "awssandboxleak"}


def processes_with(text: str) -> list[int]:
    """PIDs of host processes whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def fork_bomb() -> str:
    return "import os\nwhile True:\n    os.fork()\n"


def counting_fork_bomb() -> str:
    # Children stay alive (as `sleep MARKER`) so that they count against the limit.
    return (
        "import os\nchildren = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
        f"            os.execv('/bin/sleep', ['sleep', '{MARKER}'])\n        children += 1\n"
        "finally:\n    print(children, flush=True)\n"
    )


def memory_bomb() -> str:
    return (
        "chunks = []\ntry:\n    while True:\n        chunks.append(bytearray(16 << 20))\n"
        "finally:\n    print(16 * len(chunks), flush=True)\n"
    )


def infinite_loop() -> str:
    return "while True:\n    pass\n"


def long_sleep() -> str:
    return "import time\ntime.sleep(3600)\n"


def loopback_connection(port: int) -> str:
    return f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5)\n"


def outside_connection() -> str:
    return "import socket\nsocket.create_connection(('192.0.2.1', 80), timeout=5)\n"


def outside_datagram() -> str:
    return "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('192.0.2.1', 53))\n"


def writes_outside(targets: list[str]) -> str:
    return (
        f"import os\nfor target in {targets!r}:\n    try:\n        open(target, 'w').write('pwned')\n"
        "        print('WROTE', target)\n    except OSError as error:\n        print('refused', error.errno)\n"
        "open(os.path.expanduser('~/inside_private_home'), 'w').write('fine')\n"
        f"open({targets[0]!r}, 'w').write('pwned')\n"
    )


def reads_secrets() -> str:
    return (
        "import os\nprint(dict(os.environ))\ntry:\n    print(open('/proc/1/environ', 'rb').read())\n"
        "except OSError as error:\n    print(type(error).__name__)\nprint(os.environ['HF_TOKEN'])\n"
    )


def kills_parent(harness_pid: int) -> str:
    return (
        "import os, signal\n"
        f"for pid in (os.getppid(), 1, -1, {harness_pid}):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
        "        print('sent', pid, flush=True)\n    except OSError as error:\n"
        "        print('refused', pid, type(error).__name__, flush=True)\n"
        "os.killpg(0, signal.SIGKILL)\n"
    )


def daemon() -> str:
    return (
        "import os, time\nif os.fork() == 0:\n    os.setpgid(0, 0)  # its own group (setsid is refused)\n    if os.fork() == 0:\n"
        f"        os.execv('/bin/sleep', ['sleep', '{MARKER}'])\n    os._exit(0)\ntime.sleep(0.3)\n"
    )


def fills_one_file() -> str:
    return "with open('big', 'wb') as f:\n    while True:\n        f.write(b'0' * (1 << 20))\n"


def fills_the_disk() -> str:
    return (
        "count = 0\ntry:\n    while True:\n        open(f'f{count}', 'wb').write(b'0' * (1 << 20))\n        count += 1\n"
        "finally:\n    print(count, flush=True)\n"
    )


def floods_stdout() -> str:
    return "while True:\n    print('x' * 1023)\n"


@pytest.fixture
def listener():
    """A TCP server on the host's loopback; yields its port and whether anyone connected."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)

    def connected() -> bool:
        try:
            server.accept()[0].close()
            return True
        except BlockingIOError:
            return False

    yield server.getsockname()[1], connected
    server.close()


# --- each attack, contained ----------------------------------------------------------------


def test_a_fork_bomb_stops_at_the_process_limit(sandbox):
    result = sandbox.run_program(fork_bomb(), "", SMALL)
    assert result.status == "error" and "BlockingIOError" in result.stderr


def test_a_fork_bomb_gets_exactly_the_processes_the_limit_allows_and_none_survive(sandbox):
    result = sandbox.run_program(counting_fork_bomb(), "", SMALL)
    assert result.status == "error"
    assert result.stdout == f"{SMALL.max_processes - 1}\n"  # the program itself + 7 children
    assert processes_with(MARKER) == []


def test_a_memory_bomb_stops_at_the_address_space_limit(sandbox):
    result = sandbox.run_program(memory_bomb(), "", SMALL)
    assert result.status == "memory_limit"
    assert int(result.stdout) < SMALL.memory_bytes >> 20


def test_an_infinite_loop_stops_at_the_cpu_limit(sandbox):
    result = sandbox.run_program(infinite_loop(), "", SMALL)
    assert result.status == "timeout" and result.wall_s < SMALL.wall_seconds + 1


def test_a_long_sleep_stops_at_the_wall_clock_limit(sandbox):
    result = sandbox.run_program(long_sleep(), "", SMALL)
    assert result.status == "timeout" and result.wall_s < SMALL.wall_seconds + 1


def test_a_connection_to_the_hosts_loopback_is_refused_and_never_arrives(sandbox, inet_sandbox, listener):
    port, connected = listener
    # By default a program makes no TCP or UDP socket at all; with inet=True its network
    # namespace has a loopback of its own, not the host's.
    refused = sandbox.run_program(loopback_connection(port), "", SMALL)
    assert refused.status == "error" and "Address family not supported" in refused.stderr
    result = inet_sandbox.run_program(loopback_connection(port), "", SMALL)
    assert result.status == "error" and "ConnectionRefusedError" in result.stderr
    assert not connected()


@pytest.mark.parametrize("source", [outside_connection(), outside_datagram()], ids=["tcp", "udp"])
def test_traffic_to_an_outside_address_fails_at_once_with_no_route(inet_sandbox, source):
    result = inet_sandbox.run_program(source, "", SMALL)
    assert result.status == "error" and "Network is unreachable" in result.stderr
    assert result.wall_s < 1


def test_writes_outside_the_private_tmp_and_to_the_hosts_home_fail(sandbox, tmp_path):
    targets = [str(tmp_path / "outside.txt"), str(Path.home() / f"gdpo-sandbox-{MARKER}"), f"/usr/gdpo-{MARKER}", f"/etc/gdpo-{MARKER}", f"/gdpo-{MARKER}"]
    result = sandbox.run_program(writes_outside(targets), "", SMALL)
    assert result.status == "error" and "WROTE" not in result.stdout
    assert result.stdout.count("refused") == len(targets)
    assert [t for t in targets if os.path.exists(t)] == []
    assert not (Path.home() / "inside_private_home").exists()


def test_secrets_in_the_harness_environment_are_invisible(sandbox, monkeypatch):
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    result = sandbox.run_program(reads_secrets(), "", SMALL)
    assert result.status == "error" and "KeyError: 'HF_TOKEN'" in result.stderr
    assert "PermissionError" in result.stdout  # nor can it read the driver's environment
    assert not any(value in result.stdout + result.stderr for value in SECRETS.values())


@pytest.mark.parametrize("mode", MODES)
def test_killing_the_parent_fails_and_the_driver_reports_every_case(sandbox, mode):
    harness = os.getpid()
    results = run_as(mode, sandbox, kills_parent(harness), [Case(), Case()])
    assert [r.status for r in results] == ["error", "error"]  # killed itself; both cases reported
    # The program's parent is guarded by the filter, as is kill(-1): the job process of a
    # reused sandbox (while the driver, PID 1, ignores the signal), the driver itself in a
    # one-off sandbox; the harness's PID does not exist inside the sandbox.
    lines = results[0].stdout.splitlines()
    job = lines[0].split()[1]  # the reused sandbox's job process: the PID after the earlier program's
    parent = {"reused": [f"refused {job} PermissionError", "sent 1"], "one-off": ["refused 1 PermissionError"] * 2}[mode]
    assert lines == [*parent, "refused -1 PermissionError", f"refused {harness} ProcessLookupError"]
    assert (job == "1") == (mode == "one-off")


def test_a_daemon_that_outlives_the_program_is_killed(sandbox):
    result = sandbox.run_program(daemon(), "", SMALL)
    assert result.status == "stray_process"
    assert processes_with(MARKER) == []


def test_one_huge_file_stops_at_the_file_size_limit(sandbox):
    result = sandbox.run_program(fills_one_file(), "", SMALL)
    assert result.status == "error" and "File too large" in result.stderr


def test_many_files_stop_when_the_private_tmp_is_full(sandbox):
    result = sandbox.run_program(fills_the_disk(), "", SMALL)
    assert result.status == "error" and "No space left on device" in result.stderr
    assert int(result.stdout) <= SMALL.tmp_bytes >> 20


def test_a_stdout_flood_stops_at_the_file_size_limit_and_comes_back_cut(sandbox):
    result = sandbox.run_program(floods_stdout(), "", SMALL)
    assert result.status == "output_limit"
    assert result.stdout_truncated and len(result.stdout) == SMALL.max_output_bytes


# --- the rewards they earn, and the harness afterwards -------------------------------------


def test_every_hostile_program_earns_pass_0_and_bug_0(pool, listener, tmp_path, monkeypatch):
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    port, connected = listener
    programs = [
        fork_bomb(), counting_fork_bomb(), memory_bomb(), infinite_loop(), long_sleep(),
        loopback_connection(port), outside_connection(), outside_datagram(),
        writes_outside([str(tmp_path / "outside.txt"), str(Path.home() / f"gdpo-sandbox-{MARKER}")]),
        reads_secrets(), kills_parent(os.getpid()), daemon(), fills_one_file(), fills_the_disk(), floods_stdout(),
    ]
    completions = [f"<think>\nI will misbehave.\n</think>\n```python\n{source}```" for source in programs]
    tests = [{"inputs": ["1\n", "2\n"], "outputs": ["42\n", "42\n"]}] * len(programs)
    scores = score_code_batch(completions, tests, components=["pass", "bug", "length"], length_limit=4000, pool=pool)
    assert scores == {"pass": [0.0] * len(programs), "bug": [0.0] * len(programs), "length": [0.0] * len(programs)}
    # The harness afterwards: no survivors, nothing written, nothing connected, still working.
    assert processes_with(MARKER) == []
    assert not (tmp_path / "outside.txt").exists() and not connected()
    assert pool.run_many([("print(int(input()) * 21)", [Case(stdin="2\n")])])[0][0].stdout == "42\n"
