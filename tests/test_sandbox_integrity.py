"""Reward integrity (issue 15): no program earns a reward it did not earn, or touches another's.

Each test runs a hostile program for real, in the real sandbox, the way the attacks of
issue 15 did; the classes are numbered as there. Limits are small (sandbox_support.SMALL)
and every network attempt stays on the sandbox's own loopback.
"""

from __future__ import annotations

import ast
import ctypes
import errno
import json
import os
import random

import pytest
from sandbox_support import MODES, SMALL, pool, run_as, sandbox  # noqa: F401  (fixtures)

from gdpo_nemo.rewards.code import score_code_batch
from gdpo_nemo.sandbox import Case, Limits, SandboxPool, SandboxWorker
from tests.support.requirements import require

SECRET = f"{random.randrange(10**11, 10**12)}"  # never in any program's own source


def fenced(source: str) -> str:
    return f"```python\n{source}```\n"


# Reads the program's own data memory (heap, stack, anonymous mappings: where Python keeps
# objects, live or freed) with ctypes; /proc/self/mem is closed to it (the process is
# non-dumpable, as the driver it was forked from).
READ_MEMORY = (
    "import ctypes\n"
    "def readable_memory():\n"
    "    for line in open('/proc/self/maps').read().splitlines():\n"
    "        fields = line.split()\n"
    "        lo, hi = (int(x, 16) for x in fields[0].split('-'))\n"
    "        name = fields[5] if len(fields) > 5 else ''\n"
    "        if fields[1].startswith('r') and name in ('', '[heap]', '[stack]') and hi - lo <= (256 << 20):\n"
    "            yield ctypes.string_at(lo, hi - lo)\n"
)


def memory_count(needle_parts: tuple[str, str]) -> str:
    """A program that counts the places in its memory holding the two parts of a string
    next to each other. It never joins them itself (its source holds them apart), so any
    place it finds came from somewhere else."""
    first, second = needle_parts
    return READ_MEMORY + (
        f"first, second = {first!r}.encode(), {second!r}.encode()\n"
        "found = 0\n"
        "for chunk in readable_memory():\n"
        "    at = chunk.find(first)\n"
        "    while at >= 0:\n"
        "        found += chunk[at + len(first):at + len(first) + len(second)] == second\n"
        "        at = chunk.find(first, at + 1)\n"
        "print(found)\n"
    )


def secret_holder() -> str:
    """An honest-looking program whose source, input and output all hold SECRET."""
    return f"import sys\ndata = sys.stdin.read()\nprint(data, {SECRET!r})\nprint({SECRET!r}, file=sys.stderr)\n"


# ~20 kB: large enough that the sandbox's earlier design left copies of it in memory its next
# programs inherited (this test failed there: thousands of copies found).
SECRET_INPUT = (SECRET + " ") * 1500


SPLIT = (SECRET[:6], SECRET[6:])
_nested: list = []
for _ in range(3000):  # deeper than marshal carries (2000): cannot be sent to the sandbox
    _nested = [_nested]


# --- 1. reused workers: nothing of an earlier program in inherited memory -------------------


@pytest.fixture
def worker(sandbox):
    kept = SandboxWorker(sandbox, SMALL.tmp_bytes)
    yield kept
    kept.close()


def test_a_program_finds_no_byte_of_an_earlier_programs_source_input_or_output_in_its_memory(worker):
    held = worker.run_cases(secret_holder(), [Case(stdin=SECRET_INPUT)] * 2, SMALL)
    after = worker.run_cases(memory_count(SPLIT), [Case()] * 2, SMALL)
    assert [r.stdout for r in held] == [f"{SECRET_INPUT} {SECRET}\n"] * 2
    assert worker.started == 1  # the same sandbox served both
    assert [(r.status, r.stdout) for r in after] == [("ok", "0\n")] * 2


def test_the_memory_scan_finds_what_a_program_holds_itself(sandbox):
    # The check above can fail: the same scan finds the string once the program holds it.
    [holding] = sandbox.run_cases(f"kept = {SPLIT[0]!r} + {SPLIT[1]!r}\n" + memory_count(SPLIT), [Case()], SMALL)
    assert int(holding.stdout) >= 1


def copier() -> str:
    """Solves nothing: looks through its memory for an earlier correct program (marked by a
    comment) and runs it."""
    return READ_MEMORY + (
        "import io, sys\n"
        "mark = ('# SOLUTION-' + 'MARK').encode()\n"
        "start = ('n = int(' + 'input())').encode()\n"
        "data = sys.stdin.read()\n"
        "for chunk in readable_memory():\n"
        "    at = chunk.find(mark)\n"
        "    while at >= 0:\n"
        "        begin = chunk.rfind(start, max(0, at - 200), at)\n"
        "        try:\n"
        "            code = compile(chunk[begin:at].decode('utf-8'), 'found', 'exec') if begin >= 0 else None\n"
        "        except Exception:\n"
        "            code = None\n"
        "        if code is not None:\n"
        "            sys.stdin = io.StringIO(data)\n"
        "            exec(code)\n"
        "            sys.exit(0)\n"
        "        at = chunk.find(mark, at + 1)\n"
        "print('nothing found')\n"
    )


CORRECT = "n = int(input())\nprint(n * 21)  # SOLUTION-MARK\n"
TIMES_21 = {"inputs": ["2\n", "5\n"], "outputs": ["42\n", "105\n"]}


def test_a_copier_that_finds_a_correct_program_in_memory_does_pass(sandbox):
    # The copier works: given the correct program in its own memory, it passes.
    source = f"hint = {CORRECT!r}\n" + copier()
    with SandboxPool(workers=1, sandbox=sandbox, limits=SMALL) as one:
        scores = score_code_batch([fenced(source)], [TIMES_21], components=["pass"], pool=one)
    assert scores == {"pass": [1.0]}


def test_copiers_after_a_correct_sibling_in_the_same_worker_earn_nothing(sandbox):
    completions = [fenced(CORRECT)] + [fenced(copier())] * 7
    with SandboxPool(workers=1, sandbox=sandbox, limits=SMALL) as one:
        scores = score_code_batch(completions, [TIMES_21] * 8, components=["pass"], pool=one)
        assert sum(worker.started for worker in one._kept) == 1  # all eight in one sandbox
    assert scores == {"pass": [1.0] + [0.0] * 7}


def test_copiers_in_the_default_pool_earn_nothing(sandbox):
    completions = [fenced(CORRECT)] + [fenced(copier())] * 7
    with SandboxPool(sandbox=sandbox, limits=SMALL) as default:
        scores = score_code_batch(completions, [TIMES_21] * 8, components=["pass"], pool=default)
    assert scores == {"pass": [1.0] + [0.0] * 7}


# --- 2. extended attributes -----------------------------------------------------------------

SET_XATTR = (
    "import os\nfor target in ('/tmp', 'main.py'):\n    try:\n        os.setxattr(target, 'user.msg', b'x' * 60000)\n"
    "        print('set', target)\n    except OSError as error:\n        print('refused', target, error.errno)\n"
)


def test_extended_attributes_cannot_be_set(sandbox):
    result = sandbox.run_program(SET_XATTR, "", SMALL)
    assert result.stdout == f"refused /tmp {errno.EPERM}\nrefused main.py {errno.EPERM}\n"


def test_the_next_program_finds_no_extended_attribute_and_a_working_tmp(worker):
    worker.run_cases(SET_XATTR, [Case()], SMALL)
    [result] = worker.run_cases("import os\nprint(os.listxattr('/tmp'))\nopen('f', 'wb').write(b'0' * (4 << 20))\nprint('wrote')", [Case()], SMALL)
    assert result.stdout == "[]\nwrote\n"


def test_tmp_comes_back_with_its_mode_reset(worker):
    [first] = worker.run_cases("import os\nprint(oct(os.stat('/tmp').st_mode))\nos.chmod('/tmp', 0o700)", [Case()], SMALL)
    [second] = worker.run_cases("import os\nprint(oct(os.stat('/tmp').st_mode))", [Case()], SMALL)
    assert second.stdout == first.stdout != "0o40700\n"


def test_file_times_cannot_be_set_so_dev_null_carries_no_message(sandbox):
    source = (
        "import os\nfor target in ('/dev/null', '/tmp', 'main.py'):\n    try:\n        os.utime(target, (12345, 12345))\n"
        "        print('set', target)\n    except OSError as error:\n        print('refused', target, error.errno)\n"
    )
    assert sandbox.run_program(source, "", SMALL).stdout == "".join(f"refused {t} {errno.EPERM}\n" for t in ("/dev/null", "/tmp", "main.py"))


# --- 3. keyrings ----------------------------------------------------------------------------

KEY_SPEC_SESSION_KEYRING = -3
KEYCTL_JOIN_SESSION_KEYRING = 1
SYS = {"add_key": 248, "keyctl": 250} if os.uname().machine == "x86_64" else {"add_key": 217, "keyctl": 219}


@pytest.fixture
def harness_key():
    """A key in a session keyring of this test process (as under a login session with
    pam_keyinit); the sandbox is started from here and would inherit it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    if libc.syscall(SYS["keyctl"], KEYCTL_JOIN_SESSION_KEYRING, b"gdpo-test-session", 0, 0) < 0:
        pytest.skip(f"keyrings unavailable here (errno {ctypes.get_errno()})")
    description = f"gdpo-test-secret-{SECRET}".encode()
    key = libc.syscall(SYS["add_key"], b"user", description, SECRET.encode(), len(SECRET), ctypes.c_long(KEY_SPEC_SESSION_KEYRING))
    if key < 0:
        pytest.skip(f"cannot add a key here (errno {ctypes.get_errno()})")
    return description.decode()


@pytest.mark.parametrize("mode", MODES)
def test_the_harness_session_keyring_is_invisible_and_keys_cannot_be_made(sandbox, harness_key, mode):
    # (a one-off sandbox's /proc has no keys file at all, a reused one's lists its own keyring)
    source = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        f"print(os.path.exists('/proc/keys') and {harness_key!r} in open('/proc/keys').read())\n"
        f"print(libc.syscall({SYS['keyctl']}, 0, {KEY_SPEC_SESSION_KEYRING}, 0), ctypes.get_errno())\n"
        f"print(libc.syscall({SYS['add_key']}, b'user', b'mine', b'x', 1, ctypes.c_long({KEY_SPEC_SESSION_KEYRING})), ctypes.get_errno())\n"
    )
    [result] = run_as(mode, sandbox, source)
    assert result.stdout == f"False\n-1 {errno.EPERM}\n-1 {errno.EPERM}\n"


def test_a_program_sees_only_its_own_empty_session_keyring_while_other_sandboxes_run(sandbox, worker):
    worker.run_cases("print(1)", [Case()], SMALL)  # another sandbox, alive
    # a reused sandbox (a one-off one has no /proc/keys: tests/test_sandbox_host_counters.py)
    [result] = run_as("reused", sandbox, "print(open('/proc/keys').read().splitlines())")
    [line] = ast.literal_eval(result.stdout)
    assert line.endswith("_ses: empty") and " 3f000000 " in line


# --- 4. no silent way around bubblewrap ----------------------------------------------------


def test_the_score_command_without_bubblewrap_stops_with_a_message_not_a_traceback(tmp_path, monkeypatch, capsys):
    from gdpo_nemo.cli import main
    from gdpo_nemo.sandbox import pool as pool_module
    from gdpo_nemo.sandbox import runner as runner_module

    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"completion": "```python\\nprint(1)\\n```", "tests": {"inputs": ["\\n"], "outputs": ["1\\n"]}}\n')
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    monkeypatch.delenv("GDPO_NEMO_SANDBOX_BACKEND", raising=False)
    monkeypatch.setattr(runner_module, "_default", None)
    monkeypatch.setattr(pool_module, "_shared", None)
    assert main(["score", "--task", "code", str(rows), "--no-progress"]) == 2
    assert "never run unisolated by default" in capsys.readouterr().err


# --- 6. function-call answers compared by each dataset's rule -------------------------------

ALWAYS_ZERO = "class Solution:\n    def twoSum(self, nums, target):\n        return 0\n"
TWO_SUM = "class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n        for i, x in enumerate(nums):\n            if target - x in seen:\n                return [seen[target - x], i]\n            seen[x] = i\n"
EURUS_TWO_SUM = {"fn_name": "twoSum", "inputs": ["[2, 7, 11, 15]\n9", "[3, 2, 4]\n6", "[3, 3]\n6"], "outputs": ["[0, 1]", "[1, 2]", "[0, 1]"]}
APPS_TWO_SUM = {"fn_name": "twoSum", "inputs": [[[2, 7, 11, 15], 9], [[3, 2, 4], 6]], "outputs": [[[0, 1]], [[1, 2]]]}


def test_a_constant_answer_matching_the_first_expected_item_earns_nothing(pool):
    scores = score_code_batch([fenced(ALWAYS_ZERO)] * 2, [EURUS_TWO_SUM, APPS_TWO_SUM], components=["pass"], pool=pool)
    assert scores == {"pass": [0.0, 0.0]}


def test_a_correct_two_sum_passes_in_both_forms(pool):
    scores = score_code_batch([fenced(TWO_SUM)] * 2, [EURUS_TWO_SUM, APPS_TWO_SUM], components=["pass"], pool=pool)
    assert scores == {"pass": [1.0, 1.0]}


# --- 7. malformed tests data: lowest score, reported, never a traceback ---------------------


@pytest.mark.parametrize(
    "tests",
    [
        "[" * 100_000 + "]" * 100_000,
        ["assert f(" + "1 + " * 50_000 + "1) == 2"],
        ["assert f(1) == " + "(" * 300 + "1" + ")" * 300],
        {"fn_name": "f", "inputs": [[_nested]], "outputs": [1]},
    ],
    ids=["nested-json", "long-assert", "deep-assert", "args-too-deep-to-send"],
)
def test_malformed_tests_score_lowest_and_name_the_row(pool, tests):
    from gdpo_nemo.rewards.base import RewardDataError

    with pytest.raises(RewardDataError) as caught:
        score_code_batch([fenced(CORRECT)] * 2, [TIMES_21, tests], components=["pass", "bug"], pool=pool)
    assert list(caught.value.rows) == [1]
    assert caught.value.partial == {"pass": [1.0, 0.0], "bug": [1.0, 0.0]}


# --- 8. assert-style tests judged outside the program ---------------------------------------

EXPECTED = int(SECRET) % 10**9 + 10**9  # a value no program can guess


def assert_tests() -> list[str]:
    return [f"assert f(1) == {EXPECTED}", f"assert f(2) == {EXPECTED + 1}"]


def looks_for_expected() -> str:
    """Reads everything a judge inside its process could have held: its memory, the frames
    that called it, every object; prints what looks like an expected value, returns it (or
    0 when there is none)."""
    return READ_MEMORY + (
        "import gc, re, sys\n"
        "def f(x):\n"
        "    pattern = re.compile(r'== (\\d{10})')\n"
        "    found = set()\n"
        "    frame = sys._getframe(1)\n"
        "    while frame is not None:\n"
        "        found.update(pattern.findall(repr(frame.f_locals) + repr(frame.f_code.co_consts)))\n"
        "        frame = frame.f_back\n"
        "    for thing in gc.get_objects():\n"
        "        if isinstance(thing, (list, tuple, dict)):\n"
        "            found.update(pattern.findall(repr(thing)[:100000]))\n"
        "    for chunk in readable_memory():\n"
        "        found.update(m.decode() for m in re.findall(rb'== (\\d{10})', chunk))\n"
        "    print(sorted(found), file=sys.stderr)\n"
        "    return int(min(found)) + x - 1 if found else 0\n"
    )


FORGERS = {
    "reads-memory-and-frames": looks_for_expected(),
    "equal-to-everything": "class Any:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\ndef f(x):\n    return Any()\n",
    "int-subclass-equal-to-everything": "class Any(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\ndef f(x):\n    return Any(0)\n",
    "forged-value-on-fd-3": "import os\ndef f(x):\n    os.write(3, b'[true]')\n    os._exit(0)\n",
    "patches-the-caller": (
        "import sys\ndef f(x):\n    caller = sys._getframe(1)\n    caller.f_globals['__builtins__'].__dict__['eval'] = lambda *a, **k: True\n"
        "    sys.modules['json'].dumps = lambda *a, **k: '[true, true]'\n    return 0\n"
    ),
}


@pytest.mark.parametrize("source", list(FORGERS.values()), ids=list(FORGERS))
def test_assert_tests_cannot_be_passed_without_solving(pool, source):
    assert score_code_batch([fenced(source)], [assert_tests()], components=["pass"], pool=pool) == {"pass": [0.0]}


def test_builtins_a_test_applies_are_applied_by_the_harness_not_the_program(pool):
    source = "import builtins\nbuiltins.isinstance = lambda *args: True\nbuiltins.len = lambda *args: 3\ndef f(x):\n    return x\n"
    tests = ["assert isinstance(f('1'), int)", "assert len(f([1])) == 3"]
    assert score_code_batch([fenced(source)], [tests], components=["pass"], pool=pool) == {"pass": [0.0]}


def test_the_program_never_sees_the_expected_values(sandbox):
    from gdpo_nemo.rewards.code import parse_tests

    cases = [test.case for test in parse_tests(assert_tests())]
    results = sandbox.run_cases(looks_for_expected() + "f(1)\n", cases, SMALL)
    assert [r.status for r in results] == ["ok", "ok"]
    assert str(EXPECTED) not in "".join(r.stderr + r.stdout for r in results)


def test_a_correct_program_passes_the_same_assert_tests(pool):
    source = f"def f(x):\n    return {EXPECTED} + x - 1\n"
    assert score_code_batch([fenced(source)], [assert_tests()], components=["pass", "bug"], pool=pool) == {"pass": [1.0], "bug": [1.0]}


# --- 5. resources bounded per sandbox -------------------------------------------------------

MEMFD_AND_SHM = (
    "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "try:\n    os.memfd_create('hoard')\n    print('memfd')\nexcept OSError as error:\n    print('memfd refused', error.errno)\n"
    "print('shm', libc.shmget(0, 1 << 30, 0o1600), ctypes.get_errno())\n"
)


def test_memory_outside_the_address_space_limit_cannot_be_taken(sandbox):
    assert sandbox.run_program(MEMFD_AND_SHM, "", SMALL).stdout == f"memfd refused {errno.EPERM}\nshm -1 {errno.EPERM}\n"


def test_processes_of_one_sandbox_together_stay_within_its_memory(sandbox):
    # No cgroup per sandbox is the sandbox's stated fallback (per-process limits only); CI's
    # machine has cgroups, so there a missing one is a broken setup, not a skip.
    require(sandbox.bounded_per_sandbox, "a cgroup per sandbox (cgroup v2 with the memory controller delegated)")
    # Four processes of 200 MiB each stay below their own 256 MiB address-space limit, but
    # together hold 800 MiB, more than the sandbox's 256 + 8 + 128 MiB.
    source = (
        "import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n        block = bytearray(200 << 20)\n"
        "        time.sleep(1.5)\n        os._exit(0)\nstatuses = [os.wait()[1] for _ in range(4)]\nprint(statuses)\n"
    )
    # A wall-clock limit far above the 1.5 s the program sleeps: on a loaded machine 4 s ran out
    # before the children were judged (the test is about memory, not time).
    result = sandbox.run_program(source, "", Limits(cpu_seconds=2, wall_seconds=30, memory_bytes=256 << 20, tmp_bytes=8 << 20))
    # Some child was killed (a non-zero wait status), not all four let through; and the
    # parent lived to say so.
    statuses = json.loads(result.stdout.strip() or "null")
    assert isinstance(statuses, list) and len(statuses) == 4 and any(statuses), result


def test_cpu_time_counts_every_process_of_a_case(sandbox):
    # Three children spin 0.5 s each, the main process answers correctly: 1.5 s of CPU
    # against a 1 s limit is a timeout, however little the main process used. The wall limit
    # is far off: on a loaded machine (load 6-10) the children's 1.5 s of CPU took more than
    # the 6 s it once was, and the wall timeout ended the program before its answer.
    source = (
        "import os, time\nfor _ in range(3):\n    if os.fork() == 0:\n        end = time.process_time() + 0.5\n"
        "        while time.process_time() < end:\n            pass\n        os._exit(0)\n"
        "for _ in range(3):\n    os.wait()\nprint(int(input()) * 21)\n"
    )
    result = sandbox.run_program(source, "2\n", Limits(cpu_seconds=1, wall_seconds=60))
    assert (result.status, result.stdout) == ("timeout", "42\n")
    assert result.cpu_s > 1


def test_a_program_whose_helpers_spin_earns_no_pass(pool):
    source = "import os\nfor _ in range(3):\n    if os.fork() == 0:\n        while True:\n            pass\nprint(int(input()) * 21)\nfor _ in range(3):\n    os.wait()\n"
    assert score_code_batch([fenced(source)], [TIMES_21], components=["pass", "bug"], pool=pool) == {"pass": [0.0], "bug": [0.0]}


# --- 9. smaller channels --------------------------------------------------------------------


PRINT_PID = "import os\nprint(os.getpid())"
EARLIER_PROGRAMS = {
    "ran every case": "print(1)",
    "failed to compile": "def (",
    "made threads": "import threading\nfor _ in range(4):\n    t = threading.Thread(target=int)\n    t.start()\n    t.join()",
}


def pid_after(sandbox, earlier: str | None) -> tuple[str, int]:
    """The PID the next program sees after `earlier` ran 3 cases in the same worker, and how
    many sandboxes the worker started."""
    kept = SandboxWorker(sandbox, SMALL.tmp_bytes)
    try:
        if earlier is not None:
            kept.run_cases(earlier, [Case()] * 3, SMALL)
        [seen] = kept.run_cases(PRINT_PID, [Case()], SMALL)
        return seen.stdout, kept.started
    finally:
        kept.close()


def test_the_next_program_cannot_learn_from_its_pids_what_an_earlier_program_did(sandbox):
    # The PID counter of a reused sandbox is left where three case processes leave it, whether
    # the earlier program ran all its cases or stopped at a compile error; a program that made
    # processes or threads of its own retires the sandbox, and the next one sees a fresh one.
    seen = {name: pid_after(sandbox, source) for name, source in EARLIER_PROGRAMS.items()}
    fresh = pid_after(sandbox, None)
    assert seen["ran every case"] == seen["failed to compile"]
    assert seen["ran every case"][1] == 1 and int(seen["ran every case"][0]) > int(fresh[0])
    assert seen["made threads"] == (fresh[0], 2)


def test_main_py_is_written_afresh_for_every_case(sandbox):
    source = "import os\nprint(os.path.getsize(__file__))\nopen(__file__, 'a').write('# carried over\\n' * 100)"
    results = sandbox.run_cases(source, [Case(), Case()], SMALL)
    assert results[0].stdout == results[1].stdout == f"{len(source.encode())}\n"


@pytest.mark.parametrize("mode", MODES)
def test_sigint_to_the_driver_is_ignored_and_every_case_is_reported(sandbox, mode):
    # Reused: the driver (PID 1) gets it and ignores it. One-off: the driver is the program's
    # parent, which the filter guards: the signal is refused.
    source = ("import os, signal, time\ntry:\n    os.kill(1, signal.SIGINT)\nexcept PermissionError:\n    print('refused')\n"
              "time.sleep(0.1)\nprint('still here')")
    results = run_as(mode, sandbox, source, [Case(), Case()])
    said = {"reused": "still here\n", "one-off": "refused\nstill here\n"}[mode]
    assert [(r.status, r.stdout) for r in results] == [("ok", said)] * 2


def test_a_program_printing_protocol_lines_does_not_confuse_the_report(worker):
    source = "for _ in range(20000):\n    print('DONE 0')\nprint('CASE 1 exit 0 0 0 0 0 0 0 0 0')"
    results = worker.run_cases(source, [Case(), Case()], SMALL)
    assert [r.status for r in results] == ["ok", "ok"]
    assert results[0].stdout.count("DONE 0\n") == 20000


SECCOMP_PROBE = (
    "import ctypes, socket\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.syscall.restype = ctypes.c_long\n"
    "for name, number, args in {calls}:\n"
    "    result = libc.syscall(number, *[ctypes.c_long(a) for a in args])\n"
    "    print(name, result, ctypes.get_errno())\n"
    "try:\n    socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)\n    print('netlink opened')\n"
    "except OSError as error:\n    print('netlink', error.errno)\n"
)
X86_64_CALLS = [
    ("io_uring_setup", 425, (8, 0)), ("bpf", 321, (0, 0, 0)), ("ptrace", 101, (0, 0, 0, 0)),
    ("perf_event_open", 298, (0, 0, -1, -1, 0)), ("userfaultfd", 323, (0,)), ("mount", 165, (0, 0, 0, 0, 0)),
    ("unshare", 272, (0,)), ("keyctl", 250, (0, -3, 0)), ("request_key", 249, (0, 0, 0, 0)),
    ("process_vm_readv", 310, (1, 0, 0, 0, 0, 0)), ("setxattr", 188, (0, 0, 0, 0, 0)), ("utimensat", 280, (-100, 0, 0, 0)),
    ("clone3", 435, (0, 0)),
]


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="system call numbers of x86_64")
def test_system_calls_a_test_program_never_needs_are_refused(sandbox):
    result = sandbox.run_program(SECCOMP_PROBE.format(calls=X86_64_CALLS), "", SMALL)
    expected = [f"{name} -1 {errno.ENOSYS if name == 'clone3' else errno.EPERM}" for name, _, _ in X86_64_CALLS]
    assert result.stdout.splitlines() == expected + [f"netlink {errno.EAFNOSUPPORT}"]


def test_threads_and_subprocesses_still_work_under_the_filter(sandbox):
    source = (
        "import subprocess, sys, threading\nout = []\nt = threading.Thread(target=out.append, args=(1,))\nt.start()\nt.join()\n"
        "print(out, subprocess.run([sys.executable, '-c', 'print(2)'], capture_output=True, text=True).stdout.strip())"
    )
    assert sandbox.run_program(source, "", SMALL).stdout == "[1] 2\n"
