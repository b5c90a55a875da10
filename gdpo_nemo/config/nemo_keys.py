"""The run config's key tree, written down once as data: NeMo RL's GRPO config at the pinned
commit, each key with its type, its fate on the local engine and the default that engine
fills in, plus our ``gdpo:`` block; and the one walker both engines check a config with.

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
with ``.get`` but no class declares (marked "exemplar"). tests/nemo_tier/test_schema_parity.py
holds `TREE` to those classes in CI; the deliberate differences are `DEPARTURES`.

Why a tree of our own: NeMo RL builds ``MasterConfig(**config)`` with ``extra="allow"``,
so a misspelt key is silently kept and never read. Here an unknown, missing or mistyped key
is an error naming its key path, before anything launches, on either engine.

The data format (kept small so a reader can check it against the classes):

- a section is a ``dict``: key -> spec. A key ending in ``?`` may be absent (NotRequired, or a
  pydantic field with a default). ``"*"`` gives the spec of keys not listed (an open section);
  without it, unknown keys are errors.
- a leaf is a `Leaf`: NeMo RL's type of the value, a type string: ``int``, ``float`` (an int
  is accepted), ``bool``, ``str``, ``null``, ``dict`` (any mapping), ``list``, ``list[int]``,
  ``list[float]``, ``list[str]``, ``any``; alternatives joined by ``|`` (``"int|null"``); and
  its fate on the local engine:

  - ``used(type, default, local)``: the local engine implements the key with NeMo RL's
    meaning; a missing key takes `default`; `local` (a check of gdpo_nemo.checks) is
    the range it implements, where narrower or other than the type.
  - ``refused(type, *accepted)``: an algorithm feature the local engine does not implement;
    accepted only at its neutral values (the first fills a missing key, unless it is
    `ABSENT`: then only leaving the key out is neutral), anything else is an error naming
    the key and the accepted values, never a silent difference.
  - a bare type string: ``ignored`` there (cluster-only or throughput-only settings: vLLM,
    Megatron, DTensor, Ray, ``cluster``, ...; and the data and environment plumbing the task
    replaces). Accepted when its type is right; the local engine names it in one note.
- ``Alt(a, b, ...)`` is a choice among specs that may be sections; ``ListOf(section)`` is a
  list of sections.
- ``WHEN_ENABLED`` (a key inside a section) lists keys that are required only when the
  section's ``enabled`` is true (the TypedDict pairs ``XConfig`` / ``XConfigDisabled``).

The ``gdpo:`` block is not NeMo RL's: its keys, checks and defaults are the settings classes
of gdpo_nemo/config/settings.py, turned into leaves of the same kind (`RUN_CONFIG`), so one
walk checks the whole config.

Opaque subtrees (typed ``dict``): backend settings this project never sets and whose classes
run to hundreds of keys (``policy.megatron_cfg`` beyond ``enabled``, Megatron/SGLang/TRT-LLM
generation configs, refit transports, ``automodel_kwargs``). They are checked as mappings only;
docs/nemo_rl.md says so.

The walker, `walk(config, engine=...)`, reports every problem of the config (not the first),
one line each, starting with the key path at fault and saying what is accepted:

    grpo.num_prompt_per_step: unknown key; grpo accepts [...]
    grpo.num_prompts_per_step: 'many' is not int
    checkpointing.keep_top_k: missing; expected int                     (nemo only)
    loss_fn.use_cispo: True is not implemented by the local engine; accepted False   (local only)

``engine="nemo"`` requires what NeMo RL requires; ``engine="local"`` requires nothing, fills
the defaults of used and refused keys, holds used keys to their local range and refused keys
to their neutral values, and lists the ignored keys that are present.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Iterator

from gdpo_nemo.checks import Check, integer, is_int, mapping, number, one_of, text
from gdpo_nemo.engines.contract import ENGINES as _ENGINE_REGISTRY
from gdpo_nemo.config.settings import GdpoSettings, estimator_check, setting_table

__all__ = [
    "ABSENT",
    "DATA",
    "DEPARTURES",
    "ENGINES",
    "IGNORED",
    "REFUSED",
    "RUN_CONFIG",
    "TREE",
    "USED",
    "WHEN_ENABLED",
    "Alt",
    "Leaf",
    "ListOf",
    "Walk",
    "check_against_schema",
    "has_key",
    "leaves",
    "refused",
    "types",
    "used",
    "walk",
]

WHEN_ENABLED = "__when_enabled__"
ENGINES = tuple(_ENGINE_REGISTRY)  # gdpo_nemo.engines.contract: each engine's fate of a key is its walk
USED, IGNORED, REFUSED = "used", "ignored", "refused"


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()  # a refused key's neutral value that is no value: the key left out


@dataclass(frozen=True)
class Leaf:
    """One key of the tree.

    type: NeMo RL's type of the value (a type string, see the module docstring), or for the
    gdpo block the settings check (a callable: None for a good value, else what is accepted).
    fate: what the local engine does with the key: USED, IGNORED or REFUSED.
    default: USED: the value the local engine fills in when the key is left out.
    local: USED: the values the local engine implements (a check), where they are not just
    the type's; None: any value of the type.
    accepted: REFUSED: the neutral values the local engine accepts (`ABSENT`: leaving it out).
    """

    type: Any
    fate: str = IGNORED
    default: Any = None
    local: Check | None = None
    accepted: tuple = field(default=())


def used(type_: str, default: Any, local: Check | None = None) -> Leaf:
    """A key the local engine implements: missing, it takes `default`; `local` is the range
    it implements when narrower or other than `type_`."""
    return Leaf(type_, USED, default, local)


def refused(type_: str, *accepted) -> Leaf:
    """A key the local engine does not implement: accepted only at `accepted` (the first fills
    a missing key unless it is `ABSENT`)."""
    return Leaf(type_, REFUSED, accepted=accepted)


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


# The local engine's ranges where they are not just NeMo RL's type.
def _mapping_or_null(value) -> str | None:
    return None if value is None or isinstance(value, dict) else "a mapping or null"


def _token_ids_or_null(value) -> str | None:
    if value is None or (isinstance(value, list) and all(is_int(item) for item in value)):
        return None
    return "a list of token ids or null"


def _scheduler(value) -> str | None:
    if value is None or isinstance(value, (list, dict)):
        return None
    return "a list of {name, kwargs} (and {milestones}) or null"


# ---------------------------------------------------------------------------------------
# grpo: GRPOConfig and its nested pydantic models (all fields have defaults -> "?").
# ---------------------------------------------------------------------------------------

ADV_ESTIMATOR = {
    # NeMo RL: grpo | gdpo | reinforce_plus_plus | opd; the registry's names here. The gdpo
    # block chooses the estimator and its options; the rest mirror it for NeMo RL.
    "name?": used("str", "grpo", estimator_check),
    "normalize_rewards?": "bool",
    "use_leave_one_out_baseline?": "bool",
    "reward_weights?": "list[float]|null",  # one weight per reward/<name>, sorted by name
    "minus_baseline?": "bool",
}

GRPO = {
    "num_prompts_per_step?": used("int", 32, integer(1)),
    "num_generations_per_prompt?": used("int", 16, integer(2)),
    "max_num_epochs?": used("int", 1, integer(1)),
    "max_num_steps?": used("int", 1000000, integer(1)),
    "max_rollout_turns?": refused("int", 1),
    "normalize_rewards?": "bool",  # mirrors the gdpo block for NeMo RL
    "advantage_clip_low?": refused("float|null", None),
    "advantage_clip_high?": refused("float|null", None),
    "use_leave_one_out_baseline?": "bool",  # mirrors the gdpo block for NeMo RL
    "val_period?": used("int", 10, integer(0)),
    "val_start_at?": used("int", -1, integer()),
    "val_batch_size?": used("int|null", 256, integer(1)),
    "val_at_start?": used("bool", False),
    "val_at_end?": used("bool", False),
    "max_val_samples?": used("int|null", 256, integer(1)),
    "val_num_generations_per_prompt?": used("int", 1, integer(1)),
    "stop_at_validation_metric?": refused("str|null", None),
    "stop_at_validation_threshold?": refused("float|null", None),
    "skip_reference_policy_logprobs_calculation?": "bool",  # throughput only
    "seed?": used("int", 42, integer(0)),
    "async_grpo?": Alt(
        "null",
        {
            "enabled?": refused("bool", False),
            "max_trajectory_age_steps?": "int",
            "max_generation_failures?": "int",
            "in_flight_weight_updates?": "bool",
            "recompute_kv_cache_after_weight_updates?": "bool",
        },
    ),
    "overlong_filtering?": refused("bool", False),
    "use_dynamic_sampling?": refused("bool", False),
    "dynamic_sampling_max_gen_batches?": "int",
    "batch_multiplier?": refused("float", 1),
    "reward_shaping?": {
        "enabled?": refused("bool", False),
        "overlong_buffer_length?": "int|null",
        "overlong_buffer_penalty?": "float|null",
        "max_response_length?": "int|null",
        "stop_properly_penalty_coef?": "float|null",
    },
    "reward_scaling?": {
        "enabled?": refused("bool", False),
        "source_min?": "float",
        "source_max?": "float",
        "target_min?": "float",
        "target_max?": "float",
    },
    "calculate_advantages_on_gpu?": "bool",  # where, not what: the local engine computes on its device
    "seq_logprob_error_threshold?": refused("float|null", None),
    "invalid_tool_call_advantage?": refused("float|null", None),
    "malformed_thinking_advantage?": refused("float|null", None),
    "adv_estimator?": ADV_ESTIMATOR,
    "deduplicate_multimodal_data?": "bool",
    "debug_payload_metrics?": "bool",
}

REWARD_PENALTIES = {
    "penalize_duplicated_reasoning?": refused("bool", False),
    "penalize_empty_final_answer?": refused("bool", False),
    "penalize_unwanted_tokens?": refused("bool", False),
    "penalize_malformed_think_tag?": refused("bool", False),
    "token_ids?": Alt(
        "null",
        {"unwanted?": "list[int]|null", "think_open?": "int|null", "think_close?": "int|null"},
    ),
}

# ---------------------------------------------------------------------------------------
# loss_fn: ClippedPGLossConfig (pydantic, all defaulted). The local engine's loss is NeMo RL's
# clipped loss (gdpo_nemo/engines/local/loss.py reads the used keys).
# ---------------------------------------------------------------------------------------

LOSS_FN = {
    "disable_ppo_ratio?": used("bool", False),
    "token_level_loss?": used("bool", True),
    "sequence_level_importance_ratios?": refused("bool", False),
    "ratio_clip_min?": used("float", 0.2, number(0.0, 1.0)),
    "ratio_clip_max?": used("float", 0.2, number(0.0)),
    "ratio_clip_c?": used("float|null", None, number(1.0, nullable=True)),
    "reference_policy_kl_penalty?": used("float", 0.01, number(0.0)),
    "reference_policy_kl_type?": used("str", "k3", one_of("k1", "k2", "k3")),
    "kl_input_clamp_value?": used("float|null", 20.0, number(0.0, nullable=True)),
    "kl_output_clamp_value?": used("float|null", 10.0, number(0.0, nullable=True)),
    "use_kl_in_reward?": refused("bool", False),
    "use_importance_sampling_correction?": refused("bool", False),
    "truncated_importance_sampling_type?": refused("str|null", None),
    "truncated_importance_sampling_ratio?": refused("float|null", None),
    "truncated_importance_sampling_ratio_min?": refused("float|null", None),
    "use_on_policy_kl_approximation?": used("bool", False),
    "force_on_policy_ratio?": used("bool", False),
    "use_cispo?": refused("bool", False),
    "positive_example_nll_weight?": refused("float", 0.0, 0),
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
    "backend": "str",  # the local engine has its own KV-cached sampler
    "max_new_tokens": used("int", 512, integer(1)),
    "temperature": used("float", 1.0, number(0.0)),
    "top_p": refused("float", 1.0, 1),
    "top_k": refused("int|null", None),
    # null: the training value (temperature, top_p, top_k) at validation too
    "val_temperature": used("float", None, number(0.0, nullable=True)),
    "val_top_p": used("float", None, number(0.0, 1.0, nullable=True)),
    "val_top_k": used("int|null", None, integer(1, nullable=True)),
    "model_name?": "str",  # written by GRPO setup
    "stop_token_ids": used("list[int]|null", None, _token_ids_or_null),
    "stop_strings": refused("list[str]|null", None),
    "bad_words?": refused("list[str]|null", ABSENT, None),
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
    "model_name": used("str", "builtin:smollm2-135m", text()),
    "tokenizer": {
        "name": used("str", None, text(nullable=True)),  # null: the model's own tokenizer
        # NeMo RL: null is its passthrough template, "default" the tokenizer's; the local
        # engine applies the tokenizer's own template only.
        "chat_template?": refused("str|null", ABSENT, "default"),
        "chat_template_kwargs?": used("dict|null", None, _mapping_or_null),
        "audio?": "dict",
        "video?": "dict",
        "use_processor?": "bool",
        "use_fastokens?": "bool",
    },
    "train_global_batch_size": used("int", 512, integer(1)),
    "train_micro_batch_size": used("int", 4, integer(1)),
    "logprob_batch_size?": used("int", 4, integer(1)),
    "logprob_chunk_size?": "int|null",
    "generation?": GENERATION,
    "generation_batch_size?": used("int", 32, integer(1)),
    "precision": "str",  # the local dtype is gdpo.local.dtype
    "reward_model_cfg?": {"enabled": "bool", "reward_model_type": "str"},
    "dtensor_cfg": DTENSOR_CFG,
    # MegatronConfig has ~80 keys; only `enabled` is checked (this project trains with DTensor).
    "megatron_cfg?": {"enabled": "bool", "*": "any"},
    "draft?": {
        "enabled": refused("bool", False),
        "model_name?": "str|null",
        "loss_weight?": "float",
        "num_layers?": "int|null",
        "aux_layer_indices?": "list[int]|null",
    },
    "pretrained_checkpoint?": "dict",
    "router_replay?": {"enabled": "bool"},
    "hf_config_overrides?": refused("dict", {}, None),
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
    "max_total_sequence_length": used("int", 512, integer(2)),
    "max_grad_norm?": used("float|null", 1.0, number(0.0, nullable=True)),
    "refit_buffer_size_gb?": "float",
    "optimizer?": Alt(
        "null",
        {
            "name": used("str", "torch.optim.AdamW", one_of("torch.optim.AdamW", "torch.optim.Adam")),
            "kwargs": used("dict", {"lr": 5e-6, "weight_decay": 0.01, "betas": [0.9, 0.999], "eps": 1e-8}, mapping),
        },
    ),
    "scheduler?": used("list|dict|null", None, _scheduler),
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
# data: DataConfig and ResponseDatasetConfig. The local engine's data come from the task
# (gdpo.task): its offline set, or the files of data.<split>.data_path when
# gdpo.local.data_source is "file"; the rest of the dataset plumbing is NeMo RL's.
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
    "max_input_seq_length": used("int|null", None, integer(1, nullable=True)),
    "add_bos?": "bool",  # the task's prompt template decides these on the local engine
    "add_eos?": "bool",
    "add_generation_prompt?": "bool",
    "add_system_prompt?": "bool",
    "shuffle": used("bool", True),
    "num_workers?": "int",
    "use_multiple_dataloader?": refused("bool", False),
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
    "log_dir": used("str", "runs", text()),
    "wandb_enabled": used("bool", False),
    "swanlab_enabled": "bool",
    "tensorboard_enabled": "bool",
    "mlflow_enabled": "bool",
    "wandb": {
        "project?": used("str", "gdpo-nemo", text()),
        "name?": used("str", None, text(nullable=True)),
        "entity?": used("str", None, text(nullable=True)),  # NotRequired[str]: leave it out for W&B's default entity
        # Not a WandbConfig field: NeMo RL passes the whole block to wandb.init(**cfg), so
        # `group` reaches W&B. Run ids name the group (docs/interfaces.md).
        "group?": used("str|null", None, text(nullable=True)),
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
    "num_val_samples_to_print": used("int", 0, integer(0)),  # GRPOLoggerConfig makes it required
}

CHECKPOINTING = {
    "enabled": used("bool", True),
    "checkpoint_dir": "str",  # always <run_dir>/checkpoints on the local engine (docs/interfaces.md)
    "metric_name": "str|null",
    "higher_is_better": "bool",
    "save_period": used("int", 10, integer(1)),
    # NotRequired[int] in the class, but CheckpointManager reads config["keep_top_k"]:
    # absent crashes at setup, null is refused by MasterConfig. So: required, an int.
    # The local engine also takes null: keep every checkpoint.
    "keep_top_k": used("int", 3, integer(1, nullable=True)),
    "ft_keep_latest_k?": "int|null",
    "ft_save_period?": "int",
    "checkpoint_must_save_by?": refused("str|null", None),
    "pretrained_checkpoint?": "dict",
    "save_optimizer?": refused("bool", True),  # resume must continue the same trajectory
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

TREE: dict = {
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
    "on_policy_distillation?": refused("dict|null", None),
}


def _settings_section(table: dict, required: bool) -> dict:
    """A settings table (gdpo_nemo.config.settings.setting_table) as a section of leaves whose
    type is the setting's check; both engines use every one. Nested sections (gdpo.local)
    and their keys are optional: the local engine fills them."""
    out: dict = {}
    for name, spec in table.items():
        if isinstance(spec, dict):
            out[f"{name}?"] = _settings_section(spec, required=False)
        else:
            default, check = spec
            out[name if required else f"{name}?"] = Leaf(check, USED, default)
    return out


# The whole run config: NeMo RL's tree plus our gdpo block (gdpo_nemo/config/settings.py).
RUN_CONFIG: dict = dict(TREE, gdpo=_settings_section(setting_table(GdpoSettings), required=True))

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
# Reading the tree.
# ---------------------------------------------------------------------------------------


def _as_leaf(spec):
    """A bare type string is a leaf the local engine ignores."""
    return Leaf(spec) if isinstance(spec, str) else spec


def _children(section: dict) -> dict:
    """{key: (spec, required)} of a section's listed keys."""
    return {
        key.rstrip("?"): (spec, not key.endswith("?")) for key, spec in section.items() if key not in ("*", WHEN_ENABLED)
    }


def leaves(spec=None, prefix: str = "") -> Iterator[tuple[str, Leaf]]:
    """(key path, Leaf) of every leaf of `spec` (default: `TREE`), each path once: the
    options of an Alt and the items of a ListOf share their key's path; an open section's
    other keys are `<section>.*`."""
    seen: set[str] = set()
    for path, leaf in _leaves(TREE if spec is None else spec, prefix):
        if path not in seen:
            seen.add(path)
            yield path, leaf


def _leaves(spec, prefix: str) -> Iterator[tuple[str, Leaf]]:
    for key, child in spec.items():
        if key == WHEN_ENABLED:
            continue
        path = prefix + key.rstrip("?")
        yield from _leaves_of(child, path)


def _leaves_of(child, path: str) -> Iterator[tuple[str, Leaf]]:
    if isinstance(child, dict):
        yield from _leaves(child, path + ".")
    elif isinstance(child, ListOf):
        yield from _leaves_of(child.item, path)
    elif isinstance(child, Alt):  # its sections' keys (a bare "null" option is no key)
        for option in child.options:
            if not isinstance(option, (str, Leaf)):
                yield from _leaves_of(option, path)
    else:
        yield path, _as_leaf(child)


def has_key(path: str, spec=None) -> bool:
    """Whether dotted `path` names a key of `spec` (default: `RUN_CONFIG`), a leaf or a
    section (through the sections of Alt and ListOf; not an open section's other keys)."""
    nodes = [RUN_CONFIG if spec is None else spec]
    for part in path.split("."):
        found = []
        for node in nodes:
            for section in _sections_of(node):
                children = _children(section)
                if part in children:
                    found.append(children[part][0])
        if not found:
            return False
        nodes = found
    return True


def _sections_of(spec) -> list[dict]:
    if isinstance(spec, dict):
        return [spec]
    if isinstance(spec, ListOf):
        return _sections_of(spec.item)
    if isinstance(spec, Alt):
        return [section for option in spec.options for section in _sections_of(option)]
    return []


def types(spec=None):
    """`spec` (default: `TREE`) in the type notation alone (leaves as their type strings):
    what tests/nemo_tier/test_schema_parity.py compares with NeMo RL's classes."""
    spec = TREE if spec is None else spec
    if isinstance(spec, dict):
        return {key: child if key == WHEN_ENABLED else types(child) for key, child in spec.items()}
    if isinstance(spec, Alt):
        return Alt(*(types(option) for option in spec.options))
    if isinstance(spec, ListOf):
        return ListOf(types(spec.item))
    leaf = _as_leaf(spec)
    return leaf.type if isinstance(leaf.type, str) else "any"


def _has_fate(spec, wanted) -> bool:
    """Whether a leaf under `spec` (not under a ListOf) satisfies `wanted(leaf)`."""
    if isinstance(spec, dict):
        return any(_has_fate(child, wanted) for key, child in spec.items() if key != WHEN_ENABLED)
    if isinstance(spec, Alt):
        return any(_has_fate(option, wanted) for option in spec.options)
    if isinstance(spec, ListOf):
        return False
    return wanted(_as_leaf(spec))


def _inert(spec) -> bool:
    """Nothing under `spec` is used or refused by the local engine: it ignores the whole key."""
    return not _has_fate(spec, lambda leaf: leaf.fate != IGNORED)


def _fills(spec) -> bool:
    """The local engine fills something under `spec` when it is left out."""
    return _has_fate(spec, lambda leaf: leaf.fate == USED or (leaf.fate == REFUSED and leaf.accepted[0] is not ABSENT))


# ---------------------------------------------------------------------------------------
# The walker.
# ---------------------------------------------------------------------------------------

_PROBE = object()  # a value no check accepts: its answer is what the check accepts


def _describe(spec) -> str:
    if isinstance(spec, Leaf):
        return _describe(spec.type)
    if isinstance(spec, str):
        return " or ".join(spec.split("|"))
    if isinstance(spec, dict):
        return "a mapping"
    if isinstance(spec, ListOf):
        return "a list of mappings"
    if isinstance(spec, Alt):
        return " or ".join(_describe(option) for option in spec.options)
    if callable(spec):
        return spec(_PROBE)
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


def _type_problem(value, type_) -> str | None:
    """None when `value` has the leaf's type, else the rest of the problem's line."""
    if callable(type_):
        accepted = type_(value)
        return None if accepted is None else f"is not accepted; expected {accepted}"
    if any(_matches_type(value, name) for name in type_.split("|")):
        return None
    return f"is not {_describe(type_)}"


def _neutral(value, accepted: tuple) -> bool:
    """`value` is one of a refused key's neutral values (a bool never stands for 0 or 1)."""
    return any(
        ok is not ABSENT and value == ok and (type(value) is type(ok) or ok is None or ok == {}) for ok in accepted
    )


def _shown(accepted: tuple) -> str:
    return " or ".join("leaving it out" if ok is ABSENT else repr(ok) for ok in accepted)


def _listed(section: dict) -> list[str]:
    return sorted(key.rstrip("?") for key in section if key not in ("*", WHEN_ENABLED))


def _same_shape(value, option) -> bool:
    if isinstance(option, dict):
        return isinstance(value, dict)
    if isinstance(option, ListOf):
        return isinstance(value, list)
    return False


_NOTHING = object()


@dataclass
class Walk:
    """What `walk` found.

    problems: one line per problem, each starting with its key path (empty: the config fits).
    config: a copy of the config; on the local engine with its defaults filled in.
    ignored: local engine: the key paths present that it ignores (a section whose keys it all
    ignores is named once), in the config's order.
    """

    problems: list[str]
    config: Any
    ignored: list[str]


class _Walker:
    def __init__(self, engine: str):
        if engine not in ENGINES:
            raise ValueError(f"engine {engine!r} is not one of {list(ENGINES)}")
        self.engine = engine
        self.local = engine == "local"
        self.problems: list[str] = []
        self.ignored: list[str] = []

    def node(self, value, spec, path: str, quiet: bool):
        """The checked copy of `value` at `path` against `spec`; `quiet`: inside a key the
        local engine ignores as a whole (already named)."""
        if isinstance(spec, dict):
            return self.section(value, spec, path, quiet)
        if isinstance(spec, ListOf):
            if not isinstance(value, list):
                self.problems.append(f"{path}: {value!r} is not a list of mappings")
                return value
            return [self.node(item, spec.item, f"{path}[{index}]", quiet) for index, item in enumerate(value)]
        if isinstance(spec, Alt):
            return self.alt(value, spec, path, quiet)
        return self.leaf(value, _as_leaf(spec), path)

    def leaf(self, value, spec: Leaf, path: str):
        if self.local and spec.fate == USED and spec.local is not None and spec.local(value) is None:
            return copy.deepcopy(value)
        if self.local and spec.fate == REFUSED and _neutral(value, spec.accepted):
            return copy.deepcopy(value)
        wrong = _type_problem(value, spec.type)
        if wrong is not None:
            self.problems.append(f"{path}: {value!r} {wrong}")
        elif self.local and spec.fate == USED and spec.local is not None:
            self.problems.append(f"{path}: {value!r} is not accepted; expected {spec.local(value)}")
        elif self.local and spec.fate == REFUSED:
            self.problems.append(f"{path}: {value!r} is not implemented by the local engine; accepted {_shown(spec.accepted)}")
        return copy.deepcopy(value)

    def alt(self, value, spec: Alt, path: str, quiet: bool):
        fill = next((o for o in spec.options if isinstance(o, dict) and _fills(o)), None)
        if self.local and value is None and fill is not None:
            return self.section({}, fill, path, quiet)  # null: the local engine's defaults, as if left out
        trials = []
        for option in spec.options:
            trial = _Walker(self.engine)
            out = trial.node(value, option, path, quiet)
            if not trial.problems:
                self.ignored.extend(trial.ignored)
                return out
            trials.append((option, trial.problems))
        # Report the problems of the option with the same shape as the value, if any.
        shaped = [found for option, found in trials if _same_shape(value, option)]
        if shaped:
            self.problems.extend(min(shaped, key=len))
        else:
            self.problems.append(f"{path}: {value!r} is not {_describe(spec)}")
        return value

    def section(self, value, spec: dict, path: str, quiet: bool):
        if self.local and value is None and _fills(spec):
            value = {}  # null: the local engine's defaults, as if left out
        if not isinstance(value, dict):
            self.problems.append(f"{path}: {value!r} is not a mapping (expected keys {_listed(spec)})")
            return value
        declared = _children(spec)
        prefix = f"{path}." if path else ""
        out = {}
        for key, item in value.items():
            where = f"{prefix}{key}"
            child = declared[key][0] if key in declared else spec.get("*", _NOTHING)
            if child is _NOTHING:
                self.problems.append(f"{where}: unknown key; {path or 'the top level'} accepts {_listed(spec)}")
                continue
            if self.local and not quiet and _inert(child):
                self.ignored.append(where)
                out[key] = self.node(item, child, where, quiet=True)
            else:
                out[key] = self.node(item, child, where, quiet)
        if self.local:
            for key, (child, _) in declared.items():
                if key not in value:
                    filled = self.fill(child, f"{prefix}{key}")
                    if filled is not _NOTHING:
                        out[key] = filled
            return out
        required = [key for key, (_, needed) in declared.items() if needed]
        if value.get("enabled") is True:
            required += list(spec.get(WHEN_ENABLED, ()))
        for key in required:
            if key not in value:
                why = " (required when enabled is true)" if key in spec.get(WHEN_ENABLED, ()) else ""
                self.problems.append(f"{prefix}{key}: missing{why}; expected {_describe(declared[key][0])}")
        return out

    def fill(self, spec, path: str):
        """What the local engine puts at a missing key (`_NOTHING`: nothing)."""
        if isinstance(spec, dict):
            return self.section({}, spec, path, quiet=True) if _fills(spec) else _NOTHING
        if isinstance(spec, Alt):
            option = next((o for o in spec.options if isinstance(o, dict) and _fills(o)), None)
            return self.section({}, option, path, quiet=True) if option is not None else _NOTHING
        if isinstance(spec, ListOf):
            return _NOTHING
        leaf = _as_leaf(spec)
        if leaf.fate == USED:
            return copy.deepcopy(leaf.default)
        if leaf.fate == REFUSED and leaf.accepted[0] is not ABSENT:
            return copy.deepcopy(leaf.accepted[0])
        return _NOTHING


def walk(config, tree: dict | None = None, *, engine: str = "nemo", path: str = "") -> Walk:
    """Check `config` against `tree` (default: `RUN_CONFIG`, NeMo RL's keys and the gdpo
    block) for the engine that will run it; every problem, one line each.

    engine "nemo": unknown, missing and mistyped keys. engine "local": unknown and mistyped
    keys, used keys outside the range the local engine implements, refused keys away from
    their neutral values; nothing is missing: used and refused keys left out take their
    defaults in `Walk.config`, and `Walk.ignored` names the ignored keys present.
    """
    walker = _Walker(engine)
    if not isinstance(config, dict):
        return Walk([f"{path or 'config'}: {type(config).__name__} is not a mapping"], config, [])
    out = walker.section(config, RUN_CONFIG if tree is None else tree, path, quiet=False)
    return Walk(walker.problems, out, walker.ignored)


def check_against_schema(config: dict, schema: dict | None = None, path: str = "") -> list[str]:
    """Every problem of `config` against `schema` (default: `RUN_CONFIG`) as NeMo RL would
    run it (`walk` with engine "nemo"), one line each.

    Each line starts with the dotted key path at fault, then says what was found and what is
    accepted. An empty list means the config matches.
    """
    return walk(config, schema, path=path).problems
