"""Specification of gdpo_nemo.sandbox: what a program sees, what each status means, the pool,
the limits' validation and the rlimits fallback. Hostile programs: test_sandbox_hostile.py."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

import pytest
from sandbox_support import MODES, SMALL, pool, run_as, sandbox  # noqa: F401  (fixtures)

from gdpo_nemo.sandbox import STATUSES, Case, Limits, Sandbox, SandboxError, SandboxPool
from gdpo_nemo.sandbox import runner as runner_module
from gdpo_nemo.sandbox.values import decode_values

# --- what a program sees -------------------------------------------------------------------


def test_a_program_reads_stdin_and_its_stdout_comes_back(sandbox):
    result = sandbox.run_program("print(sum(map(int, input().split())))", "2 3 4\n", SMALL)
    assert (result.status, result.returncode, result.stdout, result.stderr) == ("ok", 0, "9\n", "")


def test_each_case_gets_its_own_stdin_and_a_fresh_interpreter_state(sandbox):
    source = "import sys\nseen = globals().setdefault('seen', [])\nseen.append(sys.stdin.read())\nprint(len(seen), seen[-1])"
    results = sandbox.run_cases(source, [Case(stdin="a"), Case(stdin="b")], SMALL)
    assert [r.stdout for r in results] == ["1 a\n", "1 b\n"]


def test_files_written_by_one_case_are_gone_in_the_next(sandbox):
    source = "import os\nprint(sorted(os.listdir('.')))\nopen('cache', 'w').write('answer')\nos.mkdir('d')"
    results = sandbox.run_cases(source, [Case(), Case()], SMALL)
    assert [r.stdout for r in results] == ["['main.py']\n", "['main.py']\n"]


def test_the_program_is_main_with_a_file_and_argv(sandbox):
    result = sandbox.run_program("import sys\nprint(__name__, __file__ == sys.argv[0], len(sys.argv))", "", SMALL)
    assert result.stdout == "__main__ True 1\n"


def test_the_environment_is_only_the_allow_list(sandbox, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_should_never_be_seen")
    result = sandbox.run_program("import os, json\nprint(json.dumps(sorted(os.environ)))", "", SMALL)
    assert json.loads(result.stdout) == ["HOME", "LANG", "LC_ALL", "PATH", "PWD", "TMPDIR"]


def test_the_working_directory_and_home_are_a_private_writable_tmp(sandbox):
    source = "import os\nopen('f', 'w').write('x')\nprint(os.getcwd(), os.environ['HOME'], os.listdir('.'))"
    assert sandbox.run_program(source, "", SMALL).stdout == "/tmp /tmp ['f', 'main.py']\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid switch happens only when the harness is root")
def test_programs_run_as_an_unprivileged_uid_when_the_harness_is_root(sandbox):
    from gdpo_nemo.sandbox.isolation import SANDBOX_UID_BASE, SANDBOX_UID_SPAN

    uid, gid = map(int, sandbox.run_program("import os\nprint(os.getuid(), os.getgid())", "", SMALL).stdout.split())
    assert uid == gid and SANDBOX_UID_BASE <= uid < SANDBOX_UID_BASE + SANDBOX_UID_SPAN  # the sandbox's own


@pytest.mark.parametrize("mode", MODES)
def test_the_program_runs_under_the_driver_as_pid_1_of_its_own_namespace(sandbox, mode):
    # Reused: its parent is the job process, forked by the driver (PID 1) for this program
    # alone. One-off: the driver runs the sandbox's only job itself and is the parent.
    source = "import os\nparent = os.getppid()\nprint(parent == 1, open(f'/proc/{parent}/stat').read().split()[3], len(os.listdir('/proc')) < 80)"
    [result] = run_as(mode, sandbox, source)
    assert result.stdout == {"one-off": "True 0 True\n", "reused": "False 1 True\n"}[mode]


def test_the_program_cannot_reach_the_drivers_report_channel(sandbox):
    # The driver and its job process are non-dumpable: their /proc/<pid>/fd entries are closed
    # to the program, so it cannot write a forged "all passed" report into the harness's pipe.
    source = (
        "import os\nfor pid in (1, os.getppid()):\n    try:\n"
        "        open(f'/proc/{pid}/fd/100', 'wb').write(b'CASE 0 exit 0')\n        print('forged')\n"
        "    except OSError as error:\n        print(type(error).__name__)\n"
    )
    assert sandbox.run_program(source, "", SMALL).stdout == "PermissionError\n" * 2


# --- statuses ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "status", "returncode"),
    [
        ("raise SystemExit(0)", "ok", 0),
        ("raise SystemExit(3)", "error", 3),
        ("import sys\nsys.exit('bad input')", "error", 1),
        ("[][1]", "error", 1),
        ("import os\nos.abort()", "error", -6),
        ("def f(:\n  pass", "compile_error", None),
        ("print('a')\0", "compile_error", None),
    ],
)
def test_exit_statuses_map_to_ok_error_and_compile_error(sandbox, source, status, returncode):
    result = sandbox.run_program(source, "", SMALL)
    assert (result.status, result.returncode) == (status, returncode)


def test_every_status_is_one_of_the_documented_ones(sandbox):
    assert sandbox.run_program("[][1]", "", SMALL).status in STATUSES
    assert set(STATUSES) >= {"ok", "error", "compile_error", "timeout", "memory_limit", "output_limit", "stray_process"}


def test_a_traceback_names_the_program_line_not_the_driver(sandbox):
    result = sandbox.run_program("x = 1\ny = [][x]\n", "", SMALL)
    assert 'File "/tmp/main.py", line 2' in result.stderr
    assert "IndexError: list index out of range" in result.stderr
    assert "driver" not in result.stderr


def test_a_compile_error_names_the_problem(sandbox):
    result = sandbox.run_program("def f(:\n  pass", "", SMALL)
    assert result.stderr.startswith("SyntaxError:") and "main.py" in result.stderr


def test_non_daemon_threads_finish_and_atexit_runs_before_the_exit(sandbox):
    source = (
        "import atexit, threading, time\n"
        "atexit.register(lambda: print('atexit'))\n"
        "def work():\n    time.sleep(0.2)\n    print('thread')\n"
        "threading.Thread(target=work).start()\n"
    )
    assert sandbox.run_program(source, "", SMALL).stdout == "thread\natexit\n"


def test_output_is_flushed_when_the_program_ends_without_a_newline(sandbox):
    assert sandbox.run_program("import sys\nsys.stdout.write('no newline')", "", SMALL).stdout == "no newline"


def test_cpu_time_past_the_limit_is_a_timeout(sandbox):
    result = sandbox.run_program("while True:\n    pass", "", Limits(cpu_seconds=1, wall_seconds=5))
    assert result.status == "timeout"


def test_wall_clock_past_the_limit_is_a_timeout(sandbox):
    result = sandbox.run_program("import time\ntime.sleep(30)", "", Limits(cpu_seconds=1, wall_seconds=1))
    assert (result.status, result.returncode) == ("timeout", -9)
    assert 1.0 <= result.wall_s < 5


def test_stop_on_timeout_skips_the_cases_after_the_first_timeout(sandbox):
    source = "import time\nif input() == 'slow':\n    time.sleep(30)\nprint('done')"
    cases = [Case(stdin="fast\n"), Case(stdin="slow\n"), Case(stdin="fast\n")]
    limits = Limits(cpu_seconds=1, wall_seconds=1)
    assert [r.status for r in sandbox.run_cases(source, cases, limits, stop_on_timeout=True)] == ["ok", "timeout", "skipped"]
    assert [r.status for r in sandbox.run_cases(source, cases, limits)] == ["ok", "timeout", "ok"]


def test_a_memory_error_is_a_memory_limit(sandbox):
    result = sandbox.run_program("x = bytearray(1 << 30)", "", SMALL)
    assert result.status == "memory_limit"


def test_a_leftover_process_makes_an_otherwise_clean_exit_a_stray_process(sandbox):
    source = "import os, time\nif os.fork() == 0:\n    time.sleep(30)\nelse:\n    print('parent done')"
    result = sandbox.run_program(source, "", SMALL)
    assert (result.status, result.stdout) == ("stray_process", "parent done\n")
    assert result.wall_s < 5


def test_children_the_program_waits_for_are_not_strays(sandbox):
    source = "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'print(7)'], check=True)"
    assert sandbox.run_program(source, "", SMALL).status == "ok"


def test_output_beyond_the_kept_bytes_is_cut_flagged_and_an_output_limit(sandbox):
    # More stdout than the harness keeps is a limit hit (bug 0), not a clean run (issue 23).
    result = sandbox.run_program("print('x' * 1000)", "", Limits(max_output_bytes=100))
    assert (result.status, len(result.stdout), result.stdout_truncated) == ("output_limit", 100, True)
    [value] = sandbox.run_cases("def f():\n    return 'x' * 1000", [Case(call="f")], Limits(max_output_bytes=100))
    assert (value.status, len(value.value)) == ("output_limit", 100)
    assert sandbox.run_program("print('x' * 99)", "", Limits(max_output_bytes=100)).status == "ok"


def test_stderr_keeps_at_most_64_kib(sandbox):
    result = sandbox.run_program("import sys\nsys.stderr.write('e' * 100000)", "", SMALL)
    assert (len(result.stderr), result.stderr_truncated) == (64 << 10, True)


def test_the_output_kept_over_a_whole_run_is_bounded(sandbox):
    limits = Limits(max_output_bytes=600, max_run_output_bytes=1000)
    results = sandbox.run_cases("print('x' * 999)", [Case(), Case(), Case()], limits)
    assert [(len(r.stdout), r.stdout_truncated) for r in results] == [(600, True), (400, True), (0, True)]


# --- call and check cases ------------------------------------------------------------------


def test_a_call_case_returns_the_json_of_the_return_value(sandbox):
    [result] = sandbox.run_cases("def pair(a, b):\n    return (a + b, [a])", [Case(call="pair", args=[2, 3])], SMALL)
    assert (result.status, result.value) == ("ok", "[5, [2]]")


def test_a_call_case_finds_a_method_of_a_leetcode_solution_class(sandbox):
    source = "class Solution:\n    def twice(self, xs: List[int]) -> List[int]:\n        return [2 * x for x in xs]"
    [result] = sandbox.run_cases(source, [Case(call="twice", args=[[1, 2]])], SMALL)
    assert result.value == "[2, 4]"


def test_a_call_of_a_missing_function_is_a_runtime_error(sandbox):
    [result] = sandbox.run_cases("def f():\n    return 1", [Case(call="g")], SMALL)
    assert (result.status, result.value) == ("error", None)
    assert "no function 'g'" in result.stderr


def test_an_unserializable_return_value_is_flagged(sandbox):
    [result] = sandbox.run_cases("def f():\n    return object()", [Case(call="f")], SMALL)
    assert (result.status, result.value) == ("ok", "\x00unserializable")


def test_eval_cases_send_back_the_values_of_their_expressions(sandbox):
    source = "def f(x):\n    return 2 * x"
    cases = [Case(evaluate=("f(2)", "(f(1), {f(3)})")), Case(evaluate=("g(2)",))]
    results = sandbox.run_cases(source, cases, SMALL)
    assert [r.status for r in results] == ["ok", "error"]
    assert decode_values(results[0].value, 2) == [4, (2, {6})]
    assert results[1].value is None and "NameError" in results[1].stderr


def test_a_program_that_exits_before_an_eval_sends_no_value(sandbox):
    [result] = sandbox.run_cases("import sys\nsys.exit(0)\ndef f():\n    return 1", [Case(evaluate=("f()",))], SMALL)
    assert (result.status, result.value) == ("ok", None)


# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "accepted"),
    [
        ("cpu_seconds", 0, "positive number"),
        ("wall_seconds", float("inf"), "positive number"),
        ("max_processes", 2.5, "positive whole number"),
        ("memory_bytes", 1 << 20, "at least"),
        ("tmp_bytes", True, "positive whole number"),
    ],
)
def test_bad_limits_are_refused_with_the_field_named(field, value, accepted):
    with pytest.raises(ValueError, match=f"Limits.{field} must be .*{accepted}"):
        Limits(**{field: value})


def test_cpu_seconds_round_up_to_whole_seconds():
    assert (Limits(cpu_seconds=0.2).cpu_rlimit, Limits(cpu_seconds=2.5).cpu_rlimit, Limits(cpu_seconds=3).cpu_rlimit) == (1, 3, 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"call": "f", "evaluate": ("f()",)}, "either call= or evaluate="),
        ({"call": "not a name"}, "identifier"),
        ({"evaluate": ("f(",)}, "does not compile"),
        ({"evaluate": "f()"}, "non-empty tuple"),
        ({"stdin": 5}, "str or bytes"),
        ({"args": "ab"}, "list or tuple"),
    ],
)
def test_bad_cases_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Case(**kwargs)


def test_arguments_must_be_plain_data(sandbox):
    with pytest.raises(ValueError, match="JSON-like"):
        sandbox.run_cases("def f(x):\n    return x", [Case(call="f", args=[object()])], SMALL)


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="backend must be one of bwrap, rlimits"):
        Sandbox(backend="docker")


def test_no_cases_means_no_run(sandbox):
    assert sandbox.run_cases("raise SystemExit(1)", [], SMALL) == []


# --- the pool ------------------------------------------------------------------------------


def test_the_pool_returns_results_in_job_order(pool):
    jobs = [(f"print({k} * int(input()))", [Case(stdin="3\n")]) for k in range(12)]
    assert [results[0].stdout for results in pool.run_many(jobs)] == [f"{3 * k}\n" for k in range(12)]


def test_the_pool_runs_programs_at_the_same_time(sandbox):
    # Four programs that each sleep 1 s and say when (the wall clock every sandbox shares): one
    # after another their spans would not overlap; at the same time all four share a moment.
    # The four workers' sandboxes are started first (a start may make a copy of the files,
    # ~0.5 s), each by a program long enough that no worker takes two.
    sleeper = "import time\nstart = time.time()\ntime.sleep(1)\nprint(start, time.time())"
    with SandboxPool(workers=4, sandbox=sandbox, limits=SMALL) as four:
        four.run_many([("import time\ntime.sleep(0.5)", [Case()])] * 4)
        results = four.run_many([(sleeper, [Case()])] * 4)
    assert [r[0].status for r in results] == ["ok"] * 4
    spans = [tuple(map(float, r[0].stdout.split())) for r in results]
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans


def test_a_pool_needs_at_least_one_worker():
    with pytest.raises(ValueError, match="workers must be a whole number >= 1"):
        SandboxPool(workers=0)


# --- the unisolated rlimits backend: only by explicit, loud opt-in --------------------------


@pytest.fixture
def path_without_bwrap(tmp_path, monkeypatch):
    """PATH with setpriv but no bwrap: the machine as it is where bubblewrap is missing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    setpriv = shutil.which("setpriv")
    if setpriv:
        (bin_dir / "setpriv").symlink_to(setpriv)
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def test_without_bwrap_the_default_sandbox_refuses_to_run_and_names_the_opt_in(path_without_bwrap):
    with pytest.raises(SandboxError, match="never run unisolated by default.*backend='rlimits'"):
        Sandbox().run_program("print(1)", "", SMALL)


def test_the_old_silent_fallback_name_is_refused_with_the_opt_in_named():
    with pytest.raises(ValueError, match="silent fallback is gone"):
        Sandbox(backend="auto")


def test_choosing_rlimits_warns_loudly_every_time(path_without_bwrap, capfd):
    for _ in range(2):
        with pytest.warns(RuntimeWarning, match="UNISOLATED"):
            assert Sandbox(backend="rlimits").active_backend == "rlimits"
    assert capfd.readouterr().err.count("*** gdpo_nemo.sandbox: UNISOLATED") == 2


def test_the_environment_variable_opts_the_default_sandbox_in(path_without_bwrap, monkeypatch):
    monkeypatch.setenv("GDPO_NEMO_SANDBOX_BACKEND", "rlimits")
    monkeypatch.setattr(runner_module, "_default", None)
    with pytest.warns(RuntimeWarning, match="UNISOLATED"):
        assert runner_module.default_sandbox().active_backend == "rlimits"


def test_the_rlimits_backend_still_enforces_time_and_memory_limits_and_scrubs_the_environment(path_without_bwrap, monkeypatch):
    monkeypatch.setenv("WANDB_API_KEY", "should-never-be-seen")
    with pytest.warns(RuntimeWarning):
        box = Sandbox(backend="rlimits")
        box.active_backend
    assert box.run_program("print(input()[::-1])", "abc\n", SMALL).stdout == "cba\n"
    assert box.run_program("while True:\n    pass", "", SMALL).status == "timeout"
    assert box.run_program("x = bytearray(1 << 30)", "", SMALL).status == "memory_limit"
    environment = box.run_program("import os, json\nprint(json.dumps(sorted(os.environ)))", "", SMALL).stdout
    assert json.loads(environment) == ["HOME", "LANG", "LC_ALL", "PATH", "PWD", "TMPDIR"]


def test_a_directory_tree_deeper_than_python_recursion_is_cleaned_up(path_without_bwrap, monkeypatch):
    # The rlimits backend's working directory is removed by the harness: without recursion.
    # The harness makes it in a temp folder of this test's own: the machine's /tmp also holds
    # the working directories of sandboxes that other tests (another xdist worker) are running.
    deep = "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\nprint('deep')"
    with pytest.warns(RuntimeWarning):
        box = Sandbox(backend="rlimits")
        box.active_backend
    # (beside /tmp's own, open as /tmp is: the sandbox's user must reach what is made in it)
    private = tempfile.mkdtemp(prefix="gdpo-test-tmp-")
    os.chmod(private, 0o755)
    try:
        monkeypatch.setattr(tempfile, "tempdir", private)
        assert box.run_program(deep, "", Limits(cpu_seconds=5, wall_seconds=20)).stdout == "deep\n"
        assert tempfile.gettempdir() == private and os.listdir(private) == []
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_asking_for_bwrap_where_it_is_missing_is_an_error(path_without_bwrap):
    with pytest.raises(SandboxError, match="bubblewrap"):
        Sandbox(backend="bwrap").active_backend
