"""NeMo RL's GRPO config key tree at the pinned commit, written down once as data, and the
walker that checks a config against it.

Pinned commit: NVIDIA-NeMo/RL 7ea279abfbeb698b092856d0dab61e7cf39bc909 (docs/nemo_rl.md). The key paths and types below were read from its config classes:
``MasterConfig``, ``GRPOConfig``, ``AdvEstimatorConfig``, ``RewardShapingConfig``,
``RewardScalingConfig``, ``AsyncGRPOConfig``, ``RewardPenaltyConfig`` (pydantic models,
``nemo_rl/algorithms/grpo.py``, ``advantage_estimator.py``, ``reward_functions.py``),
``ClippedPGLossConfig`` (``algorithms/loss/loss_functions.py``), ``PolicyConfig`` and its
parts (``models/policy/__init__.py``), ``GenerationConfig`` / ``VllmConfig``
(``models/generation/interfaces.py``, ``vllm/config.py``), ``DataConfig`` /
``ResponseDatasetConfig`` (``data/__init__.py``), ``LoggerConfig`` (``utils/logger.py``),
``CheckpointingConfig`` (``utils/checkpoint.py``), ``ClusterConfig``
(``distributed/virtual_cluster.py``),
plus the keys the exemplar ``examples/configs/grpo_math_1B.yaml`` carries that the code reads
with ``.get`` but no class declares (marked "exemplar").

Why a schema of our own: NeMo RL builds ``MasterConfig(**config)`` with ``extra="allow"``,
so a misspelt key is silently kept and never read. Here an unknown, missing or mistyped key
is an error naming its key path, before anything launches.

The data format (kept small so a reader can check it against the classes):

- a section is a ``dict``: key -> spec. A key ending in ``?`` may be absent (NotRequired, or a
  pydantic field with a default). ``"*"`` gives the spec of keys not listed (an open section);
  without it, unknown keys are errors.
- a leaf spec is a type string: ``int``, ``float`` (an int is accepted), ``bool``, ``str``,
  ``null``, ``dict`` (any mapping), ``list``, ``list[int]``, ``list[float]``, ``list[str]``,
  ``any``; alternatives are joined by ``|`` (``"int|null"``).
- ``Alt(a, b, ...)`` is a choice among specs that may be sections; ``ListOf(section)`` is a
  list of sections.
- ``WHEN_ENABLED`` (a key inside a section) lists keys that are required only when the
  section's ``enabled`` is true (the TypedDict pairs ``XConfig`` / ``XConfigDisabled``).

Opaque subtrees (typed ``dict``): backend settings this project never sets and whose classes
run to hundreds of keys (``policy.megatron_cfg`` beyond ``enabled``, Megatron/SGLang/TRT-LLM
generation configs, refit transports, ``automodel_kwargs``). They are checked as mappings only;
docs/nemo_rl.md says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["DEPARTURES", "SCHEMA", "Alt", "ListOf", "WHEN_ENABLED", "check_against_schema"]

WHEN_ENABLED = "__when_enabled__"


@dataclass(frozen=True)
class Alt:
    """A value matching any one of `options` (type strings, sections, or ListOf)."""

    options: tuple

    def __init__(self, *options):
        object.__setattr__(self, "options", options)


@dataclass(frozen=True)
class ListOf:
    """A list whose items each match `item` (a section)."""

    item: Any


# ---------------------------------------------------------------------------------------
# grpo: GRPOConfig and its nested pydantic models (all fields have defaults -> "?").
# ---------------------------------------------------------------------------------------

ADV_ESTIMATOR = {
    "name?": "str",  # NeMo RL: grpo | gdpo | reinforce_plus_plus | opd; ours add gdpo_no_bn
    "normalize_rewards?": "bool",
    "use_leave_one_out_baseline?": "bool",
    "reward_weights?": "list[float]|null",  # one weight per reward/<name>, sorted by name
    "minus_baseline?": "bool",
}

GRPO = {
    "num_prompts_per_step?": "int",
    "num_generations_per_prompt?": "int",
    "max_num_epochs?": "int",
    "max_num_steps?": "int",
    "max_rollout_turns?": "int",
    "normalize_rewards?": "bool",
    "advantage_clip_low?": "float|null",
    "advantage_clip_high?": "float|null",
    "use_leave_one_out_baseline?": "bool",
    "val_period?": "int",
    "val_start_at?": "int",
    "val_batch_size?": "int|null",
    "val_at_start?": "bool",
    "val_at_end?": "bool",
    "max_val_samples?": "int|null",
    "val_num_generations_per_prompt?": "int",
    "stop_at_validation_metric?": "str|null",
    "stop_at_validation_threshold?": "float|null",
    "skip_reference_policy_logprobs_calculation?": "bool",
    "seed?": "int",
    "async_grpo?": Alt(
        "null",
        {
            "enabled?": "bool",
            "max_trajectory_age_steps?": "int",
            "max_generation_failures?": "int",
            "in_flight_weight_updates?": "bool",
            "recompute_kv_cache_after_weight_updates?": "bool",
        },
    ),
    "overlong_filtering?": "bool",
    "use_dynamic_sampling?": "bool",
    "dynamic_sampling_max_gen_batches?": "int",
    "batch_multiplier?": "float",
    "reward_shaping?": {
        "enabled?": "bool",
        "overlong_buffer_length?": "int|null",
        "overlong_buffer_penalty?": "float|null",
        "max_response_length?": "int|null",
        "stop_properly_penalty_coef?": "float|null",
    },
    "reward_scaling?": {
        "enabled?": "bool",
        "source_min?": "float",
        "source_max?": "float",
        "target_min?": "float",
        "target_max?": "float",
    },
    "calculate_advantages_on_gpu?": "bool",
    "seq_logprob_error_threshold?": "float|null",
    "invalid_tool_call_advantage?": "float|null",
    "malformed_thinking_advantage?": "float|null",
    "adv_estimator?": ADV_ESTIMATOR,
    "deduplicate_multimodal_data?": "bool",
    "debug_payload_metrics?": "bool",
}

REWARD_PENALTIES = {
    "penalize_duplicated_reasoning?": "bool",
    "penalize_empty_final_answer?": "bool",
    "penalize_unwanted_tokens?": "bool",
    "penalize_malformed_think_tag?": "bool",
    "token_ids?": Alt(
        "null",
        {"unwanted?": "list[int]|null", "think_open?": "int|null", "think_close?": "int|null"},
    ),
}

# ---------------------------------------------------------------------------------------
# loss_fn: ClippedPGLossConfig (pydantic, all defaulted).
# ---------------------------------------------------------------------------------------

LOSS_FN = {
    "disable_ppo_ratio?": "bool",
    "token_level_loss?": "bool",
    "sequence_level_importance_ratios?": "bool",
    "ratio_clip_min?": "float",
    "ratio_clip_max?": "float",
    "ratio_clip_c?": "float|null",
    "reference_policy_kl_penalty?": "float",
    "reference_policy_kl_type?": "str",
    "kl_input_clamp_value?": "float|null",
    "kl_output_clamp_value?": "float|null",
    "use_kl_in_reward?": "bool",
    "use_importance_sampling_correction?": "bool",
    "truncated_importance_sampling_type?": "str|null",
    "truncated_importance_sampling_ratio?": "float|null",
    "truncated_importance_sampling_ratio_min?": "float|null",
    "use_on_policy_kl_approximation?": "bool",
    "force_on_policy_ratio?": "bool",
    "use_cispo?": "bool",
    "positive_example_nll_weight?": "float",
}

# ---------------------------------------------------------------------------------------
# policy: PolicyConfig (TypedDict: keys without NotRequired are required).
# ---------------------------------------------------------------------------------------

VLLM_CFG = {
    "tensor_parallel_size": "int",
    "pipeline_parallel_size": "int",
    "expert_parallel_size": "int",
    "gpu_memory_utilization": "float",
    "max_model_len": "int",
    "skip_tokenizer_init?": "bool",  # required by the class, but written by configure_generation_config
    "async_engine": "bool",
    "video?": "dict",
    "load_format?": "str",
    "precision?": "str",
    "logprobs_mode?": "str",
    "cap_max_tokens_to_context?": "bool",
    "is_mx?": "bool",
    "kv_cache_dtype": "str",
    "enforce_eager?": "bool",
    "enable_return_routed_experts?": "bool",
    "use_tqdm?": "bool",
    "expose_http_server?": "bool",
    "http_refit_api_key_env_var?": "str|null",
    "reset_encoder_cache_after_weight_update?": "bool",
    "http_refit_server_port?": "int|null",
    "zmq_refit_server_port?": "int|null",
    "http_server_serving_chat_kwargs?": "dict",
    "tool_parser_plugin?": "str",
    "env_vars?": "dict",
    "reasoning_parser_plugin?": "str",
    # exemplar keys, read with .get by the vLLM worker
    "use_deep_gemm?": "bool",
    "num_last_layers_in_bf16?": "int",
    "num_first_layers_in_bf16?": "int",
    "enable_vllm_metrics_logger?": "bool",
    "vllm_metrics_logger_interval?": "float",
}

GENERATION = {
    "backend": "str",
    "max_new_tokens": "int",
    "temperature": "float",
    "top_p": "float",
    "top_k": "int|null",
    "val_temperature": "float",
    "val_top_p": "float",
    "val_top_k": "int|null",
    "model_name?": "str",  # written by GRPO setup
    "stop_token_ids": "list[int]|null",
    "stop_strings": "list[str]|null",
    "bad_words?": "list[str]|null",
    "colocated?": {
        "enabled": "bool",
        "resources": {"gpus_per_node": "int|null", "num_nodes": "int|null"},
    },
    "port_range_low?": "int",
    "port_range_high?": "int",
    "use_async_rollouts?": "bool",
    # VllmConfig (backend: vllm)
    "vllm_cfg?": VLLM_CFG,
    "vllm_kwargs?": "dict",
    "refit_transport?": "str|null",
    "refit_cfg?": "dict|null",
    "quant_cfg?": "str|null",
    "real_quant?": "bool",
    "real_quant_export_cpu_offload?": "bool",
    "real_quant_ignore?": "list[str]",
    # other backends' blocks: opaque here
    "mcore_generation_config?": "dict",
    "sglang_cfg?": "dict",
    "trtllm_cfg?": "dict",
    "dynamo_cfg?": "dict",
}

DTENSOR_CFG = {
    "enabled": "bool",
    WHEN_ENABLED: (
        "tensor_parallel_size",
        "context_parallel_size",
        "sequence_parallel",
        "activation_checkpointing",
        "cpu_offload",
    ),
    "env_vars?": "dict|null",
    "_v2?": "bool",
    "tensor_parallel_size?": "int",
    "context_parallel_size?": "int",
    "expert_parallel_size?": "int",
    "dp_replicate_size?": "int",
    "sequence_parallel?": "bool",
    "activation_checkpointing?": "bool",
    "cpu_offload?": "bool",
    "custom_parallel_plan?": "str|null",
    "defer_fsdp_grad_sync?": "bool",
    "moe_parallelizer?": "dict",
    "lora_cfg?": {
        "enabled": "bool",
        WHEN_ENABLED: ("target_modules", "exclude_modules", "dim", "alpha", "dropout", "dropout_position", "lora_A_init"),
        "target_modules?": "list[str]",
        "exclude_modules?": "list[str]",
        "match_all_linear?": "bool",
        "dim?": "int",
        "alpha?": "int",
        "dropout?": "float",
        "dropout_position?": "str",
        "lora_A_init?": "str",
        "use_triton?": "bool",
    },
    "automodel_kwargs?": "dict",
    "clear_cache_every_n_steps?": "int|null",
}

MICROBATCH_TOKENS = {
    "enabled": "bool",
    "train_mb_tokens?": "int",
    "logprob_mb_tokens?": "int",
    "sequence_length_round?": "int",
}

POLICY = {
    "model_name": "str",
    "tokenizer": {
        "name": "str",
        "chat_template?": "str|null",
        "chat_template_kwargs?": "dict|null",
        "audio?": "dict",
        "video?": "dict",
        "use_processor?": "bool",
        "use_fastokens?": "bool",
    },
    "train_global_batch_size": "int",
    "train_micro_batch_size": "int",
    "logprob_batch_size?": "int",
    "logprob_chunk_size?": "int|null",
    "generation?": GENERATION,
    "generation_batch_size?": "int",
    "precision": "str",
    "reward_model_cfg?": {"enabled": "bool", "reward_model_type": "str"},
    "dtensor_cfg": DTENSOR_CFG,
    # MegatronConfig has ~80 keys; only `enabled` is checked (this project trains with DTensor).
    "megatron_cfg?": {"enabled": "bool", "*": "any"},
    "draft?": {
        "enabled": "bool",
        "model_name?": "str|null",
        "loss_weight?": "float",
        "num_layers?": "int|null",
        "aux_layer_indices?": "list[int]|null",
    },
    "pretrained_checkpoint?": "dict",
    "router_replay?": {"enabled": "bool"},
    "hf_config_overrides?": "dict",
    "dynamic_batching": dict(MICROBATCH_TOKENS, **{WHEN_ENABLED: ("train_mb_tokens", "sequence_length_round")}),
    "sequence_packing?": {
        "enabled": "bool",
        "train_mb_tokens?": "int",
        "logprob_mb_tokens?": "int",
        "algorithm?": "str",
        "microbatch_order?": "str",
        WHEN_ENABLED: ("train_mb_tokens", "algorithm"),
    },
    "make_sequence_length_divisible_by": "int",
    "max_total_sequence_length": "int",
    "max_grad_norm?": "float|null",
    "refit_buffer_size_gb?": "float",
    "optimizer?": Alt("null", {"name": "str", "kwargs": "dict"}),
    "scheduler?": "list|dict|null",
    "quant_cfg?": "str|null",
    "quant_calib_data?": "str|null",
    "quant_calib_size?": "int|null",
    "quant_batch_size?": "int|null",
    "quant_sequence_length?": "int|null",
    "disable_modelopt_layer_spec?": "bool",
    "is_vlm?": "bool",
    "offload_optimizer_for_logprob?": "bool",  # exemplar
}

# ---------------------------------------------------------------------------------------
# data: DataConfig and ResponseDatasetConfig.
# ---------------------------------------------------------------------------------------

RESPONSE_DATASET = {
    "dataset_name?": "str",
    "data_path?": "str",  # NotRequired[str]: leave it out when there is no file (source: offline)
    "input_key?": "str",
    "output_key?": "str",
    "subset?": "str|null",
    "split?": "str",
    "prompt_file?": "str|null",
    "system_prompt_file?": "str|null",
    "env_name?": "str",
    "processor?": "str",
    "download_dir?": "str",
    "split_validation_size?": "float",
    "seed?": "int",
    "num_frames?": "int",
    "video_sampling_style?": "str",
    "video_target_num_patches?": "int|null",
    "video_temporal_patch_size?": "int",
    "video_maintain_aspect_ratio?": "bool",
    "min_generation_tokens?": "int",
    # gdpo_nemo extension: constructor arguments of our dataset class
    # (gdpo_nemo.engines.nemo.datasets.TaskDataset, named by dotted path in dataset_name;
    # NeMo RL passes every key of the dataset config to the class).
    "task?": "str",
    "source?": "str",
    "limit?": "int|null",
    "task_options?": "dict|null",
}

DATA = {
    "max_input_seq_length": "int|null",
    "add_bos?": "bool",
    "add_eos?": "bool",
    "add_generation_prompt?": "bool",
    "add_system_prompt?": "bool",
    "shuffle": "bool",
    "num_workers?": "int",
    "use_multiple_dataloader?": "bool",
    "num_prompts_per_dataloader?": "int",
    "custom_dataloader?": "str",
    "train": Alt(RESPONSE_DATASET, ListOf(RESPONSE_DATASET)),
    "validation?": Alt("null", RESPONSE_DATASET, ListOf(RESPONSE_DATASET)),
    "default?": Alt("null", RESPONSE_DATASET),
}

# ---------------------------------------------------------------------------------------
# logger, checkpointing, cluster.
# ---------------------------------------------------------------------------------------

LOGGER = {
    "log_dir": "str",
    "wandb_enabled": "bool",
    "swanlab_enabled": "bool",
    "tensorboard_enabled": "bool",
    "mlflow_enabled": "bool",
    "wandb": {
        "project?": "str",
        "name?": "str",
        "entity?": "str",  # NotRequired[str]: leave it out for W&B's default entity
        # Not a WandbConfig field: NeMo RL passes the whole block to wandb.init(**cfg), so
        # `group` reaches W&B. Run ids name the group (docs/interfaces.md).
        "group?": "str|null",
        "log_nemo_gym_full_result_tables?": "bool",
    },
    "tensorboard?": {"log_dir?": "str"},
    "swanlab?": {"project?": "str", "name?": "str"},
    "mlflow?": {
        "experiment_name?": "str|null",
        "run_id?": "str|null",
        "run_name?": "str|null",
        "tracking_uri?": "str|null",
        "artifact_location?": "str|null",
    },
    "monitor_gpus": "bool",
    "gpu_monitoring": {"collection_interval": "float", "flush_interval": "float"},
    "num_val_samples_to_print": "int",  # GRPOLoggerConfig makes it required
}

CHECKPOINTING = {
    "enabled": "bool",
    "checkpoint_dir": "str",
    "metric_name": "str|null",
    "higher_is_better": "bool",
    "save_period": "int",
    # NotRequired[int] in the class, but CheckpointManager reads config["keep_top_k"]:
    # absent crashes at setup, null is refused by MasterConfig. So: required, an int.
    "keep_top_k": "int",
    "ft_keep_latest_k?": "int|null",
    "ft_save_period?": "int",
    "checkpoint_must_save_by?": "str|null",
    "pretrained_checkpoint?": "dict",
    "save_optimizer?": "bool",
    "model_save_format?": "str|null",
    "save_consolidated?": "bool",
    "model_cache_dir?": "str",
    "model_repo_id?": "str",
    "is_peft?": "bool",
    "peft_config?": "any",
    "is_async?": "bool",
}

CLUSTER = {
    "gpus_per_node": "int",
    "num_nodes": "int",
    "master_port_range_low?": "int",
    "master_port_range_high?": "int",
    "segment_size?": "int|null",
}

SCHEMA: dict = {
    "policy": POLICY,
    "loss_fn": LOSS_FN,
    "env": {"*": "dict"},  # MasterConfig.env: dict[str, Any]; each env checks its own block
    "data": DATA,
    "grpo": GRPO,
    "logger": LOGGER,
    "cluster": CLUSTER,
    "checkpointing": CHECKPOINTING,
    "reward_penalties?": REWARD_PENALTIES,
    # DataPlaneConfig and OnPolicyDistillationConfig: features this project keeps off.
    "data_plane?": "dict|null",
    "on_policy_distillation?": "dict|null",
}

# ---------------------------------------------------------------------------------------
# Where this copy deliberately differs from NeMo RL's classes at the pin: key path -> why.
# tests/nemo_tier/test_schema_parity.py translates NeMo RL's own classes (MasterConfig and
# below) into this notation in CI and requires the differences to be exactly these keys.
# Not listed because not compared: the value sets of Literal-typed keys (NeMo RL's own
# check, gdpo_nemo.engines.nemo.validation, refuses a bad value; this copy checks the type).
# ---------------------------------------------------------------------------------------

_OPAQUE = "a backend block this project never sets, checked as a mapping only (see the module docstring)"
_OUR_DATASET_KEYS = "gdpo_nemo's TaskDataset arguments; NeMo RL passes every key of the block to the class"
_EXEMPLAR = "in NeMo RL's exemplar grpo_math_1B.yaml and read with .get, but declared by no class"
DEPARTURES: dict[str, str] = {
    "checkpointing.keep_top_k": "required here: CheckpointManager reads config['keep_top_k'] (absent crashes at setup)",
    "checkpointing.pretrained_checkpoint": _OPAQUE,
    "policy.pretrained_checkpoint": _OPAQUE,
    "policy.dtensor_cfg.automodel_kwargs": _OPAQUE,
    "policy.dtensor_cfg.moe_parallelizer": _OPAQUE,
    "policy.generation.vllm_cfg.video": _OPAQUE,
    "policy.generation.refit_cfg": _OPAQUE,
    "data_plane": _OPAQUE + "; the composer refuses data_plane.enabled (our hooks wrap the legacy trainer)",
    "on_policy_distillation": _OPAQUE,
    "policy.megatron_cfg": "only `enabled` is checked: this project trains with DTensor (MegatronConfig has ~80 keys)",
    "policy.generation.vllm_cfg": "optional here (VllmConfig requires it): other backends have none; the composer"
    " requires it for backend 'vllm'",
    "policy.generation.vllm_cfg.skip_tokenizer_init": "optional here: configure_generation_config writes it",
    "policy.generation._pad_token_id": "written by configure_generation_config, never by a user",
    "policy.generation._mtp_weights_from_refit": "written by run_grpo.py, never by a user",
    "policy.generation._debug_payload_metrics": "written from grpo.debug_payload_metrics, never by a user",
    "policy.generation.dynamo_cfg": "another generation backend's block (" + _OPAQUE + ")",
    "policy.generation.mcore_generation_config": "another generation backend's block (" + _OPAQUE + ")",
    "policy.generation.sglang_cfg": "another generation backend's block (" + _OPAQUE + ")",
    "policy.generation.trtllm_cfg": "another generation backend's block (" + _OPAQUE + ")",
    "policy.offload_optimizer_for_logprob": _EXEMPLAR,
    "policy.generation.vllm_cfg.use_deep_gemm": _EXEMPLAR,
    "policy.generation.vllm_cfg.num_first_layers_in_bf16": _EXEMPLAR,
    "policy.generation.vllm_cfg.num_last_layers_in_bf16": _EXEMPLAR,
    "policy.generation.vllm_cfg.enable_vllm_metrics_logger": _EXEMPLAR,
    "policy.generation.vllm_cfg.vllm_metrics_logger_interval": _EXEMPLAR,
    "logger.wandb.group": "not a WandbConfig field, but NeMo RL passes logger.wandb to wandb.init(**cfg)",
    **{
        f"data.{block}": "NeMo RL also accepts a PreferenceDatasetConfig (DPO/reward-model data); GRPO reads"
        " response datasets only"
        for block in ("train", "validation", "default")
    },
    **{
        f"data.{block}.{key}": _OUR_DATASET_KEYS
        for block in ("train", "train[]", "validation", "validation[]", "default")
        for key in ("task", "source", "limit", "task_options")
    },
}

# ---------------------------------------------------------------------------------------
# The walker.
# ---------------------------------------------------------------------------------------

def _describe(spec) -> str:
    if isinstance(spec, str):
        return " or ".join(spec.split("|"))
    if isinstance(spec, dict):
        return "a mapping"
    if isinstance(spec, ListOf):
        return "a list of mappings"
    if isinstance(spec, Alt):
        return " or ".join(_describe(option) for option in spec.options)
    raise TypeError(f"bad schema spec {spec!r}")


def _matches_type(value, name: str) -> bool:
    if name == "any":
        return True
    if name == "null":
        return value is None
    if name == "bool":
        return isinstance(value, bool)
    if name == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if name == "str":
        return isinstance(value, str)
    if name == "dict":
        return isinstance(value, dict)
    if name == "list":
        return isinstance(value, list)
    if name.startswith("list[") and name.endswith("]"):
        inner = name[5:-1]
        return isinstance(value, list) and all(_matches_type(item, inner) for item in value)
    raise TypeError(f"bad schema type {name!r}")


def _matches_leaf(value, spec: str) -> bool:
    return any(_matches_type(value, name) for name in spec.split("|"))


def _check(value, spec, path: str, errors: list[str]) -> None:
    """Append to `errors` every problem of `value` at `path` against `spec`."""
    if isinstance(spec, str):
        if not _matches_leaf(value, spec):
            errors.append(f"{path}: {value!r} is not {_describe(spec)}")
        return
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            errors.append(f"{path}: {value!r} is not a mapping (expected keys {_listed(spec)})")
            return
        _check_section(value, spec, path, errors)
        return
    if isinstance(spec, ListOf):
        if not isinstance(value, list):
            errors.append(f"{path}: {value!r} is not a list of mappings")
            return
        for index, item in enumerate(value):
            _check(item, spec.item, f"{path}[{index}]", errors)
        return
    if isinstance(spec, Alt):
        # Report the problems of the option with the same shape as the value, if any.
        trials = []
        for option in spec.options:
            found: list[str] = []
            _check(value, option, path, found)
            if not found:
                return
            trials.append((option, found))
        shaped = [found for option, found in trials if _same_shape(value, option)]
        if shaped:
            errors.extend(min(shaped, key=len))
        else:
            errors.append(f"{path}: {value!r} is not {_describe(spec)}")
        return
    raise TypeError(f"bad schema spec at {path}: {spec!r}")


def _same_shape(value, option) -> bool:
    if isinstance(option, dict):
        return isinstance(value, dict)
    if isinstance(option, ListOf):
        return isinstance(value, list)
    return False


def _listed(section: dict) -> list[str]:
    return sorted(key.rstrip("?") for key in section if key not in ("*", WHEN_ENABLED))


def _check_section(value: dict, section: dict, path: str, errors: list[str]) -> None:
    declared = {key.rstrip("?"): (spec, not key.endswith("?")) for key, spec in section.items() if key not in ("*", WHEN_ENABLED)}
    prefix = f"{path}." if path else ""
    for key, item in value.items():
        where = f"{prefix}{key}"
        if key in declared:
            _check(item, declared[key][0], where, errors)
        elif "*" in section:
            _check(item, section["*"], where, errors)
        else:
            known = _listed(section)
            errors.append(f"{where}: unknown key; {path or 'the top level'} accepts {known}")
    required = [key for key, (_, needed) in declared.items() if needed]
    if value.get("enabled") is True:
        required += list(section.get(WHEN_ENABLED, ()))
    for key in required:
        if key not in value:
            why = " (required when enabled is true)" if key in section.get(WHEN_ENABLED, ()) else ""
            errors.append(f"{prefix}{key}: missing{why}; expected {_describe(declared[key][0])}")


def check_against_schema(config: dict, schema: dict | None = None, path: str = "") -> list[str]:
    """Every problem of `config` against `schema` (default: NeMo RL's `SCHEMA`), one line each.

    Each line starts with the dotted key path at fault, then says what was found and what is
    accepted. An empty list means the config matches. Keys of the `gdpo` block are not part
    of NeMo RL's schema: check them with `gdpo_nemo.config.validate`.
    """
    errors: list[str] = []
    if not isinstance(config, dict):
        return [f"{path or 'config'}: {type(config).__name__} is not a mapping"]
    _check_section(config, SCHEMA if schema is None else schema, path, errors)
    return errors
