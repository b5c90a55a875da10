"""A composed NeMo RL run config, cut down to run a few steps on a CPU.

`cpu_config` keeps everything that makes the run what it is (task, data processor,
environment and reward components, estimator and its options, loss, KL, clipping,
dynamic sampling, checkpoint ranking, the hooks) and changes only what a CPU cannot do or
what would take hours here. Every change is listed in `CpuConfig.changes` (key: old ->
new) so the smoke command can print them; the user's own overrides are applied after
them and win.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from gdpo_nemo.config import ConfigError, apply_overrides, validate
from gdpo_nemo.config.derive import get_path, our_env_blocks
from gdpo_nemo.config.files import to_plain
from gdpo_nemo.config.overrides import override_key

__all__ = ["CpuConfig", "SmokeSize", "cpu_config"]

# The CPU path's ceiling on grpo.dynamic_sampling_max_gen_batches: each extra batch is a
# whole generation round, minutes on a CPU (a math run redrew for 322 s before this).
MAX_GEN_BATCHES = 2
# Sequence budget: room for the tasks' longest prompts (tool calling with its tool schemas,
# byte tokens for builtin:tiny) and the answer.
MAX_SEQUENCE = 3072


@dataclass(frozen=True)
class SmokeSize:
    """How much to run: `steps` training steps of `prompts` x `generations` samples,
    answers of at most `max_new_tokens` tokens; validation every `val_period` steps
    (0: never) on `prompts` prompts; DAPO's grpo.dynamic_sampling_max_gen_batches capped at
    `max_gen_batches` (overrides given to the CPU path win over the cap)."""

    steps: int = 2
    prompts: int = 2
    generations: int = 2
    max_new_tokens: int = 32
    val_period: int = 1
    max_gen_batches: int = MAX_GEN_BATCHES


@dataclass
class CpuConfig:
    config: dict
    changes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _set(config: dict, path: str, value, changes: list[str]) -> None:
    parts = path.split(".")
    node = config
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    old = node.get(parts[-1], "<absent>")
    if old != value:
        changes.append(f"{path}: {old!r} -> {value!r}")
    node[parts[-1]] = value


def _data_files_present(block: Mapping | None) -> bool:
    if not isinstance(block, Mapping) or block.get("source", "file") != "file":
        return True
    path = block.get("data_path")
    return bool(path) and Path(str(path)).exists()


def cpu_config(config: Mapping, *, model_dir: str, run_dir: Path, size: SmokeSize = SmokeSize(),
               data: str = "auto", tiny_model: bool = False, overrides: Sequence[str] = (),
               keep_wandb: bool = False) -> CpuConfig:
    """The CPU version of `config` (a validated ``gdpo.engine: nemo`` run config).

    model_dir: the Hugging Face folder to train (policy, tokenizer and the environments'
    token counts all use it). run_dir: where logs and checkpoints go (never the config's
    own). data: "offline" (our seeded offline rows of the task), "config" (the config's
    data files) or "auto" (the files when they exist here, else offline). tiny_model: the
    policy is builtin:tiny, whose rewards never vary, so DAPO dynamic sampling is turned
    off (it would only redraw) unless the overrides turn it back on. keep_wandb: keep the
    config's W&B logging (its project, group and name; offline files when no server answers,
    see `gdpo_nemo.runs.tracking.settle_external_wandb`) instead of turning it off.
    Raises ConfigError naming the key at fault.
    """
    if data not in ("auto", "offline", "config"):
        raise ConfigError(f"--data {data!r}: expected auto, offline or config")
    if get_path(config, "gdpo.engine") != "nemo":
        raise ConfigError(f"gdpo.engine: {get_path(config, 'gdpo.engine')!r}; the CPU path runs gdpo.engine 'nemo' configs")
    for name in ("steps", "prompts", "generations", "max_new_tokens", "max_gen_batches"):
        if int(getattr(size, name)) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} {getattr(size, name)}: must be at least 1")
    out = CpuConfig(config=copy.deepcopy(dict(config)))
    c, changes = out.config, out.changes
    run_dir = Path(run_dir).resolve()

    _model(c, changes, out.notes, model_dir, size)
    _batch(c, changes, out.notes, size, tiny_model)
    _data(c, changes, out.notes, data)
    _places(c, changes, run_dir, keep_wandb)

    if overrides:
        c = out.config = to_plain(apply_overrides(c, overrides))
        changes.extend(f"{o} (yours)" for o in overrides)
    # Enough rows for every step and every DAPO redraw (NeMo RL ends a run quietly when its
    # data runs out mid-step), validation on `prompts` rows; after the overrides, which may
    # turn DAPO on or off, unless they set the limits themselves.
    yours = {override_key(o) for o in overrides}
    redraws = int(get_path(c, "grpo.dynamic_sampling_max_gen_batches") or 1) if get_path(c, "grpo.use_dynamic_sampling") else 0
    draws = (1 + redraws) * int(get_path(c, "grpo.batch_multiplier") or 1)
    for split, rows in (("train", size.prompts * size.steps * draws), ("validation", size.prompts)):
        if isinstance(get_path(c, f"data.{split}"), dict) and f"data.{split}.limit" not in yours:
            _set(c, f"data.{split}.limit", int(rows), changes)
    validate(c)
    return out


def _model(c: dict, changes: list, notes: list, model_dir: str, size: SmokeSize) -> None:
    """The model: a small one, in float32 (bf16 autocast is GPU-only here), on NeMo RL's v2
    worker; sequence budget and micro-batches for the CPU."""
    samples = size.prompts * size.generations
    _set(c, "policy.model_name", str(model_dir), changes)
    _set(c, "policy.tokenizer.name", str(model_dir), changes)
    for env_name in our_env_blocks(c):
        _set(c, f"env.{env_name}.tokenizer", str(model_dir), changes)
        _set(c, f"env.{env_name}.num_workers", 1, changes)
    _set(c, "policy.precision", "float32", changes)
    if get_path(c, "policy.dtensor_cfg._v2") is False:
        notes.append("policy.dtensor_cfg._v2 was false: the CPU path runs NeMo RL's v2 DTensor worker (the one our configs select)")
    for key, value in (("_v2", True), ("enabled", True), ("cpu_offload", False), ("tensor_parallel_size", 1),
                       ("context_parallel_size", 1), ("sequence_parallel", False), ("activation_checkpointing", False)):
        _set(c, f"policy.dtensor_cfg.{key}", value, changes)
    _set(c, "policy.sequence_packing.enabled", False, changes)  # flash-attn's varlen kernels: GPU only
    _set(c, "policy.megatron_cfg.enabled", False, changes)
    _set(c, "policy.generation.colocated.enabled", True, changes)  # one model generates and trains
    _set(c, "policy.generation.max_new_tokens", int(size.max_new_tokens), changes)
    longest = min(int(get_path(c, "policy.max_total_sequence_length") or MAX_SEQUENCE), MAX_SEQUENCE)
    longest = max(longest, int(size.max_new_tokens) + 64)
    _set(c, "policy.max_total_sequence_length", longest, changes)
    _set(c, "data.max_input_seq_length", longest - int(size.max_new_tokens), changes)
    for key in ("train_mb_tokens", "logprob_mb_tokens"):
        for section in ("dynamic_batching", "sequence_packing"):
            if isinstance(get_path(c, f"policy.{section}"), dict) and key in c["policy"][section]:
                _set(c, f"policy.{section}.{key}", longest * 2, changes)
    _set(c, "policy.train_global_batch_size", samples, changes)
    _set(c, "policy.train_micro_batch_size", min(2, samples), changes)
    _set(c, "policy.logprob_batch_size", min(2, samples), changes)
    _set(c, "policy.generation_batch_size", samples, changes)



def _batch(c: dict, changes: list, notes: list, size: SmokeSize, tiny_model: bool) -> None:
    """The batch and the schedule; DAPO off for builtin:tiny, its redraws capped."""
    _set(c, "grpo.num_prompts_per_step", int(size.prompts), changes)
    _set(c, "grpo.num_generations_per_prompt", int(size.generations), changes)
    _set(c, "grpo.max_num_steps", int(size.steps), changes)
    _set(c, "grpo.val_period", int(size.val_period), changes)
    _set(c, "grpo.val_at_start", False, changes)
    _set(c, "grpo.val_at_end", False, changes)
    _set(c, "grpo.max_val_samples", int(size.prompts), changes)
    _set(c, "grpo.val_batch_size", int(size.prompts), changes)
    if tiny_model:
        notes.append("builtin:tiny has random weights: its answers are noise, so each reward stays at what malformed"
                         " text earns (not always 0: toolcall's correctness is -3, math's length 1) and every advantage"
                         " is 0; the run checks the machinery (--model smollm2-135m for rewards that move on math; on"
                         " gsm8k and tool calling SmolLM2 rarely meets the format before the local engine's warm start)")
    if tiny_model and get_path(c, "grpo.use_dynamic_sampling"):
        _set(c, "grpo.use_dynamic_sampling", False, changes)
        notes.append("grpo.use_dynamic_sampling turned off: builtin:tiny's rewards do not vary, so DAPO would only"
                         " redraw until its limit (pass grpo.use_dynamic_sampling=true to keep it, or --model smollm2-135m)")
    configured = int(get_path(c, "grpo.dynamic_sampling_max_gen_batches") or 1)
    _set(c, "grpo.dynamic_sampling_max_gen_batches", min(configured, int(size.max_gen_batches)), changes)



def _data(c: dict, changes: list, notes: list, data: str) -> None:
    """The task's offline rows where the files are not here (the row counts are set last);
    batches read in the driver itself.

    `data.num_workers` 0: a loader worker is a fork of the driver, which by then runs Ray's
    and gRPC's threads; a lock one of them held at the fork stays held in the child, and
    grpo_train's first batch never came (a tier run of a clean clone, 2026-11-30, hung
    before step 1 in the loader's first `next`). The rows of a smoke run are a few dozen:
    reading them in the driver costs nothing. torchdata shuffles them in another order than
    with a worker, and the two kinds' states do not load into each other, so a run resumes
    with the workers its checkpoint had (`train.saved_loader_workers`)."""
    _set(c, "data.num_workers", 0, changes)
    for split in ("train", "validation"):
        block = get_path(c, f"data.{split}")
        if not isinstance(block, dict):
            continue
        if data == "offline" or (data == "auto" and not _data_files_present(block)):
            if data == "auto":
                notes.append(f"data.{split}: {block.get('data_path')} is not here; using the task's offline rows")
            _set(c, f"data.{split}.source", "offline", changes)
            if "data_path" in block:
                changes.append(f"data.{split}.data_path: {block.pop('data_path')!r} -> <removed>")



def _places(c: dict, changes: list, run_dir: Path, keep_wandb: bool) -> None:
    """Where it writes: the smoke run's own dir, never the config's run dir or checkpoints;
    TensorBoard on, W&B off unless kept."""
    _set(c, "logger.log_dir", str(run_dir), changes)
    _set(c, "checkpointing.checkpoint_dir", str(run_dir / "checkpoints"), changes)
    _set(c, "checkpointing.enabled", True, changes)
    _set(c, "checkpointing.save_period", 1, changes)
    _set(c, "checkpointing.checkpoint_must_save_by", None, changes)
    if not keep_wandb:
        _set(c, "logger.wandb_enabled", False, changes)  # a smoke run stays out of the W&B project; TensorBoard files instead
    _set(c, "logger.tensorboard_enabled", True, changes)
    if not isinstance(get_path(c, "logger.tensorboard"), dict):  # NeMo RL's Logger reads it when enabled
        _set(c, "logger.tensorboard", {}, changes)
    _set(c, "logger.mlflow_enabled", False, changes)
    _set(c, "logger.swanlab_enabled", False, changes)
    _set(c, "logger.monitor_gpus", False, changes)
    _set(c, "cluster.num_nodes", 1, changes)
    _set(c, "cluster.gpus_per_node", 1, changes)
