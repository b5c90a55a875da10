"""The local engine as the sweep and the config layer see it (gdpo_nemo.config.engines.Engine).

One process on one node, CPU or one GPU: its configs are checked against the key tree's fates
(each NeMo RL key used in a range, ignored, or refused away from its neutral value), a run lives
in ``logger.log_dir`` (the run dir, as on every engine), and its Slurm job (slurm/templates/local.sbatch) runs
`gdpo-nemo train`, resuming from the run dir's newest checkpoint. Import-light: no torch.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from gdpo_nemo.config.engines import Engine, register_engine
from gdpo_nemo.config.files import to_plain
from gdpo_nemo.layout import REPO_ROOT


class LocalEngine(Engine):
    name = "local"
    summary = "the single-process trainer (gdpo_nemo.engines.local): CPU or one GPU, a small model"
    load = "gdpo_nemo.engines.local.config:load_run_config"
    train = "gdpo_nemo.engines.local.trainer:train"
    command = "gdpo-nemo train --config RUN.yaml [--run-dir DIR] [--resume | --overwrite] [key=value ...]"
    resume = "--resume: from the newest checkpoints/step_N of the run dir, on the same trajectory"
    metrics = "metrics.jsonl"
    keys = "tree"
    template = "local.sbatch"
    evaluation_jobs = True

    def start_problems(self, config: Mapping) -> list[str]:
        """What `gdpo-nemo train` refuses at its start (the local engine's own check: DAPO, a
        nemo-only loss, ...), so that a sweep refuses it before any job is planned."""
        from gdpo_nemo.engines.local.config import local_problems

        return local_problems(to_plain(config))

    def job_values(self, profile, *, run_dir: Path, config_path: Path, sweep_dir: Path, workdir: Path,
                   gpus_per_node: int, overrides: tuple[str, ...] = ()) -> dict[str, str]:
        q = shlex.quote
        return {"repo_root": q(str(REPO_ROOT)), "run_dir": q(str(run_dir)), "python": q(profile.python or sys.executable),
                "config": q(str(config_path))}


ENGINE = register_engine(LocalEngine())
