"""Benchmark: sandboxed executions per second vs one plain subprocess per program.

Both sides run the same trivial program (read a number, print its double) with the same
interpreter and flags (`python -S -I -B`), on the same number of parallel workers, in
alternating rounds so that load from other users of the machine hits both alike.

- baseline: `subprocess.run([python, "-S", "-I", "-B", "-c", source], input=stdin)` per
  program, no isolation at all;
- sandbox, fresh: `SandboxPool(reuse=False).run_many`, each program in a bubblewrap sandbox
  of its own;
- sandbox, reused: `SandboxPool(reuse=True)` (the default), each worker keeps one sandbox
  and runs program after program in it, emptied in between. Each program's processes fork
  from a driver that never held another job's data (issue 15), and run under the seccomp
  filter and, where the machine allows, the sandbox's cgroup.

Printed: runs per second of each (median over rounds, and the best round), and the cost of
isolation as sandbox time / baseline time. A second table does the same for programs with
10 test cases each, where the sandbox runs all cases of a program in one invocation and the
baseline starts one subprocess per case. A third times one program on a big test set (400
cases of 64 KiB) against the same program on 1-byte inputs: the ratio shows whether a case
pays for its own input only (issue 23) or for the whole test set. Targets (issues 3 and 15): at least 100 isolated
runs of a trivial program per second on a 2-core machine with reused sandboxes, and
isolation costing under 2x the baseline.

With --runsc (Debian's `runsc`, gVisor, on PATH), a fourth row in the first two tables runs
each program in a fresh gVisor sandbox (`runsc --platform=ptrace --network=none do`, a user-
space kernel of its own per program: the backend issue 35 asked to measure), and a last table
times a system-call-heavy program (20,000 stat calls) in each backend.

    python benchmarks/bench_sandbox.py [--programs 300] [--rounds 5] [--workers N] [--runsc]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from gdpo_nemo.sandbox import Case, Limits, Sandbox, SandboxPool, default_workers

PROGRAM = "print(int(input()) * 2)\n"


def baseline_run(python: str, source: str, stdin: str) -> str:
    """One program in one plain subprocess: what running without a sandbox costs."""
    done = subprocess.run(
        [python, "-S", "-I", "-B", "-c", source], input=stdin.encode(), capture_output=True, timeout=30, check=False
    )
    return done.stdout.decode()


def time_baseline(executor: ThreadPoolExecutor, python: str, stdins: list[list[str]]) -> float:
    start = time.perf_counter()
    futures = [executor.submit(baseline_run, python, PROGRAM, s) for program in stdins for s in program]
    outputs = [future.result() for future in futures]
    elapsed = time.perf_counter() - start
    expected = [f"{int(s) * 2}\n" for program in stdins for s in program]
    if outputs != expected:
        raise SystemExit("baseline produced wrong outputs")
    return elapsed


# gVisor as Debian ships it (0.0~20221219): ptrace is the platform that runs in a VM without
# nested KVM; no network; cgroups left to the caller, as `runsc do` needs for a non-container run.
RUNSC = ["runsc", "--platform=ptrace", "--network=none", "--ignore-cgroups", "do"]


def time_runsc(executor: ThreadPoolExecutor, python: str, stdins: list[list[str]], source: str = PROGRAM) -> float:
    """Every program in a gVisor sandbox of its own (`runsc do`), one per case."""
    start = time.perf_counter()
    command = [*RUNSC, python, "-S", "-I", "-B", "-c", source]
    futures = [executor.submit(subprocess.run, command, input=s.encode(), capture_output=True, timeout=60, check=False)
               for program in stdins for s in program]
    outputs = [future.result() for future in futures]
    elapsed = time.perf_counter() - start
    if source == PROGRAM and [o.stdout.decode() for o in outputs] != [f"{int(s) * 2}\n" for program in stdins for s in program]:
        raise SystemExit(f"runsc produced wrong outputs: {outputs[0].stderr.decode()[-500:]}")
    return elapsed


def time_sandbox(pool: SandboxPool, stdins: list[list[str]], limits: Limits) -> float:
    start = time.perf_counter()
    results = pool.run_many([(PROGRAM, [Case(stdin=s) for s in program]) for program in stdins], limits)
    elapsed = time.perf_counter() - start
    for program, program_results in zip(stdins, results):
        for stdin, result in zip(program, program_results):
            if result.status != "ok" or result.stdout != f"{int(stdin) * 2}\n":
                raise SystemExit(f"sandbox produced a wrong result: {result}")
    return elapsed


def compare(label: str, programs: int, cases: int, rounds: int, workers: int, sandbox: Sandbox,
            runsc: bool = False) -> None:
    stdins = [[str(p * cases + c) for c in range(cases)] for p in range(programs)]
    limits = Limits(cpu_seconds=5, wall_seconds=20)
    times: dict[str, list[float]] = {"baseline": [], "fresh": [], "reused": [], **({"runsc": []} if runsc else {})}
    with ThreadPoolExecutor(max_workers=workers) as executor, SandboxPool(
        workers, sandbox=sandbox, reuse=False
    ) as fresh, SandboxPool(workers, sandbox=sandbox, reuse=True) as reused:
        time_baseline(executor, sandbox.python, stdins[:workers])  # warm-up: page cache, threads, sandboxes
        time_sandbox(fresh, stdins[:workers], limits)
        time_sandbox(reused, stdins[:workers], limits)
        for _ in range(rounds):
            times["baseline"].append(time_baseline(executor, sandbox.python, stdins))
            times["fresh"].append(time_sandbox(fresh, stdins, limits))
            times["reused"].append(time_sandbox(reused, stdins, limits))
            if runsc:
                times["runsc"].append(time_runsc(executor, sandbox.python, stdins))
    print(f"\n{label}: {programs} programs x {cases} case(s), {workers} workers, {rounds} rounds")
    print(f"{'':<40}{'median':>10}{'best':>10}")
    names = {"baseline": "baseline (no isolation)", "fresh": "sandbox, fresh", "reused": "sandbox, reused",
             **({"runsc": "gVisor runsc, fresh"} if runsc else {})}
    for key, name in names.items():
        median, best = statistics.median(times[key]), min(times[key])
        print(f"{name + ' programs/s':<40}{programs / median:>10.1f}{programs / best:>10.1f}")
        if cases > 1:
            print(f"{name + ' cases/s':<40}{programs * cases / median:>10.1f}{programs * cases / best:>10.1f}")
    for key in ("fresh", "reused", *(["runsc"] if runsc else [])):
        ratios = [box / base for box, base in zip(times[key], times["baseline"])]
        print(f"{'isolation cost, ' + names[key] + ' (x baseline)':<40}{statistics.median(ratios):>9.2f}x{min(ratios):>9.2f}x")
    if runsc:
        ratios = [gvisor / ours for gvisor, ours in zip(times["runsc"], times["fresh"])]
        print(f"{'gVisor runsc / sandbox, fresh (x)':<40}{statistics.median(ratios):>9.2f}x{min(ratios):>9.2f}x")


SYSCALLS = "import os\nfor _ in range(20000):\n    os.stat('/tmp')\nprint(int(input()) * 2)\n"


def syscall_heavy(rounds: int, sandbox: Sandbox) -> None:
    """One program making 20,000 stat calls, one at a time: where a user-space kernel pays
    most (each call is trapped by ptrace and served by gVisor's Sentry)."""
    limits = Limits(cpu_seconds=20, wall_seconds=60)
    times: dict[str, list[float]] = {"baseline": [], "fresh": [], "runsc": []}
    with ThreadPoolExecutor(max_workers=1) as executor, SandboxPool(1, sandbox=sandbox, reuse=False) as fresh:
        for _ in range(rounds):
            start = time.perf_counter()
            baseline_run(sandbox.python, SYSCALLS, "1\n")
            times["baseline"].append(time.perf_counter() - start)
            start = time.perf_counter()
            [[result]] = fresh.run_many([(SYSCALLS, [Case(stdin="1\n")])], limits)
            times["fresh"].append(time.perf_counter() - start)
            if result.stdout != "2\n":
                raise SystemExit(f"sandbox produced a wrong result: {result}")
            times["runsc"].append(time_runsc(executor, sandbox.python, [["1"]], SYSCALLS))
    print(f"\nsystem-call-heavy program (20,000 stat calls), 1 worker, {rounds} rounds")
    print(f"{'':<40}{'median':>10}{'best':>10}")
    for key, name in (("baseline", "baseline (s)"), ("fresh", "sandbox, fresh (s)"), ("runsc", "gVisor runsc, fresh (s)")):
        print(f"{name:<40}{statistics.median(times[key]):>10.3f}{min(times[key]):>10.3f}")


BIG_PROGRAM = "import sys\nprint(len(sys.stdin.buffer.read()))\n"


def big_test_set(cases: int, case_bytes: int, rounds: int, sandbox: Sandbox) -> None:
    """One program on `cases` inputs of `case_bytes` each, in a reused sandbox, against the
    same program on as many one-byte inputs and against one plain subprocess per case: a
    payload read once per case (issue 23) makes the big set cost cases x the whole payload."""
    limits = Limits(cpu_seconds=5, wall_seconds=20)
    big = [Case(stdin="x" * (case_bytes - 1) + "\n") for _ in range(cases)]
    small = [Case(stdin="\n") for _ in range(cases)]
    times: dict[str, list[float]] = {"big": [], "small": [], "baseline": []}
    with SandboxPool(1, sandbox=sandbox, limits=limits) as pool:
        pool.run_many([(BIG_PROGRAM, small[:2])])  # warm-up
        for _ in range(rounds):
            for key, job in (("big", big), ("small", small)):
                start = time.perf_counter()
                [results] = pool.run_many([(BIG_PROGRAM, job)])
                times[key].append(time.perf_counter() - start)
                expected = f"{len(job[0].stdin)}\n"
                if any(r.status != "ok" or r.stdout != expected for r in results):
                    raise SystemExit(f"sandbox produced a wrong result on the big test set: {results[0]}")
            start = time.perf_counter()
            for case in big:
                baseline_run(sandbox.python, BIG_PROGRAM, case.stdin)
            times["baseline"].append(time.perf_counter() - start)
    print(f"\nbig test set: 1 program x {cases} cases of {case_bytes >> 10} KiB ({cases * case_bytes >> 20} MiB), 1 worker, {rounds} rounds")
    print(f"{'':<40}{'median':>10}{'best':>10}")
    for key, name in (("big", "sandbox, reused, big inputs (s)"), ("small", "sandbox, reused, 1-byte inputs (s)"),
                      ("baseline", "baseline, big inputs (s)")):
        print(f"{name:<40}{statistics.median(times[key]):>10.3f}{min(times[key]):>10.3f}")
    ratio = [b / s for b, s in zip(times["big"], times["small"])]
    print(f"{'big / 1-byte inputs (x)':<40}{statistics.median(ratio):>9.2f}x{min(ratio):>9.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=300, help="programs per round (default 300)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating baseline/sandbox rounds (default 5)")
    parser.add_argument("--workers", type=int, default=None, help="parallel runs (default: 2 per CPU)")
    parser.add_argument("--big-cases", type=int, default=400, help="cases of 64 KiB in the big test set (default 400)")
    parser.add_argument("--runsc", action="store_true", help="also run each program under gVisor's runsc (on PATH)")
    args = parser.parse_args()
    if args.runsc and shutil.which("runsc") is None:
        raise SystemExit("--runsc: no runsc on PATH (Debian: apt-get install runsc)")
    workers = args.workers or default_workers()
    sandbox = Sandbox()
    print(
        f"sandbox backend: {sandbox.active_backend}; cgroup per sandbox: {sandbox.bounded_per_sandbox}; "
        f"interpreter: {sandbox.python}; workers: {workers}"
    )
    compare("trivial program, 1 case", args.programs, 1, args.rounds, workers, sandbox, args.runsc)
    compare("trivial program, 10 cases", max(1, args.programs // 10), 10, args.rounds, workers, sandbox, args.runsc)
    big_test_set(args.big_cases, 64 << 10, args.rounds, sandbox)
    if args.runsc:
        syscall_heavy(args.rounds, sandbox)


if __name__ == "__main__":
    main()
