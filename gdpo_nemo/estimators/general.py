"""The built-in estimators (paper Eqs. 1-6) on the general path: any group sizes and order,
NaN components, leave-one-out, batch scaling, a token mask. Each is a small pure function
over [B, K] float64 rewards; gdpo_nemo.estimators.builtin registers them with their metadata
(torch-free: a config names an estimator without importing torch), and the registry's entry
imports this module on its first call.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from gdpo_nemo.errors import UserError
from gdpo_nemo.estimators.groups import Groups, constant_within, relative_sums, sum_terms, tolerance_of
from gdpo_nemo.estimators.options import AdvantageOptions

__all__ = ["RewardOverflow", "gdpo", "gdpo_no_bn", "grpo", "grpo_no_std"]


# ---------------------------------------------------------------------------------------
# Group statistics, vectorized with index_add / scatter_reduce over the group index.
# ---------------------------------------------------------------------------------------


def _others_extreme(values: Tensor, valid: Tensor, groups: Groups, reduce: str) -> Tensor:
    """[B, K]: the max ("amax") or min ("amin") of each sample's valid group-mates, itself
    excluded (-inf / +inf where it has none), from the group's extreme, the next distinct
    value, and how many samples hold the extreme."""
    index = groups.index
    top = groups.extreme(values, valid, reduce)  # [N, K]
    at_top = valid & (values == top[index])
    n_top = groups.sum(at_top.to(values.dtype))[index]  # [B, K]
    second = groups.extreme(values, valid & ~at_top, reduce)[index]
    # Without this sample, the extreme stays `top` unless it was the only one there.
    return torch.where(at_top & (n_top == 1), second, top[index])


def _others_constant(values: Tensor, valid: Tensor, groups: Groups, magnitude: Tensor, tolerance: float) -> Tensor:
    """[B, K] bool: the valid group-mates of each sample (itself excluded) are one value, by
    the rule that makes a whole group constant (`constant_within`, with the mates' own
    largest `magnitude`). No other valid sample at all counts as constant: no variation."""
    hi = _others_extreme(values, valid, groups, "amax")
    lo = _others_extreme(values, valid, groups, "amin")
    largest = _others_extreme(magnitude, valid, groups, "amax") if tolerance else magnitude
    return constant_within(hi, lo, largest, tolerance)


def _normalize_in_groups(
    values: Tensor, valid: Tensor, groups: Groups, options: AdvantageOptions, divide_by_std: bool,
    magnitude: Tensor | None = None, terms: int = 1,
) -> Tensor:
    """Centre each column of `values` [B, K] in its group, optionally divide by the group std.

    `magnitude` [B, K]: each value's sum of |terms| when `values` are sums of `terms` terms
    (GRPO's weighted sum; None: rewards as given, |value|), for the rule of a constant group
    (`constant_within`, `tolerance_of(options, terms)`).
    Invalid entries (and groups with fewer than 2 valid samples, where no baseline exists
    besides the sample itself) give 0. Returns float64 [B, K].
    """
    index = groups.index
    vf = valid.to(values.dtype)
    count = groups.sum(vf)  # [N, K]
    hi = groups.extreme(values, valid, "amax")
    lo = groups.extreme(values, valid, "amin")
    tolerance = tolerance_of(options, terms)
    magnitude = values.abs() if magnitude is None else magnitude
    constant = constant_within(hi, lo, groups.extreme(magnitude, valid, "amax"), tolerance)
    # The statistics of each group are taken about its smallest value, so that a constant
    # added to every reward never reaches them: near the offset the subtraction is exact,
    # and the mean of the differences is as precise as the rewards' spread allows.
    base = torch.where(torch.isfinite(lo), lo, torch.zeros_like(lo))
    shifted = torch.where(valid, values - base[index], torch.zeros_like(values))
    mean = groups.sum(shifted * vf) / count.clamp(min=1)
    # Exact zero for constant groups: their mean can carry a rounding residue.
    centred = torch.where(valid & ~constant[index], shifted - mean[index], torch.zeros_like(values))
    sq_dev = groups.sum(centred * centred)  # [N, K]
    _refuse_overflow(sq_dev, "a group's squared deviations")
    n = count[index]  # [B, K]

    if options.leave_one_out:
        m = n - 1  # number of group-mates of each sample
        # r_i - mean(others) = c_i * n / m, with c_i = r_i - mean(group).
        advantage = centred * n / m.clamp(min=1)
        # Squared deviations of the others about their own mean: the group's, less this
        # sample's share (exact algebra), recomputed directly where that subtraction cancels
        # and the mates are not one value (those get std 0 anyway).
        removed = centred * centred * n / m.clamp(min=1)
        others_sq = (sq_dev[index] - removed).clamp(min=0)
        alike = _others_constant(values, valid, groups, magnitude, tolerance)
        others_sq = _exact_where_cancelled(others_sq, removed, values, valid, alike, groups)
        dof = m - options.std_ddof
        std = torch.where(dof > 0, (others_sq / dof.clamp(min=1)).sqrt(), torch.zeros_like(others_sq))
        std = torch.where(alike, torch.zeros_like(std), std)
        usable = valid & (m >= 1)
    else:
        advantage = centred
        dof = n - options.std_ddof
        std = torch.where(dof > 0, (sq_dev[index] / dof.clamp(min=1)).sqrt(), torch.zeros_like(centred))
        std = torch.where(constant[index], torch.zeros_like(std), std)
        usable = valid & (n >= 2)

    if divide_by_std:
        advantage = torch.where(std > 0, advantage / (std + options.eps), advantage)
    return torch.where(usable, advantage, torch.zeros_like(advantage))


# A difference of sums that keeps less than this fraction of what it subtracted has lost
# more than ~6 of float64's 16 digits to cancellation: such rows are recomputed directly.
_CANCELLED = 1e-6


def _exact_where_cancelled(others_sq: Tensor, removed: Tensor, values: Tensor, valid: Tensor, skip: Tensor,
                           groups: Groups) -> Tensor:
    """`others_sq` [B, K] (each sample's group-mates' squared deviations about their mean, by
    subtraction) with the valid rows (`skip` aside) where the subtraction cancelled (an outlier
    beside near-equal mates: [1, 0, 0, 1e-8]) summed again over the mates themselves: two
    passes of scatters over the batch with that row left out, about the smallest mate (so
    neither an offset nor the outlier's distance rounds the mates' spread). `values` [B, K]
    are the rewards as given.

    A row cancels only when its own share dominates its group's squared deviations; in a
    group of n >= 3 two rows cannot both (each would hold more than (n - 1) / n of them), and
    a group of 2 has one mate (`skip`). So one round, each (group, column) leaving out its
    first cancelled row, recomputes them all, whatever the group sizes: O(B K). Should
    rounding ever leave a second, the next round takes it."""
    pending = valid & ~skip & (removed > 0) & (others_sq <= _CANCELLED * removed)
    if not bool(pending.any()):
        return others_sq
    index = groups.index
    rows = torch.arange(index.shape[0], device=index.device, dtype=values.dtype).unsqueeze(1).expand_as(values)
    others_sq = others_sq.clone()
    while bool(pending.any()):
        first = groups.extreme(rows, pending, "amin")  # [N, K]: +inf where none is pending
        left_out = pending & (rows == first[index])
        mates = valid & ~left_out
        lowest = groups.extreme(values, mates, "amin")
        base = torch.where(torch.isfinite(lowest), lowest, torch.zeros_like(lowest))[index]
        shifted = torch.where(mates, values - base, torch.zeros_like(values))
        mean = groups.sum(shifted) / groups.sum(mates.to(values.dtype)).clamp(min=1)
        deviation = torch.where(mates, shifted - mean[index], torch.zeros_like(values))
        squares = groups.sum(deviation * deviation)
        others_sq = torch.where(left_out, squares[index], others_sq)
        pending = pending & ~left_out
    return others_sq


class RewardOverflow(UserError):
    """Rewards so large that the squares of their deviations overflow float64 (|r| around
    1e154 and beyond): a std cannot be computed, and no advantage is given in its place."""


def _refuse_overflow(squares: Tensor, what: str) -> None:
    """Raise RewardOverflow when `squares` (sums of squares of finite values) overflowed."""
    if not math.isfinite(float(squares.sum())) and not bool(torch.isfinite(squares).all()):
        raise RewardOverflow(f"{what} overflow float64")


def _batch_norm(
    values: Tensor, row_valid: Tensor, options: AdvantageOptions, token_mask: Tensor | None, scale: float, terms: int
) -> Tensor:
    """Normalize `values` [B] over the valid samples of the batch (per sample or per token).

    `scale` is the magnitude of the `terms` terms `values` was summed from (sum over
    components of the largest |w_k A_k|): a batch std at most `tolerance_of(options, terms)`
    * scale is float residue of exact cancellation, and gives 0.
    """
    if token_mask is None:
        weight = row_valid.to(values.dtype)
    else:
        weight = token_mask.to(values.dtype).sum(dim=1) * row_valid.to(values.dtype)
    total = weight.sum()
    if total <= 0:
        return torch.zeros_like(values)
    mean = (weight * values).sum() / total
    centred = torch.where(weight > 0, values - mean, torch.zeros_like(values))
    dof = total - options.std_ddof
    var = (weight * centred * centred).sum() / dof if dof > 0 else values.new_zeros(())
    _refuse_overflow(var, "the batch's squared deviations")
    if var <= 0 or float(var.sqrt()) <= tolerance_of(options, terms) * scale:
        return torch.zeros_like(values)
    if token_mask is None:
        return centred / (var.sqrt() + options.batch_norm_eps)
    return centred / (var + options.batch_norm_eps).sqrt()


def _batch_std(values: Tensor, row_valid: Tensor, options: AdvantageOptions, scale: float, terms: int) -> Tensor:
    """Std of `values` [B] (sums of `terms` terms, the largest sum of |terms| `scale`) over
    the valid samples (``std_ddof``); 0 when the batch is one value by the rule of a constant
    group (`constant_within`) or the std is undefined."""
    weight = row_valid.to(values.dtype)
    total = weight.sum()
    dof = total - options.std_ddof
    if dof <= 0:
        return values.new_zeros(())
    present = values[row_valid]
    lowest, highest = float(present.min()), float(present.max())
    if highest - lowest <= tolerance_of(options, terms) * scale:
        return values.new_zeros(())
    values = values - lowest  # about the smallest: an offset never reaches the std
    mean = (weight * values).sum() / total
    var = (weight * (values - mean) ** 2).sum() / dof
    _refuse_overflow(var, "the batch's squared deviations")
    return var.sqrt()


def _weighted_sum(parts: Tensor, valid: Tensor, weights: Tensor) -> Tensor:
    """sum_k w_k * parts[:, k] over the valid components of each sample: [B, K] -> [B]."""
    return torch.where(valid, parts * weights, torch.zeros_like(parts)).sum(dim=1)


# ---------------------------------------------------------------------------------------
# The estimators.
# ---------------------------------------------------------------------------------------


def _grpo(rewards, valid, groups, weights, options, token_mask, scale_rewards: str) -> Tensor:
    row_valid = valid.any(dim=1, keepdim=True)
    components = rewards.shape[1]
    # Each component less its group's smallest (one reward too), so that neither an offset
    # nor a weight rounds the sum at the offset's last place.
    sums, size = relative_sums(rewards, valid, weights, groups)
    reward_sum, magnitude = sums.unsqueeze(1), size.unsqueeze(1)
    terms = sum_terms(components)
    centred = _normalize_in_groups(reward_sum, row_valid, groups, options, scale_rewards == "group",
                                   magnitude, terms).squeeze(1)
    if scale_rewards != "batch":
        return centred
    # TRL scale_rewards="batch": the group-centred sum over the std of the sums in the batch
    # (relative to the batch's references: the same std).
    whole = Groups(index=torch.zeros_like(groups.index), num_groups=1)
    sums, size = relative_sums(rewards, valid, weights, whole)
    scale = float(torch.where(row_valid.squeeze(1), size, torch.zeros_like(size)).max())
    std = _batch_std(sums, row_valid.squeeze(1), options, scale, terms)
    return torch.where(std > 0, centred / (std + options.eps), centred)


def grpo(rewards, valid, groups, weights, options, token_mask):
    """GRPO (paper Eq. 1-2): sum the weighted components, normalize the sum within each group
    (``scale_rewards``: by the group std, the batch std, or not at all)."""
    return _grpo(rewards, valid, groups, weights, options, token_mask, options.scale_rewards)


def grpo_no_std(rewards, valid, groups, weights, options, token_mask):
    """GRPO without std normalization (Dr.GRPO-style; NeMo RL normalize_rewards: false)."""
    return _grpo(rewards, valid, groups, weights, options, token_mask, "none")


def gdpo_no_bn(rewards, valid, groups, weights, options, token_mask):
    """GDPO without the final batch normalization (paper ablation): sum_k w_k A_k."""
    per_component = _normalize_in_groups(rewards, valid, groups, options, options.scale_rewards == "group")
    return _weighted_sum(per_component, valid, weights)


def gdpo(rewards, valid, groups, weights, options, token_mask):
    """GDPO (paper Eqs. 4-6): normalize each component in its group, sum, batch-normalize
    (``scale_rewards="none"``: centre each component without dividing by its std, NeMo RL's
    GDPO with normalize_rewards: false)."""
    per_component = _normalize_in_groups(rewards, valid, groups, options, options.scale_rewards == "group")
    advantage_sum = _weighted_sum(per_component, valid, weights)
    scale = float((per_component.abs().amax(dim=0) * weights.abs()).sum())
    return _batch_norm(advantage_sum, valid.any(dim=1), options, token_mask, scale, sum_terms(rewards.shape[1]))



