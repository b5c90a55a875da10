"""Cluster profiles: where and how a sweep's jobs run (slurm/profiles/<name>.yaml).

A profile holds everything about a Slurm cluster that is not part of a run config:
account, partition, time limit, job size, container, mounts, the NeMo RL checkout and
the names of the environment variables to pass into jobs. Secrets are passed by name
only: the job inherits their values from the shell that runs `gdpo-nemo sweep --submit`,
and nothing the sweep writes ever contains a value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from gdpo_nemo.builtin_models import SMOLLM2, TINY
from gdpo_nemo.config.engines import ENGINES as _ENGINE_REGISTRY
from gdpo_nemo.layout import REPO_ROOT
from gdpo_nemo.sweep.errors import SweepError

PROFILE_DIR = REPO_ROOT / "slurm" / "profiles"
ENGINES = _ENGINE_REGISTRY  # gdpo_nemo.config.engines, read live

# key -> what it means; the ones in REQUIRED must be present (account may be null).
KEYS: dict[str, str] = {
    "description": "one line saying what cluster this is",
    "account": "Slurm account (--account), or null where the cluster has none",
    "partition": "Slurm partition (--partition)",
    "time": "time limit per job, Slurm format: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS",
    "nodes": "optional: if set, every nemo-engine run config's cluster.num_nodes must equal it"
    " (a partition of fixed-size jobs); by default each job asks for its config's cluster.num_nodes",
    "gpus_per_node": "GPUs per node; must equal each run config's cluster.gpus_per_node (nemo engine)",
    "gres": "generic resources per node (--gres); default gpu:<gpus_per_node> when gpus_per_node > 0",
    "container": "container image for NeMo RL's ray.sub (CONTAINER), built from the pinned NeMo RL commit;"
    " required by the nemo engine (NGC releases older than the pin are refused)",
    "mounts": "container mounts, 'src:dst' or 'path' (MOUNTS); the NeMo RL checkout, this repo and the sweep dir are added when not covered",
    "nemo_rl_dir": "absolute path of the NeMo RL checkout holding ray.sub; required by the nemo engine",
    "nemo_launcher": "how COMMAND starts Python in NeMo RL's environment inside the container"
    " (default 'uv run --project <nemo_rl_dir> python')",
    "env": "names of environment variables passed into jobs (values come from the submitting shell)",
    "cpus_per_task": "CPUs per local-engine job (--cpus-per-task)",
    "mem": "memory per local-engine job (--mem), e.g. 4G",
    "python": "Python interpreter for local-engine jobs (default: the one running gdpo-nemo)",
    "setup": "shell lines run at the top of every job (module load, source a venv, ...)",
    "sbatch_extra": "extra sbatch options, one per item, e.g. --qos=high",
    "eval_args": "arguments added to `gdpo-nemo eval` in the evaluation job of --with-eval, e.g. [--samples, \"4\"]",
    "nemo_cpu": "run nemo-engine jobs through NeMo RL's own grpo_train on the node's CPU (no container, no ray.sub:"
    " `gdpo-nemo nemo-smoke`'s CPU path, one node, cpus_per_task and mem as for the local engine), sized by the"
    " mapping's keys: " + ", ".join(f"{k} ({v})" for k, v in {
        "model": f"{TINY}, {SMOLLM2} or a checkpoint folder; default {TINY}", "steps": "default 2", "prompts": "default 2",
        "generations": "default 2", "max_new_tokens": "default 32", "val_period": "default 1",
        "max_gen_batches": "the cap on DAPO's grpo.dynamic_sampling_max_gen_batches; default 2",
        "overrides": "KEY=VALUE list given to every job after the CPU path's changes, so they win; default none",
        "wandb": "true: keep the run config's W&B logging (offline files without a server); default true"}.items()),
}
# nemo_cpu's keys -> (type, default); `gdpo-nemo nemo-smoke` flags of the same names.
NEMO_CPU_KEYS: dict[str, tuple[type, object]] = {
    "model": (str, TINY), "steps": (int, 2), "prompts": (int, 2), "generations": (int, 2),
    "max_new_tokens": (int, 32), "val_period": (int, 1), "max_gen_batches": (int, 2), "overrides": (list, ()),
    "wandb": (bool, True),
}
REQUIRED = ("account", "partition", "time", "gpus_per_node")
_TIME = re.compile(r"^(\d+-\d{1,2}(:\d{2}){0,2}|\d+(:\d{2}){0,2})$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ClusterProfile:
    """A validated cluster profile; see KEYS for each field's meaning."""

    name: str
    path: Path
    account: str | None
    partition: str
    time: str
    gpus_per_node: int
    nodes: int | None = None
    description: str = ""
    gres: str | None = None
    container: str | None = None
    mounts: tuple[str, ...] = ()
    nemo_rl_dir: str | None = None
    nemo_launcher: str | None = None
    env: tuple[str, ...] = ()
    cpus_per_task: int | None = None
    mem: str | None = None
    python: str | None = None
    setup: tuple[str, ...] = field(default=())
    sbatch_extra: tuple[str, ...] = field(default=())
    eval_args: tuple[str, ...] = field(default=())
    nemo_cpu: tuple[tuple[str, object], ...] | None = None  # NEMO_CPU_KEYS, all filled in; None: GPUs and ray.sub

    @property
    def node_gres(self) -> str | None:
        """The --gres of a nemo-engine job: the profile's, else gpu:<gpus_per_node>, else none."""
        if self.gres:
            return self.gres
        return f"gpu:{self.gpus_per_node}" if self.gpus_per_node > 0 else None

    def check_engine(self, engine: str, *, submit: bool = False) -> None:
        """Raise SweepError if this profile lacks what `engine` needs (`Engine.profile_problems`:
        for nemo, a container and NeMo RL checkout, or the CPU path's model); `submit`: also
        what only a submission needs on this machine."""
        if engine not in ENGINES:
            raise SweepError(f"engine {engine!r} is not known: use one of {', '.join(ENGINES)}")
        problems = ENGINES[engine].profile_problems(self, submit=submit)
        if problems:
            raise SweepError("; ".join(problems))


def list_profiles(profile_dir: Path = PROFILE_DIR) -> dict[str, str]:
    """Profile name -> description for every slurm/profiles/*.yaml."""
    out = {}
    for path in sorted(profile_dir.glob("*.yaml")):
        try:
            raw = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError:
            raw = {}
        out[path.stem] = str(raw.get("description", "")) if isinstance(raw, dict) else ""
    return out


def load_profile(name_or_path: str, profile_dir: Path = PROFILE_DIR) -> ClusterProfile:
    """Load and validate a profile by name (slurm/profiles/<name>.yaml) or by path to a YAML file.

    Raises SweepError naming the profile, the key at fault and what is accepted.
    """
    candidate = Path(name_or_path)
    if name_or_path.endswith((".yaml", ".yml")) or candidate.is_file():
        path = candidate.resolve()
        if not path.is_file():
            raise SweepError(f"--cluster {name_or_path!r}: no such profile file")
        name = path.stem
    else:
        path = profile_dir / f"{name_or_path}.yaml"
        name = name_or_path
        if not path.is_file():
            known = ", ".join(list_profiles(profile_dir)) or "none"
            raise SweepError(
                f"--cluster {name_or_path!r} is not a known profile: known profiles are {known}"
                f" (in {profile_dir}), or give a path to a profile .yaml"
            )
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise SweepError(f"profile {name!r} ({path}) is not valid YAML: {err}") from None
    return parse_profile(raw, name=name, path=path)


def parse_profile(raw: object, *, name: str, path: Path) -> ClusterProfile:
    """Validate a profile mapping as read from YAML and build a ClusterProfile."""
    where = f"profile {name!r} ({path})"
    if not isinstance(raw, dict):
        raise SweepError(f"{where} must be a mapping of keys: {', '.join(KEYS)}")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise SweepError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; accepted keys are {', '.join(KEYS)}")
    missing = [key for key in REQUIRED if key not in raw]
    if missing:
        raise SweepError(
            f"{where} is missing required key(s) {', '.join(missing)}"
            f" ({'; '.join(f'{k}: {KEYS[k]}' for k in missing)})"
        )

    def text(key: str, *, optional: bool = False) -> str | None:
        value = raw.get(key)
        if value is None and optional:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and key in ("mem",):
            value = str(value)
        if not isinstance(value, str) or not value.strip():
            raise SweepError(f"{where}: {key} must be a non-empty string ({KEYS[key]}), got {value!r}")
        return value

    def count(key: str, minimum: int, *, optional: bool = False) -> int | None:
        value = raw.get(key)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise SweepError(f"{where}: {key} must be an integer >= {minimum} ({KEYS[key]}), got {value!r}")
        return value

    def strings(key: str) -> tuple[str, ...]:
        value = raw.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise SweepError(f"{where}: {key} must be a list of strings ({KEYS[key]}), got {value!r}")
        return tuple(value)

    if not isinstance(raw["time"], str):
        # YAML 1.1 reads an unquoted 4:00:00 as the base-60 integer 14400
        raise SweepError(f"{where}: time must be a quoted string such as \"4:00:00\", got {raw['time']!r}")
    time = text("time")
    if not _TIME.match(str(time)):
        raise SweepError(f"{where}: time {time!r} is not a Slurm time: use {KEYS['time'].split(': ', 1)[1]}")
    env = raw.get("env") or []
    if isinstance(env, dict):
        raise SweepError(
            f"{where}: env must list variable NAMES only (e.g. [HF_HOME, HF_TOKEN, WANDB_API_KEY]);"
            " values are never stored: jobs inherit them from the submitting shell"
        )
    env_names = strings("env")
    bad = [n for n in env_names if not _ENV_NAME.match(n)]
    if bad:
        raise SweepError(f"{where}: env entries {bad} are not variable names (letters, digits, '_'; names only, no values)")
    nemo_rl_dir = text("nemo_rl_dir", optional=True)
    if nemo_rl_dir and not Path(nemo_rl_dir).is_absolute():
        raise SweepError(f"{where}: nemo_rl_dir must be an absolute path, got {nemo_rl_dir!r}")
    account = raw["account"]
    if account is not None:
        account = text("account")
    nemo_cpu = _nemo_cpu(raw.get("nemo_cpu"), where) if "nemo_cpu" in raw else None
    return ClusterProfile(
        name=name,
        path=path,
        account=account,
        partition=text("partition"),
        time=time,
        gpus_per_node=count("gpus_per_node", 0),
        nodes=count("nodes", 1, optional=True),
        description=str(raw.get("description") or ""),
        gres=text("gres", optional=True),
        container=text("container", optional=True),
        mounts=strings("mounts"),
        nemo_rl_dir=nemo_rl_dir,
        nemo_launcher=text("nemo_launcher", optional=True),
        env=env_names,
        cpus_per_task=count("cpus_per_task", 1, optional=True),
        mem=text("mem", optional=True),
        python=text("python", optional=True),
        setup=strings("setup"),
        sbatch_extra=strings("sbatch_extra"),
        eval_args=strings("eval_args"),
        nemo_cpu=nemo_cpu,
    )


def _nemo_cpu(raw: object, where: str) -> tuple[tuple[str, object], ...]:
    """The nemo_cpu mapping, checked and with every default filled in (null or {}: all defaults)."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise SweepError(f"{where}: nemo_cpu must be a mapping of {', '.join(NEMO_CPU_KEYS)} (or null), got {raw!r}")
    unknown = sorted(map(str, set(raw) - set(NEMO_CPU_KEYS)))
    if unknown:
        raise SweepError(f"{where}: nemo_cpu: unknown key(s) {', '.join(unknown)}; accepted keys are {', '.join(NEMO_CPU_KEYS)}")
    values = []
    for key, (kind, default) in NEMO_CPU_KEYS.items():
        value = raw.get(key, default)
        if kind is list:
            value = () if value is None else value
            if not (isinstance(value, (list, tuple)) and all(isinstance(v, str) and "=" in v for v in value)):
                raise SweepError(f"{where}: nemo_cpu.{key} must be a list of KEY=VALUE overrides, got {value!r}")
            values.append((key, tuple(value)))
            continue
        good = isinstance(value, bool) if kind is bool else (
            isinstance(value, int) and not isinstance(value, bool) and value >= (0 if key == "val_period" else 1)
            if kind is int else isinstance(value, str) and value.strip() != "")
        if not good:
            expected = {bool: "true or false", int: "a positive integer", str: "a non-empty string"}[kind]
            raise SweepError(f"{where}: nemo_cpu.{key} must be {expected}, got {value!r}")
        values.append((key, value))
    return tuple(values)
