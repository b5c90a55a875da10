"""The run config's key tree, written down once as data: NeMo RL's GRPO config at the pinned
commit, each key with its type and one column per engine (the key's fate on that engine and
the default it fills in), plus our ``gdpo:`` block. The one walker both engines check a
config with, and that reads the tree, is gdpo_nemo/config/key_walk.py.

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
  its column: a `Fate` per engine that walks the tree (`Engine.keys` "tree"; the nemo engine
  walks NeMo RL's schema, the types and what NeMo RL requires, and has no cells). The
  local engine's cells are written inline, as:

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

  Another engine's cells come from its own package (`Engine.column`: key path -> `Fate`),
  so a third engine adds a column without editing this tree; the gdpo block's leaves have one
  cell for every engine (``"*"``: each uses every setting).
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

The walker (`key_walk.walk(config, engine=...)`) reports every problem of a config against this
tree, one line each by key path; on an engine of the tree (``engine="local"``) it fills the
defaults of used and refused keys from that engine's column and names the ignored keys
present (gdpo_nemo/config/key_walk.py says how).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gdpo_nemo.builtin_models import BUILTIN_PREFIX, SMOLLM2
from gdpo_nemo.checks import Check, integer, is_int, mapping, number, one_of, text
from gdpo_nemo.config.settings import GdpoSettings, estimator_check, setting_table

__all__ = [
    "ABSENT",
    "DATA",
    "DEPARTURES",
    "IGNORED",
    "REFUSED",
    "RUN_CONFIG",
    "TREE",
    "USED",
    "WHEN_ENABLED",
    "IGNORE",
    "Alt",
    "Fate",
    "Leaf",
    "ListOf",
    "refused",
    "used",
]

WHEN_ENABLED = "__when_enabled__"
USED, IGNORED, REFUSED = "used", "ignored", "refused"


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()  # a refused key's neutral value that is no value: the key left out


class _Base:
    def __repr__(self) -> str:
        return "BASE"


# A used key's default is configs/base.yaml's value at its path: one default per key, written
# once there (every composed config carries it) and filled in by the local engine when a
# config leaves the key out. Resolved when this module loads (`_derive_defaults`).
BASE = _Base()


@dataclass(frozen=True)
class Fate:
    """What one engine does with a key: its cell in the key's column.

    kind: USED, IGNORED or REFUSED.
    default: USED: the value the engine fills in when the key is left out.
    local: USED: the values the engine implements (a check), where they are not just the
    type's; None: any value of the type.
    accepted: REFUSED: the neutral values the engine accepts (`ABSENT`: leaving it out).
    """

    kind: str = IGNORED
    default: Any = None
    local: Check | None = None
    accepted: tuple = ()


IGNORE = Fate()  # the cell of an engine a key names no fate for


@dataclass(frozen=True)
class Leaf:
    """One key of the tree: NeMo RL's type of the value and one column per engine.

    type: NeMo RL's type of the value (a type string, see the module docstring), or for the
    gdpo block the settings check (a callable: None for a good value, else what is accepted).
    fates: engine name -> its `Fate` of the key, as ((name, fate), ...); the name ``"*"`` is
    every engine that names none of its own; an engine in neither ignores the key. An engine
    whose keys are NeMo RL's schema (gdpo_nemo.config.engines.Engine.keys) reads the type
    and what NeMo RL requires; it has no cells here. An engine may also bring its column from
    its own package (`Engine.column`), which comes before this one.
    """

    type: Any
    fates: tuple = ()

    def fate(self, engine: str) -> Fate:
        """`engine`'s cell of this key's column."""
        every = IGNORE
        for who, fate in self.fates:
            if who == engine:
                return fate
            if who == "*":
                every = fate
        return every


def used(type_: str, default: Any, local: Check | None = None) -> Leaf:
    """A key the local engine implements: missing, it takes `default`; `local` is the range
    it implements when narrower or other than `type_`."""
    return Leaf(type_, (("local", Fate(USED, default, local)),))


def refused(type_: str, *accepted) -> Leaf:
    """A key the local engine does not implement: accepted only at `accepted` (the first fills
    a missing key unless it is `ABSENT`)."""
    return Leaf(type_, (("local", Fate(REFUSED, accepted=accepted)),))


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
    "name?": used("str", BASE, estimator_check),
    "normalize_rewards?": "bool",
    "use_leave_one_out_baseline?": "bool",
    "reward_weights?": "list[float]|null",  # one weight per reward/<name>, sorted by name
    "minus_baseline?": "bool",
}

GRPO = {
    "num_prompts_per_step?": used("int", BASE, integer(1)),
    "num_generations_per_prompt?": used("int", BASE, integer(2)),
    "max_num_epochs?": used("int", BASE, integer(1)),
    "max_num_steps?": used("int", BASE, integer(1)),
    "max_rollout_turns?": refused("int", 1),
    "normalize_rewards?": "bool",  # mirrors the gdpo block for NeMo RL
    "advantage_clip_low?": refused("float|null", None),
    "advantage_clip_high?": refused("float|null", None),
    "use_leave_one_out_baseline?": "bool",  # mirrors the gdpo block for NeMo RL
    "val_period?": used("int", BASE, integer(0)),
    "val_start_at?": used("int", BASE, integer()),
    "val_batch_size?": used("int|null", BASE, integer(1)),
    "val_at_start?": used("bool", BASE),
    "val_at_end?": used("bool", BASE),
    "max_val_samples?": used("int|null", BASE, integer(1)),
    "val_num_generations_per_prompt?": used("int", BASE, integer(1)),
    "stop_at_validation_metric?": refused("str|null", None),
    "stop_at_validation_threshold?": refused("float|null", None),
    "skip_reference_policy_logprobs_calculation?": "bool",  # throughput only
    "seed?": used("int", BASE, integer(0)),
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
    "disable_ppo_ratio?": used("bool", BASE),
    "token_level_loss?": used("bool", BASE),
    "sequence_level_importance_ratios?": refused("bool", False),
    "ratio_clip_min?": used("float", BASE, number(0.0, 1.0)),
    "ratio_clip_max?": used("float", BASE, number(0.0)),
    "ratio_clip_c?": used("float|null", BASE, number(1.0, nullable=True)),
    "reference_policy_kl_penalty?": used("float", BASE, number(0.0)),
    "reference_policy_kl_type?": used("str", BASE, one_of("k1", "k2", "k3")),
    "kl_input_clamp_value?": used("float|null", BASE, number(0.0, nullable=True)),
    "kl_output_clamp_value?": used("float|null", BASE, number(0.0, nullable=True)),
    "use_kl_in_reward?": refused("bool", False),
    "use_importance_sampling_correction?": refused("bool", False),
    "truncated_importance_sampling_type?": refused("str|null", None),
    "truncated_importance_sampling_ratio?": refused("float|null", None),
    "truncated_importance_sampling_ratio_min?": refused("float|null", None),
    "use_on_policy_kl_approximation?": used("bool", BASE),
    "force_on_policy_ratio?": used("bool", BASE),
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
    "temperature": used("float", BASE, number(0.0)),
    "top_p": refused("float", 1.0, 1),
    "top_k": refused("int|null", None),
    # null: the training value (temperature, top_p, top_k) at validation too
    "val_temperature": used("float", None, number(0.0, nullable=True)),
    "val_top_p": used("float", None, number(0.0, 1.0, nullable=True)),
    "val_top_k": used("int|null", None, integer(1, nullable=True)),
    "model_name?": "str",  # written by GRPO setup
    "stop_token_ids": used("list[int]|null", BASE, _token_ids_or_null),
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
    "model_name": used("str", BUILTIN_PREFIX + SMOLLM2, text()),
    "tokenizer": {
        "name": used("str", None, text(nullable=True)),  # null: the model's own tokenizer
        # NeMo RL: null is its passthrough template, "default" the tokenizer's; the local
        # engine applies the tokenizer's own template only.
        "chat_template?": refused("str|null", ABSENT, "default"),
        "chat_template_kwargs?": used("dict|null", BASE, _mapping_or_null),
        "audio?": "dict",
        "video?": "dict",
        "use_processor?": "bool",
        "use_fastokens?": "bool",
    },
    "train_global_batch_size": used("int", BASE, integer(1)),
    "train_micro_batch_size": used("int", BASE, integer(1)),
    "logprob_batch_size?": used("int", 4, integer(1)),
    "logprob_chunk_size?": "int|null",
    "generation?": GENERATION,
    "generation_batch_size?": used("int", BASE, integer(1)),
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
    "max_total_sequence_length": used("int", BASE, integer(2)),
    "max_grad_norm?": used("float|null", BASE, number(0.0, nullable=True)),
    "refit_buffer_size_gb?": "float",
    "optimizer?": Alt(
        "null",
        {
            "name": used("str", BASE, one_of("torch.optim.AdamW", "torch.optim.Adam")),
            "kwargs": used("dict", BASE, mapping),
        },
    ),
    "scheduler?": used("list|dict|null", BASE, _scheduler),
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
    "shuffle": used("bool", BASE),
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
    "log_dir": used("str", BASE, text()),
    "wandb_enabled": used("bool", BASE),
    "swanlab_enabled": "bool",
    "tensorboard_enabled": "bool",
    "mlflow_enabled": "bool",
    "wandb": {
        "project?": used("str", BASE, text()),
        "name?": used("str", None, text(nullable=True)),
        "entity?": used("str", None, text(nullable=True)),  # NotRequired[str]: leave it out for W&B's default entity
        # Not a WandbConfig field: NeMo RL passes the whole block to wandb.init(**cfg), so
        # `group` reaches W&B. Run ids name the group (docs/interfaces.md).
        "group?": used("str|null", BASE, text(nullable=True)),
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
    "num_val_samples_to_print": used("int", BASE, integer(0)),  # GRPOLoggerConfig makes it required
}

CHECKPOINTING = {
    "enabled": used("bool", BASE),
    "checkpoint_dir": "str",  # always <run_dir>/checkpoints on the local engine (docs/interfaces.md)
    "metric_name": "str|null",
    "higher_is_better": "bool",
    "save_period": used("int", BASE, integer(1)),
    # NotRequired[int] in the class, but CheckpointManager reads config["keep_top_k"]:
    # absent crashes at setup, null is refused by MasterConfig. So: required, an int.
    # The local engine also takes null: keep every checkpoint.
    "keep_top_k": used("int", BASE, integer(1, nullable=True)),
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


def _derive_defaults(section: dict, values, prefix: str = "") -> None:
    """Replace each `BASE` default of `section` (in place) by configs/base.yaml's value at its
    path (`values`: the matching part of base.yaml). A BASE key whose base.yaml value is
    missing, required (???) or an interpolation is an error here, at import."""
    for key, spec in list(section.items()):
        if not isinstance(key, str):
            continue
        name = key.rstrip("?")
        value = values.get(name, ABSENT) if isinstance(values, dict) else ABSENT
        if isinstance(spec, Leaf) and any(fate.default is BASE for _, fate in spec.fates):
            if value is ABSENT or (isinstance(value, str) and ("${" in value or value == "???")):
                raise RuntimeError(f"{prefix}{name}: its default is configs/base.yaml's, which has no plain value there")
            fates = tuple((who, replace(fate, default=value) if fate.default is BASE else fate) for who, fate in spec.fates)
            section[key] = replace(spec, fates=fates)
        elif isinstance(spec, dict):
            _derive_defaults(spec, value, f"{prefix}{name}.")
        elif isinstance(spec, Alt):
            for option in spec.options:
                if isinstance(option, dict):
                    _derive_defaults(option, value, f"{prefix}{name}.")


def _base_yaml() -> dict:
    import yaml

    from gdpo_nemo.config.files import config_dir

    with open(config_dir() / "base.yaml", encoding="utf-8") as handle:
        return yaml.safe_load(handle)


_derive_defaults(TREE, _base_yaml())

# The keys whose local default is not base.yaml's, on purpose (tests/test_configs_settings.py
# holds every other used key to base.yaml): key path -> why.
OWN_DEFAULTS = {
    "policy.model_name": "base.yaml requires it (???: the model group sets it); a local config without it gets"
    " the embedded SmolLM2-135M",
    "policy.tokenizer.name": "null is the model's tokenizer, what base.yaml's ${policy.model_name} says",
    "policy.logprob_batch_size": "base.yaml: ${policy.train_micro_batch_size}, 4 by its default; the local"
    " engine's is the number 4, so a local config changing the micro batch alone keeps 4 logprob rows",
    "policy.generation.max_new_tokens": "base.yaml: ${policy.max_total_sequence_length}; 512 is that key's own"
    " default, so the same number unless a config changes the sequence length only",
    "policy.generation.val_temperature": "null is the training temperature, what base.yaml's ${.temperature} says",
    "policy.generation.val_top_p": "null is the training top_p, what base.yaml's ${.top_p} says",
    "policy.generation.val_top_k": "null is the training top_k, what base.yaml's ${.top_k} says",
    "data.max_input_seq_length": "base.yaml: ${policy.max_total_sequence_length}, which drops prompts longer"
    " than the sequence budget; null keeps every prompt (the tasks' prompts are short)",
    "logger.wandb.name": "base.yaml's 'run' is replaced by the composer with the run id; null gives the local"
    " run its run id the same way",
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
            out[name if required else f"{name}?"] = Leaf(check, (("*", Fate(USED, default)),))
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
