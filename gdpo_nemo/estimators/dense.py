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
from gdpo_nemo.estimators.groups import constant_within, sum_terms, tolerance_of
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


# A batch std within this range lets the dense path centre in float64, round to float32 and
# scale there: centred values (at most std * sqrt(B)) and 1 / std stay far inside float32's
# normal range (1.2e-38 .. 3.4e38). Outside it the scaling is done in float64.
_FLOAT32_SAFE = (1e-25, 1e25)

# Values this small may differ by less than the square root of float64's smallest number:
# their squared deviations can underflow to a std of 0, so such groups are compared by min
# and max before they are called constant.
_TINY = 1e-140


def _group_statistics(
    grouped: list[Tensor], options: AdvantageOptions, scratch: Tensor, tolerance: float,
    terms: list[tuple[Tensor, float]] | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor] | None:
    """Per group of each of the K tensors `grouped` [N, G]: (shift, mean, std, constant), each
    [K, N] (constant: bool). `shift` is the group's first value and `mean` the mean of the
    values less it: every statistic is taken of x - shift, exact near any offset (the
    variance as E[d^2] - E[d]^2 of d = x - shift loses at most a few digits, |mean(d)| being
    at most the group's range, never the offset's). None when a value is not finite.
    `scratch` [N, G] float64 receives each x - shift in turn (content left undefined).

    A group is constant by `constant_within`'s rule: `tolerance` 0 (rewards as given) means
    equal values, and then std == 0 says it (min and max decide for tiny values); else its
    max - min <= tolerance * the group's largest sum of |terms|: |x| for rewards as given,
    sum_k |w_k x_k| over `terms` (each component's [N, G] values and weight) for GRPO's sum.
    Such a group has std <= its range, so only groups with std below the bound need their
    min, max and magnitude."""
    num_groups, size = grouped[0].shape
    sums = grouped[0].new_empty((3, len(grouped), num_groups))
    total, squares, shift = sums
    for k, values in enumerate(grouped):
        shift[k] = values[:, 0]
        torch.sub(values, shift[k].unsqueeze(1), out=scratch)
        torch.sum(scratch, dim=1, out=total[k])
        torch.sum(torch.mul(scratch, scratch, out=scratch), dim=1, out=squares[k])
    # Any inf or NaN makes the sum non-finite; the mask is only needed when the finite
    # sums overflow (rewards beyond ~1e150), to tell that apart.
    if not math.isfinite(float(sums.sum())) and not bool(torch.isfinite(sums).all()):
        return None
    mean = total / size
    std = (squares - total * mean).clamp_(min=0).div_(size - options.std_ddof).sqrt_()
    if tolerance == 0:
        constant = std == 0
        maybe = constant & (shift.abs() < _TINY)
    else:
        if terms is None:
            bound = (shift + mean).abs()  # |the group mean|: max(|max|, |min|) >= it
        elif len(terms) == 1:  # w x: its largest |w x| over the chunk
            bound = abs(terms[0][1]) * float(terms[0][0].abs().max())
        else:  # sum_k |w_k| (max_k - min_k) over the chunk bounds every group's magnitude
            bound = sum(abs(w) * float(values.amax() - values.amin()) for values, w in terms if values.numel())
        constant = torch.zeros_like(std, dtype=torch.bool)
        maybe = std <= 2 * tolerance * bound
    for k, values in enumerate(grouped):
        rows = maybe[k].nonzero().squeeze(1)
        if not rows.numel():
            continue
        lo, hi = torch.aminmax(values[rows], dim=1)
        if terms is None:
            magnitude = torch.maximum(hi.abs(), lo.abs())
        elif len(terms) == 1:
            magnitude = (abs(terms[0][1]) * terms[0][0][rows].abs()).amax(dim=1)
        else:  # the largest sum_k |w_k (x_k - first x_k)| of the group
            magnitude = sum(abs(w) * (part[rows] - part[rows][:, :1]).abs() for part, w in terms).amax(dim=1)
        constant[k, rows] = constant_within(hi, lo, magnitude, tolerance)
    return shift, mean, std, constant


def dense_advantages(
    columns: list[Tensor], size: int, form: DenseForm, multi_component: bool, weights: Tensor,
    options: AdvantageOptions,
) -> Tensor | None:
    """The estimators for rewards in consecutive groups of one size, without leave-one-out,
    batch scaling or a token mask, in few passes over memory: no gathers, and no temporary
    of the batch's size besides one float64 sum (reused for the batch norm) and the output.

    Each centred, scaled component is f_k ((x_k - s_k) - m_k) with one factor f_k per group
    (w_k / (std + eps); 0 for a constant group), s_k the group's first value and m_k the
    mean of x_k - s_k: the sum is sum_k f_k (x_k - s_k) minus the per-group constant
    sum_k f_k m_k, every term at the scale of the group's spread whatever the offset. Same
    definitions as the general path (tests compare the two and the kernel at offsets); the
    cancellation scale uses the bound max |x - mean| <= std * sqrt(G - 1).
    On CPU the groups go through in chunks of about `_DENSE_CHUNK` samples, so that a
    chunk's rewards are read from memory once and its further passes hit the cache; every
    per-group value is the same as in one piece.
    Returns float32 [B], or None where the general path must decide (NaN or infinite
    rewards, overflow, a batch std near cancellation).
    On CPU, `gdpo_nemo.estimators.kernel` computes the same in one pass instead."""
    divide = form.divides(options)
    terms_count = len(columns)
    group_tolerance = tolerance_of(options, 1 if multi_component else sum_terms(terms_count))
    grouped = [column.view(-1, size) if column.is_contiguous() else column.reshape(-1, size) for column in columns]
    num_groups = grouped[0].shape[0]
    centred = grouped[0].new_empty((num_groups, size))  # sum_k f_k (x_k - m_k), float64
    weight_list = [float(w) for w in weights.tolist()]
    weight = weights.unsqueeze(1) if multi_component else weights.new_ones((1, 1))  # [K, 1]
    step = max(1, _DENSE_CHUNK // size) if centred.device.type == "cpu" else num_groups
    scratch = grouped[0].new_empty((min(step, num_groups), size))  # each x - shift in turn
    largest = weight.new_zeros(weight.shape[0])  # max over groups of |f_k| std_k, per component
    for start in range(0, num_groups, step):
        chunk = [values[start : start + step] for values in grouped]
        total = centred[start : start + step]
        work = scratch[: total.shape[0]]
        terms = None
        if not multi_component:
            # GRPO: the weighted sum of each component (one too) less its group's first value
            # (the general path's `relative_sums`, with another reference), in the output
            # rows: no offset, size or weight of a component rounds it. `terms` give the
            # constant-group rule its magnitudes (one reward: |w x|, only with a tolerance).
            for k, (values, w) in enumerate(zip(chunk, weight_list)):
                part = torch.sub(values, values[:, :1], out=work)
                if k == 0:
                    torch.mul(part, w, out=total)
                else:
                    total.add_(part, alpha=w)
            if terms_count > 1 or options.residue_tolerance:
                terms = list(zip(chunk, weight_list))
            chunk = [total]
        stats = _group_statistics(chunk, options, work, group_tolerance, terms)
        if stats is None:
            return None
        shift, mean, std, constant = stats
        # Exactly 0 for a constant group, residue or not (every std == 0 group is constant
        # or left undivided, as the general path).
        scaled = torch.where(std > 0, torch.reciprocal(std + options.eps), 1.0) * weight if divide else weight.expand_as(std)
        factor = torch.where(constant, 0.0, scaled)
        torch.maximum(largest, (factor.abs() * std).amax(dim=1), out=largest)
        if multi_component:
            torch.sub(chunk[0], shift[0].unsqueeze(1), out=work)
            torch.mul(work, factor[0].unsqueeze(1), out=total)
        else:  # the reward sum is read no more: centred and scaled in place
            total.sub_(shift[0].unsqueeze(1)).mul_(factor[0].unsqueeze(1))
        offset = factor[0] * mean[0]
        for k in range(1, len(chunk)):
            torch.sub(chunk[k], shift[k].unsqueeze(1), out=work)
            total.addcmul_(work, factor[k].unsqueeze(1))
            offset.addcmul_(factor[k], mean[k])
        total.sub_(offset.unsqueeze(1))
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
    if not math.isfinite(std) or not math.isfinite(float(batch_mean)):
        return None  # the squares overflowed: the general path refuses, naming the cause
    if std <= 0:
        return out.zero_()
    if std <= tolerance_of(options, sum_terms(terms_count)) * scale:
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
        batch_norm_eps=options.batch_norm_eps,
        tolerance=tolerance_of(options, 1 if info.multi_component else sum_terms(len(columns))),
        batch_tolerance=tolerance_of(options, sum_terms(len(columns))),
    )


