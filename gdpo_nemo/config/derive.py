"""The NeMo RL keys a run config derives from its gdpo block, and which estimator computes.

``grpo.adv_estimator`` (and its mirrors ``grpo.normalize_rewards``,
``grpo.use_leave_one_out_baseline``) restate gdpo.estimator in NeMo RL's terms; the logger
and checkpoint directories and W&B names come from the run id. `needs_our_estimator` says
whether NeMo RL's native estimator can compute what the gdpo block asks (else the plugin's
hook computes with ``gdpo_nemo.estimators``). Nothing here imports torch or NeMo RL.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Iterable, Mapping

from gdpo_nemo.checks import is_number
from gdpo_nemo.config.engines import ENGINES
from gdpo_nemo.config.errors import ConfigError
from gdpo_nemo.config.settings import estimator_registry
from gdpo_nemo.tasks import PerTask
from gdpo_nemo.estimators.options import PRESETS as ESTIMATOR_PRESETS
from gdpo_nemo.runs.rundir import checkpoints_dir
from gdpo_nemo.runs.run_id import RunId

__all__ = [
    "DATASET_CLASS",
    "DERIVED_KEYS",
    "ENV_NAMES",
    "PROCESSOR_NAMES",
    "RUNS_DIR_ENV",
    "adv_estimator_for",
    "derive",
    "estimator_decision",
    "drop_unread_keys",
    "get_path",
    "needs_our_estimator",
    "our_env_blocks",
    "run_id_of",
]

NEMO_RL_GROUP_EPS = ESTIMATOR_PRESETS["nemo_rl"]["eps"]  # the epsilon NeMo RL adds to a non-zero group std

# Our NeMo RL environments (gdpo_nemo/engines/nemo/environment.py) and data processors
# (gdpo_nemo/engines/nemo/data.py), one per task, registered by the plugin.
# {task: NeMo RL environment / processor name}, over the registered tasks, read live.
ENV_NAMES = PerTask(lambda task: f"gdpo_{task}")
PROCESSOR_NAMES = PerTask(lambda task: f"gdpo_{task}")
DATASET_CLASS = "gdpo_nemo.engines.nemo.datasets.TaskDataset"

# Keys the composer writes from the gdpo block and the run id; a user override of one of
# them is kept (and then checked against the gdpo block by validate).
DERIVED_KEYS = (
    "grpo.adv_estimator",
    "grpo.normalize_rewards",
    "grpo.use_leave_one_out_baseline",
    "logger.log_dir",
    "logger.wandb.name",
    "logger.wandb.group",
    "checkpointing.checkpoint_dir",
    "gdpo.computed_by",
)
RUNS_DIR_ENV = "GDPO_RUNS_DIR"


def get_path(config: Mapping, path: str, default=None):
    """The value at dotted `path` of a nested mapping, or `default` where any part is absent."""
    node = config
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def our_env_blocks(config: Mapping) -> dict:
    """{name: block} of the env blocks of our environments (gdpo_<task>)."""
    env = config.get("env") or {}
    return {name: block for name, block in env.items() if name in ENV_NAMES.values() and isinstance(block, Mapping)}


def needs_our_estimator(gdpo: Mapping, env_blocks: Mapping | None = None) -> bool:
    """Whether NeMo RL's native estimators cannot express the gdpo block (then the plugin's
    hook computes the advantages with gdpo_nemo.estimators). An estimator whose registry
    entry has no NeMo RL equivalent (``EstimatorInfo.nemo_rl`` None) is always ours.

    Native: grpo, grpo_no_std (grpo without normalization, also grpo with scale_rewards
    "none") and gdpo with per-sample batch norm and group scaling, NeMo RL's numerics
    (preset nemo_rl or none, std_ddof 1 or null, eps 1e-6 or null: null is the preset's),
    single-sample groups at 0, and finite rewards; grpo-family weights other than 1 are ours
    (NeMo RL sums rewards unweighted).
    """
    estimator = gdpo.get("estimator")
    info = estimator_registry().get(estimator) if isinstance(estimator, str) else None
    if info is None or info.nemo_rl is None:
        return True
    if gdpo.get("preset") not in (None, "nemo_rl"):
        return True
    std_ddof, eps = gdpo.get("std_ddof"), gdpo.get("eps")
    if std_ddof not in (None, 1) or not (eps is None or _close(eps, NEMO_RL_GROUP_EPS)):
        return True
    if gdpo.get("batch_norm", "sample") != "sample":
        return True
    scale = gdpo.get("scale_rewards", "group")
    if scale == "batch" or (scale == "none" and info.multi_component):
        return True  # NeMo RL: no batch std; normalize_rewards false is its grpo's option
    if gdpo.get("single_sample_groups") == "raise":
        return True
    weights = gdpo.get("reward_weights") or {}
    if not info.multi_component and any(not _close(w, 1.0) for w in weights.values()):
        return True
    if any((block or {}).get("on_data_error") == "nan" for block in (env_blocks or {}).values()):
        return True  # NaN rewards poison NeMo RL's estimators; ours leave them out
    return False


LEAVE_ONE_OUT_REASON = (
    "leave-one-out: NeMo RL's float32 std (E[x^2] - E[x]^2) of group-mates that all share a reward is float"
    " residue, not 0, and dividing by it gives advantages up to ~1e4-1e6; gdpo_nemo's is exactly 0"
    " (docs/estimators.md)"
)


def estimator_decision(gdpo: Mapping, env_blocks: Mapping | None = None) -> tuple[str, str]:
    """("nemo_rl" | "gdpo_nemo", why): whose estimator computes a NeMo RL run's advantages.
    The one decision: the composer writes it into gdpo.computed_by, validation checks a
    hand-set value against it, and the plugin's hook reads it."""
    if needs_our_estimator(gdpo, env_blocks):
        return "gdpo_nemo", "NeMo RL's own estimators cannot compute what the gdpo block asks"
    if gdpo.get("leave_one_out", False):
        return "gdpo_nemo", LEAVE_ONE_OUT_REASON
    return "nemo_rl", "NeMo RL's own estimator computes the gdpo block as asked"


def _close(a, b) -> bool:
    return is_number(a) and math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0)


def adv_estimator_for(gdpo: Mapping, env_blocks: Mapping | None = None) -> dict:
    """The `grpo.adv_estimator` block that restates gdpo.estimator in NeMo RL's terms.

    The registry's NeMo RL equivalent (``EstimatorInfo.nemo_rl``): grpo -> grpo; grpo_no_std
    -> grpo with normalize_rewards false (so is scale_rewards "none"); gdpo -> gdpo; an
    estimator NeMo RL lacks keeps its own name (gdpo_no_bn; the hook computes it). Weights other than 1 are
    written as NeMo RL's list, ordered by sorted component name. Whether NeMo RL's own
    estimator or gdpo_nemo's computes the advantages is `needs_our_estimator(gdpo)`: the
    plugin's hook decides from the gdpo block, so a weighted GRPO or a token-level batch
    norm keeps the readable name grpo / gdpo here (and the local engine accepts it).
    """
    estimator = gdpo.get("estimator")
    info = estimator_registry().get(estimator) if isinstance(estimator, str) else None
    native = info.nemo_rl if info is not None else None
    name = native.name if native is not None else estimator
    normalize = native.normalize_rewards if native is not None else True
    weights = gdpo.get("reward_weights")
    components = gdpo.get("reward_components") or []
    listed = None
    if weights and any(not _close(w, 1.0) for w in weights.values()):
        listed = [float(weights.get(component, 1.0)) for component in sorted(components)]
    return {
        "name": name,
        "normalize_rewards": normalize and gdpo.get("scale_rewards", "group") != "none",
        "use_leave_one_out_baseline": bool(gdpo.get("leave_one_out", False)),
        "reward_weights": listed,
        "minus_baseline": True,
    }


def run_id_of(config: Mapping) -> RunId:
    """The run id a config names itself by; a ConfigError if its parts are invalid."""
    try:
        return RunId.from_config(config)
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"gdpo: cannot name the run ({err}); check gdpo.experiment/task/model_tag/algo and grpo.seed") from None


def _set_path(config: dict, path: str, value) -> None:
    node = config
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def derive(config: dict, keep: Iterable[str]) -> None:
    """Write DERIVED_KEYS from the gdpo block and the run id, except those in `keep`."""
    keep = list(keep)

    def kept(path: str) -> bool:
        return any(k == path or k.startswith(path + ".") or path.startswith(k + ".") for k in keep)

    gdpo = config["gdpo"]
    adv = adv_estimator_for(gdpo, our_env_blocks(config))
    run_id = run_id_of(config)
    runs_root = Path(os.environ.get(RUNS_DIR_ENV, "runs"))
    run_dir = runs_root / run_id.name
    values = {
        "grpo.adv_estimator": adv,
        "grpo.normalize_rewards": adv["normalize_rewards"],
        "grpo.use_leave_one_out_baseline": adv["use_leave_one_out_baseline"],
        "logger.log_dir": str(run_dir),  # the run dir on every engine
        "logger.wandb.name": run_id.name,
        "logger.wandb.group": run_id.group,
        "checkpointing.checkpoint_dir": str(checkpoints_dir(run_dir)),
        "gdpo.computed_by": estimator_decision(gdpo, our_env_blocks(config))[0],
    }
    for path in DERIVED_KEYS:
        if not kept(path):
            _set_path(config, path, values[path])



def drop_unread_keys(config: dict, keep: Iterable[str]) -> None:
    """Remove keys the config's engine would refuse and never reads, except those in `keep`
    (set by an override: the checks then report them): `Engine.drop_unread_keys`."""
    ENGINES[get_path(config, "gdpo.engine")].drop_unread_keys(config, set(keep))
