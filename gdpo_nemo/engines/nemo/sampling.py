"""Which prompt groups DAPO's dynamic sampling keeps: those whose TRAINED signal varies.

NeMo RL (pinned commit, ``nemo_rl.algorithms.grpo.dynamic_sampling(repeated_batch, std,
baseline, ...)``) keeps the samples whose ``std != 0``, where ``std`` is each sample's group
std of ``total_reward``, the unweighted sum of the components. That is the signal of
unweighted GRPO only:

- GDPO normalizes each component within the group, so a group whose components vary while
  their sum is constant (format 1 + correctness 0 vs format 0 + correctness 1) still has
  non-zero advantages: filtering on the sum drops it;
- weighted GRPO trains on sum_k w_k r_k, which can vary when the plain sum does not (and
  the other way round).

`group_signal_spread` gives, per sample, a number that is 0 exactly when its group carries
no signal under the run's estimator: the largest within-group range of any component for
gdpo / gdpo_no_bn, the within-group range of the weighted sum for the grpo family. The
plugin's hook passes it to NeMo RL's ``dynamic_sampling`` as ``std`` (only its zeros are
read there), so NeMo RL's own filtering, caching and batch completion run unchanged.
"""

from __future__ import annotations

from typing import Mapping

import torch
from torch import Tensor

from gdpo_nemo.estimators import estimator_info
from gdpo_nemo.estimators.groups import Groups, group_extremes, group_rows, relative_sums, sum_terms, tolerance_of
from gdpo_nemo.config.settings import EstimatorSettings
from gdpo_nemo.engines.nemo.estimators import reward_components

__all__ = ["group_range", "group_signal_spread"]


def group_range(values: Tensor, group_ids: Tensor, magnitude: Tensor | None = None, tolerance: float = 0.0) -> Tensor:
    """Tensor[B]: max - min of `values` (Tensor[B]) over each sample's group (`group_ids`,
    Tensor[B] of ints); 0 for a group that is one value by the estimators' rule
    (`constant_within`: equal rewards, or sums within `tolerance` of their largest
    `magnitude`, sum_k |w_k r_k|: it gives no advantage); inf for a group holding a NaN
    (never 0: such a group is kept)."""
    extremes = group_extremes(values, group_ids, magnitude=magnitude, tolerance=tolerance)
    spread = torch.where(extremes.constant(), torch.zeros_like(extremes.hi), extremes.hi - extremes.lo)
    spread = torch.where(extremes.has_nan, torch.full_like(spread, torch.inf), spread)
    return spread[extremes.index]


def group_signal_spread(batch: Mapping, settings: EstimatorSettings) -> Tensor | None:
    """Tensor[B] float64, 0 exactly where the sample's prompt group has no training signal
    under `settings` (see the module docstring); None when the batch has no reward/<name>
    components or no prompt groups (then NeMo RL's own std stands)."""
    from gdpo_nemo.engines.nemo.metrics import batch_group_ids

    components = reward_components(batch)
    groups = batch_group_ids(batch)
    if not components or groups is None:
        return None
    options = settings.options
    if estimator_info(settings.estimator).multi_component:
        tolerance = tolerance_of(options, 1)
        return torch.stack([group_range(values, groups, tolerance=tolerance)
                            for values in components.values()]).amax(dim=0)
    weights = options.reward_weights or {}
    # The weighted sum as the estimators form and judge it (`relative_sums`: each component,
    # one too, less its group's smallest value; NaN marks a missing component).
    names = list(components)
    matrix = torch.stack([torch.as_tensor(components[name]).to(torch.float64) for name in names], dim=1)
    index, count = group_rows(groups, matrix.device)
    valid = ~torch.isnan(matrix)
    vector = torch.tensor([float(weights.get(name, 1.0)) for name in names], dtype=torch.float64)
    sums, magnitude = relative_sums(torch.where(valid, matrix, torch.zeros_like(matrix)), valid, vector,
                                    Groups(index=index, num_groups=count))
    sums = torch.where(valid.any(dim=1), sums, torch.full_like(sums, torch.nan))
    return group_range(sums, groups, magnitude, tolerance_of(options, sum_terms(len(names))))
