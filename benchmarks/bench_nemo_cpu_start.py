"""CPU seconds of one NeMo RL run on the CPU path: ours against NeMo RL's own worker start.

NeMo RL starts each policy worker as a Ray actor (a Python process that imports torch,
transformers and NeMo RL's worker modules again), through an IsolatedWorkerInitializer actor
(another process that imports the worker's module only to start it). The CPU path runs the
initializer's code in the driver (gdpo_nemo.engines.nemo.cpu.cluster.workers_started_by_the_driver)
and makes the one worker in the driver too (gdpo_nemo.engines.nemo.cpu.driver_worker). This
runs `gdpo-nemo nemo-smoke CONFIG --steps 2 --data offline` (builtin:tiny) ours and the
peer's way, interleaved, and counts the CPU of every process of each run (driver, Ray's
processes, workers, actors) in a cgroup of its own (cgroup v1 cpuacct or v2 cpu.stat; needs
the right to make one):

    PYTHONPATH=. .venv/bin/python benchmarks/bench_nemo_cpu_start.py [--pairs 3] [--task gsm8k] [--peer actor]

`--peer actor` (default): the worker as NeMo RL's Ray actor (``GDPO_NEMO_CPU_WORKER=actor``),
its initializer still in the driver. `--peer initializer`: NeMo RL's own start, the
initializer actor too. Wall seconds depend on the machine's load; CPU seconds much less.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NEMO_PYTHON = REPO / ".venv-nemo" / "bin" / "python"
MODELS = {"gsm8k": "qwen2.5-1.5b-instruct", "toolcall": "qwen2.5-1.5b-instruct", "math": "r1-distill-qwen-1.5b"}
# The same command, with NeMo RL's own IsolatedWorkerInitializer actor starting the worker.
INITIALIZER_PEER = ("import contextlib, sys\n"
                    "from gdpo_nemo.engines.nemo.cpu import cluster\n"
                    "cluster.workers_started_by_the_driver = contextlib.nullcontext\n"
                    "from gdpo_nemo.cli import main\n"
                    "sys.exit(main(sys.argv[1:]))\n")
OURS = "import sys\nfrom gdpo_nemo.cli import main\nsys.exit(main(sys.argv[1:]))\n"
# --peer: (its row's name, the code it runs); its policy worker is always a Ray actor.
PEERS = {"actor": ("the worker a Ray actor (peer)", OURS),
         "initializer": ("NeMo RL's initializer actor (peer)", INITIALIZER_PEER)}


class CpuCgroup:
    """A cgroup whose processes' CPU time can be read: v1 cpuacct or v2 (cpu.stat)."""

    def __init__(self, name: str):
        v1 = Path("/sys/fs/cgroup/cpuacct")
        self.path = (v1 if v1.is_dir() else Path("/sys/fs/cgroup")) / name
        self.v1 = v1.is_dir()
        self.path.mkdir()

    def seconds(self) -> float:
        if self.v1:
            return int((self.path / "cpuacct.usage").read_text()) / 1e9
        usage = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
        return int(usage["usage_usec"]) / 1e6

    def remove(self) -> None:
        try:
            self.path.rmdir()
        except OSError:
            pass


def run(code: str, config: Path, run_dir: Path, cgroup: CpuCgroup, worker: str) -> tuple[float, float]:
    """(wall s, CPU s) of one nemo-smoke run, every process it starts inside `cgroup`;
    `worker`: where the policy worker runs ("driver" or "actor")."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), "GDPO_NEMO_CPU_WORKER": worker}
    env.pop("RAY_ADDRESS", None)
    command = [str(NEMO_PYTHON), "-c", code, "nemo-smoke", str(config), "--steps", "2", "--run-dir", str(run_dir),
               "--data", "offline"]
    # The child joins the cgroup before it execs, so nothing it starts escapes the count.
    join = f"echo $$ > {cgroup.path / 'cgroup.procs'} && exec \"$@\""
    started = time.perf_counter()
    done = subprocess.run(["sh", "-c", join, "sh", *command], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"nemo-smoke failed ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    return wall, cgroup.seconds()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3, help="interleaved runs of each (default 3)")
    parser.add_argument("--task", choices=sorted(MODELS), default="gsm8k")
    parser.add_argument("--peer", choices=sorted(PEERS), default="actor",
                        help="actor: the worker as NeMo RL's Ray actor; initializer: its initializer actor too")
    args = parser.parse_args(argv)
    if not NEMO_PYTHON.is_file():
        raise SystemExit(f"{NEMO_PYTHON}: run scripts/setup_nemo.sh first")
    with tempfile.TemporaryDirectory(prefix="bench_nemo_cpu_start_") as temp:
        temp = Path(temp)
        config = temp / "run.yaml"
        subprocess.run([str(NEMO_PYTHON), "-m", "gdpo_nemo.cli", "config", "show", f"task={args.task}",
                        f"model={MODELS[args.task]}", "algo=gdpo", "cluster=nemo_1n1g", "-o", str(config)],
                       check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        peer_name, peer_code = PEERS[args.peer]
        rows = {peer_name: [], "ours: the worker in the driver": []}
        for pair in range(args.pairs):
            for (name, times), code, worker in zip(rows.items(), (peer_code, OURS), ("actor", "driver")):
                mine = worker == "driver"
                cgroup = CpuCgroup(f"bench-nemo-cpu-start-{os.getpid()}-{pair}-{len(times)}-{mine}")
                try:
                    times.append(run(code, config, temp / f"run{pair}{mine}", cgroup, worker))
                finally:
                    cgroup.remove()
                load = os.getloadavg()[0]
                print(f"pair {pair + 1}: {name}: {times[-1][0]:.1f} s wall, {times[-1][1]:.1f} s CPU (load {load:.1f})",
                      flush=True)
    print(f"\n{args.task}, 2 steps of builtin:tiny, {args.pairs} interleaved pair(s), CPU of every process of the run:")
    means = {name: tuple(sum(t[i] for t in times) / len(times) for i in (0, 1)) for name, times in rows.items()}
    for name, (wall, cpu) in means.items():
        print(f"  {name:38s} {wall:7.1f} s wall {cpu:7.1f} s CPU")
    (peer_wall, peer_cpu), (our_wall, our_cpu) = means.values()
    print(f"  ours / peer: {our_wall / peer_wall:.2f} x wall, {our_cpu / peer_cpu:.2f} x CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
