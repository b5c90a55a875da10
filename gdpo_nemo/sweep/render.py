"""Render one sbatch script per run from its engine's template (slurm/templates/) and a cluster profile.

The sweep fills what every job shares and asks the run's engine (gdpo_nemo.config.engines) for
the rest: its template, its size (`sbatch_resources`), its nodes and its own placeholders
(`job_values`). The two engines' jobs (gdpo_nemo.engines.<name>.engine):
- nemo: an N-node job (N = the run config's cluster.num_nodes) that runs NeMo RL's
  ray.sub from the profile's NeMo RL checkout, with COMMAND = our entry point
  `python -m gdpo_nemo.commands.nemo_run --config <run config>` (started with the
  profile's nemo_launcher, `uv run --project <nemo_rl_dir> python` by default);
  with a profile's `nemo_cpu`, the same template runs COMMAND itself on one node instead:
  NeMo RL's own grpo_train on that node's CPU (`python -m gdpo_nemo.commands.nemo_smoke
  <run config> --run-dir <run dir> --continue ...`, the CPU path), no container, no ray.sub;
- local: a one-node job running `gdpo-nemo train --config <run config> --run-dir <run dir>`,
  with `--resume` whenever the run dir has a checkpoint.

Every job is named after the run id, appends to one log per job id (requeues included),
is requeue-able, and uses `--dependency=singleton` so two jobs of one run never overlap.
It runs in `workdir`, the directory `gdpo-nemo sweep` ran in, so relative paths in the
run configs (data files, ...) mean in the job what they meant when the sweep composed them.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from gdpo_nemo.config.engines import Engine
from gdpo_nemo.errors import UserError
from gdpo_nemo.layout import REPO_ROOT
from gdpo_nemo.runs.run_id import RunId
from gdpo_nemo.sweep.profiles import ClusterProfile
from gdpo_nemo.tasks import PerTask

TEMPLATE_DIR = REPO_ROOT / "slurm" / "templates"
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def fill(template: str, values: dict[str, str]) -> str:
    """Replace every {{name}} in `template` by values[name].

    Raises ValueError for a placeholder without a value and for a value the template
    does not use, so templates and code cannot drift apart silently.
    """
    used = set(_PLACEHOLDER.findall(template))
    missing, unused = used - set(values), set(values) - used
    if missing or unused:
        raise UserError(f"template placeholders without value: {sorted(missing)}; values without placeholder: {sorted(unused)}")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def sbatch_directives(
    profile: ClusterProfile, engine: Engine, *, job_name: str, log_path: Path, nodes: int, workdir: Path
) -> list[str]:
    """The `#SBATCH` lines of one run's job, in a stable order (its size: `engine.sbatch_resources`)."""
    options = [f"--job-name={job_name}", f"--partition={profile.partition}"]
    if profile.account:
        options.append(f"--account={profile.account}")
    options += [f"--time={profile.time}", f"--nodes={nodes}"]
    options += engine.sbatch_resources(profile)
    options += [
        f"--chdir={workdir}",
        f"--output={log_path}",
        "--open-mode=append",
        "--requeue",
        "--dependency=singleton",
    ]
    if profile.env:
        # Names only: sbatch copies their values from the submitting shell.
        options.append(f"--export=ALL,{','.join(profile.env)}")
    options += list(profile.sbatch_extra)
    return [f"#SBATCH {option}" for option in options]


def render_script(
    engine: Engine,
    *,
    run_id: RunId,
    profile: ClusterProfile,
    run_dir: Path,
    config_path: Path,
    log_path: Path,
    sweep_dir: Path,
    workdir: Path,
    nodes: int,
    gpus_per_node: int,
    overrides: tuple[str, ...] = (),
) -> str:
    """The sbatch script of one run (text) from `engine`'s template and values; `workdir` is the
    job's cwd; `overrides`: the run's own (the experiment's), which an engine may pass on."""
    q = shlex.quote
    values = {
        "run_name": run_id.name,
        "experiment": run_id.experiment,
        "profile": profile.name,
        "sbatch_directives": "\n".join(
            sbatch_directives(profile, engine, job_name=run_id.name, log_path=log_path, nodes=nodes, workdir=workdir)
        ),
        "setup": "\n".join(profile.setup),
        "wandb_name": q(run_id.name),
        "wandb_group": q(run_id.group),
    }
    values.update(engine.job_values(profile, run_dir=run_dir, config_path=config_path, sweep_dir=sweep_dir,
                                    workdir=workdir, gpus_per_node=gpus_per_node, overrides=overrides))
    template = (TEMPLATE_DIR / engine.template).read_text()
    return fill(template, values)


# The training tasks with an evaluation (docs/eval.md; the task registry's `evaluation`):
# `gdpo-nemo eval --task` takes the task's own name. gsm8k has none in the paper.
EVAL_TASKS = PerTask(lambda name: name, where=lambda cls: cls.evaluation is not None)  # read live


def render_eval_script(engine: Engine, *, run_id: RunId, profile: ClusterProfile, run_dir: Path, log_path: Path,
                       workdir: Path) -> str:
    """The sbatch script of the evaluation job of a run of `engine` (one whose
    `evaluation_jobs` is true: `--with-eval`), sized as that engine's jobs are."""
    q = shlex.quote
    directives = sbatch_directives(profile, engine, job_name=f"{run_id.name}.eval", log_path=log_path, nodes=1,
                                   workdir=workdir)
    # the afterok dependency comes on sbatch's command line; a requeue would re-evaluate
    directives = [d for d in directives if d not in ("#SBATCH --dependency=singleton", "#SBATCH --requeue")]
    values = {
        "run_name": run_id.name,
        "experiment": run_id.experiment,
        "profile": profile.name,
        "sbatch_directives": "\n".join(directives),
        "setup": "\n".join(profile.setup),
        "repo_root": q(str(REPO_ROOT)),
        "run_dir": q(str(run_dir)),
        "python": q(profile.python or sys.executable),
        "eval_task": EVAL_TASKS[run_id.task],
        "eval_args": " ".join(q(a) for a in profile.eval_args),
    }
    return fill((TEMPLATE_DIR / "eval.sbatch").read_text(), values)
