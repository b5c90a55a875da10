"""Render one sbatch script per run from slurm/templates/<engine>.sbatch and a cluster profile.

Two engines, two jobs:
- nemo: an N-node job (N = the run config's cluster.num_nodes) that runs NeMo RL's
  ray.sub from the profile's NeMo RL checkout, with COMMAND = our entry point
  `python -m gdpo_nemo.commands.nemo_run --config <run config>` (started with the
  profile's nemo_launcher, `uv run --project <nemo_rl_dir> python` by default);
  With a profile's `nemo_cpu`, the same template runs COMMAND itself on one node instead:
  NeMo RL's own grpo_train on that node's CPU (`python -m gdpo_nemo.commands.nemo_smoke
  <run config> --run-dir <run dir> --continue ...`, the CPU path), no container, no ray.sub;
- local: a one-node job running `gdpo-nemo train --config <run config> --run-dir <run dir>`,
  with `--resume` whenever the run dir has a checkpoint.

Both name the job after the run id, append to one log per job id (requeues included),
are requeue-able, and use `--dependency=singleton` so two jobs of one run never overlap.
Both run in `workdir`, the directory `gdpo-nemo sweep` ran in, so relative paths in the
run configs (data files, ...) mean in the job what they meant when the sweep composed them.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from gdpo_nemo.errors import UserError
from gdpo_nemo.layout import REPO_ROOT
from gdpo_nemo.runs.run_id import RunId
from gdpo_nemo.sweep.profiles import ClusterProfile
from gdpo_nemo.tasks import PerTask

TEMPLATE_DIR = REPO_ROOT / "slurm" / "templates"
NEMO_ENTRY_POINT = "gdpo_nemo.commands.nemo_run"
NEMO_CPU_ENTRY_POINT = "gdpo_nemo.commands.nemo_smoke"
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
    profile: ClusterProfile, engine: str, *, job_name: str, log_path: Path, nodes: int, workdir: Path
) -> list[str]:
    """The `#SBATCH` lines of one run's job, in a stable order."""
    options = [f"--job-name={job_name}", f"--partition={profile.partition}"]
    if profile.account:
        options.append(f"--account={profile.account}")
    options += [f"--time={profile.time}", f"--nodes={nodes}"]
    if engine == "nemo" and profile.nemo_cpu is None:
        options.append("--exclusive")
        if profile.node_gres:
            options.append(f"--gres={profile.node_gres}")
    else:
        options.append("--ntasks=1")
        if profile.cpus_per_task:
            options.append(f"--cpus-per-task={profile.cpus_per_task}")
        if profile.mem:
            options.append(f"--mem={profile.mem}")
        if profile.gpus_per_node > 0 and engine != "nemo":
            options.append("--gres=gpu:1")  # the local engine uses at most one GPU
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


def container_mounts(profile: ClusterProfile, needed: list[Path]) -> str:
    """MOUNTS for ray.sub: the profile's mounts plus `path:path` for each needed path none covers.

    A mount covers a path when the path lies under its source and the container sees
    it at the same place (`src` or `src:src`), since the job's paths are host paths.
    """
    covering = []
    for mount in profile.mounts:
        parts = mount.split(":")
        if len(parts) == 1 or parts[0] == parts[1]:
            covering.append(Path(parts[0]))
    extra = []
    for path in sorted(needed, key=lambda p: len(p.parts)):  # a parent first makes its children covered
        if not any(path == src or src in path.parents for src in covering + extra):
            extra.append(path)
    return ",".join([*profile.mounts, *(f"{p}:{p}" for p in extra)])


def nemo_command(profile: ClusterProfile, config_path: Path, workdir: Path) -> str:
    """COMMAND for ray.sub: our entry point in NeMo RL's environment, run in `workdir` with this repo importable."""
    launcher = profile.nemo_launcher or f"uv run --project {shlex.quote(str(profile.nemo_rl_dir))} python"
    return (
        f"cd {shlex.quote(str(workdir))} && "
        f"PYTHONPATH={shlex.quote(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}} "
        f"{launcher} -m {NEMO_ENTRY_POINT} --config {shlex.quote(str(config_path))}"
    )


# Keys the CPU path only bounds for cost: an experiment's override of one reaches the job as
# an override of its own, which wins over the bound (the run config already holds it).
CPU_BOUNDED_KEYS = ("grpo.dynamic_sampling_max_gen_batches",)


def nemo_cpu_command(profile: ClusterProfile, config_path: Path, run_dir: Path, workdir: Path,
                     overrides: tuple[str, ...] = ()) -> str:
    """COMMAND of a `nemo_cpu` profile's job: NeMo RL's grpo_train on the node's CPU through
    `gdpo-nemo nemo-smoke`'s CPU path, in `run_dir` (the sweep's), continuing the run there
    when a requeued or resubmitted job finds one. The run's own overrides of CPU_BOUNDED_KEYS,
    then the profile's nemo_cpu.overrides, are given to the job after the CPU path's changes."""
    from gdpo_nemo.config.overrides import override_key

    q = shlex.quote
    cpu = dict(profile.nemo_cpu or ())
    flags = [f"--{key.replace('_', '-')} {q(str(value))}" for key, value in cpu.items() if key not in ("wandb", "overrides")]
    if cpu.get("wandb"):
        flags.append("--wandb")
    passed = [o for o in overrides if override_key(o) in CPU_BOUNDED_KEYS] + list(cpu.get("overrides") or ())
    return (
        f"cd {q(str(workdir))} && "
        f"PYTHONPATH={q(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}} "
        f"{q(profile.python or sys.executable)} -m {NEMO_CPU_ENTRY_POINT} {q(str(config_path))} --run-dir {q(str(run_dir))}"
        f" --continue {' '.join(flags)}" + "".join(f" {q(o)}" for o in passed)
    )


def render_script(
    engine: str,
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
    """The sbatch script of one run (text), for `engine` "nemo" or "local"; `workdir` is the
    job's cwd; `overrides`: the run's own (the experiment's), for the CPU path's bounds."""
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
    if engine == "nemo" and profile.nemo_cpu is not None:
        values.update(container="''", mounts="''", gpus_per_node="0", ray_log_dir=q(str(run_dir / "ray_logs")),
                      command=q(nemo_cpu_command(profile, config_path, run_dir, workdir, overrides)), ray_sub="''", run_grpo="''")
    elif engine == "nemo":
        values.update(
            container=q(str(profile.container)),
            mounts=q(container_mounts(profile, [Path(str(profile.nemo_rl_dir)), REPO_ROOT, sweep_dir, workdir])),
            gpus_per_node=str(gpus_per_node),
            ray_log_dir=q(str(run_dir / "ray_logs")),
            command=q(nemo_command(profile, config_path, workdir)),
            ray_sub=q(str(Path(str(profile.nemo_rl_dir)) / "ray.sub")),
            run_grpo=q(str(Path(str(profile.nemo_rl_dir)) / "examples" / "run_grpo.py")),
        )
    else:
        values.update(
            repo_root=q(str(REPO_ROOT)),
            run_dir=q(str(run_dir)),
            python=q(profile.python or sys.executable),
            config=q(str(config_path)),
        )
    template = (TEMPLATE_DIR / f"{engine}.sbatch").read_text()
    return fill(template, values)


# The training tasks with an evaluation (docs/eval.md; the task registry's `evaluation`):
# `gdpo-nemo eval --task` takes the task's own name. gsm8k has none in the paper.
EVAL_TASKS = PerTask(lambda name: name, where=lambda cls: cls.evaluation is not None)  # read live


def render_eval_script(*, run_id: RunId, profile: ClusterProfile, run_dir: Path, log_path: Path,
                       workdir: Path) -> str:
    """The sbatch script of a local-engine run's evaluation job (`--with-eval`)."""
    q = shlex.quote
    directives = sbatch_directives(profile, "local", job_name=f"{run_id.name}.eval", log_path=log_path, nodes=1,
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
