"""NeMo RL's v0.7.0 release (what its release containers hold) under our hooks, on this CPU.

Run by tests/nemo_tier/test_release.py in .venv-nemo with the release's source first on
PYTHONPATH (scripts/setup_nemo.sh unpacks it into .nemo-rl-release/source): the same
dependency pins fit it, and this process imports the release, not the pin.

    python tests/nemo_tier/release_scenarios.py killed RUN.yaml RUN_DIR MODEL
    python tests/nemo_tier/release_scenarios.py matrix OUT MODEL [RUN_DIR]

`killed` runs the math run until a SIGKILL right after step 1's checkpoint; `matrix` trains
every task once (math with DAPO on the early-stopping MODEL, its policy worker a Ray actor,
the others' made in the driver), then resumes RUN_DIR (the killed run) in the same process and
Ray: one NeMo RL start-up (imports, Ray) fewer than a process of its own. `matrix` writes what
it saw as JSON to stdout's last line.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import ACTOR_RUN, MATH_CHECKPOINTING, actor_classes, cpu_config  # noqa: E402

# Every task once, each with another estimator (as tests/nemo_tier's MATRIX); math keeps
# DAPO on with the early-stopping model so its groups vary.
MATRIX = {"gsm8k": "gdpo", "toolcall": "grpo", "code": "grpo_no_std", "math": "gdpo_no_bn"}
MATH = dict(compose=("gdpo.length_limit=10",), steps=3, generations=8,
            overrides=MATH_CHECKPOINTING)


def _nemo_rl() -> dict:
    import nemo_rl

    from gdpo_nemo.engines.nemo.interfaces import interface_problems

    return {"version": nemo_rl.__version__, "file": nemo_rl.__file__, "problems": interface_problems()}



def _run(config: dict, worker: str | None = None) -> dict:
    from gdpo_nemo.engines.nemo.cpu.train import train_on_cpu

    result = train_on_cpu(config, out=io.StringIO(), worker=worker)
    return {"run_dir": str(result.run_dir), "timed_out": result.timed_out, "generate_calls": result.generate_calls,
            "moved": result.weights_after != result.weights_before, "initializers_in_driver": result.initializers_in_driver,
            "worker": result.worker}


def matrix(out: Path, stopper: Path, resume: Path | None = None) -> dict:
    from gdpo_nemo.engines.nemo.cpu import cluster
    from gdpo_nemo.engines.nemo.cpu.models import model_folder
    from gdpo_nemo.runs import rundir

    seen = {"nemo_rl": _nemo_rl(), "runs": {}}
    tiny = model_folder("tiny", seed=0)
    cluster.start_ray()
    try:
        for task, algo in MATRIX.items():
            run_dir = out / f"{task}_{algo}" / "run"
            if task == "math":
                config = cpu_config(task, algo, run_dir, stopper, tiny=False, **MATH)
            else:
                config = cpu_config(task, algo, run_dir, tiny, tiny=True, steps=2)
            seen["runs"][task] = _run(config, worker="actor" if task == ACTOR_RUN else None)
        if resume is not None:
            seen["resumed"] = _run(rundir.read_config(resume))
        seen["actors"] = actor_classes()
    finally:
        cluster.stop_ray()
    return seen


def killed(source: Path, run_dir: Path, model: Path) -> None:
    """`gdpo-nemo nemo-smoke` on the math run, killed (SIGKILL, the whole process group) right
    after step 1's checkpoint becomes the one to resume from: on the release that is
    CheckpointManager.finalize_checkpoint's rename, which our hook holds back until step 1's
    record is written."""
    from nemo_rl.utils import checkpoint

    finalize = checkpoint.CheckpointManager.finalize_checkpoint

    def finalize_then_die(self, checkpoint_path):  # the name the hooks' interface check expects
        finalize(self, checkpoint_path)
        if str(checkpoint_path).rstrip("/").endswith("tmp_step_1"):
            os.killpg(os.getpgrp(), signal.SIGKILL)

    checkpoint.CheckpointManager.finalize_checkpoint = finalize_then_die
    from gdpo_nemo.commands.nemo_smoke import main

    sys.exit(main([str(source), "--model", str(model), "--run-dir", str(run_dir), "--steps", "3", "--generations", "8",
                   "--max-new-tokens", "32", "--data", "offline"]))


if __name__ == "__main__":
    mode, *args = sys.argv[1:]
    if mode == "killed":
        killed(Path(args[0]), Path(args[1]), Path(args[2]))
    print(json.dumps(matrix(*map(Path, args))))
