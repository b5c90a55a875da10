"""The local engine's GRPO / GDPO trainer: one process, torch + transformers.

One training step, as in the paper (and NeMo RL's `grpo_train`):

    1. sample     G completions for each of the step's prompts (KV-cached, batched)
    2. score      every reward component r_k of every completion
    3. advantages A = compute_advantages(r_1..r_K, groups, estimator)   (GRPO or GDPO)
    4. ratio      r_t = pi_theta(y_t) / pi_old(y_t) per response token
    5. clip       loss = max(-A r_t, -A clip(r_t, 1 - eps_low, 1 + eps_high)) (+ beta KL_k3)
    6. step       AdamW on each global batch (micro-batches accumulate), grad clipping

`train(config, run_dir)` runs a whole run from a checked config (`config.load_run_config`)
and writes the run dir of docs/interfaces.md (names from gdpo_nemo.runs.rundir): config.yaml,
metrics.jsonl, checkpoints/, wandb/, DONE. It reads top to bottom as:

    setup       lifecycle.start_run (runs/lifecycle.py, with RESUME_RULES), setup -> TrainState
                (what the steps carry)
    step        run_step -> train_step: sample (1), score (2), advantages_for (3),
                update_policy (4-6); step_metrics builds the record
    validate    validation_due, validate
    log         log_step: checkpoint, then metrics.jsonl / W&B

The pieces live beside it: optimizer.py (policy.optimizer / policy.scheduler), scoring.py
(steps 2-3), policy_update.py (steps 4-6), progress.py (the bar or step lines).

Device (`gdpo.local.device`, device.py): the model, the sampling generator, the rollouts,
rewards, advantages and every batch tensor of steps 1-6 live on it; the data order and the
reward functions run on the host. Forward passes run under `gdpo.local.autocast`; logprobs
and the loss are fp32.
"""

from __future__ import annotations

import contextlib
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from gdpo_nemo.errors import UserError
from gdpo_nemo.engines.local import checkpoint as ckpt
from gdpo_nemo.engines.local import device as dev
from gdpo_nemo.engines.local.generation import Rollouts, sample_completions
from gdpo_nemo.engines.local.loss import LossConfig
from gdpo_nemo.engines.local.optimizer import build_optimizer, build_scheduler
from gdpo_nemo.engines.local.policy_update import UPDATE_METRICS, reference_policy_logprobs, update_policy
from gdpo_nemo.runs import metric_names as mn
from gdpo_nemo.engines.local.progress import postfix, progress_bar
from gdpo_nemo.engines.local.prompts import DataOrder, PromptSet, left_pad, load_prompt_sets
from gdpo_nemo.engines.local.scoring import advantages_for, reward_metrics, score
from gdpo_nemo.runs import lifecycle, provenance, rundir
from gdpo_nemo.runs.run_id import RunId

# Keys that may change between a run and its resume (they do not touch the trajectory).
RESUMABLE_CHANGES = ("grpo.max_num_steps", "logger.", "gdpo.local.progress", "checkpointing.keep_top_k")


def _with_current_defaults(saved: dict) -> dict:
    """The run's saved config with keys added since it was written filled by today's
    defaults, so that a code upgrade between a run and its resume is not a "change"."""
    from gdpo_nemo.engines.local.config import resolve_and_check

    try:
        return resolve_and_check(saved)[0]
    except ValueError:
        return saved  # a key that no longer validates: compare as saved, the diff names it


# What the local engine tells the run-dir lifecycle (runs/lifecycle.py) about its resumes.
RESUME_RULES = lifecycle.ResumeRules(latest_checkpoint=ckpt.latest_checkpoint, resumable_changes=RESUMABLE_CHANGES,
                                     as_saved_today=_with_current_defaults)


# ---------------------------------------------------------------------------------------
# The run.
# ---------------------------------------------------------------------------------------


@dataclass
class RunResult:
    """What `train` returns: the run dir, its step count, the last step's metrics record,
    the call's wall seconds and the step it started from (0, or the checkpoint it resumed)."""

    run_dir: Path
    steps: int
    last_metrics: dict
    wall_time_s: float
    started_from: int = 0


def load_initial_policy(config: dict, log=print):
    """The starting policy `(model, tokenizer, start_weights)`: `policy.model_name`,
    warm-started first when `gdpo.local.warm_start.enabled` (cached; see warm_start.py);
    `start_weights` = where the weights came from and their digest (runs/provenance.py)."""
    from gdpo_nemo.engines.local.models import base_seed, load_policy, prepare_tokenizer
    from gdpo_nemo.runs.provenance import state_digest

    seed = config["grpo"]["seed"]
    policy = config["policy"]
    if config["gdpo"]["local"]["warm_start"]["enabled"]:
        from gdpo_nemo.engines.local.warm_start import load_warm_start

        model, tokenizer, start_weights = load_warm_start(config, log=log)
    else:
        model, tokenizer = load_policy(policy["model_name"], seed=seed, log=log)
        digest = state_digest(model)
        start_weights = {"source": policy["model_name"], "digest": digest, "base_digest": digest,
                         "base_seed": base_seed(policy["model_name"], seed)}
    if policy["tokenizer"]["name"] not in (None, policy["model_name"]):
        from transformers import AutoTokenizer

        tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(policy["tokenizer"]["name"]))
    return model, tokenizer, start_weights


# ---- setup ----------------------------------------------------------------------------


@dataclass
class TrainState:
    """What one run carries from step to step. Built once by `setup`; the model, optimizer,
    scheduler, sampling generator and data order change as the steps run."""

    config: dict
    run_dir: Path
    log: Callable[[str], None]
    device: torch.device
    model: torch.nn.Module
    tokenizer: object
    reference: torch.nn.Module | None  # frozen starting policy for the KL term; None when beta = 0
    loss_config: LossConfig
    train_set: PromptSet
    val_set: PromptSet | None
    reward_set: object
    optimizer: torch.optim.Optimizer
    scheduler: object
    generator: torch.Generator  # the training rollouts' sampling randomness
    order: DataOrder
    total_steps: int
    start_step: int = 0
    tracker: object = None
    pad_id: int = 0
    stop_ids: list = field(default_factory=list)

    @property
    def group_size(self) -> int:
        """G: completions sampled per prompt (`grpo.num_generations_per_prompt`)."""
        return self.config["grpo"]["num_generations_per_prompt"]

    def autocast(self):
        """The forward passes' precision context; logprob and loss math stay fp32."""
        return dev.autocast(self.device, self.config["gdpo"]["local"]["autocast"])


def _seed_and_pick_device(config: dict) -> torch.device:
    """Seed Python's and torch's global RNGs with `grpo.seed`, set the thread count, and
    return `gdpo.local.device` (made deterministic when `gdpo.local.deterministic`)."""
    local = config["gdpo"]["local"]
    random.seed(config["grpo"]["seed"])
    torch.manual_seed(config["grpo"]["seed"])
    if local["num_threads"]:
        torch.set_num_threads(local["num_threads"])
    return dev.prepare_device(local)


def stop_token_ids(config: dict, tokenizer) -> list[int]:
    """The tokens that end a completion: the tokenizer's EOS (-1, no token, with
    `gdpo.local.ignore_eos`: then only explicit stop tokens end one) and
    `policy.generation.stop_token_ids`."""
    eos = -1 if config["gdpo"]["local"]["ignore_eos"] else tokenizer.eos_token_id
    return [eos] + list(config["policy"]["generation"]["stop_token_ids"] or [])


def setup(config: dict, run_dir: Path, latest: tuple[int, Path] | None, log=print) -> TrainState:
    """Seeds, policy (and its frozen reference), prompts and rewards, optimizer, scheduler,
    sampling generator and data order; restored from checkpoint `latest` when given; then
    the metrics tracker. The order of these calls fixes the run's random streams."""
    grpo, policy, local = config["grpo"], config["policy"], config["gdpo"]["local"]
    seed = grpo["seed"]
    device = _seed_and_pick_device(config)
    model, tokenizer, start_weights = load_initial_policy(config, log=log)
    model.to(device=device, dtype=dev.weight_dtype(local["dtype"]))
    loss_config = LossConfig.from_config(config["loss_fn"])
    reference = None
    if loss_config.reference_policy_kl_penalty > 0:
        import copy

        reference = copy.deepcopy(model).eval().requires_grad_(False)
    train_set, val_set, reward_set = load_prompt_sets(config, tokenizer, log=log)
    optimizer = build_optimizer(model, policy)
    order = DataOrder(len(train_set), grpo["num_prompts_per_step"], config["data"]["shuffle"], seed)
    state = TrainState(
        config=config, run_dir=run_dir, log=log, device=device, model=model, tokenizer=tokenizer,
        reference=reference, loss_config=loss_config, train_set=train_set, val_set=val_set,
        reward_set=reward_set, optimizer=optimizer, scheduler=build_scheduler(optimizer, policy["scheduler"]),
        generator=dev.sampling_generator(device, seed), order=order,
        total_steps=min(grpo["max_num_steps"], grpo["max_num_epochs"] * order.steps_per_epoch),
        pad_id=tokenizer.pad_token_id, stop_ids=stop_token_ids(config, tokenizer),
    )
    restored_metrics = _restore(state, latest) if latest is not None else None
    lifecycle.record_start(
        run_dir, numbers=provenance.numerics(device, dtype=local["dtype"], autocast=local["autocast"],
                                             attention=dev.attention_backends(device)),
        start_weights=start_weights, resumed_from=state.start_step if latest is not None else None)
    state.tracker = _open_tracker(config, run_dir, state.start_step if latest is not None else None, log=log)
    if restored_metrics is not None and not any(r.get("step") == state.start_step
                                                for r in rundir.read_metrics(run_dir)):
        state.tracker.log(restored_metrics, step=state.start_step)  # killed after the checkpoint, before the log
    return state


def _restore(state: TrainState, latest: tuple[int, Path]) -> dict | None:
    """Load checkpoint `latest` into the state (weights, optimizer, scheduler, generator,
    data position, start step); returns the metrics record saved with it."""
    restored = ckpt.load_checkpoint(latest[1], model=state.model, optimizer=state.optimizer,
                                    scheduler=state.scheduler, generator=state.generator)
    state.start_step = restored["step"]
    state.order.position = restored["data_position"]
    state.log(f"resumed from {latest[1]} (step {state.start_step})")
    return restored["metrics"]


def _open_tracker(config: dict, run_dir: Path, resume_step: int | None, log=print):
    """The run's metrics sink (metrics.jsonl, plus W&B when `logger.wandb_enabled`), named
    by the run id unless `logger.wandb.name` / `group` say otherwise."""
    from gdpo_nemo.runs.tracking import Tracker

    logger_cfg = config["logger"]
    run_id = RunId.from_config(config)
    return Tracker(
        run_dir,
        config=config,
        name=logger_cfg["wandb"]["name"] or run_id.name,
        group=logger_cfg["wandb"]["group"] or run_id.group,
        project=logger_cfg["wandb"]["project"],
        entity=logger_cfg["wandb"]["entity"],
        wandb_enabled=logger_cfg["wandb_enabled"],
        resume_step=resume_step,
        log=log,
    )


# ---- the step: sample, score, advantages, update -------------------------------------------


def sample(state: TrainState, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, group_size: int,
           temperature: float, top_k, top_p, sampler: torch.Generator) -> Rollouts:
    """`group_size` completions of each of the [B, P] left-padded prompts with the current
    policy, drawn from `sampler`: Rollouts of B * group_size rows, prompt-major."""
    policy, generation = state.config["policy"], state.config["policy"]["generation"]
    budget = policy["max_total_sequence_length"] - prompt_ids.shape[1]
    if budget < 1:
        raise UserError(f"policy.max_total_sequence_length={policy['max_total_sequence_length']} leaves no room"
                         f" for a completion after a {prompt_ids.shape[1]}-token prompt")
    with state.autocast():
        return sample_completions(
            state.model, prompt_ids.to(state.device), prompt_mask.to(state.device), group_size=group_size,
            max_new_tokens=min(generation["max_new_tokens"], budget), temperature=temperature, top_k=top_k,
            top_p=top_p, stop_token_ids=state.stop_ids, pad_token_id=state.pad_id, generator=sampler,
            batch_size=policy["generation_batch_size"],
        )


def train_step(state: TrainState) -> dict:
    """One GRPO / GDPO step on the next `grpo.num_prompts_per_step` prompts; returns the
    step's metrics (`step_metrics`)."""
    temperature = state.config["policy"]["generation"]["temperature"]
    group_size = state.group_size
    seconds = {}
    indices = state.order.next_batch()
    examples = [state.train_set.examples[i] for i in indices]
    prompt_ids, prompt_mask = left_pad([state.train_set.ids[i] for i in indices], state.pad_id)

    # 1. sample G completions per prompt with the current policy (= pi_old)
    state.model.eval()
    with _timer(seconds, "generation", state.device):
        rollouts = sample(state, prompt_ids, prompt_mask, group_size, temperature, None, None, state.generator)
    group_ids = torch.arange(len(indices), device=state.device).repeat_interleave(group_size)

    # 2. score every reward component r_k of every completion
    with _timer(seconds, "reward_calculation"):
        group_examples = [e for e in examples for _ in range(group_size)]
        rewards, _ = score(state.reward_set, state.tokenizer, rollouts, group_examples, log=state.log)

    # 3. advantages from the registry: GRPO sums then normalizes, GDPO normalizes each r_k
    advantages = advantages_for(rewards, group_ids, state.config["gdpo"], rollouts.completion_mask)

    # 4-6. ratio, clip, step: one optimizer step per global batch, micro-batches accumulate
    reference_logprobs = reference_policy_logprobs(state.reference, rollouts, temperature,
                                                   state.config["policy"]["logprob_batch_size"], state.device,
                                                   state.autocast)
    with _timer(seconds, "policy_training", state.device):
        state.model.train()
        update = update_policy(state.model, state.optimizer, rollouts, advantages, reference_logprobs,
                               state.loss_config, state.config["policy"], temperature, state.device, state.autocast)
        if state.scheduler is not None:
            state.scheduler.step()
        state.model.eval()
    return step_metrics(state, rollouts, rewards, group_ids, advantages, update, seconds)


def step_metrics(state: TrainState, rollouts: Rollouts, rewards: dict, group_ids: torch.Tensor,
                 advantages: torch.Tensor, update: dict, seconds: dict) -> dict:
    """The step's metrics under NeMo RL's names plus ours (docs/interfaces.md): rewards,
    the update's loss / grad norm / ratios, LR, token-level advantage range, rollout lengths,
    advantage diagnostics, timings (s) and throughput (tokens/s), peak device memory."""
    from gdpo_nemo.estimators.collapse import (collapsed_group_fraction, component_advantage_gaps,
                                               distinct_advantage_groups, zero_std_fraction)
    from gdpo_nemo.config.settings import EstimatorSettings

    options = EstimatorSettings.from_gdpo(state.config["gdpo"]).options
    weights = options.reward_weights  # the sum GRPO normalizes

    completion_mask = rollouts.completion_mask
    generated_tokens = int(completion_mask.sum())
    token_advantages = advantages[:, None].expand_as(completion_mask)[completion_mask.bool()]
    has_tokens = token_advantages.numel() > 0
    return {
        **reward_metrics(rewards, mn.TRAIN),
        **{mn.train(key): update[key] for key in UPDATE_METRICS},
        mn.train(mn.LR): state.optimizer.param_groups[0]["lr"],
        mn.train("advantages/mean"): float(token_advantages.mean()) if has_tokens else 0.0,
        mn.train("advantages/max"): float(token_advantages.max()) if has_tokens else 0.0,
        mn.train("advantages/min"): float(token_advantages.min()) if has_tokens else 0.0,
        mn.train("mean_gen_tokens_per_sample"): float(rollouts.lengths.float().mean()),
        mn.train("truncation_rate"): float(rollouts.truncated.float().mean()),
        mn.train("global_valid_toks"): generated_tokens,
        mn.train(mn.DISTINCT_GROUPS): distinct_advantage_groups(advantages, group_ids),
        **{mn.train(mn.zero_std_frac(name)): value for name, value in zero_std_fraction(rewards, group_ids, options.residue_tolerance or 0.0).items()},
        mn.train(mn.COLLAPSED_FRAC): collapsed_group_fraction(rewards, group_ids, weights),
        **{mn.train(mn.gap(name)): value for name, value in component_advantage_gaps(advantages, rewards, group_ids).items()},
        **exceed_metrics(state.reward_set, rollouts, mn.TRAIN),
        **{mn.timing(mn.TRAIN, key): value for key, value in seconds.items()},
        # throughput: wall-clock dependent like every timing/* key (NeMo RL's
        # performance/generation_tokens_per_sec on one device)
        mn.timing(mn.TRAIN, "generation_tokens_per_sec"): generated_tokens / max(seconds["generation"], 1e-9),
        mn.timing(mn.TRAIN, "policy_training_tokens_per_sec"): generated_tokens / max(seconds["policy_training"], 1e-9),
        **dev.peak_memory_metrics(state.device),
    }


@contextlib.contextmanager
def _timer(seconds: dict, key: str, device: torch.device | None = None):
    """Store the wall seconds of the block in `seconds[key]`; with `device`, after waiting
    for its queued work (CUDA runs asynchronously: the clock would stop too early)."""
    start = time.perf_counter()
    yield
    if device is not None:
        dev.synchronize(device)
    seconds[key] = time.perf_counter() - start


# ---- validation ---------------------------------------------------------------------------


def validation_due(state: TrainState, step: int) -> bool:
    """Whether step `step` ends with a validation: every `grpo.val_period` steps from
    `grpo.val_start_at`, and at the last step when `grpo.val_at_end`."""
    grpo = state.config["grpo"]
    return state.val_set is not None and (
        (grpo["val_period"] > 0 and step >= grpo["val_start_at"] and step % grpo["val_period"] == 0)
        or (grpo["val_at_end"] and step == state.total_steps)
    )


def validate(state: TrainState, step: int) -> dict:
    """validation/accuracy (mean reward sum, NeMo RL's multi-reward meaning),
    validation/avg_length (tokens) and validation/reward/<name>. Sampling uses its own
    generator seeded from (seed, step), so validation never shifts training's randomness."""
    grpo, generation = state.config["grpo"], state.config["policy"]["generation"]
    state.model.eval()
    k = grpo["val_num_generations_per_prompt"]
    # A null val_* is the training value (NeMo RL's exemplar: val_temperature: ${.temperature}).
    temperature, top_k, top_p = (generation[f"val_{name}"] if generation[f"val_{name}"] is not None else generation[name]
                                 for name in ("temperature", "top_k", "top_p"))
    sampler = dev.sampling_generator(state.device, grpo["seed"] * 7919 + step + 1)
    rewards, lengths, shown = {}, [], 0
    batch = grpo["val_batch_size"]
    for start in range(0, len(state.val_set), batch):
        examples = state.val_set.examples[start:start + batch]
        ids, mask = left_pad(state.val_set.ids[start:start + batch], state.pad_id)
        rollouts = sample(state, ids, mask, k, temperature, top_k, top_p, sampler)
        repeated = [e for e in examples for _ in range(k)]
        scores, texts = score(state.reward_set, state.tokenizer, rollouts, repeated, log=state.log)
        for name, values in scores.items():
            rewards.setdefault(name, []).append(values)
        lengths.append(rollouts.lengths.float())
        while shown < state.config["logger"]["num_val_samples_to_print"] and shown < len(texts):
            state.log(f"[validation step {step}] {texts[shown]!r}")
            shown += 1
    rewards = {name: torch.cat(parts) for name, parts in rewards.items()}
    metrics = reward_metrics(rewards, mn.VALIDATION)
    metrics[mn.validation(mn.ACCURACY)] = metrics[mn.validation(mn.REWARD)]
    metrics[mn.validation(mn.AVG_LENGTH)] = float(torch.cat(lengths).mean())
    metrics.update(exceed_metrics(state.reward_set, torch.cat(lengths), mn.VALIDATION))
    return metrics


def exceed_metrics(reward_set, lengths, prefix: str) -> dict:
    """``{"<prefix>/exceed_rate": share of responses longer than the length reward's limit}``
    (the paper's Exceed column, whatever the length reward's conditioning), {} for a reward
    set without `length`. lengths: Rollouts or Tensor[N] of response tokens."""
    if "length" not in reward_set.names or not reward_set.length_limit:
        return {}
    lengths = lengths.lengths if isinstance(lengths, Rollouts) else lengths
    return {mn.key(prefix, mn.EXCEED_RATE): float((lengths.double() > reward_set.length_limit).double().mean())}


# ---- the run: setup, then step -> validate -> log ------------------------------------------


def run_step(state: TrainState, step: int) -> dict:
    """Train step `step`, validate when due; the step's whole metrics record."""
    started, cpu_started = time.perf_counter(), time.process_time()
    dev.reset_peak_memory(state.device)
    metrics = train_step(state)
    if validation_due(state, step):
        validation_started = time.perf_counter()
        metrics.update(validate(state, step))
        metrics[mn.timing(mn.VALIDATION, mn.TOTAL_VALIDATION_TIME)] = time.perf_counter() - validation_started
    metrics[mn.timing(mn.TRAIN, mn.TOTAL_STEP_TIME)] = time.perf_counter() - started
    # CPU seconds of all threads: less sensitive than wall time to other processes
    metrics[mn.timing(mn.TRAIN, mn.TOTAL_STEP_CPU_TIME)] = time.process_time() - cpu_started
    return metrics


def log_step(state: TrainState, step: int, metrics: dict) -> None:
    """Checkpoint the step when due, then append its record to metrics.jsonl (and W&B).
    Checkpoint first: a step is logged only if it can be resumed from or is re-run
    identically after a kill."""
    checkpointing = state.config["checkpointing"]
    if checkpointing["enabled"] and (step % checkpointing["save_period"] == 0 or step == state.total_steps):
        ckpt.save_checkpoint(state.run_dir, step, model=state.model, optimizer=state.optimizer,
                             scheduler=state.scheduler, generator=state.generator,
                             data_position=state.order.position, keep=checkpointing["keep_top_k"],
                             metrics=metrics)
    state.tracker.log(metrics, step=step)


def train(config: dict, run_dir, *, resume: bool = False, overwrite: bool = False, ignored_note: str | None = None,
          log=print) -> RunResult:
    """Run (or resume) one local-engine training run of a checked config.

    Args:
        config: a checked run config (`config.load_run_config` / `resolve_and_check`).
        run_dir: where config.yaml, metrics.jsonl, checkpoints/ and wandb/ go.
        resume: continue from the newest checkpoint in `run_dir` (fresh start if none).
        overwrite: move an earlier run in `run_dir` into ``replaced/<time>/`` and start again
            (without `resume` or `overwrite`, a run dir that holds files is refused).
        ignored_note: the config checker's line about ignored keys, printed once.
    """
    started = time.perf_counter()
    run_dir = Path(run_dir)
    if ignored_note:
        log(ignored_note)
    # Before the run dir is written: a model this machine cannot load leaves nothing behind.
    from gdpo_nemo.engines.local.models import check_model_available

    check_model_available(config["policy"]["model_name"])
    latest = lifecycle.start_run(run_dir, config, resume=resume, overwrite=overwrite, rules=RESUME_RULES, log=log)
    state = setup(config, run_dir, latest, log=log)
    progress = progress_bar(state.total_steps, state.start_step, enabled=config["gdpo"]["local"]["progress"],
                            log=lambda line: log(line) if log is not print else print(line, flush=True))
    metrics: dict = {}
    exit_code = 1
    try:
        if config["grpo"]["val_at_start"] and state.start_step == 0 and state.val_set is not None:
            state.tracker.log(validate(state, 0), step=0)
        for step in range(state.start_step + 1, state.total_steps + 1):
            metrics = run_step(state, step)
            log_step(state, step, metrics)
            progress.update(1)
            progress.set_postfix_str(postfix(metrics, state.reward_set.names))
        lifecycle.finish_run(run_dir, f"{state.total_steps}\n")
        exit_code = 0
    finally:
        progress.close()
        state.tracker.close(exit_code=exit_code)
        if exit_code:
            lifecycle.fail_run(run_dir, sys.exc_info()[1])
    return RunResult(run_dir, state.total_steps, metrics, time.perf_counter() - started, state.start_step)


