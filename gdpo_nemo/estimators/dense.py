"""The dense path of `compute_advantages`: rewards in consecutive groups of one size (the
usual layout of a rollout batch), no leave-one-out, batch scaling or token mask, computed in
few passes over memory (torch ops on any device), or in one pass by the numba kernel on a
CPU (gdpo_nemo.estimators.kernel). Same definitions as the general path; where they could
differ (NaN or extreme rewards, a batch std near cancellation) it returns None and the
general path decides.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from gdpo_nemo.estimators import kernel
from gdpo_nemo.estimators.groups import tolerance_of
from gdpo_nemo.estimators.options import AdvantageOptions
from gdpo_nemo.estimators.registry import DenseForm, EstimatorInfo

__all__ = ["dense_advantages", "dense_group_size", "kernel_advantages"]


def dense_group_size(group_ids: Tensor, batch_size: int, device: torch.device, verify: bool = True) -> int | None:
    """G when `group_ids` are consecutive runs of one size G >= 2 with distinct ids (the
    usual layout of a rollout batch), found without sorting the batch; else None. With
    `verify` False, G is read from the first run only and the caller checks the rest (the
    CPU kernel does, in its pass over the rewards)."""
    ids = torch.as_tensor(group_ids, device=device)
    if ids.dim() != 1 or ids.shape[0] != batch_size or batch_size < 2:
        return None
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        return None
    prefix = ids[:_DENSE_PREFIX]
    change = (prefix != prefix[0]).nonzero()
    if change.numel():
        size = int(change[0])
    elif prefix.shape[0] == batch_size:
        size = batch_size
    else:
        return None
    if size < 2 or batch_size % size:
        return None
    if not verify:
        return size
    blocks = ids.view(-1, size) if ids.is_contiguous() else ids.reshape(-1, size)
    # torch.equal against the broadcast first column reads the ids once and allocates
    # nothing, where `(blocks == first).all()` writes and rescans a [B] bool mask.
    if not torch.equal(blocks, blocks[:, :1].expand_as(blocks)):
        return None
    first = blocks[:, 0]
    if first.shape[0] > 1 and not bool((first[1:] > first[:-1]).all()):
        if torch.unique(first).shape[0] != first.shape[0]:
            return None
    return size


_DENSE_PREFIX = 1 << 12  # groups larger than this take the general path
# Samples per chunk of the dense path on CPU: a chunk's three rewards, x^2 and sum (2 MB
# each) stay in the last-level cache between its passes, and chunks are few enough (4 per
# 1M samples) that the per-chunk ops cost little.
_DENSE_CHUNK = 1 << 18


# The dense path computes a group's variance as E[x^2] - E[x]^2 (one product-sum per group,
# no centred copy); that loses ~(|mean| / std)^2 * 1e-16 relative, so it is used only while
# |mean| <= this * std for every group that is not constant (else the general path runs).
_DENSE_MEAN_TO_STD = 1e3

# A batch std within this range lets the dense path centre in float64, round to float32 and
# scale there: centred values (at most std * sqrt(B)) and 1 / std stay far inside float32's
# normal range (1.2e-38 .. 3.4e38). Outside it the scaling is done in float64.
_FLOAT32_SAFE = (1e-25, 1e25)


def _group_statistics(
    grouped: list[Tensor], options: AdvantageOptions, scratch: Tensor, tolerance: float
) -> tuple[Tensor, Tensor, Tensor] | None:
    """Per group of each of the K tensors `grouped` [N, G]: (mean, std, constant), each
    [K, N] (constant: bool), from the group sums of x and x^2, plus a min/max over the few
    groups that may be constant up to float residue. None when a value is not finite or a
    group's |mean| / std is too large for E[x^2] - E[x]^2 (the general path takes over).
    `scratch` [N, G] float64 receives each x^2 in turn (its content is left undefined).

    The K tensors' statistics share one [2, K, N] buffer, so everything after the
    reductions is a handful of ops over all components at once rather than per component.
    A group is constant when max - min <= tolerance * max(|max|, |min|) (`residue_tolerance`
    of the options); such a group has a true std <= 2 * tolerance * |mean|, so only groups
    below about that need their min and max."""
    num_groups, size = grouped[0].shape
    sums = grouped[0].new_empty((2, len(grouped), num_groups))
    total, squares = sums
    for k, values in enumerate(grouped):
        torch.sum(values, dim=1, out=total[k])
        # x^2 then the same row sum: vectorized, where a bmm of [N, 1, G] x [N, G, 1] takes
        # torch's scalar loop for tiny matrices (1.7x the time).
        torch.sum(torch.mul(values, values, out=scratch), dim=1, out=squares[k])
    # Any inf or NaN makes the sum non-finite; the mask is only needed when the finite
    # sums overflow (rewards beyond ~1e150), to tell that apart.
    if not math.isfinite(float(sums.sum())) and not bool(torch.isfinite(sums).all()):
        return None
    mean = total / size
    std = (squares - total * mean).clamp_(min=0).div_(size - options.std_ddof).sqrt_()
    constant = std == 0
    magnitude = mean.abs()
    if bool(((magnitude <= _DENSE_MEAN_TO_STD * std) | constant).all()):
        # Every group that may be constant up to residue (0 < std <= 4e-6 |mean|) fails
        # this test, so none exists: no min / max needed.
        return mean, std, constant
    maybe = (std > 0) & (std <= 4 * tolerance * magnitude)
    for k, values in enumerate(grouped):
        rows = maybe[k].nonzero().squeeze(1)
        if rows.numel():
            lo, hi = torch.aminmax(values[rows], dim=1)
            constant[k, rows] = (hi - lo) <= tolerance * torch.maximum(hi.abs(), lo.abs())
    if not bool(((magnitude <= _DENSE_MEAN_TO_STD * std) | constant).all()):
        return None
    return mean, std, constant


def dense_advantages(
    columns: list[Tensor], size: int, form: DenseForm, multi_component: bool, weights: Tensor,
    options: AdvantageOptions,
) -> Tensor | None:
    """The estimators for rewards in consecutive groups of one size, without leave-one-out,
    batch scaling or a token mask, in few passes over memory: no gathers, and no temporary
    of the batch's size besides one float64 sum (reused for the batch norm) and the output.

    Each centred, scaled component is f_k (x_k - m_k) with one factor f_k per group (w_k /
    (std + eps); 0 for a constant group): the sum is sum_k f_k x_k minus the per-group
    constant sum_k f_k m_k. Same definitions as the general path (a test compares the two);
    the cancellation scale uses the bound max |x - mean| <= std * sqrt(G - 1).
    On CPU the groups go through in chunks of about `_DENSE_CHUNK` samples, so that a
    chunk's rewards are read from memory once and its further passes hit the cache; every
    per-group value is the same as in one piece.
    Returns float32 [B], or None where the general path must decide (NaN or infinite
    rewards, extreme mean / std ratios, a batch std near cancellation).
    On CPU, `gdpo_nemo.estimators.kernel` computes the same in one pass instead."""
    divide = form.divides(options)
    tolerance = tolerance_of(options, columns)
    grouped = [column.view(-1, size) if column.is_contiguous() else column.reshape(-1, size) for column in columns]
    num_groups = grouped[0].shape[0]
    centred = grouped[0].new_empty((num_groups, size))  # sum_k f_k (x_k - m_k), float64
    weight_list = [float(w) for w in weights.tolist()]
    weight = weights.unsqueeze(1) if multi_component else weights.new_ones((1, 1))  # [K, 1]
    step = max(1, _DENSE_CHUNK // size) if centred.device.type == "cpu" else num_groups
    scratch = grouped[0].new_empty((min(step, num_groups), size))  # each x^2 in turn
    largest = weight.new_zeros(weight.shape[0])  # max over groups of |f_k| std_k, per component
    for start in range(0, num_groups, step):
        chunk = [values[start : start + step] for values in grouped]
        total = centred[start : start + step]
        if not multi_component:  # GRPO: the weighted reward sum, in the output rows
            torch.mul(chunk[0], weight_list[0], out=total)
            for values, w in zip(chunk[1:], weight_list[1:]):
                total.add_(values, alpha=w)
            chunk = [total]
        stats = _group_statistics(chunk, options, scratch[: total.shape[0]], tolerance)
        if stats is None:
            return None
        mean, std, constant = stats
        # Exactly 0 for a constant group, residue or not (every std == 0 group is constant,
        # so elsewhere std > 0 and the division is defined).
        scaled = torch.reciprocal(std + options.eps) * weight if divide else weight.expand_as(std)
        factor = torch.where(constant, 0.0, scaled)
        torch.maximum(largest, (factor.abs() * std).amax(dim=1), out=largest)
        if multi_component:
            torch.mul(chunk[0], factor[0].unsqueeze(1), out=total)
        else:  # the reward sum is read no more: scaled in place
            total.mul_(factor[0].unsqueeze(1))
        shift = factor[0] * mean[0]
        for k in range(1, len(chunk)):
            total.addcmul_(chunk[k], factor[k].unsqueeze(1))
            shift.addcmul_(factor[k], mean[k])
        total.sub_(shift.unsqueeze(1))
    # Added component by component, in this order, as the bound was defined.
    scale = 0.0
    for value in largest.tolist():
        scale += value * math.sqrt(size - 1)
    centred = centred.view(-1)
    out = torch.empty(centred.shape, dtype=torch.float32, device=centred.device)
    if not form.batch_norm:
        return out.copy_(centred)
    batch_size = centred.shape[0]
    dof = batch_size - options.std_ddof
    batch_mean = centred.sum() / batch_size
    squares = torch.dot(centred, centred) - batch_size * batch_mean * batch_mean
    std = float((squares.clamp(min=0) / dof).sqrt()) if dof > 0 else 0.0
    if not math.isfinite(std):
        return None  # the squares overflowed: the general path refuses, naming the reward
    if std <= 0:
        return out.zero_()
    if std <= tolerance * scale:
        # `scale` bounds the general path's (sum_k of the largest |w_k A_k|) from above, so
        # near cancellation that path decides, with the exact scale.
        return None
    factor = 1.0 / (std + options.batch_norm_eps)
    if not _FLOAT32_SAFE[0] < std < _FLOAT32_SAFE[1]:
        # Centred values or the factor beyond float32's range (rewards near 1e-160 or 1e39):
        # scaled in float64, then rounded once.
        return out.copy_(centred.sub_(batch_mean).mul_(factor))
    # Centre in float64 in place, then round once to float32 and scale there: a float64 ->
    # float32 `sub(..., out=)` takes torch's slow casting loop (3x the time of the two).
    out.copy_(centred.sub_(batch_mean))
    return out.mul_(factor)


def kernel_advantages(
    columns: list[Tensor], group_ids: Tensor, size: int, info: EstimatorInfo, weights: Tensor, options: AdvantageOptions
) -> Tensor | None:
    """The dense path on CPU by `gdpo_nemo.estimators.kernel` (checked float32 advantages), or
    None where the general path must decide, group ids that are not runs of `size` included."""
    return kernel.dense_advantages(
        columns, group_ids, size, weights, divide=info.dense.divides(options), sum_first=not info.multi_component,
        batch_norm=info.dense.batch_norm, eps=options.eps, ddof=options.std_ddof,
        batch_norm_eps=options.batch_norm_eps, tolerance=tolerance_of(options, columns),
    )


