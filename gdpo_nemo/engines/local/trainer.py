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

    setup       prepare_run_dir, setup -> TrainState (what the steps carry)
    step        run_step -> train_step: sample (1), score (2), advantages_for (3),
                update_policy (4-6); step_metrics builds the record
    validate    validation_due, validate
    log         log_step: checkpoint, then metrics.jsonl / W&B

Device (`gdpo.local.device`, device.py): the model, the sampling generator, the rollouts,
rewards, advantages and every batch tensor of steps 1-6 live on it; the data order and the
reward functions run on the host. Forward passes run under `gdpo.local.autocast`; logprobs
and the loss are fp32.
"""

from __future__ import annotations

import contextlib
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from gdpo_nemo.engines.local import checkpoint as ckpt
from gdpo_nemo.engines.local import device as dev
from gdpo_nemo.engines.local.generation import Rollouts, sample_completions, shared_prompt_logprobs
from gdpo_nemo.engines.local.loss import LossConfig, clipped_pg_loss
from gdpo_nemo.engines.local.prompts import DataOrder, PromptSet, left_pad, load_prompt_sets
from gdpo_nemo.runs import provenance, rundir
from gdpo_nemo.runs.run_id import RunId

# Keys that may change between a run and its resume (they do not touch the trajectory).
RESUMABLE_CHANGES = ("grpo.max_num_steps", "logger.", "gdpo.local.progress", "checkpointing.keep_top_k")


# ---------------------------------------------------------------------------------------
# Optimizer and LR schedule from policy.optimizer / policy.scheduler (NeMo RL's shapes).
# ---------------------------------------------------------------------------------------


def build_optimizer(model, policy: dict):
    """`policy.optimizer`: torch.optim.AdamW or torch.optim.Adam (the two names the config
    check accepts) over the model's parameters with `kwargs` (lr, weight_decay, betas, eps)."""
    name = policy["optimizer"]["name"]
    kwargs = dict(policy["optimizer"]["kwargs"])
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    cls = torch.optim.AdamW if name == "torch.optim.AdamW" else torch.optim.Adam
    try:
        return cls(model.parameters(), **kwargs)
    except TypeError as err:
        raise ValueError(f"policy.optimizer.kwargs={kwargs}: {err}") from None


def build_scheduler(optimizer, spec):
    """NeMo RL's `policy.scheduler`: a list of `{name, kwargs}` entries (torch.optim.lr_scheduler
    classes) plus an optional `{milestones: [...]}` entry that chains them with SequentialLR;
    a single `{name, kwargs}` mapping; or null (constant LR). Stepped once per GRPO step."""
    if spec is None:
        return None
    entries = [spec] if isinstance(spec, dict) else list(spec)
    milestones = None
    schedulers = []
    for index, entry in enumerate(entries):
        where = f"policy.scheduler[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}={entry!r}: expected {{name, kwargs}} or {{milestones}}")
        if "milestones" in entry and "name" not in entry:
            milestones = list(entry["milestones"])
            continue
        name = entry.get("name", "")
        prefix = "torch.optim.lr_scheduler."
        cls = getattr(torch.optim.lr_scheduler, name[len(prefix):], None) if name.startswith(prefix) else None
        if cls is None:
            raise ValueError(f"{where}.name={name!r}: expected a torch.optim.lr_scheduler class, e.g. "
                             "'torch.optim.lr_scheduler.LinearLR'")
        try:
            schedulers.append(cls(optimizer, **(entry.get("kwargs") or {})))
        except TypeError as err:
            raise ValueError(f"{where}.kwargs: {err}") from None
    if not schedulers:
        return None
    if len(schedulers) == 1:
        return schedulers[0]
    if milestones is None or len(milestones) != len(schedulers) - 1:
        raise ValueError(f"policy.scheduler: {len(schedulers)} schedulers need a {{milestones: [...]}} entry with "
                         f"{len(schedulers) - 1} values")
    return torch.optim.lr_scheduler.SequentialLR(optimizer, schedulers, milestones)


# ---------------------------------------------------------------------------------------
# The pieces of one step.
# ---------------------------------------------------------------------------------------


def score(reward_set, tokenizer, rollouts: Rollouts, examples: list, log=print) -> tuple[dict, list]:
    """Decode every completion and score it: ({name: Tensor[N] float32 on the rollouts'
    device}, texts). Decoding and the reward functions run on the host."""
    from gdpo_nemo.rewards.base import RewardDataError

    completion_ids, completion_mask = rollouts.completion_ids.cpu(), rollouts.completion_mask.cpu()
    texts = tokenizer.batch_decode(
        [ids[mask.bool()] for ids, mask in zip(completion_ids, completion_mask)],
        skip_special_tokens=True,
    )
    lengths = completion_mask.sum(-1).tolist()
    tests = [e.tests for e in examples] if any(e.tests is not None for e in examples) else None
    try:
        scores = reward_set.score_batch(texts, [e.ground_truth for e in examples], num_tokens=lengths, tests=tests)
    except RewardDataError as err:  # bad ground truth in our data: keep going, say so
        log(f"reward data error (rows scored lowest): {err}")
        scores = err.partial
    device = rollouts.completion_ids.device
    return {name: torch.tensor(values, dtype=torch.float32, device=device) for name, values in scores.items()}, texts


def advantages_for(rewards: dict, group_ids: torch.Tensor, gdpo: dict, completion_mask: torch.Tensor) -> torch.Tensor:
    """[N] advantages of the step from the registry (`gdpo_nemo.estimators`), with every
    estimator option of the gdpo block (`gdpo_nemo.config.settings.EstimatorSettings`)."""
    from gdpo_nemo.estimators import compute_advantages
    from gdpo_nemo.config.settings import EstimatorSettings

    settings = EstimatorSettings.from_gdpo(gdpo)
    token_mask = completion_mask if settings.batch_norm == "token" else None
    return compute_advantages(rewards, group_ids, settings.estimator, options=settings.options, token_mask=token_mask)


def reward_metrics(rewards: dict, prefix: str) -> dict:
    """`<prefix>/reward` (mean of the component sum, NeMo RL's total_reward) and
    `<prefix>/reward/<name>` (mean of each component)."""
    total = torch.stack(list(rewards.values())).sum(0)
    metrics = {f"{prefix}/reward": float(total.mean())}
    metrics.update({f"{prefix}/reward/{name}": float(values.mean()) for name, values in rewards.items()})
    return metrics


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


def _with_current_defaults(saved: dict) -> dict:
    """The run's saved config with keys added since it was written filled by today's
    defaults, so that a code upgrade between a run and its resume is not a "change"."""
    from gdpo_nemo.engines.local.config import resolve_and_check

    try:
        return resolve_and_check(saved)[0]
    except ValueError:
        return saved  # a key that no longer validates: compare as saved, the diff names it


def _config_differences(old: dict, new: dict, prefix: str = "") -> list:
    keys = sorted(set(old) | set(new))
    out = []
    for key in keys:
        where = f"{prefix}{key}"
        a, b = old.get(key, "<missing>"), new.get(key, "<missing>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += _config_differences(a, b, where + ".")
        elif a != b:
            out.append(where)
    return out


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


def prepare_run_dir(config: dict, run_dir: Path, resume: bool, log=print, overwrite: bool = False) -> tuple[int, Path] | None:
    """Create the run dir, write its config.yaml and clear a stale DONE. With `resume`,
    returns the newest checkpoint `(step, path)` (None: start from step 0) after refusing a
    config that differs from the saved one in keys that change the trajectory, or a
    metrics.jsonl that does not belong with the checkpoint.

    A run dir that already holds files is refused unless `resume` (continue it) or
    `overwrite` (move the earlier run into ``replaced/<time>/`` and start again): nothing in
    a run dir is ever truncated or deleted."""
    if resume and overwrite:
        raise ValueError("--resume and --overwrite contradict each other: --resume continues the run in the run dir, "
                         "--overwrite moves it aside and starts again; pass one")
    if rundir.holds_run_data(run_dir) and not resume:
        if not overwrite:
            raise ValueError(f"run dir {run_dir} already holds a run ({rundir.describe_run_dir(run_dir)}): pass --resume "
                             "to continue it, or --overwrite to move it into "
                             f"{run_dir / rundir.REPLACED_DIR}/<time>/ and start again (nothing is deleted)")
        moved = rundir.move_aside(run_dir)
        log(f"--overwrite: the earlier run in {run_dir} is now in {moved}")
    run_dir.mkdir(parents=True, exist_ok=True)
    latest = ckpt.latest_checkpoint(run_dir) if resume else None
    config_path = rundir.config_path(run_dir)
    if latest is not None and config_path.exists():
        saved = rundir.read_config_file(config_path)
        changed = [k for k in _config_differences(_with_current_defaults(saved), config)
                   if not k.startswith(RESUMABLE_CHANGES)]
        if changed:
            raise ValueError(f"--resume: the config differs from the run's {config_path} at {changed[:5]}:"
                             " a resumed run must keep its settings (only grpo.max_num_steps and logger.* may change)")
    if latest is not None:
        _check_metrics_match(run_dir, latest[0])
    if resume and latest is None:
        log(f"--resume: no checkpoint in {rundir.checkpoints_dir(run_dir)}; starting from step 0")
    if latest is None:
        rundir.set_aside_unlogged_provenance(run_dir)
    rundir.write_config(run_dir, config)
    rundir.clear_done(run_dir)
    return latest


def _check_metrics_match(run_dir: Path, step: int) -> None:
    """Refuse to resume from checkpoint `step` when metrics.jsonl cannot be that run's: it
    must hold every step before the checkpoint (the checkpoint's own record may be missing,
    when the run was killed between saving and logging). Records after it are set aside by
    the tracker and logged again."""
    logged = {int(record["step"]) for record in rundir.read_metrics(run_dir)}
    missing = sorted(set(range(1, step)) - logged)
    if missing:
        raise ValueError(
            f"--resume: {rundir.metrics_path(run_dir)} lacks step(s) {missing[:5]}{' ...' if len(missing) > 5 else ''} "
            f"before the newest checkpoint step_{step}: the metrics and the checkpoint are not one run's. Keep this run "
            f"dir as it is and start a new one (--run-dir), or --overwrite to move it aside"
        )


def _seed_and_pick_device(config: dict) -> torch.device:
    """Seed Python's and torch's global RNGs with `grpo.seed`, set the thread count, and
    return `gdpo.local.device` (made deterministic when `gdpo.local.deterministic`)."""
    local = config["gdpo"]["local"]
    random.seed(config["grpo"]["seed"])
    torch.manual_seed(config["grpo"]["seed"])
    if local["num_threads"]:
        torch.set_num_threads(local["num_threads"])
    return dev.prepare_device(local)


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
        pad_id=tokenizer.pad_token_id,
        # -1 is no token: with ignore_eos only explicit stop_token_ids end a completion.
        stop_ids=[-1 if local["ignore_eos"] else tokenizer.eos_token_id]
        + list(policy["generation"]["stop_token_ids"] or []),
    )
    restored_metrics = _restore(state, latest) if latest is not None else None
    provenance.append(run_dir, provenance.invocation_record(
        numbers=provenance.numerics(device, dtype=local["dtype"], autocast=local["autocast"],
                                    attention=dev.attention_backends(device)),
        start_weights=start_weights, resumed_from=state.start_step if latest is not None else None))
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
        raise ValueError(f"policy.max_total_sequence_length={policy['max_total_sequence_length']} leaves no room"
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
    reference_logprobs = _reference_logprobs(state, rollouts)
    with _timer(seconds, "policy_training", state.device):
        state.model.train()
        update = update_policy(state.model, state.optimizer, rollouts, advantages, reference_logprobs,
                               state.loss_config, state.config["policy"], temperature, state.device, state.autocast)
        if state.scheduler is not None:
            state.scheduler.step()
        state.model.eval()
    return step_metrics(state, rollouts, rewards, group_ids, advantages, update, seconds)


def _reference_logprobs(state: TrainState, rollouts: Rollouts) -> torch.Tensor | None:
    """[N, C] logprobs of the completions under the frozen reference policy, for the KL
    term; None when `loss_fn.reference_policy_kl_penalty` is 0."""
    if state.reference is None:
        return None
    temperature = state.config["policy"]["generation"]["temperature"]
    rows = range(rollouts.completion_ids.shape[0])
    with torch.no_grad(), state.autocast():
        return torch.cat([_logprobs_of_rows(state.reference, rollouts, chunk, temperature, state.device)
                          for chunk in _chunks(rows, state.config["policy"]["logprob_batch_size"])])


def step_metrics(state: TrainState, rollouts: Rollouts, rewards: dict, group_ids: torch.Tensor,
                 advantages: torch.Tensor, update: dict, seconds: dict) -> dict:
    """The step's metrics under NeMo RL's names plus ours (docs/interfaces.md): rewards,
    the update's loss / grad norm / ratios, LR, token-level advantage range, rollout lengths,
    advantage diagnostics, timings (s) and throughput (tokens/s), peak device memory."""
    from gdpo_nemo.estimators.collapse import distinct_advantage_groups, zero_std_fraction

    completion_mask = rollouts.completion_mask
    generated_tokens = int(completion_mask.sum())
    token_advantages = advantages[:, None].expand_as(completion_mask)[completion_mask.bool()]
    has_tokens = token_advantages.numel() > 0
    return {
        **reward_metrics(rewards, "train"),
        **{f"train/{key}": update[key] for key in UPDATE_METRICS},
        "train/lr": state.optimizer.param_groups[0]["lr"],
        "train/advantages/mean": float(token_advantages.mean()) if has_tokens else 0.0,
        "train/advantages/max": float(token_advantages.max()) if has_tokens else 0.0,
        "train/advantages/min": float(token_advantages.min()) if has_tokens else 0.0,
        "train/mean_gen_tokens_per_sample": float(rollouts.lengths.float().mean()),
        "train/truncation_rate": float(rollouts.truncated.float().mean()),
        "train/global_valid_toks": generated_tokens,
        "train/adv/distinct_groups": distinct_advantage_groups(advantages, group_ids),
        **{f"train/adv/zero_std_frac/{name}": value for name, value in zero_std_fraction(rewards, group_ids).items()},
        **{f"timing/train/{key}": value for key, value in seconds.items()},
        # throughput: wall-clock dependent like every timing/* key (NeMo RL's
        # performance/generation_tokens_per_sec on one device)
        "timing/train/generation_tokens_per_sec": generated_tokens / max(seconds["generation"], 1e-9),
        "timing/train/policy_training_tokens_per_sec": generated_tokens / max(seconds["policy_training"], 1e-9),
        **dev.peak_memory_metrics(state.device),
    }


# The keys of `update_policy`'s result, logged as train/<key> in this order.
UPDATE_METRICS = ("loss", "grad_norm", "kl_penalty", "probs_ratio", "probs_ratio_clamped", "clip_fraction",
                  "skipped_updates")


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
    temperature = generation["val_temperature"] if generation["val_temperature"] is not None else generation["temperature"]
    sampler = dev.sampling_generator(state.device, grpo["seed"] * 7919 + step + 1)
    rewards, lengths, shown = {}, [], 0
    batch = grpo["val_batch_size"]
    for start in range(0, len(state.val_set), batch):
        examples = state.val_set.examples[start:start + batch]
        ids, mask = left_pad(state.val_set.ids[start:start + batch], state.pad_id)
        rollouts = sample(state, ids, mask, k, temperature, generation["val_top_k"], generation["val_top_p"], sampler)
        repeated = [e for e in examples for _ in range(k)]
        scores, texts = score(state.reward_set, state.tokenizer, rollouts, repeated, log=state.log)
        for name, values in scores.items():
            rewards.setdefault(name, []).append(values)
        lengths.append(rollouts.lengths.float())
        while shown < state.config["logger"]["num_val_samples_to_print"] and shown < len(texts):
            state.log(f"[validation step {step}] {texts[shown]!r}")
            shown += 1
    rewards = {name: torch.cat(parts) for name, parts in rewards.items()}
    metrics = reward_metrics(rewards, "validation")
    metrics["validation/accuracy"] = metrics["validation/reward"]
    metrics["validation/avg_length"] = float(torch.cat(lengths).mean())
    return metrics


# ---- the run: setup, then step -> validate -> log ------------------------------------------


def run_step(state: TrainState, step: int) -> dict:
    """Train step `step`, validate when due; the step's whole metrics record."""
    started, cpu_started = time.perf_counter(), time.process_time()
    dev.reset_peak_memory(state.device)
    metrics = train_step(state)
    if validation_due(state, step):
        validation_started = time.perf_counter()
        metrics.update(validate(state, step))
        metrics["timing/validation/total_validation_time"] = time.perf_counter() - validation_started
    metrics["timing/train/total_step_time"] = time.perf_counter() - started
    # CPU seconds of all threads: less sensitive than wall time to other processes
    metrics["timing/train/total_step_cpu_time"] = time.process_time() - cpu_started
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
    latest = prepare_run_dir(config, run_dir, resume, log=log, overwrite=overwrite)
    state = setup(config, run_dir, latest, log=log)
    progress = _progress_bar(state.total_steps, state.start_step, enabled=config["gdpo"]["local"]["progress"],
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
            progress.set_postfix_str(_postfix(metrics, state.reward_set.names))
        rundir.mark_done(run_dir, f"{state.total_steps}\n")
        exit_code = 0
    finally:
        progress.close()
        state.tracker.close(exit_code=exit_code)
    return RunResult(run_dir, state.total_steps, metrics, time.perf_counter() - started, state.start_step)


# ---- steps 4-6: ratio, clip, step -----------------------------------------------------------


def _chunks(rows, size: int):
    rows = list(rows)
    for start in range(0, len(rows), size):
        yield rows[start:start + size]


def _logprobs_of_rows(model, rollouts: Rollouts, rows, temperature: float, device) -> torch.Tensor:
    """[len(rows), C] logprobs of the completions of `rows` (consecutive rows of one prompt
    share its forward pass: `shared_prompt_logprobs`)."""
    index = torch.as_tensor(rows, dtype=torch.long, device=rollouts.prompt_index.device)
    _, counts = torch.unique_consecutive(rollouts.prompt_index[index], return_counts=True)
    firsts = index[torch.cumsum(counts, 0) - counts]
    return shared_prompt_logprobs(model, rollouts.prompt_ids[firsts].to(device), rollouts.prompt_mask[firsts].to(device),
                                  counts, rollouts.completion_ids[index].to(device),
                                  rollouts.completion_mask[index].to(device), temperature)


def update_policy(model, optimizer, rollouts: Rollouts, advantages, reference_logprobs, loss_config: LossConfig,
                  policy: dict, temperature: float, device, autocast=contextlib.nullcontext) -> dict:
    """Steps 4-6 over the whole rollout batch: for each global batch of
    `train_global_batch_size` rows, accumulate micro-batch gradients of the clipped loss
    (normalized by the global batch's token / sample count), clip, step. `autocast()` is the
    forward passes' precision context; the loss is computed in fp32 outside it.

    An update whose clipped gradient norm is not finite is skipped (the weights stay as they
    were; `skipped_updates` counts them, and `grad_norm` shows the NaN or inf).

    Returns the means over global batches of `loss`, `kl_penalty` and `grad_norm`, the number
    of skipped updates, and the token means of `probs_ratio`, `probs_ratio_clamped` and
    `clip_fraction` (UPDATE_METRICS)."""
    rows_total = rollouts.completion_ids.shape[0]
    global_batch = policy["train_global_batch_size"]
    parameters = [p for p in model.parameters() if p.requires_grad]
    totals = {"loss": 0.0, "kl_penalty": 0.0, "probs_ratio_sum": 0.0, "probs_ratio_clamped_sum": 0.0,
              "clipped_tokens": 0.0}
    grad_norms, tokens_seen, num_global, skipped = [], 0.0, rows_total // global_batch, 0
    for start in range(0, rows_total, global_batch):
        batch_rows = list(range(start, start + global_batch))
        valid_tokens = float(rollouts.completion_mask[batch_rows].sum())
        optimizer.zero_grad(set_to_none=True)
        for rows in _chunks(batch_rows, policy["train_micro_batch_size"]):
            _, parts = _micro_batch_backward(model, rollouts, rows, advantages, reference_logprobs, loss_config,
                                             temperature, device, autocast, valid_tokens, len(batch_rows))
            for key in totals:
                totals[key] += parts[key]
        # 6. step: clip the global gradient norm, AdamW
        max_norm = policy["max_grad_norm"]
        norm = float(torch.nn.utils.clip_grad_norm_(parameters, max_norm if max_norm is not None else math.inf))
        grad_norms.append(norm)
        if math.isfinite(norm):
            optimizer.step()
        else:  # a NaN or inf gradient would make every weight NaN: leave them as they are
            skipped += 1
            print(f"warning: the gradient's norm is {norm} (not finite): this update is skipped, the weights are "
                  "unchanged (train/skipped_updates counts them)", file=sys.stderr, flush=True)
        tokens_seen += valid_tokens
    optimizer.zero_grad(set_to_none=True)
    return {
        "loss": totals["loss"] / num_global,
        "kl_penalty": totals["kl_penalty"] / num_global,
        "grad_norm": sum(grad_norms) / len(grad_norms),
        "skipped_updates": skipped,
        "probs_ratio": totals["probs_ratio_sum"] / max(tokens_seen, 1.0),
        "probs_ratio_clamped": totals["probs_ratio_clamped_sum"] / max(tokens_seen, 1.0),
        "clip_fraction": totals["clipped_tokens"] / max(tokens_seen, 1.0),
    }


def _micro_batch_backward(model, rollouts: Rollouts, rows: list, advantages, reference_logprobs,
                          loss_config: LossConfig, temperature: float, device, autocast,
                          global_valid_tokens: float, global_valid_samples: int) -> tuple[torch.Tensor, dict]:
    """Steps 4-5 on micro-batch `rows`: the ratio's logprobs under the current weights, the
    clipped loss (normalized by the global batch), backward. Returns `clipped_pg_loss`'s
    (loss, metrics)."""
    index = torch.as_tensor(rows, dtype=torch.long, device=device)
    completion_mask = rollouts.completion_mask[index].to(device)
    # 4. ratio: logprobs of the sampled tokens under the current weights
    with autocast():
        logprobs = _logprobs_of_rows(model, rollouts, rows, temperature, device)
    width = logprobs.shape[1]
    old_logprobs = rollouts.logprobs[index, :width].to(device)
    # 5. clip: NeMo RL's ClippedPGLossFn
    loss, parts = clipped_pg_loss(
        logprobs,
        old_logprobs,
        advantages[index].to(device=device, dtype=logprobs.dtype),
        completion_mask[:, :width],
        loss_config,
        global_valid_tokens=global_valid_tokens,
        global_valid_samples=float(global_valid_samples),
        reference_logprobs=None if reference_logprobs is None else reference_logprobs[index, :width].to(device),
        generation_logprobs=old_logprobs,
    )
    loss.backward()
    return loss, parts


class _StepLines:
    """Progress without a bar (`gdpo.local.progress: false`, as sweep jobs run): one line
    per step, flushed, so that `tail -f` of a Slurm log shows the run's life as NeMo RL's
    and TRL's logs do."""

    def __init__(self, total: int, done: int, log):
        self.total, self.step, self.log = total, done, log

    def update(self, n=1):
        self.step += n

    def set_postfix_str(self, text):
        self.log(f"step {self.step}/{self.total}: {text}")

    def close(self):
        pass


def _progress_bar(total: int, done: int, enabled: bool, log=print):
    if not enabled:
        return _StepLines(total, done, log)
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=done, desc="train", unit="step", dynamic_ncols=True)


def _postfix(metrics: dict, names) -> str:
    parts = [f"{name}={metrics.get(f'train/reward/{name}', float('nan')):.2f}" for name in names]
    parts.append(f"{metrics.get('timing/train/total_step_time', 0.0):.1f}s/step")
    return " ".join(parts)

