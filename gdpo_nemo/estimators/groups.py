"""Prompt groups of a batch of rollouts, and the one group statistic the rest of the package
shares: each group's extremes (`group_extremes`) and whether its values are one value up to
float residue (`constant_within`). The estimators, the collapse diagnostics
(zero_std_fraction) and the NeMo RL engine's dynamic-sampling signal all read groups
through this module, so "a group with no signal" means the same everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from gdpo_nemo.errors import UserError
from gdpo_nemo.estimators.options import RESIDUE_EPSILONS

__all__ = ["GroupExtremes", "Groups", "constant_within", "group_extremes", "group_index", "group_rows",
           "relative_sums", "sum_terms", "summation_tolerance", "tolerance_of"]


@dataclass(frozen=True)
class Groups:
    """Group membership of a batch: `index[b]` in 0..num_groups-1.

    `size` is set when every group has that many samples and the batch is ordered group by
    group: reductions are then dense [num_groups, size, K] ops instead of scatters.
    """

    index: Tensor  # [B] long
    num_groups: int
    size: int | None = None

    def sum(self, values: Tensor) -> Tensor:
        """Per-group sums of `values` [B, K] -> [num_groups, K]."""
        if self.size is not None:
            return values.view(self.num_groups, self.size, -1).sum(dim=1)
        out = values.new_zeros((self.num_groups, values.shape[1]))
        return out.index_add_(0, self.index, values)

    def extreme(self, values: Tensor, valid: Tensor, reduce: str) -> Tensor:
        """Per-group max ("amax") or min ("amin") over valid entries; -+inf where none."""
        fill = -math.inf if reduce == "amax" else math.inf
        masked = torch.where(valid, values, torch.full_like(values, fill))
        if self.size is not None:
            grouped = masked.view(self.num_groups, self.size, -1)
            return grouped.amax(dim=1) if reduce == "amax" else grouped.amin(dim=1)
        index = self.index.unsqueeze(1).expand_as(values)
        out = values.new_full((self.num_groups, values.shape[1]), fill)
        return out.scatter_reduce_(0, index, masked, reduce=reduce, include_self=True)



def group_index(
    group_ids: Tensor, batch_size: int, device: torch.device, single_sample_groups: str = "raise"
) -> tuple[Groups, Tensor | None]:
    """The groups of `group_ids`, and the permutation that orders the batch group by group
    when all groups have the same size (None when that is not needed or not possible).
    Everything is on `device` (the rewards'): group ids are metadata and follow them."""
    group_ids = torch.as_tensor(group_ids, device=device)
    if group_ids.dim() != 1 or group_ids.shape[0] != batch_size:
        raise UserError(f"group_ids has shape {tuple(group_ids.shape)}; expected Tensor[B] with B = {batch_size}")
    if group_ids.is_floating_point() or group_ids.is_complex() or group_ids.dtype == torch.bool:
        raise UserError(f"group_ids has dtype {group_ids.dtype}; expected an integer tensor of prompt group ids")
    unique, index, sizes = torch.unique(group_ids, return_inverse=True, return_counts=True)
    small = sizes < 2
    if single_sample_groups == "raise" and bool(small.any()):
        bad = unique[small][:5].tolist()
        raise UserError(
            f"group_ids: group(s) {bad} have a single sample; every prompt group needs at least 2 rollouts"
            " (group_size >= 2): a group of 1 has no baseline. single_sample_groups='zero' (preset"
            " 'nemo_rl') gives such samples advantage 0 instead"
        )
    num_groups = int(unique.shape[0])
    if bool((sizes == sizes[0]).all()):
        size = int(sizes[0])
        order = torch.argsort(index, stable=True)
        contiguous = torch.arange(num_groups, device=device).repeat_interleave(size)
        if bool((index == contiguous).all()):
            order = None
        return Groups(index=contiguous, num_groups=num_groups, size=size), order
    return Groups(index=index, num_groups=num_groups), None




def summation_tolerance(terms: int) -> float:
    """The default relative tolerance of float residue for values summed from `terms` terms
    in float64. 0 for one term: a reward as given is exact, so distinct rewards are never
    merged whatever dtype they came in, and equal ones are equal (one weighted reward, w (r -
    ref), is 0 exactly where r = ref: exact too).
    RESIDUE_EPSILONS * terms float64 epsilons for a sum of several (GRPO's weighted sum):
    each sum carries at most about terms / 2 epsilons of the largest sum of |terms| in the
    group, and two sums of equal rewards in another order, or of equal-valued combinations,
    differ by less than twice that."""
    return 0.0 if terms <= 1 else RESIDUE_EPSILONS * terms * _FLOAT64_EPS


_FLOAT64_EPS = float(torch.finfo(torch.float64).eps)


def sum_terms(components: int) -> int:
    """The float operations behind each of GRPO's sums of `components` weighted rewards taken
    relative to a reference (`relative_sums`): a subtraction and a product per component and
    the additions, counted generously (2 K + 1): what `summation_tolerance` is given. One
    component is judged as the reward as given: exact (1 term)."""
    return 1 if components <= 1 else 2 * components + 1


def relative_sums(values: Tensor, valid: Tensor, weights: Tensor, groups: "Groups") -> tuple[Tensor, Tensor]:
    """GRPO's weighted sums sum_k w_k r_k [B] less one constant per group, and each one's
    sum of |terms| [B] (its residue's scale, `constant_within`'s magnitude).

    Each component is taken less its smallest value in the group before it is weighted and
    summed, so neither an offset of a component nor its size reaches the sum: its rounding is
    relative to the spread within the group, and centring it in the group gives what centring
    the plain sums gives. One reward (K = 1) too: w r as given rounds at the offset's last
    place (3.0 times 803179469476690.6 and times the next float64 are one value), w (r - ref)
    does not; its magnitude is then |w r|, the weighted reward as given, whose rule is the
    one-term rule (`summation_tolerance(1)`: exact; w (r - ref) is 0 exactly where r = ref).
    A sample missing a component (NaN; `valid` False) that others of its group have adds the
    difference of the references it leaves out, and its magnitude counts them. `values`
    [B, K] float64 (anything where not valid), `weights` [K]."""
    index = groups.index
    lowest = groups.extreme(values, valid, "amin")  # [N, K], +inf where the group has none
    present = torch.isfinite(lowest)
    base = torch.where(present, lowest, torch.zeros_like(lowest))[index]  # [B, K]
    parts = torch.where(valid, (values - base) * weights, torch.zeros_like(values))
    sums = parts.sum(dim=1)
    if values.shape[1] == 1:  # w r - w ref: only the reward as given can be residue-sized
        return sums, torch.where(valid[:, 0], values[:, 0] * weights[0], torch.zeros_like(sums)).abs()
    magnitude = parts.abs().sum(dim=1)
    partial = (valid != present[index]).any(dim=1)
    if bool(partial.any()):
        weighted = base * weights
        own = torch.where(valid, weighted, torch.zeros_like(weighted)).sum(dim=1)
        full = torch.where(present[index], weighted, torch.zeros_like(weighted)).sum(dim=1)
        sums = sums + torch.where(partial, own - full, torch.zeros_like(own))
        magnitude = magnitude + torch.where(partial, weighted.abs().sum(dim=1), torch.zeros_like(own))
    return sums, magnitude


def tolerance_of(options, terms: int) -> float:
    """The options' `residue_tolerance`, or (None) `summation_tolerance(terms)`."""
    if options.residue_tolerance is not None:
        return options.residue_tolerance
    return summation_tolerance(terms)


def constant_within(hi: Tensor, lo: Tensor, magnitude: Tensor, tolerance: float) -> Tensor:
    """The one rule for "a group is one value": its values, between `lo` and `hi`, differ by
    at most `tolerance` * `magnitude`, the group's largest sum of |terms| (a reward as given:
    its |value|; a weighted sum: sum_k |w_k r_k|). With tolerance 0 (`summation_tolerance`
    of one term) that is exact equality. An empty group (hi = -inf, lo = +inf) counts as
    constant: no variation."""
    if tolerance == 0:
        return hi <= lo
    return (hi <= lo) | ((hi - lo) <= tolerance * magnitude)


def group_rows(group_ids: Tensor, device: torch.device | None = None) -> tuple[Tensor, int]:
    """(group index [B] in 0..N-1 in the order of the ids, N), on `device` (default: the ids')."""
    group_ids = torch.as_tensor(group_ids, device=device)
    if group_ids.dim() != 1:
        raise UserError(f"group_ids has shape {tuple(group_ids.shape)}; expected Tensor[B]")
    _, index = torch.unique(group_ids, return_inverse=True)
    return index, int(index.max()) + 1 if index.numel() else 0


class GroupExtremes(NamedTuple):
    """Per group of a batch (N groups): the largest and smallest non-NaN value (-inf / +inf
    where none), whether it holds a NaN, and the largest sum of |terms| of its values
    (`constant_within`'s magnitude); `index` [B] maps each sample to its group."""

    index: Tensor
    hi: Tensor
    lo: Tensor
    has_nan: Tensor
    magnitude: Tensor
    tolerance: float

    def constant(self) -> Tensor:
        """[N] bool: the group's non-NaN values are one value (`constant_within`)."""
        return constant_within(self.hi, self.lo, self.magnitude, self.tolerance)


def group_extremes(values: Tensor, group_ids: Tensor, index: Tensor | None = None, *,
                   magnitude: Tensor | None = None, tolerance: float = 0.0) -> GroupExtremes:
    """The extremes of `values` [B] in each group of `group_ids` [B], computed in float64 on
    the values' device. `index`: a `group_rows` index already made for these ids there.
    `magnitude` [B]: each value's sum of |terms| when it is a sum (default: |value|, a reward
    as given), and `tolerance` the relative residue of that sum (`summation_tolerance`; 0,
    the default: exact)."""
    values = torch.as_tensor(values).to(torch.float64)
    if index is None:
        index, count = group_rows(group_ids, values.device)
    else:
        count = int(index.max()) + 1 if index.numel() else 0
    if values.shape[0] != index.shape[0]:
        raise UserError(f"values has {values.shape[0]} samples but group_ids has {index.shape[0]}")
    groups = Groups(index=index, num_groups=count)
    column = values.unsqueeze(1)
    valid = ~torch.isnan(column)
    hi = groups.extreme(column, valid, "amax").squeeze(1)
    lo = groups.extreme(column, valid, "amin").squeeze(1)
    has_nan = groups.sum((~valid).to(torch.float64)).squeeze(1) > 0
    size = column.abs() if magnitude is None else torch.as_tensor(magnitude, device=values.device).to(torch.float64).unsqueeze(1)
    largest = groups.extreme(size, valid, "amax").squeeze(1)
    return GroupExtremes(index, hi, lo, has_nan, largest, tolerance)
