"""Advantage estimators for multi-reward GRPO-family training (paper Eqs. 1-6).

Notation (the paper's Section 3; docs/estimators.md): B samples in a batch, each the rollout of one
prompt; samples of one prompt form a group (G rollouts, groups may differ in size and need
not be contiguous); K named reward components r_k.

- ``grpo``:        r_sum = sum_k w_k r_k;  A = (r_sum - baseline_group) / std_group(r_sum)
- ``grpo_no_std``: A = r_sum - baseline_group                         (Dr.GRPO-style)
- ``gdpo``:        A_k = (r_k - baseline_group) / std_group(r_k);  A_sum = sum_k w_k A_k;
                   A = batch_norm(A_sum)                              (the paper's method)
- ``gdpo_no_bn``:  A_sum without the batch normalization            (paper ablation)

Each estimator is a small pure function registered by name with everything the rest of the
package needs to know of it (``register_estimator``: display label, plot style, NeMo RL's own
equivalent, how collapse counts it, ...); ``ESTIMATORS`` / ``estimator_info`` are the one
source of estimator names for configs, engines, collapse counting, tables and figures, and
``compute_advantages`` is the one public entry; ``AdvantageOptions`` is the one options type. Everything is vectorized over the batch (no Python loop over groups).

Semantics shared by all estimators, each taken from a peer (``preset`` reproduces them):

- Group std uses ``std_ddof`` (1 = Bessel, as NeMo RL, TRL and verl do). A group whose
  values are one value has std exactly 0, decided from the values, never from a std (one
  rule everywhere: ``gdpo_nemo.estimators.groups.constant_within``). A reward as given is
  exact whatever its dtype: a group is constant only when its rewards are equal (bfloat16
  3.0 and 3.03125 differ, 1e6 and 1e6 + 1 differ). A value this package sums (GRPO's
  weighted sum of K >= 2 components, in float64, each less its group's smallest value;
  one weighted reward is taken the same way and judged as given, exactly) carries
  residue of that sum: sums within ``RESIDUE_EPSILONS`` (2) * (2K + 1) float64 epsilons of
  the group's largest sum of |terms| are one value, so equal rewards summed in another order, or combinations with equal sums,
  give exactly 0 rather than residue divided by its own tiny std (``residue_tolerance``
  replaces that tolerance everywhere). The statistics are taken about a value of the group,
  so a constant offset added to every reward leaves the advantages as they were.
  Where the std is 0 the centred value is left undivided (NeMo RL: "don't sharpen the ones
  with no variation"); with a mean baseline that value is exactly 0.
- Elsewhere the centred value is divided by ``std + eps`` (NeMo RL: eps 1e-6, TRL: 1e-4).
- ``scale_rewards`` (TRL's option of that name): ``"group"`` divides by the group std as
  above; ``"none"`` does not divide (TRL ``scale_rewards="none"``, NeMo RL
  ``normalize_rewards: false``, for GRPO and for each GDPO component); ``"batch"`` (GRPO
  only, TRL) divides the group-centred sum by the std of the sums over the whole batch.
- ``single_sample_groups``: a group with one sample has no baseline. ``"raise"`` (default:
  it usually means wrong group ids) or ``"zero"`` (NeMo RL: its advantage is 0, and it still
  counts in GDPO's batch norm).
- ``leave_one_out``: the baseline (and std) of a sample are those of the *other* samples of
  its group, as NeMo RL's ``use_leave_one_out_baseline`` (from RLOO, arXiv 2402.14740).
- NaN rewards (TRL semantics): a NaN component of a sample is left out of its group's
  statistics and adds nothing to that sample's sum; a sample whose components are all NaN
  is left out of every statistic and gets advantage exactly 0. Infinite rewards are an
  error: they have no meaningful normalization.
- Batch norm (gdpo only) over all valid samples: per sample
  ``(A - mean) / (std + batch_norm_eps)`` (NeMo RL: eps 0, TRL: 1e-4), or, when a
  ``token_mask`` [B, T] is given, per token as verl's ``masked_whiten`` (each sample
  weighted by its number of response tokens, ``(A - mean) / sqrt(var + batch_norm_eps)``,
  verl: 1e-8). Where the batch std is 0 (at most the residue tolerance of K terms times the
  sum over components of the largest |w_k A_k|, i.e. components that cancel exactly up to
  float residue) the output is 0.
- ``strict=True`` (with a preset) instead follows that peer's own float32 arithmetic,
  residue included (gdpo_nemo.estimators.strict; differences and sizes: docs/estimators.md).

The package: ``options`` (AdvantageOptions, presets; torch-free), ``registry`` (the
estimators' metadata; torch-free), ``groups`` (prompt groups and their one statistic),
``general`` (the built-in estimators; ``builtin``: their torch-free registry entries), ``dense`` and ``kernel`` (the fast path for
equal-size groups in order), ``strict`` (peers' own arithmetic), ``compute``
(``compute_advantages``) and ``collapse`` (counting distinct advantage groups, Fig. 2-3).
"""

from __future__ import annotations

import importlib
from typing import Any

# Each public name and its module. Resolved on first use (PEP 562), so that importing the
# torch-free modules (options, registry, builtin) does not import torch with this package;
# every name of registry, general and compute comes with the built-in estimators registered.
_HOMES = {
    "AdvantageOptions": "options",
    "PRESETS": "options",
    "RESIDUE_EPSILONS": "options",
    "SCALE_REWARDS": "options",
    "COLLAPSE_KINDS": "registry",
    "ESTIMATORS": "registry",
    "DenseForm": "registry",
    "EstimatorInfo": "registry",
    "NemoRLEstimator": "registry",
    "PlotStyle": "registry",
    "estimator_info": "registry",
    "register_estimator": "registry",
    "unregister_estimator": "registry",
    "RewardOverflow": "general",
    "compute_advantages": "compute",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'gdpo_nemo.estimators' has no attribute {name!r}")
    if home != "options":
        importlib.import_module("gdpo_nemo.estimators.builtin")  # registers the built-ins (torch-free)
    value = getattr(importlib.import_module(f"gdpo_nemo.estimators.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
