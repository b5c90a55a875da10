"""The run config: NeMo RL's GRPO config (pinned commit) plus our ``gdpo:`` block.

One module per concern:

- `settings`: the gdpo block as typed, documented settings; the one place its defaults live.
- `compose`: Hydra composition of ``configs/`` (base x task x model x algo x cluster), then
  `derive` (the NeMo RL keys restating the gdpo block, run names and directories).
- `files`, `overrides`: reading config files (NeMo RL's ``defaults:`` inheritance) and the one
  override grammar (Hydra's) both engines use.
- `validate`: the whole config checked once, before any work, every problem by key path.
- `experiments`: ``experiments/<name>.yaml`` -> `RunSpec` values.
- `nemo_keys`: the key tree, written down once: NeMo RL's keys (held to NeMo RL's own
  classes by tests/nemo_tier/test_schema_parity.py), each with its type, its fate on the local
  engine and the default that engine fills in, plus the gdpo block (data only).
- `key_walk`: the one walker over that tree, with which both engines check a config
  (`walk`, `check_against_schema`, `leaves`, `has_key`, `types`).

The API the sweep, the CLI and the engines use::

    compose(task, model, algo, *, cluster="local", seed=42, experiment="adhoc", overrides=()) -> dict
    validate(config) -> None                       # raises ConfigError
    list_experiments() -> dict[str, str]
    load_experiment(name) -> list[RunSpec]
    check_cluster_consistency(config, nodes, gpus_per_node) -> None
    load_config_file(path, overrides=()) -> dict   # a user's own YAML, NeMo RL style

Nothing here imports NeMo RL; torch only when a config names an estimator to check
(gdpo_nemo.estimators holds the estimator registry).
"""

from __future__ import annotations

from gdpo_nemo.config.compose import GROUPS, compose, group_options, load_config_file
from gdpo_nemo.config.derive import (
    DATASET_CLASS,
    ENV_NAMES,
    PROCESSOR_NAMES,
    adv_estimator_for,
    needs_our_estimator,
    run_id_of,
)
from gdpo_nemo.config.errors import ConfigError
from gdpo_nemo.config.experiments import RunSpec, list_experiments, load_experiment
from gdpo_nemo.config.files import config_dir, dump, experiments_dir
from gdpo_nemo.config.overrides import apply_overrides
from gdpo_nemo.config.settings import TASKS, estimator_names
from gdpo_nemo.config.validate import check_cluster_consistency, validate

__all__ = [
    "DATASET_CLASS",
    "ENV_NAMES",
    "ESTIMATORS",
    "GROUPS",
    "PROCESSOR_NAMES",
    "TASKS",
    "ConfigError",
    "RunSpec",
    "adv_estimator_for",
    "apply_overrides",
    "check_cluster_consistency",
    "compose",
    "config_dir",
    "dump",
    "experiments_dir",
    "group_options",
    "list_experiments",
    "load_config_file",
    "load_experiment",
    "needs_our_estimator",
    "run_id_of",
    "validate",
]


def __getattr__(name: str):
    """`ESTIMATORS`: the estimator names gdpo.estimator accepts, read from the registry on
    first use (so importing the config package does not import torch)."""
    if name == "ESTIMATORS":
        return estimator_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
