"""`compute_advantages(..., preset=P, strict=True)`: the peers' own arithmetic, reproduced.

The default estimators (gdpo_nemo.estimators) compute in float64 and give exactly 0 where a
group (or, with leave-one-out, a sample's group-mates) is constant. The peers compute in
float32 and keep the float residue of such groups; docs/estimators.md lists each difference
and its size. Strict mode follows the peer step by step instead, for a user who wants to
reproduce a peer's run. tests/test_peer_conformance.py checks it against the peers' code.

- ``nemo_rl`` (NeMo RL @7ea279a, GRPOAdvantageEstimator / GDPOAdvantageEstimator): float32;
  per group (a loop over groups, as NeMo RL's) baseline = M r / n_valid and std = sqrt((M r^2 / n_valid - baseline^2)
  * n_valid / (n_valid - 1)) with M the all-ones or (leave-one-out) 1 - I matrix; a group of
  one gets advantage 0; centred values divided by (std + 1e-6) only where std > 0; GDPO sums
  the components in the order of their sorted names, then (A - mean) / std over the batch
  (std() Bessel; only the mean subtracted when that std is 0).
- ``trl`` (TRL 1.16 GRPOTrainer): float32; contiguous groups of equal size; GRPO
  (sum_then_normalize): r = nansum_k w_k r_k, A = (r - group mean) / (std + 1e-4) with the
  group std or the batch std (``scale_rewards``) or undivided; GDPO (normalize_then_sum):
  per component (r - nanmean) / (nanstd + 1e-4), weighted nansum, (A - mean) / (std + 1e-4)
  over the batch; samples whose rewards are all NaN get 0.
- ``verl`` (verl core_algos): float32; GRPO, per group (a loop, as verl's): (r - group mean)
  / (group std + eps) (a group of one: mean 0, std 1); GDPO: per component the same, weighted sum, then verl's masked_whiten
  over the response tokens (rsqrt(var + 1e-8), Bessel over the token count).

Shapes: `matrix` Tensor[B, K] float64 rewards (NaN allowed only for trl), `group_ids`
Tensor[B], `weights` Tensor[K]; returns Tensor[B] float32 on the rewards' device.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from gdpo_nemo.errors import UserError
from gdpo_nemo.estimators.groups import group_index
from gdpo_nemo.estimators.options import AdvantageOptions

__all__ = ["STRICT_PRESETS", "strict_advantages"]

StrictFn = Callable[[str, Tensor, Tensor, Tensor, AdvantageOptions, "Tensor | None", list], Tensor]
STRICT_PRESETS: dict[str, StrictFn] = {}
# The estimators the peers compute (NeMo RL, TRL and verl name them differently; each preset
# below says which it has). Estimators registered later have no peer to reproduce.
STRICT_ESTIMATORS = ("grpo", "grpo_no_std", "gdpo", "gdpo_no_bn")


def _register(name: str) -> Callable[[StrictFn], StrictFn]:
    def decorate(fn: StrictFn) -> StrictFn:
        STRICT_PRESETS[name] = fn
        return fn

    return decorate


def _buckets(group_ids: Tensor, batch_size: int, device, single_sample_groups: str) -> list[Tensor]:
    """The batch's groups as [num_groups_of_size_s, s] index matrices, one per group size s,
    each group's samples in batch order (the peers loop over groups; equal-size groups are
    computed together here)."""
    group_index(group_ids, batch_size, device, single_sample_groups)  # validates, as the default path
    ids = torch.as_tensor(group_ids, device=device)
    _, index, sizes = torch.unique(ids, return_inverse=True, return_counts=True)
    order = torch.argsort(index, stable=True)
    starts = torch.cumsum(sizes, 0) - sizes
    out = []
    for size in torch.unique(sizes).tolist():
        first = starts[sizes == size]
        out.append(order[first.unsqueeze(1) + torch.arange(size, device=device)])
    return out


def _finish(advantages: Tensor, estimator: str) -> Tensor:
    if not bool(torch.isfinite(advantages).all()):
        raise RuntimeError(f"strict estimator {estimator!r} produced a non-finite advantage")
    return advantages.to(torch.float32)


# ---------------------------------------------------------------------------------------
# NeMo RL: calculate_baseline_and_std_per_prompt, then the estimator classes.
# ---------------------------------------------------------------------------------------


def _nemo_rl_centred(values: Tensor, buckets: list[Tensor], options: AdvantageOptions) -> Tensor:
    """NeMo RL's per-prompt baseline and std of `values` [B] float32, and the centred (and,
    unless scale_rewards is "none", std-divided) advantage [B].

    One matrix-vector product per group, as NeMo RL does: a batched product sums in another
    order on some group sizes, and the residue this mode keeps depends on the last bit."""
    out = torch.zeros_like(values)
    loo = options.leave_one_out
    for rows in buckets:
        size = rows.shape[1]
        if size <= 1:  # NeMo RL: baseline = reward for a prompt with one valid response
            continue
        mask = torch.ones(size, size, dtype=values.dtype, device=values.device)
        if loo:
            mask = mask - torch.eye(size, dtype=values.dtype, device=values.device)
        num_valid = torch.tensor(float(size), device=values.device) - int(loo)
        for index in rows:
            group = values[index]
            baseline = torch.matmul(mask, group) / num_valid
            square = torch.matmul(mask, torch.pow(group, 2)) / num_valid
            std = ((square - baseline.square()) * (num_valid / (num_valid - 1))).sqrt().nan_to_num(0)
            centred = group - baseline
            if options.scale_rewards != "none":
                centred = torch.where(std > 0, centred / (std + 1e-6), centred)
            out[index] = centred
    return out


@_register("nemo_rl")
def _nemo_rl(estimator, matrix, group_ids, weights, options, token_mask, names):
    if bool(torch.isnan(matrix).any()):
        raise UserError("strict=True with preset 'nemo_rl': NeMo RL has no NaN handling; give finite rewards")
    if options.scale_rewards == "batch":
        raise UserError("scale_rewards='batch' is not a NeMo RL option; strict 'nemo_rl' takes 'group' or 'none'")
    values = matrix.to(torch.float32)
    buckets = _buckets(group_ids, values.shape[0], values.device, options.single_sample_groups)
    if estimator in ("grpo", "grpo_no_std"):
        if estimator == "grpo_no_std":
            options = _replace_scale(options, "none")
        # The rollout's total_reward: float32, 0 + r_1 + r_2 + ... in the environment's order.
        total = torch.zeros_like(values[:, 0])
        for k in range(values.shape[1]):
            total = total + float(weights[k]) * values[:, k]
        return _finish(_nemo_rl_centred(total, buckets, options), estimator)
    # GDPO: components in sorted-name order, summed as Python's sum() does (0 + w_1 A_1 + ...).
    advantages = 0
    for k in sorted(range(len(names)), key=lambda k: names[k]):
        advantages = advantages + float(weights[k]) * _nemo_rl_centred(values[:, k], buckets, options)
    if estimator == "gdpo":
        std = advantages.std()
        advantages = (advantages - advantages.mean()) / std if std > 0 else advantages - advantages.mean()
    return _finish(advantages, estimator)


# ---------------------------------------------------------------------------------------
# TRL 1.16: GRPOTrainer._generate_and_score_completions.
# ---------------------------------------------------------------------------------------


def _trl_nanstd(values: Tensor, dim=None) -> Tensor:
    """TRL's NaN-aware Bessel std: mean of squared deviations from the nanmean, times
    count / (count - 1); NaN where fewer than 2 values (keeps the reduced dims)."""
    mean = torch.nanmean(values, dim=dim, keepdim=True)
    variance = torch.nanmean((values - mean) ** 2, dim=dim, keepdim=True)
    count = torch.sum(~torch.isnan(values), dim=dim, keepdim=True)
    correction = torch.where(count > 1, count / (count - 1), torch.full_like(count / 1, float("nan")))
    return torch.sqrt(variance * correction)


@_register("trl")
def _trl(estimator, matrix, group_ids, weights, options, token_mask, names):
    from gdpo_nemo.estimators.dense import dense_group_size

    if estimator == "gdpo_no_bn":
        raise UserError("strict=True with preset 'trl': TRL has no GDPO without batch norm; use 'gdpo' or 'grpo'")
    if estimator == "gdpo" and options.scale_rewards != "group":
        raise UserError("strict=True with preset 'trl': TRL's normalize_then_sum always divides by the group std")
    values = matrix.to(torch.float32)
    batch_size, num_rewards = values.shape
    size = dense_group_size(group_ids, batch_size, values.device)
    if size is None:
        raise UserError(
            "strict=True with preset 'trl': group_ids must be consecutive groups of one size >= 2, as TRL lays out"
            " its batches"
        )
    weight = weights.to(torch.float32).unsqueeze(0)
    unscorable = torch.isnan(values).all(dim=1)
    if estimator in ("grpo", "grpo_no_std"):
        scale = "none" if estimator == "grpo_no_std" else options.scale_rewards
        rewards = (values * weight).nansum(dim=1)
        rewards[unscorable] = float("nan")
        mean = torch.nanmean(rewards.view(-1, size), dim=1).repeat_interleave(size)
        if scale == "batch":
            std = _trl_nanstd(rewards).squeeze().expand_as(rewards)
        else:
            std = _trl_nanstd(rewards.view(-1, size), dim=1).squeeze(1).repeat_interleave(size)
        advantages = rewards - mean
        if scale != "none":
            advantages = advantages / (std + 1e-4)
    else:
        grouped = values.view(-1, size, num_rewards)
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = _trl_nanstd(grouped, dim=1)
        per_reward = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, num_rewards)
        rewards = (per_reward * weight).nansum(dim=1)
        rewards[unscorable] = float("nan")
        std = _trl_nanstd(rewards).squeeze().expand_as(rewards)
        advantages = (rewards - torch.nanmean(rewards)) / (std + 1e-4)
    return _finish(torch.nan_to_num(advantages, nan=0.0), estimator)


# ---------------------------------------------------------------------------------------
# verl: core_algos.compute_grpo_outcome_advantage / compute_gdpo_outcome_advantage.
# ---------------------------------------------------------------------------------------


def _verl_group_normalized(scores: Tensor, buckets: list[Tensor], divide: bool) -> Tensor:
    """(score - group mean) / (group std + 1e-6), std Bessel; a group of one: mean 0, std 1.
    One reduction per group, as verl's loop: a reduction over a batch of groups rounds
    differently for groups of 8 or more, and the residue this mode keeps depends on it."""
    out = torch.empty_like(scores)
    for rows in buckets:
        for index in rows:
            group = scores[index]
            if index.shape[0] == 1:
                mean, std = torch.zeros_like(group[0]), torch.ones_like(group[0])
            else:
                mean, std = torch.mean(group), torch.std(group)
            out[index] = (group - mean) / (std + 1e-6) if divide else group - mean
    return out


@_register("verl")
def _verl(estimator, matrix, group_ids, weights, options, token_mask, names):
    if bool(torch.isnan(matrix).any()):
        raise UserError("strict=True with preset 'verl': verl has no NaN handling; give finite rewards")
    if options.scale_rewards == "batch" or options.leave_one_out:
        raise UserError("strict=True with preset 'verl': verl takes scale_rewards 'group' or 'none', no leave-one-out")
    values = matrix.to(torch.float32)
    buckets = _buckets(group_ids, values.shape[0], values.device, "zero")
    divide = estimator not in ("grpo_no_std",) and options.scale_rewards == "group"
    weight = weights.to(torch.float32)
    if estimator in ("grpo", "grpo_no_std"):
        scores = 0
        for k in range(values.shape[1]):  # the score: the components' weighted float32 sum
            scores = scores + weight[k] * values[:, k]  # weight 1: the plain sum, bit for bit
        return _finish(_verl_group_normalized(scores, buckets, divide), estimator)
    total = None
    for k in range(values.shape[1]):
        part = weight[k] * _verl_group_normalized(values[:, k], buckets, divide)
        total = part if total is None else total + part
    if estimator == "gdpo_no_bn":
        return _finish(total, estimator)
    mask = torch.ones_like(total).unsqueeze(1) if token_mask is None else token_mask.to(torch.float32)
    per_token = total.unsqueeze(1) * mask
    # verl_F.masked_whiten: masked mean, Bessel masked variance, (x - mean) * rsqrt(var + 1e-8).
    count = mask.sum()
    mean = (per_token * mask).sum() / (count + 1e-8)
    variance = ((per_token - mean) ** 2 * mask).sum() / (count + 1e-8) * (count / (count - 1))
    whitened = (per_token - mean) * torch.rsqrt(variance + 1e-8) * mask
    return _finish(whitened[:, 0], estimator)


def _replace_scale(options: AdvantageOptions, scale: str) -> AdvantageOptions:
    from dataclasses import replace

    return replace(options, scale_rewards=scale)


def strict_advantages(
    preset: str,
    estimator: str,
    matrix: Tensor,
    group_ids: Tensor,
    weights: Tensor,
    options: AdvantageOptions,
    token_mask: Tensor | None,
    names: list[str],
) -> Tensor:
    """Advantages [B] float32 as `preset`'s peer computes them (module docstring)."""
    if preset not in STRICT_PRESETS:
        raise UserError(f"strict=True: no strict reproduction of preset {preset!r}; expected one of {sorted(STRICT_PRESETS)}")
    if estimator not in STRICT_ESTIMATORS:
        # A registered estimator of our own has no peer arithmetic to reproduce.
        raise UserError(
            f"strict=True: no peer computes estimator {estimator!r}; strict reproduces {list(STRICT_ESTIMATORS)}"
        )
    return STRICT_PRESETS[preset](estimator, matrix, group_ids, weights, options, token_mask, names)
