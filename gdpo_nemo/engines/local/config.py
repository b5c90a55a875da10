"""Run configs for the local engine: load, override, check.

A run config is NeMo RL's GRPO config (the pinned commit's ``examples/configs/grpo_math_1B.yaml``
key structure, docs/nemo_rl.md) plus our ``gdpo:`` block (docs/interfaces.md). Its key tree,
with each NeMo RL key's fate here, is gdpo_nemo/config/nemo_keys.py:

- **used**: the local engine implements it with NeMo RL's meaning (``grpo.num_prompts_per_step``,
  ``loss_fn.ratio_clip_min``, ``policy.optimizer``, ...). Missing keys get the tree's default.
- **refused**: an algorithm feature the local engine does not implement (``loss_fn.use_cispo``,
  ``grpo.use_dynamic_sampling``, ...). Accepted only at its neutral value; anything else is
  an error naming the key and the accepted value, never a silent difference.
- **ignored**: cluster-only or throughput-only settings (vLLM, Megatron, DTensor, Ray,
  ``cluster``, sequence packing, ...) and the environment/processor plumbing that the task
  replaces. Accepted when well typed; ``check_config`` returns one line naming them.

The check is gdpo_nemo.config.validate's `check_keys`, the one the NeMo path runs first, with
engine "local": a config gets the same lines on both engines, every problem at once. What is
truly local stays here: ``gdpo.engine`` must say local, and the batch arithmetic of one process.
Files are read and overridden by gdpo_nemo.config.files and gdpo_nemo.config.overrides
(Hydra's grammar).
"""

from __future__ import annotations

import os
from pathlib import Path

from gdpo_nemo.config import key_walk
from gdpo_nemo.checks import is_number
from gdpo_nemo.config.errors import ConfigError
from gdpo_nemo.config.files import read_config_file, to_plain
from gdpo_nemo.config.identity import reconcile_algo
from gdpo_nemo.config.overrides import apply_overrides, override_key
from gdpo_nemo.config.validate import check_keys

# The note names this many ignored keys, then how many more.
_IGNORED_SUMMARY_LIMIT = 8
SHOW_IGNORED_ENV = "GDPO_NEMO_SHOW_IGNORED"  # set: the note lists every ignored key


def check_config(raw: dict) -> tuple[dict, str | None]:
    """Check a resolved config for the local engine.

    Returns `(config, note)`: the config with the tree's defaults filled in for missing used
    keys (ignored keys kept as given), and one line naming the ignored keys (None if none).
    Raises ConfigError (a ValueError) listing every problem, each by its key path.
    """
    found, problems = _checked(raw)
    if problems:
        raise ConfigError(problems)
    return found.config, _ignored_note(found.ignored)


def local_problems(config: dict) -> list[str]:
    """What `check_config` refuses in `config`, as lines (none: the local engine runs it): the
    sweep asks this (LocalEngine.start_problems), so that a run the local engine would refuse
    at its start is refused before any job is planned."""
    return _checked(config)[1]


def _checked(raw: dict):
    found = check_keys(raw, engine="local")
    problems = found.problems + _engine_problems(found.config)
    if not problems:
        problems = _batch_problems(found.config)
    return found, problems


def _engine_problems(config: dict) -> list[str]:
    gdpo = config.get("gdpo")
    engine = gdpo.get("engine") if isinstance(gdpo, dict) else None
    if engine == "local" or engine not in key_walk.ENGINES:
        return []  # a name no engine has is the walk's to report
    return [f"gdpo.engine: {engine!r} is not accepted; expected 'local': the local engine runs configs meant for it"
            " (compose one with `gdpo-nemo config show task=... model=... algo=... cluster=local -o RUN.yaml`; run"
            f" this one on its engine: {engine_command(engine)})"]


def engine_command(name: str) -> str:
    """The command that runs configs of engine `name` (gdpo_nemo.config.engines)."""
    from gdpo_nemo.config.engines import engine

    return f"`{engine(name).command}`"


def _batch_problems(config: dict) -> list[str]:
    """What one process needs of the batch sizes, and an optimizer learning rate."""
    problems = []
    grpo, policy = config["grpo"], config["policy"]
    rollouts = grpo["num_prompts_per_step"] * grpo["num_generations_per_prompt"]
    gbs = policy["train_global_batch_size"]
    if rollouts % gbs:
        problems.append(
            f"policy.train_global_batch_size: {gbs} must divide grpo.num_prompts_per_step *"
            f" grpo.num_generations_per_prompt = {rollouts} (one optimizer step per global batch)"
        )
    elif gbs % policy["train_micro_batch_size"]:
        problems.append(
            f"policy.train_micro_batch_size: {policy['train_micro_batch_size']} must divide"
            f" policy.train_global_batch_size={gbs}"
        )
    if config["loss_fn"]["force_on_policy_ratio"] and gbs != rollouts:
        problems.append(
            f"loss_fn.force_on_policy_ratio: true needs policy.train_global_batch_size ="
            f" num_prompts_per_step * num_generations_per_prompt = {rollouts}, got {gbs}"
        )
    kwargs = policy["optimizer"]["kwargs"]
    if "lr" not in kwargs or not is_number(kwargs["lr"]):
        problems.append(f"policy.optimizer.kwargs.lr: {kwargs.get('lr')!r} is not accepted; expected a number")
    return problems


def _ignored_note(ignored: list[str]) -> str | None:
    if not ignored:
        return None
    show_all = bool(os.environ.get(SHOW_IGNORED_ENV))
    shown = ", ".join(ignored if show_all else ignored[:_IGNORED_SUMMARY_LIMIT])
    more = ""
    if len(ignored) > _IGNORED_SUMMARY_LIMIT and not show_all:
        more = f" and {len(ignored) - _IGNORED_SUMMARY_LIMIT} more (set {SHOW_IGNORED_ENV}=1 to list them all)"
    return f"local engine: ignoring cluster-only / not-applicable keys {shown}{more}"


def load_run_config(path, overrides=()) -> tuple[dict, str | None]:
    """Read a run config YAML (with NeMo RL `defaults:` inheritance), apply overrides in
    Hydra's grammar (gdpo_nemo.config.overrides; a plain `key=value` may set a key of the tree
    that the file leaves out), resolve interpolations and check it.
    Returns `(config, ignored-keys note)`."""
    config = to_plain(apply_overrides(read_config_file(Path(path)), overrides, settable=key_walk.has_key))
    keys = [override_key(o) for o in overrides]
    reconcile_algo(config, keys, refuse=False)  # the run's names follow its method (config.identity)
    checked, note = check_config(config)
    reconcile_algo(checked, keys)
    return checked, note


def resolve_and_check(config: dict) -> tuple[dict, str | None]:
    """`check_config` of an in-memory config (interpolations resolved first)."""
    return check_config(to_plain(config))  # to_plain builds a new dict
