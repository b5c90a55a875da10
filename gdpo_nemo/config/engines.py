"""What an engine is: the one contract both engines implement, and the registry of engines.

An engine takes a run config (NeMo RL's keys plus the gdpo block, docs/interfaces.md) and
trains it into a run dir. Each provides, in the same shape:

- `load`: "module:function" (path, overrides) -> config: the config file read with
  Hydra-grammar overrides, checked for this engine before any work (a ConfigError naming
  every bad key); the key tree's walk with ``engine=<name>`` decides each key's fate
  (gdpo_nemo.config.nemo_keys: NeMo RL's keys are all NeMo RL's on "nemo"; on "local" each is
  used, ignored or refused);
- `train`: "module:function", the Python entry that runs a loaded config;
- `command`: the shell command a user or a Slurm job runs;
- `resume`: how an interrupted run continues (both: the same command again, never a mixed
  or truncated log: gdpo_nemo.runs.rundir);
- `metrics`: where its step metrics go in the run dir (what gdpo_nemo.analysis reads).

Every list of engines (the gdpo.engine key, the key tree's walk, the sweep's --engine) is
`ENGINES`' keys. Torch-free and import-light: the config layer reads it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from gdpo_nemo.errors import UserError

__all__ = ["ENGINES", "Engine", "engine", "register_engine"]


@dataclass(frozen=True)
class Engine:
    name: str
    summary: str
    load: str
    train: str
    command: str
    resume: str
    metrics: str

    def entry(self, which: str = "train"):
        """The callable `load` or `train` names (imported now: it may import torch)."""
        module, function = getattr(self, which).split(":")
        return getattr(importlib.import_module(module), function)


ENGINES: dict[str, Engine] = {}


def register_engine(spec: Engine) -> Engine:
    """Add an engine (a third one, e.g. for TRL or verl: its module, its entry in the sweep's
    templates, and this call)."""
    if not spec.name or spec.name in ENGINES:
        raise UserError(f"engine {spec.name!r}: a new, non-empty name is needed")
    for which in ("load", "train"):
        if getattr(spec, which).count(":") != 1:
            raise UserError(f"engine {spec.name!r}: {which} must be 'module:function'")
    ENGINES[spec.name] = spec
    return spec


def engine(name: str) -> Engine:
    """The engine called `name`; a ValueError naming the accepted ones."""
    if name not in ENGINES:
        raise UserError(f"engine {name!r} is not known: use one of {', '.join(ENGINES)}")
    return ENGINES[name]


register_engine(Engine(
    name="local",
    summary="the single-process trainer (gdpo_nemo.engines.local): CPU or one GPU, a small model",
    load="gdpo_nemo.engines.local.config:load_run_config",
    train="gdpo_nemo.engines.local.trainer:train",
    command="gdpo-nemo train --config RUN.yaml [--run-dir DIR] [--resume | --overwrite] [key=value ...]",
    resume="--resume: from the newest checkpoints/step_N of the run dir, on the same trajectory",
    metrics="metrics.jsonl",
))
register_engine(Engine(
    name="nemo",
    summary="NeMo RL's own GRPO trainer with gdpo_nemo's plugin (gdpo_nemo.engines.nemo): Ray, vLLM, clusters",
    load="gdpo_nemo.engines.nemo.run:load_nemo_config",
    train="gdpo_nemo.engines.nemo.run:launch",
    command="python -m gdpo_nemo.commands.nemo_run --config RUN.yaml [key=value ...]",
    resume="the same command: NeMo RL resumes from checkpointing.checkpoint_dir, metrics.jsonl kept up to it",
    metrics="metrics.jsonl",
))
