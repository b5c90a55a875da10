"""The nemo engine as the sweep and the config layer see it (gdpo_nemo.config.engines.Engine).

NeMo RL's own GRPO trainer with our plugin: its configs are NeMo RL's MasterConfig (every key
required and typed as NeMo RL has it), NeMo RL writes its logs into ``logger.log_dir`` itself
(the run dir), what NeMo RL would refuse only at run time is refused here, and NeMo RL's own
code can check the configs (`native_check`). Its Slurm job (slurm/templates/nemo.sbatch) is an
N-node job that runs NeMo RL's ray.sub in the profile's container, with our entry point
`python -m gdpo_nemo.commands.nemo_run` as its COMMAND; with a profile's `nemo_cpu`, the same
template runs NeMo RL's grpo_train on one node's CPU instead (`gdpo-nemo nemo-smoke --continue`:
no container, no ray.sub). Import-light: neither NeMo RL nor torch is imported here.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from gdpo_nemo.config.derive import DATASET_CLASS, get_path
from gdpo_nemo.config.engines import Engine, register_engine
from gdpo_nemo.engines.nemo.cpu.models import MODELS as CPU_MODELS  # import-light: no torch
from gdpo_nemo.layout import REPO_ROOT
from gdpo_nemo.runs import metric_names as mn

NEMO_ENTRY_POINT = "gdpo_nemo.commands.nemo_run"
NEMO_CPU_ENTRY_POINT = "gdpo_nemo.commands.nemo_smoke"
# What a GPU profile needs for the nemo engine (ray.sub runs in a container from the checkout).
NEMO_REQUIRED = ("container", "nemo_rl_dir")
# NGC's NeMo RL release images: a release older than the pinned commit's own version (0.6.0
# on main at 7ea279ab, the commit gdpo_nemo/config/nemo_keys.py was read from) cannot hold that commit's
# environment (Python >= 3.13.14, torch 2.11.0, ray >= 2.55.1; v0.4.0 has Python 3.12,
# torch 2.7.1, ray 2.46, vLLM 0.10), and `uv run` would have to re-sync it on a compute node.
_NGC_RELEASE = re.compile(r"nemo-rl:v?(\d+)\.(\d+)(?:\.(\d+))?")
PINNED_NEMO_RL_VERSION = (0, 6, 0)
# The CPU path's built-in models (`gdpo-nemo nemo-smoke --model`), besides a model folder.
# Keys the CPU path only bounds for cost: an experiment's override of one reaches the job as
# an override of its own, which wins over the bound (the run config already holds it).
CPU_BOUNDED_KEYS = ("grpo.dynamic_sampling_max_gen_batches",)


class NemoEngine(Engine):
    name = "nemo"
    summary = "NeMo RL's own GRPO trainer with gdpo_nemo's plugin (gdpo_nemo.engines.nemo): Ray, vLLM, clusters"
    load = "gdpo_nemo.engines.nemo.run:load_nemo_config"
    train = "gdpo_nemo.engines.nemo.run:launch"
    command = "python -m gdpo_nemo.commands.nemo_run --config RUN.yaml [key=value ...]"
    resume = "the same command: NeMo RL resumes from checkpointing.checkpoint_dir, metrics.jsonl kept up to it"
    metrics = "metrics.jsonl"
    keys = "schema"
    template = "nemo.sbatch"
    evaluation_jobs = False

    # -- the run config ---------------------------------------------------------------
    def drop_unread_keys(self, config: dict, keep: set[str]) -> None:
        """Remove `data_path` from our dataset blocks whose source is "offline" (the task's
        generated set reads no file), unless an override set it (then the checks refuse the
        pair). NeMo RL types data_path NotRequired[str]: a null there is refused by its
        MasterConfig, and a path with source offline by our dataset; the task files' default
        path only serves source "file"."""
        data = config.get("data") or {}
        for split in ("train", "validation"):
            blocks = data.get(split)
            for block in blocks if isinstance(blocks, list) else [blocks]:
                if (
                    isinstance(block, dict)
                    and block.get("dataset_name") == DATASET_CLASS
                    and block.get("source", "offline") == "offline"
                    and "data_path" in block
                    and f"data.{split}.data_path" not in keep
                ):
                    del block["data_path"]

    def dataset_block_problems(self, block: Mapping, where: str) -> list[str]:
        if block.get("source", "offline") == "offline" and "data_path" in block:
            return [f"{where}.data_path: {block['data_path']!r} but source is 'offline' (the task's generated set reads"
                    " no file): remove data_path (~" + where + ".data_path) or set source: file"]
        return []

    def config_problems(self, config: Mapping) -> list[str]:
        problems = []
        model = get_path(config, "policy.model_name")
        if isinstance(model, str) and model.startswith("builtin:"):
            problems.append(f"policy.model_name: {model!r} is a local-engine model; NeMo RL needs a hub name or checkpoint path")
        if get_path(config, "grpo.async_grpo.enabled"):
            problems.append("grpo.async_grpo.enabled: true is not supported: gdpo_nemo's metric hooks wrap the synchronous trainer")
        if (get_path(config, "data_plane") or {}).get("enabled"):
            problems.append("data_plane.enabled: true is not supported: gdpo_nemo's hooks wrap the legacy synchronous trainer")
        metric = get_path(config, "checkpointing.metric_name")
        prefix, _, name = str(metric).partition(":")
        if prefix in ("val", "train") and mn.component(name, mn.REWARD) is not None:
            components = config["gdpo"]["reward_components"]
            if mn.component(name, mn.REWARD) not in components:
                problems.append(
                    f"checkpointing.metric_name: {metric!r} names no reward component; gdpo_nemo logs"
                    f" {[f'{prefix}:{mn.reward(c)}' for c in components]}"
                )
        # Traps NeMo RL springs only at run time (the first checkpoint, the first step): refused here.
        dtensor = get_path(config, "policy.dtensor_cfg") or {}
        save_format = get_path(config, "checkpointing.model_save_format")
        if dtensor.get("enabled") and dtensor.get("_v2") is False and save_format is not None:
            problems.append(
                f"checkpointing.model_save_format: {save_format!r} with policy.dtensor_cfg._v2: false; NeMo RL's v1 DTensor"
                " worker saves torch DCP only and refuses any format at the first checkpoint: set"
                " checkpointing.model_save_format=null, or policy.dtensor_cfg._v2=true (our configs' worker)"
            )
        if get_path(config, "grpo.use_dynamic_sampling") and not (get_path(config, "grpo.dynamic_sampling_max_gen_batches") or 0) >= 1:
            problems.append("grpo.dynamic_sampling_max_gen_batches: must be at least 1 when grpo.use_dynamic_sampling is true"
                            " (NeMo RL asserts it at the first step)")
        multiplier = get_path(config, "grpo.batch_multiplier")
        if multiplier not in (None, 1) and not get_path(config, "grpo.use_dynamic_sampling"):
            problems.append(f"grpo.batch_multiplier: {multiplier!r} needs grpo.use_dynamic_sampling: true (NeMo RL asserts it in setup)")
        logger = get_path(config, "logger") or {}
        for backend in ("tensorboard", "wandb", "mlflow", "swanlab"):
            if logger.get(f"{backend}_enabled") and not isinstance(logger.get(backend), Mapping):
                problems.append(f"logger.{backend}: missing; NeMo RL's Logger reads it when logger.{backend}_enabled is true"
                                f" (add {backend}: {{}})")
        generation = get_path(config, "policy.generation") or {}
        if generation.get("backend") == "vllm" and "vllm_cfg" not in generation:
            problems.append("policy.generation.vllm_cfg: missing; backend 'vllm' needs it")
        return problems

    def cluster_problems(self, config: Mapping, nodes: int, gpus_per_node: int) -> list[str]:
        """cluster.num_nodes must equal the request's --nodes and cluster.gpus_per_node its GPUs
        per node: NeMo RL places workers from these numbers; a mismatch hangs or idles the
        allocation."""
        problems = []
        have_nodes, have_gpus = get_path(config, "cluster.num_nodes"), get_path(config, "cluster.gpus_per_node")
        if have_nodes != nodes:
            problems.append(f"cluster.num_nodes: {have_nodes!r} but the Slurm request has --nodes={nodes}; they must be equal")
        if have_gpus != gpus_per_node:
            problems.append(f"cluster.gpus_per_node: {have_gpus!r} but the Slurm request gives {gpus_per_node} GPU(s) per"
                            " node; they must be equal")
        return problems

    def native_check(self, python: str | None, *, name_each: bool = True):
        from gdpo_nemo.engines.nemo.validation import NEMO_RL_PYTHON_ENV, refuse_what_nemo_rl_refuses
        from gdpo_nemo.sweep.actions import ConfigCheck

        return ConfigCheck(
            run=lambda configs: refuse_what_nemo_rl_refuses(configs, python, name_each=name_each),
            unchecked_note=f"run configs checked against gdpo_nemo's copy of NeMo RL's schema only; set ${NEMO_RL_PYTHON_ENV}"
                           " (or --nemo-rl-python) to NeMo RL's venv Python to check them with NeMo RL's own MasterConfig too")

    # -- its Slurm job ----------------------------------------------------------------
    def profile_problems(self, profile, *, submit: bool = False) -> list[str]:
        where = f"profile {profile.name!r} ({profile.path})"
        if profile.nemo_cpu is not None:
            model = dict(profile.nemo_cpu)["model"]
            if model not in CPU_MODELS and not Path(str(model)).is_dir():
                return [f"{where}: nemo_cpu.model {model!r} is not {', '.join(CPU_MODELS)}"
                        " or a model folder on this machine (the jobs load it from the same path)"]
            return []
        missing = [key for key in NEMO_REQUIRED if not getattr(profile, key)]
        if missing:
            return [f"{where} lacks {', '.join(missing)}, which the nemo engine needs (NeMo RL's ray.sub runs in a"
                    " container from the NeMo RL checkout); add them or use --engine local"]
        release = _NGC_RELEASE.search(str(profile.container))
        if release and tuple(int(part or 0) for part in release.groups()) < PINNED_NEMO_RL_VERSION:
            return [f"{where}: container {profile.container!r} is NeMo RL release"
                    f" {'.'.join(part for part in release.groups() if part)}, older than the pinned commit"
                    " (7ea279ab, version 0.6.0 on main: Python >= 3.13.14, torch 2.11.0, ray >= 2.55.1), so our"
                    " plugin would run on another NeMo RL; build the image from the pinned commit's docker/Dockerfile"
                    " (docs/nemo_rl.md, section 1) and name it in `container`"]
        if submit and not (Path(str(profile.nemo_rl_dir)) / "ray.sub").is_file():
            return [f"profile {profile.name!r}: nemo_rl_dir {profile.nemo_rl_dir} has no ray.sub;"
                    " point nemo_rl_dir at a NeMo RL checkout (github.com/NVIDIA-NeMo/RL)"]
        return []

    def job_nodes(self, profile, config: Mapping) -> int:
        if profile.nemo_cpu is not None:
            return 1  # one node's CPU; the CPU path sets the config's cluster to 1 x 1 itself
        return profile.nodes or config["cluster"]["num_nodes"]

    def cluster_checked(self, profile) -> bool:
        return profile.nemo_cpu is None  # the CPU path sets the config's cluster to 1 x 1 itself

    def sbatch_resources(self, profile) -> list[str]:
        if profile.nemo_cpu is not None:
            return [option for option in super().sbatch_resources(profile) if not option.startswith("--gres=")]
        options = ["--exclusive"]  # whole nodes: ray.sub places NeMo RL's workers on them
        if profile.node_gres:
            options.append(f"--gres={profile.node_gres}")
        return options

    def job_values(self, profile, *, run_dir: Path, config_path: Path, sweep_dir: Path, workdir: Path,
                   gpus_per_node: int, overrides: tuple[str, ...] = ()) -> dict[str, str]:
        q = shlex.quote
        if profile.nemo_cpu is not None:
            return dict(container="''", mounts="''", gpus_per_node="0", ray_log_dir=q(str(run_dir / "ray_logs")),
                        command=q(nemo_cpu_command(profile, config_path, run_dir, workdir, overrides)), ray_sub="''",
                        run_grpo="''")
        checkout = Path(str(profile.nemo_rl_dir))
        return dict(
            container=q(str(profile.container)),
            mounts=q(container_mounts(profile, [checkout, REPO_ROOT, sweep_dir, workdir])),
            gpus_per_node=str(gpus_per_node),
            ray_log_dir=q(str(run_dir / "ray_logs")),
            command=q(nemo_command(profile, config_path, workdir)),
            ray_sub=q(str(checkout / "ray.sub")),
            run_grpo=q(str(checkout / "examples" / "run_grpo.py")),
        )


def container_mounts(profile, needed: list[Path]) -> str:
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


def nemo_command(profile, config_path: Path, workdir: Path) -> str:
    """COMMAND for ray.sub: our entry point in NeMo RL's environment, run in `workdir` with this repo importable."""
    launcher = profile.nemo_launcher or f"uv run --project {shlex.quote(str(profile.nemo_rl_dir))} python"
    return (
        f"cd {shlex.quote(str(workdir))} && "
        f"PYTHONPATH={shlex.quote(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}} "
        f"{launcher} -m {NEMO_ENTRY_POINT} --config {shlex.quote(str(config_path))}"
    )


def nemo_cpu_command(profile, config_path: Path, run_dir: Path, workdir: Path, overrides: tuple[str, ...] = ()) -> str:
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


ENGINE = register_engine(NemoEngine())
