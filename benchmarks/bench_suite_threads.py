"""Benchmark: torch's thread count in the test suite's processes (tests/conftest.py sets
OMP_NUM_THREADS=1), against torch's default (a thread per core) on the same machine in the
same run.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_suite_threads.py [--copies 2 --benchmarks aime minerva]

The workload is the eval end-to-end test's own (tests/test_eval.py): `gdpo-nemo eval --task
math` of the embedded SmolLM2-135M-Instruct, 2 samples of 24 new tokens per problem of
tests/data/eval, native CPU kernels as in the suite. Each setting runs `--copies` copies at
once (2: what the suite's two pytest-xdist workers do on two cores), then one copy alone:

- default: OMP_NUM_THREADS and MKL_NUM_THREADS unset (torch's own thread count), the peer
  every ratio is against;
- one-thread: both set to 1, as the suite sets them.

Prints, per setting and case, the wall seconds until the last copy ended and the CPU seconds
(user + system) all copies used, and each ratio to the default. Asserts no time.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETTINGS = {"default": {}, "one-thread": {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}}


def _run(setting: dict, copies: int, benchmarks: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the children) of `copies` eval processes started together."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.update(setting, GDPO_NEMO_CPU_NUMERICS="native", PYTHONPATH=str(REPO))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-threads-") as folder:
        processes = [
            subprocess.Popen([sys.executable, "-m", "gdpo_nemo.cli", "eval", "--task", "math", "--model",
                              "builtin:smollm2-135m", "--data-dir", str(REPO / "tests" / "data" / "eval"), "--samples", "2",
                              "--max-new-tokens", "24", "--benchmarks", *benchmarks, "--out", str(Path(folder) / str(i))],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for i in range(copies)
        ]
        for process in processes:
            _, err = process.communicate()
            if process.returncode != 0:
                raise SystemExit(f"eval failed ({process.returncode}): {err[-2000:]}")
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, default=2, help="processes at once in the side-by-side case (default 2)")
    parser.add_argument("--benchmarks", nargs="+", default=["aime", "minerva"], help="math benchmarks of tests/data/eval")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} logical CPUs, load average {os.getloadavg()[0]:.2f} at the start")
    results = {}
    for case, copies in ((f"{args.copies} side by side", args.copies), ("1 alone", 1)):
        for name, setting in SETTINGS.items():
            results[case, name] = _run(setting, copies, args.benchmarks)
            wall, cpu = results[case, name]
            peer_wall, peer_cpu = results[case, "default"]
            print(f"{case:>16} {name:>10}: wall {wall:7.1f} s ({wall / peer_wall:.2f} x default), "
                  f"CPU {cpu:7.1f} s ({cpu / peer_cpu:.2f} x default)", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
