"""Run configs for the local engine: load, override, check against NeMo RL's schema.

A run config is NeMo RL's GRPO config (the pinned commit's ``examples/configs/grpo_math_1B.yaml``
key structure, docs/nemo_rl.md) plus our ``gdpo:`` block (docs/interfaces.md).
Every key of that structure has one of three fates here:

- **used**: the local engine implements it with NeMo RL's meaning (``grpo.num_prompts_per_step``,
  ``loss_fn.ratio_clip_min``, ``policy.optimizer``, ...). Missing keys get NeMo RL's default.
- **off**: an algorithm feature the local engine does not implement (``loss_fn.use_cispo``,
  ``grpo.use_dynamic_sampling``, ...). Accepted only at its neutral value; anything else is a
  ``ValueError`` naming the key and the accepted value, never a silent difference.
- **ignored**: cluster-only or throughput-only settings (vLLM, Megatron, DTensor, Ray,
  ``cluster``, sequence packing, ...) and the environment/processor plumbing that the task
  replaces here. Accepted with any value; ``check_config`` returns one line naming them.

A key that is in none of the three is an error listing the section's accepted keys.

The gdpo block is not tabled here: its keys, defaults and checks are the settings classes of
gdpo_nemo/config/settings.py, and its cross-key rules (weights naming no component, options
that contradict) are gdpo_nemo/config/validate.py's, the same the composer runs. Files are
read and overridden by gdpo_nemo.config.files and gdpo_nemo.config.overrides (Hydra's grammar).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gdpo_nemo.config.checks import Check, anything, boolean, integer, is_int, is_number, mapping, number, one_of, text
from gdpo_nemo.config.derive import get_path
from gdpo_nemo.config.errors import ConfigError
from gdpo_nemo.config.files import read_config_file, to_plain
from gdpo_nemo.config.identity import reconcile_algo
from gdpo_nemo.config.overrides import apply_overrides, override_key
from gdpo_nemo.config.settings import GdpoSettings, estimator_check, setting_table
from gdpo_nemo.config.validate import estimator_option_problems, reward_problems

@dataclass(frozen=True)
class Key:
    """One config key: `fate` is "use", "off" or "ignore"; `default` fills a missing key;
    `check` validates a used key; `accepted` lists the neutral values of an "off" key."""

    fate: str
    default: Any = None
    check: Check = anything
    accepted: tuple = ()


def use(default, check: Check = anything) -> Key:
    return Key("use", default, check)


def off(*accepted) -> Key:
    return Key("off", accepted[0], anything, accepted)


IGNORE = Key("ignore")


def _from_settings(table: dict) -> dict:
    """The "use" keys of a settings table (gdpo_nemo.config.settings.setting_table)."""
    return {name: _from_settings(spec) if isinstance(spec, dict) else use(*spec) for name, spec in table.items()}


# ---------------------------------------------------------------------------------------
# The schema: NeMo RL's GRPO config at the pinned commit, plus the gdpo block.
# ---------------------------------------------------------------------------------------

SCHEMA: dict = {
    "defaults": IGNORE,  # resolved by the loader
    "grpo": {
        "num_prompts_per_step": use(32, integer(1)),
        "num_generations_per_prompt": use(16, integer(2)),
        "max_rollout_turns": off(1),
        "max_num_epochs": use(1, integer(1)),
        "max_num_steps": use(1000000, integer(1)),
        # The gdpo block chooses the estimator and its options; these mirror it for NeMo RL.
        "normalize_rewards": IGNORE,
        "use_leave_one_out_baseline": IGNORE,
        "val_period": use(10, integer(0)),
        "val_start_at": use(-1, integer()),
        "val_at_start": use(False, boolean),
        "val_at_end": use(False, boolean),
        "overlong_filtering": off(False),
        "advantage_clip_low": off(None),
        "advantage_clip_high": off(None),
        "max_val_samples": use(256, integer(1)),
        "val_num_generations_per_prompt": use(1, integer(1)),
        "stop_at_validation_metric": off(None),
        "stop_at_validation_threshold": off(None),
        "val_batch_size": use(256, integer(1)),
        "seed": use(42, integer(0)),
        "use_dynamic_sampling": off(False),
        "dynamic_sampling_max_gen_batches": IGNORE,
        "batch_multiplier": off(1),
        "reward_shaping": {
            "enabled": off(False),
            "overlong_buffer_length": IGNORE,
            "overlong_buffer_penalty": IGNORE,
            "max_response_length": IGNORE,
            "stop_properly_penalty_coef": IGNORE,
        },
        "adv_estimator": {
            "name": use("grpo", estimator_check),  # the registry's names
            "normalize_rewards": IGNORE,
            "use_leave_one_out_baseline": IGNORE,
            "minus_baseline": IGNORE,
            "reward_weights": IGNORE,
        },
        "reward_scaling": {
            "enabled": off(False),
            "source_min": IGNORE,
            "source_max": IGNORE,
            "target_min": IGNORE,
            "target_max": IGNORE,
        },
        "seq_logprob_error_threshold": off(None),
        "invalid_tool_call_advantage": off(None),
        "malformed_thinking_advantage": off(None),
        "async_grpo": {
            "enabled": off(False),
            "max_trajectory_age_steps": IGNORE,
            "max_generation_failures": IGNORE,
            "in_flight_weight_updates": IGNORE,
            "recompute_kv_cache_after_weight_updates": IGNORE,
        },
        "debug_payload_metrics": IGNORE,
    },
    "reward_penalties": {
        "penalize_duplicated_reasoning": off(False),
        "penalize_empty_final_answer": off(False),
        "penalize_unwanted_tokens": off(False),
        "penalize_malformed_think_tag": off(False),
        "token_ids": IGNORE,
    },
    "loss_fn": {
        "reference_policy_kl_penalty": use(0.01, number(0.0)),
        "reference_policy_kl_type": use("k3", one_of("k1", "k2", "k3")),
        "kl_input_clamp_value": use(20.0, number(0.0, nullable=True)),
        "kl_output_clamp_value": use(10.0, number(0.0, nullable=True)),
        "ratio_clip_min": use(0.2, number(0.0, 1.0)),
        "ratio_clip_max": use(0.2, number(0.0)),
        "ratio_clip_c": use(None, number(1.0, nullable=True)),
        "use_on_policy_kl_approximation": use(False, boolean),
        "use_importance_sampling_correction": off(False),
        "truncated_importance_sampling_type": off(None),
        "truncated_importance_sampling_ratio": off(None),
        "truncated_importance_sampling_ratio_min": off(None),
        "sequence_level_importance_ratios": off(False),
        "token_level_loss": use(True, boolean),
        "force_on_policy_ratio": use(False, boolean),
        "use_kl_in_reward": off(False),
        "use_cispo": off(False),
        "disable_ppo_ratio": use(False, boolean),
        "positive_example_nll_weight": off(0.0, 0),
    },
    "checkpointing": {
        "enabled": use(True, boolean),
        "checkpoint_dir": IGNORE,  # always <run_dir>/checkpoints (docs/interfaces.md)
        "metric_name": IGNORE,
        "higher_is_better": IGNORE,
        "keep_top_k": use(3, integer(1, nullable=True)),
        "save_period": use(10, integer(1)),
        "checkpoint_must_save_by": off(None),
        "model_save_format": IGNORE,
        "save_consolidated": IGNORE,
        "save_optimizer": off(True),  # resume must continue the same trajectory
    },
    "policy": {
        "model_name": use("builtin:smollm2-135m", text()),
        "tokenizer": {
            "name": use(None, text(nullable=True)),
            "chat_template_kwargs": use(None, lambda v: None if v is None or isinstance(v, dict) else "a mapping or null"),
            "use_fastokens": IGNORE,
        },
        "hf_config_overrides": off({}, None),
        "train_global_batch_size": use(512, integer(1)),
        "train_micro_batch_size": use(4, integer(1)),
        "generation_batch_size": use(32, integer(1)),
        "logprob_batch_size": use(4, integer(1)),
        "max_total_sequence_length": use(512, integer(2)),
        "precision": IGNORE,  # the local dtype is gdpo.local.dtype
        "logprob_chunk_size": IGNORE,
        "offload_optimizer_for_logprob": IGNORE,
        "dtensor_cfg": IGNORE,
        "megatron_cfg": IGNORE,
        "draft": {"enabled": off(False), "model_name": IGNORE, "loss_weight": IGNORE,
                  "num_layers": IGNORE, "aux_layer_indices": IGNORE},
        "dynamic_batching": IGNORE,
        "sequence_packing": IGNORE,
        "make_sequence_length_divisible_by": IGNORE,
        "max_grad_norm": use(1.0, number(0.0, nullable=True)),
        "optimizer": {
            "name": use("torch.optim.AdamW", one_of("torch.optim.AdamW", "torch.optim.Adam")),
            "kwargs": use({"lr": 5e-6, "weight_decay": 0.01, "betas": [0.9, 0.999], "eps": 1e-8}, mapping),
        },
        "scheduler": use(None, lambda v: None if v is None or isinstance(v, (list, dict)) else "a list of {name, kwargs} (and {milestones}) or null"),
        "generation": {
            "port_range_low": IGNORE,
            "port_range_high": IGNORE,
            "backend": IGNORE,  # the local engine has its own KV-cached sampler
            "max_new_tokens": use(512, integer(1)),
            "temperature": use(1.0, number(0.0)),
            "top_p": off(1.0, 1),
            "top_k": off(None),
            "val_temperature": use(None, number(0.0, nullable=True)),
            "val_top_p": use(None, number(0.0, 1.0, nullable=True)),
            "val_top_k": use(None, integer(1, nullable=True)),
            "stop_token_ids": use(None, lambda v: None if v is None or (isinstance(v, list) and all(is_int(i) for i in v)) else "a list of token ids or null"),
            "stop_strings": off(None),
            "refit_transport": IGNORE,
            "real_quant_export_cpu_offload": IGNORE,
            "refit_cfg": IGNORE,
            "mcore_generation_config": IGNORE,
            "vllm_cfg": IGNORE,
            "vllm_kwargs": IGNORE,
            "colocated": IGNORE,
        },
    },
    "data": {
        "max_input_seq_length": use(None, integer(1, nullable=True)),
        "shuffle": use(True, boolean),
        "num_workers": IGNORE,
        "use_multiple_dataloader": off(False),
        # Local data come from the task (gdpo.task): its offline set, or data_path files.
        "train": IGNORE,
        "validation": IGNORE,
        "default": IGNORE,
        "_override_": IGNORE,
    },
    "env": IGNORE,  # the task's reward set is the environment here
    "logger": {
        "log_dir": use("runs", text()),
        "num_val_samples_to_print": use(0, integer(0)),
        "wandb_enabled": use(False, boolean),
        "tensorboard_enabled": IGNORE,
        "mlflow_enabled": IGNORE,
        "swanlab_enabled": IGNORE,
        "monitor_gpus": IGNORE,
        "wandb": {
            "project": use("gdpo-nemo", text()),
            "name": use(None, text(nullable=True)),
            "entity": use(None, text(nullable=True)),
            "group": use(None, text(nullable=True)),
            "log_nemo_gym_full_result_tables": IGNORE,
        },
        "swanlab": IGNORE,
        "tensorboard": IGNORE,
        "mlflow": IGNORE,
        "gpu_monitoring": IGNORE,
    },
    "cluster": IGNORE,
    "data_plane": IGNORE,
    "on_policy_distillation": off(None),
    # The gdpo block: its keys, defaults and checks are gdpo_nemo/config/settings.py's.
    "gdpo": _from_settings(setting_table(GdpoSettings)),
}
# What only this engine restricts: it runs configs meant for it.
SCHEMA["gdpo"]["engine"] = use("local", one_of("local"))

# Sections whose presence alone is worth one line when ignored (their keys are many).
_IGNORED_SUMMARY_LIMIT = 8
SHOW_IGNORED_ENV = "GDPO_NEMO_SHOW_IGNORED"  # set: the note lists every ignored key


def _walk(node: dict, schema: dict, path: str, ignored: list, out: dict) -> None:
    for key in node:
        where = f"{path}{key}"
        if not isinstance(schema, dict) or key not in schema:
            accepted = sorted(k for k in schema) if isinstance(schema, dict) else []
            section = path[:-1] or "the top level"
            raise ValueError(f"unknown config key {where!r}: accepted keys in {section} are {accepted}")
    for key, spec in schema.items():
        where = f"{path}{key}"
        present = key in node
        value = node.get(key)
        if isinstance(spec, dict):
            if present and value is not None and not isinstance(value, dict):
                raise ValueError(f"{where}={value!r}: expected a mapping with keys {sorted(spec)}")
            out[key] = {}
            _walk(value or {}, spec, where + ".", ignored, out[key])
            continue
        if spec.fate == "ignore":
            if present:
                ignored.append(where)
                out[key] = copy.deepcopy(value)
            continue
        if not present:
            out[key] = copy.deepcopy(spec.default)
            continue
        if spec.fate == "off":
            if not any(value == ok and type(value) is type(ok) or (value is None and ok is None) or (value == {} and ok == {}) for ok in spec.accepted):
                shown = " or ".join(repr(v) for v in spec.accepted)
                raise ValueError(
                    f"{where}={value!r} is not implemented by the local engine: accepted {shown}"
                )
            out[key] = copy.deepcopy(value)
            continue
        problem = spec.check(value)
        if problem is not None:
            raise ValueError(f"{where}={value!r}: expected {problem}")
        out[key] = copy.deepcopy(value)


def check_config(raw: dict) -> tuple[dict, str | None]:
    """Check a resolved config against `SCHEMA`.

    Returns `(config, note)`: the config with NeMo RL's defaults filled in for missing used
    keys (ignored keys kept as given), and one line naming the ignored keys (None if none).
    Raises ValueError naming the first bad key and what it accepts.
    """
    if not isinstance(raw, dict):
        raise ValueError(f"a run config must be a mapping, got {type(raw).__name__}")
    if "gdpo" not in raw:
        raise ValueError("the run config has no 'gdpo' block: the local engine needs gdpo.task and gdpo.estimator"
                         " (see docs/interfaces.md, 'Run config')")
    ignored: list = []
    config: dict = {}
    _walk(raw, SCHEMA, "", ignored, config)
    _check_cross_keys(config)
    note = None
    if ignored:
        shown = ", ".join(ignored[:_IGNORED_SUMMARY_LIMIT])
        more = (f" and {len(ignored) - _IGNORED_SUMMARY_LIMIT} more (set {SHOW_IGNORED_ENV}=1 to list them all)"
                if len(ignored) > _IGNORED_SUMMARY_LIMIT and not os.environ.get(SHOW_IGNORED_ENV) else "")
        if os.environ.get(SHOW_IGNORED_ENV):
            shown = ", ".join(ignored)
        note = f"local engine: ignoring cluster-only / not-applicable keys {shown}{more}"
    return config, note


def _check_cross_keys(config: dict) -> None:
    grpo, policy, gdpo = config["grpo"], config["policy"], config["gdpo"]
    rollouts = grpo["num_prompts_per_step"] * grpo["num_generations_per_prompt"]
    gbs = policy["train_global_batch_size"]
    if rollouts % gbs:
        raise ValueError(
            f"policy.train_global_batch_size={gbs} must divide grpo.num_prompts_per_step *"
            f" grpo.num_generations_per_prompt = {rollouts} (one optimizer step per global batch)"
        )
    if gbs % policy["train_micro_batch_size"]:
        raise ValueError(
            f"policy.train_micro_batch_size={policy['train_micro_batch_size']} must divide"
            f" policy.train_global_batch_size={gbs}"
        )
    if config["loss_fn"]["force_on_policy_ratio"] and gbs != rollouts:
        raise ValueError(
            "loss_fn.force_on_policy_ratio=true needs policy.train_global_batch_size ="
            f" num_prompts_per_step * num_generations_per_prompt = {rollouts}, got {gbs}"
        )
    problems = estimator_option_problems(gdpo) + reward_problems(gdpo)
    if problems:  # refused here, before the model loads
        raise ConfigError(problems)
    kwargs = policy["optimizer"]["kwargs"]
    if "lr" not in kwargs or not is_number(kwargs["lr"]):
        raise ValueError(f"policy.optimizer.kwargs.lr={kwargs.get('lr')!r}: expected a number")


# ---------------------------------------------------------------------------------------
# Loading: gdpo_nemo.config's file reader and override grammar (Hydra's), then the table.
# ---------------------------------------------------------------------------------------


def _in_schema(key: str) -> bool:
    """Whether dotted `key` is in `SCHEMA` (a plain override may set it though the file
    leaves it out: its default would fill it anyway)."""
    return get_path(SCHEMA, key) is not None


def load_run_config(path, overrides=()) -> tuple[dict, str | None]:
    """Read a run config YAML (with NeMo RL `defaults:` inheritance), apply overrides in
    Hydra's grammar (gdpo_nemo.config.overrides), resolve interpolations and check it.
    Returns `(config, ignored-keys note)`."""
    config = to_plain(apply_overrides(read_config_file(Path(path)), overrides, settable=_in_schema))
    keys = [override_key(o) for o in overrides]
    reconcile_algo(config, keys, refuse=False)  # the run's names follow its method (config.identity)
    checked, note = check_config(config)
    try:
        reconcile_algo(checked, keys)
    except ConfigError as err:
        raise ValueError(str(err)) from None
    return checked, note


def resolve_and_check(config: dict) -> tuple[dict, str | None]:
    """`check_config` of an in-memory config (interpolations resolved first)."""
    return check_config(to_plain(config))  # to_plain builds a new dict
