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
``compute_advantages`` is the one public entry. Everything is vectorized over the batch (no Python loop over groups).

Semantics shared by all estimators, each taken from a peer (``preset`` reproduces them):

- Group std uses ``std_ddof`` (1 = Bessel, as NeMo RL, TRL and verl do). A group whose
  values are all equal has std exactly 0: equality is max - min <= 1e-6 * max(|max|, |min|)
  (``RELATIVE_TOLERANCE``), never a std residue, because a float sum of the same rewards in
  another order can differ in its last bit and dividing that residue by its own tiny std
  would turn noise into a +-1 advantage.
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
  verl: 1e-8). Where the batch std is 0 (at most ``RELATIVE_TOLERANCE`` times the sum over
  components of the largest |w_k A_k|, i.e. components that cancel exactly up to float
  residue) the output is 0.
- ``strict=True`` (with a preset) instead follows that peer's own float32 arithmetic,
  residue included (gdpo_nemo.advantages_strict; differences and sizes: docs/estimators.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

import torch
from torch import Tensor

from gdpo_nemo import dense_kernel

__all__ = [
    "COLLAPSE_KINDS",
    "ESTIMATORS",
    "PRESETS",
    "AdvantageOptions",
    "DenseForm",
    "EstimatorInfo",
    "NemoRLEstimator",
    "PlotStyle",
    "compute_advantages",
    "estimator_info",
    "register_estimator",
    "unregister_estimator",
]

# Above float32 epsilon (1.2e-7): rewards usually arrive as float32, and their quantization
# is the residue this tolerance absorbs.
RELATIVE_TOLERANCE = 1e-6
SCALE_REWARDS = ("group", "batch", "none")


@dataclass(frozen=True)
class AdvantageOptions:
    """Numerical options of the estimators. Defaults are NeMo RL's (the cluster engine)."""

    std_ddof: int = 1
    """Delta degrees of freedom of every std (group and batch): 1 = Bessel (all peers), 0 = population."""
    eps: float = 1e-6
    """Added to a non-zero group std before dividing (NeMo RL 1e-6, TRL 1e-4, verl 1e-6)."""
    batch_norm_eps: float = 0.0
    """Per-sample BN: added to the batch std (NeMo RL 0, TRL 1e-4). Per-token BN: added to the
    variance inside the square root (verl's masked_whiten: 1e-8)."""
    leave_one_out: bool = False
    """Baseline and std from the other samples of the group (NeMo RL use_leave_one_out_baseline)."""
    scale_rewards: str = "group"
    """"group": divide by the group std; "none": do not (TRL scale_rewards="none", NeMo RL
    normalize_rewards: false); "batch" (grpo only): divide by the batch std of the reward sums (TRL)."""
    single_sample_groups: str = "raise"
    """A group of one sample: "raise" a ValueError, or "zero": advantage 0 (NeMo RL)."""
    strict: bool = False
    """Reproduce the preset's peer exactly: its float32 formulas, float residue of constant
    groups included (gdpo_nemo.advantages_strict). Needs a preset."""


PRESETS: dict[str, dict[str, object]] = {
    # NeMo RL main (GDPOAdvantageEstimator + calculate_baseline_and_std_per_prompt).
    "nemo_rl": {"std_ddof": 1, "eps": 1e-6, "batch_norm_eps": 0.0, "single_sample_groups": "zero"},
    # TRL >= 0.27, multi_objective_aggregation="normalize_then_sum".
    "trl": {"std_ddof": 1, "eps": 1e-4, "batch_norm_eps": 1e-4},
    # The GDPO authors' verl: group eps 1e-6, BN per token by masked_whiten (rsqrt(var + 1e-8)).
    "verl": {"std_ddof": 1, "eps": 1e-6, "batch_norm_eps": 1e-8},
}


@dataclass(frozen=True)
class _Groups:
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


EstimatorFn = Callable[[Tensor, Tensor, _Groups, Tensor, AdvantageOptions, "Tensor | None"], Tensor]

# How gdpo_nemo.collapse counts an estimator's distinct advantage groups for binary rewards
# (paper Fig. 3), by the shape of its formula: "centred_sum" (the reward sum minus its group
# mean, grpo_no_std), "normalized_sum" (that over its group std, grpo), "normalized_components"
# (each reward over its own group std, then summed: gdpo; batch norm does not change the count).
COLLAPSE_KINDS = ("centred_sum", "normalized_sum", "normalized_components")


@dataclass(frozen=True)
class PlotStyle:
    """How figures draw an estimator: the same colour in every figure of the paper."""

    color: str
    """A matplotlib colour ("tab:blue")."""
    marker: str
    """A matplotlib marker of its points (paper Fig. 3: "o", "s", "^")."""
    linestyle: str
    """A matplotlib line style of its training curves ("-", "--")."""


@dataclass(frozen=True)
class NemoRLEstimator:
    """NeMo RL's own advantage estimator that computes the same thing (grpo.adv_estimator)."""

    name: str
    """NeMo RL's grpo.adv_estimator.name ("grpo", "gdpo")."""
    normalize_rewards: bool = True
    """NeMo RL's grpo.adv_estimator.normalize_rewards (false: no division by the group std)."""


@dataclass(frozen=True)
class DenseForm:
    """What the dense path of `compute_advantages` (equal-size groups in order, no token mask)
    computes for an estimator, by structure rather than by name: each reward (when
    multi-component) or the weighted reward sum is centred in its group, divided by its
    group std when `divide_by_group_std` (and scale_rewards is "group"), summed, and
    batch-normalized when `batch_norm`."""

    divide_by_group_std: bool = True
    batch_norm: bool = False

    def divides(self, options: AdvantageOptions) -> bool:
        """Whether the centred values are divided by their group std under `options`."""
        return self.divide_by_group_std and options.scale_rewards == "group"


@dataclass(frozen=True)
class EstimatorInfo:
    """One registered advantage estimator: its function and everything the rest of the
    package needs to know about it, declared once at `register_estimator`.

    Calling an `EstimatorInfo` calls its function (see `register_estimator` for the
    signature), so ``ESTIMATORS[name](...)`` computes advantages."""

    name: str
    """The config's name (gdpo.estimator), lower case."""
    fn: EstimatorFn
    label: str
    """Display name in tables and figure legends ("GDPO w/o BN")."""
    multi_component: bool = False
    """Normalizes each reward component separately: needs at least 2 components."""
    nemo_rl: NemoRLEstimator | None = None
    """NeMo RL's own estimator for it, or None when only gdpo_nemo's hook can run it."""
    collapse_key: str | Callable[[tuple[int, ...], int], object] | None = None
    """How gdpo_nemo.collapse counts its distinct advantage groups: a kind of
    `COLLAPSE_KINDS`, or a function (group as G ints whose bit k is reward k, num_rewards)
    -> a hashable key equal exactly for equal sorted advantage tuples; None: not countable."""
    style: PlotStyle | None = None
    """None: figures give it a colour of their own (dash-dot line)."""
    in_fig3: bool = False
    """Drawn in the paper's Fig. 3 (and its Fig. 2 toy table); needs `collapse_key`."""
    dense: DenseForm | None = None
    """Its form on the dense fast path; None: always the general path (its `fn`)."""
    token_batch_norm: bool = False
    """Ends with a batch normalization that a token_mask makes per token (verl): the one
    estimator gdpo.batch_norm "token" applies to."""
    scale_rewards: tuple[str, ...] = ("group", "none")
    """The values of AdvantageOptions.scale_rewards it accepts ("batch" is TRL's, GRPO only)."""

    def __call__(self, rewards, valid, groups, weights, options, token_mask):
        """The estimator: advantages [B] float64 (arguments as in `register_estimator`)."""
        return self.fn(rewards, valid, groups, weights, options, token_mask)


_REGISTRY: dict[str, EstimatorInfo] = {}
ESTIMATORS: Mapping[str, EstimatorInfo] = MappingProxyType(_REGISTRY)
"""Read-only view {name: EstimatorInfo} of the registered estimators, in registration order
(the display order of tables and figures)."""


def estimator_info(name: str) -> EstimatorInfo:
    """The registered estimator `name`; a ValueError naming it and the accepted names if none."""
    info = _REGISTRY.get(name) if isinstance(name, str) else None
    if info is None:
        raise ValueError(f"unknown estimator {name!r}; expected one of {list(_REGISTRY)}")
    return info


def register_estimator(
    name: str,
    *,
    label: str | None = None,
    multi_component: bool = False,
    nemo_rl: NemoRLEstimator | None = None,
    collapse_key: str | Callable[[tuple[int, ...], int], object] | None = None,
    style: PlotStyle | None = None,
    in_fig3: bool = False,
    dense: DenseForm | None = None,
    scale_rewards: Sequence[str] = ("group", "none"),
    token_batch_norm: bool = False,
) -> Callable[[EstimatorFn], EstimatorFn]:
    """Register an estimator under `name`, with its metadata (fields of `EstimatorInfo`;
    `label` defaults to `name`).

    The function receives `(rewards [B, K] float64 with NaN already zeroed, valid [B, K] bool,
    groups, weights [K] float64, options, token_mask [B, T] or None)` and returns the
    advantage [B] float64; samples with no valid component must get 0. The decorator
    returns the function unchanged.
    """
    if not isinstance(name, str) or not name.isidentifier() or name != name.lower():
        raise ValueError(f"estimator name {name!r}: expected a lower-case Python identifier (it is a config value)")
    if isinstance(collapse_key, str) and collapse_key not in COLLAPSE_KINDS:
        raise ValueError(
            f"estimator {name!r}: collapse_key {collapse_key!r}; expected one of {list(COLLAPSE_KINDS)} or a function"
        )
    if in_fig3 and collapse_key is None:
        raise ValueError(f"estimator {name!r}: in_fig3 needs a collapse_key (Fig. 3 counts its advantage groups)")
    unknown = [value for value in scale_rewards if value not in SCALE_REWARDS]
    if unknown or not scale_rewards:
        raise ValueError(
            f"estimator {name!r}: scale_rewards {list(scale_rewards)}; expected a non-empty subset of {list(SCALE_REWARDS)}"
        )

    def decorate(fn: EstimatorFn) -> EstimatorFn:
        if name in _REGISTRY:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        _REGISTRY[name] = EstimatorInfo(
            name=name, fn=fn, label=name if label is None else label, multi_component=multi_component,
            nemo_rl=nemo_rl, collapse_key=collapse_key, style=style, in_fig3=in_fig3, dense=dense,
            scale_rewards=tuple(scale_rewards), token_batch_norm=token_batch_norm,
        )
        return fn

    return decorate


def unregister_estimator(name: str) -> EstimatorInfo:
    """Remove the estimator `name` and return its entry (for tests and plugins that
    register one for a while); a ValueError if it is not registered."""
    info = estimator_info(name)
    del _REGISTRY[name]
    return info


# ---------------------------------------------------------------------------------------
# Group statistics, vectorized with index_add / scatter_reduce over the group index.
# ---------------------------------------------------------------------------------------


def _others_constant(values: Tensor, valid: Tensor, groups: _Groups) -> Tensor:
    """[B, K] bool: the valid group-mates of each sample (itself excluded) are all equal, within
    the relative tolerance that makes a whole group constant (`_constant`).

    The others' max and min are found from the group's largest and second-largest distinct
    values and how many samples hold the largest.
    """
    index = groups.index
    others = []
    for reduce in ("amax", "amin"):
        top = groups.extreme(values, valid, reduce)  # [N, K]
        at_top = valid & (values == top[index])
        n_top = groups.sum(at_top.to(values.dtype))[index]  # [B, K]
        second = groups.extreme(values, valid & ~at_top, reduce)[index]
        # Without this sample, the extreme stays `top` unless it was the only one there.
        only_one = at_top & (n_top == 1)
        others.append(torch.where(only_one, second, top[index]))
    hi, lo = others
    # No other valid sample at all (hi = -inf, lo = +inf) counts as constant: no variation.
    return (hi < lo) | _constant(hi, lo)


def _constant(hi: Tensor, lo: Tensor) -> Tensor:
    """Values between `lo` and `hi` are one value up to float residue: hi - lo <=
    RELATIVE_TOLERANCE * max(|hi|, |lo|) (exactly equal included)."""
    return (hi - lo) <= RELATIVE_TOLERANCE * torch.maximum(hi.abs(), lo.abs())


def _normalize_in_groups(
    values: Tensor, valid: Tensor, groups: _Groups, options: AdvantageOptions, divide_by_std: bool
) -> Tensor:
    """Centre each column of `values` [B, K] in its group, optionally divide by the group std.

    Invalid entries (and groups with fewer than 2 valid samples, where no baseline exists
    besides the sample itself) give 0. Returns float64 [B, K].
    """
    index = groups.index
    vf = valid.to(values.dtype)
    count = groups.sum(vf)  # [N, K]
    mean = groups.sum(values * vf) / count.clamp(min=1)
    hi = groups.extreme(values, valid, "amax")
    lo = groups.extreme(values, valid, "amin")
    constant = _constant(hi, lo)
    # Exact zero for constant groups: their mean can carry a rounding residue.
    centred = torch.where(valid & ~constant[index], values - mean[index], torch.zeros_like(values))
    sq_dev = groups.sum(centred * centred)  # [N, K]
    _refuse_overflow(sq_dev, "a group's squared deviations")
    n = count[index]  # [B, K]

    if options.leave_one_out:
        m = n - 1  # number of group-mates of each sample
        # r_i - mean(others) = c_i * n / m, with c_i = r_i - mean(group).
        advantage = centred * n / m.clamp(min=1)
        # Squared deviations of the others about their own mean.
        others_sq = (sq_dev[index] - centred * centred * n / m.clamp(min=1)).clamp(min=0)
        dof = m - options.std_ddof
        std = torch.where(dof > 0, (others_sq / dof.clamp(min=1)).sqrt(), torch.zeros_like(others_sq))
        std = torch.where(_others_constant(values, valid, groups), torch.zeros_like(std), std)
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


class RewardOverflow(ValueError):
    """Rewards so large that the squares of their deviations overflow float64 (|r| around
    1e154 and beyond): a std cannot be computed, and no advantage is given in its place."""


def _refuse_overflow(squares: Tensor, what: str) -> None:
    """Raise RewardOverflow when `squares` (sums of squares of finite values) overflowed."""
    if not math.isfinite(float(squares.sum())) and not bool(torch.isfinite(squares).all()):
        raise RewardOverflow(f"{what} overflow float64")


def _batch_norm(
    values: Tensor, row_valid: Tensor, options: AdvantageOptions, token_mask: Tensor | None, scale: float
) -> Tensor:
    """Normalize `values` [B] over the valid samples of the batch (per sample or per token).

    `scale` is the magnitude of the terms `values` was summed from (sum over components of
    the largest |w_k A_k|): a batch std below RELATIVE_TOLERANCE * scale is float residue of
    exact cancellation, and gives 0.
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
    if var <= 0 or float(var.sqrt()) <= RELATIVE_TOLERANCE * scale:
        return torch.zeros_like(values)
    if token_mask is None:
        return centred / (var.sqrt() + options.batch_norm_eps)
    return centred / (var + options.batch_norm_eps).sqrt()


def _batch_std(values: Tensor, row_valid: Tensor, options: AdvantageOptions, scale: float) -> Tensor:
    """Std of `values` [B] over the valid samples (``std_ddof``); 0 when that is below
    RELATIVE_TOLERANCE * `scale` (float residue of a constant batch) or undefined."""
    weight = row_valid.to(values.dtype)
    total = weight.sum()
    dof = total - options.std_ddof
    if dof <= 0:
        return values.new_zeros(())
    mean = (weight * values).sum() / total
    var = (weight * (values - mean) ** 2).sum() / dof
    _refuse_overflow(var, "the batch's squared deviations")
    std = var.sqrt()
    return values.new_zeros(()) if float(std) <= RELATIVE_TOLERANCE * scale else std


def _weighted_sum(parts: Tensor, valid: Tensor, weights: Tensor) -> Tensor:
    """sum_k w_k * parts[:, k] over the valid components of each sample: [B, K] -> [B]."""
    return torch.where(valid, parts * weights, torch.zeros_like(parts)).sum(dim=1)


# ---------------------------------------------------------------------------------------
# The estimators.
# ---------------------------------------------------------------------------------------


def _grpo(rewards, valid, groups, weights, options, token_mask, scale_rewards: str) -> Tensor:
    row_valid = valid.any(dim=1, keepdim=True)
    reward_sum = _weighted_sum(rewards, valid, weights).unsqueeze(1)
    centred = _normalize_in_groups(reward_sum, row_valid, groups, options, scale_rewards == "group").squeeze(1)
    if scale_rewards != "batch":
        return centred
    # TRL scale_rewards="batch": the group-centred sum over the std of the sums in the batch.
    scale = float(reward_sum.abs().max())
    std = _batch_std(reward_sum.squeeze(1), row_valid.squeeze(1), options, scale)
    return torch.where(std > 0, centred / (std + options.eps), centred)


@register_estimator("grpo", label="GRPO", nemo_rl=NemoRLEstimator("grpo", normalize_rewards=True),
                    collapse_key="normalized_sum", style=PlotStyle("tab:blue", "o", "-"), in_fig3=True,
                    dense=DenseForm(divide_by_group_std=True), scale_rewards=SCALE_REWARDS)
def grpo(rewards, valid, groups, weights, options, token_mask):
    """GRPO (paper Eq. 1-2): sum the weighted components, normalize the sum within each group
    (``scale_rewards``: by the group std, the batch std, or not at all)."""
    return _grpo(rewards, valid, groups, weights, options, token_mask, options.scale_rewards)


@register_estimator("grpo_no_std", label="GRPO w/o std", nemo_rl=NemoRLEstimator("grpo", normalize_rewards=False),
                    collapse_key="centred_sum", style=PlotStyle("tab:orange", "s", "--"), in_fig3=True,
                    dense=DenseForm(divide_by_group_std=False))
def grpo_no_std(rewards, valid, groups, weights, options, token_mask):
    """GRPO without std normalization (Dr.GRPO-style; NeMo RL normalize_rewards: false)."""
    return _grpo(rewards, valid, groups, weights, options, token_mask, "none")


# NeMo RL has no GDPO without batch norm (nemo_rl=None): gdpo_nemo's hook runs it there.
@register_estimator("gdpo_no_bn", label="GDPO w/o BN", multi_component=True, nemo_rl=None,
                    collapse_key="normalized_components", style=PlotStyle("tab:purple", "D", "--"),
                    dense=DenseForm(divide_by_group_std=True))
def gdpo_no_bn(rewards, valid, groups, weights, options, token_mask):
    """GDPO without the final batch normalization (paper ablation): sum_k w_k A_k."""
    per_component = _normalize_in_groups(rewards, valid, groups, options, options.scale_rewards == "group")
    return _weighted_sum(per_component, valid, weights)


@register_estimator("gdpo", label="GDPO", multi_component=True, nemo_rl=NemoRLEstimator("gdpo", normalize_rewards=True),
                    collapse_key="normalized_components", style=PlotStyle("tab:green", "^", "-"), in_fig3=True,
                    dense=DenseForm(divide_by_group_std=True, batch_norm=True), token_batch_norm=True)
def gdpo(rewards, valid, groups, weights, options, token_mask):
    """GDPO (paper Eqs. 4-6): normalize each component in its group, sum, batch-normalize
    (``scale_rewards="none"``: centre each component without dividing by its std, NeMo RL's
    GDPO with normalize_rewards: false)."""
    per_component = _normalize_in_groups(rewards, valid, groups, options, options.scale_rewards == "group")
    advantage_sum = _weighted_sum(per_component, valid, weights)
    scale = float((per_component.abs().amax(dim=0) * weights.abs()).sum())
    return _batch_norm(advantage_sum, valid.any(dim=1), options, token_mask, scale)


# ---------------------------------------------------------------------------------------
# Public entry: input checking, then the registry.
# ---------------------------------------------------------------------------------------


def _as_columns(
    rewards: Mapping[str, Tensor] | Tensor, component_names: Sequence[str] | None
) -> tuple[list[Tensor], list[str]]:
    """The reward components as float64 Tensor[B] each (views where the input allows), and
    their names."""
    if isinstance(rewards, Mapping):
        if component_names is not None:
            raise ValueError("component_names is only for a Tensor[B, K] of rewards; a dict names its own")
        if not rewards:
            raise ValueError("rewards is empty: give at least one named reward component")
        names = list(rewards)
        columns = []
        for name in names:
            column = torch.as_tensor(rewards[name])
            if column.dim() != 1:
                raise ValueError(f"rewards[{name!r}] has shape {tuple(column.shape)}; expected a 1-D Tensor[B]")
            columns.append(column)
        devices = {name: str(c.device) for name, c in zip(names, columns)}
        if len(set(devices.values())) != 1:
            raise ValueError(f"reward components are on different devices: {devices}; put them on one device")
        lengths = {name: int(c.shape[0]) for name, c in zip(names, columns)}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"reward components differ in length: {lengths}; all must be Tensor[B]")
        return [c.to(torch.float64) for c in columns], names
    matrix = torch.as_tensor(rewards)
    if matrix.dim() != 2:
        raise ValueError(f"rewards has shape {tuple(matrix.shape)}; expected dict[str, Tensor[B]] or Tensor[B, K]")
    if component_names is None:
        raise ValueError("a Tensor[B, K] of rewards needs component_names=[...] (K names)")
    names = list(component_names)
    if len(names) != matrix.shape[1] or len(set(names)) != len(names):
        raise ValueError(
            f"component_names {names} must be {matrix.shape[1]} distinct names, one per column of rewards"
        )
    matrix = matrix.to(torch.float64)
    return [matrix[:, k] for k in range(matrix.shape[1])], names


def _dense_group_size(group_ids: Tensor, batch_size: int, device: torch.device, verify: bool = True) -> int | None:
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
    grouped: list[Tensor], options: AdvantageOptions, scratch: Tensor
) -> tuple[Tensor, Tensor, Tensor] | None:
    """Per group of each of the K tensors `grouped` [N, G]: (mean, std, constant), each
    [K, N] (constant: bool), from the group sums of x and x^2, plus a min/max over the few
    groups that may be constant up to float residue. None when a value is not finite or a
    group's |mean| / std is too large for E[x^2] - E[x]^2 (the general path takes over).
    `scratch` [N, G] float64 receives each x^2 in turn (its content is left undefined).

    The K tensors' statistics share one [2, K, N] buffer, so everything after the
    reductions is a handful of ops over all components at once rather than per component.
    A group is constant when max - min <= RELATIVE_TOLERANCE * max(|max|, |min|); such a
    group has a true std <= 2 * RELATIVE_TOLERANCE * |mean|, so only groups below about that
    need their min and max."""
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
    maybe = (std > 0) & (std <= 4 * RELATIVE_TOLERANCE * magnitude)
    for k, values in enumerate(grouped):
        rows = maybe[k].nonzero().squeeze(1)
        if rows.numel():
            lo, hi = torch.aminmax(values[rows], dim=1)
            constant[k, rows] = (hi - lo) <= RELATIVE_TOLERANCE * torch.maximum(hi.abs(), lo.abs())
    if not bool(((magnitude <= _DENSE_MEAN_TO_STD * std) | constant).all()):
        return None
    return mean, std, constant


def _dense_advantages(
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
    On CPU, `gdpo_nemo.dense_kernel` computes the same in one pass instead."""
    divide = form.divides(options)
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
        stats = _group_statistics(chunk, options, scratch[: total.shape[0]])
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
    if std <= RELATIVE_TOLERANCE * scale:
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


def _kernel_advantages(
    columns: list[Tensor], group_ids: Tensor, size: int, info: EstimatorInfo, weights: Tensor, options: AdvantageOptions
) -> Tensor | None:
    """The dense path on CPU by `gdpo_nemo.dense_kernel` (checked float32 advantages), or
    None where the general path must decide, group ids that are not runs of `size` included."""
    return dense_kernel.dense_advantages(
        columns, group_ids, size, weights, divide=info.dense.divides(options), sum_first=not info.multi_component,
        batch_norm=info.dense.batch_norm, eps=options.eps, ddof=options.std_ddof,
        batch_norm_eps=options.batch_norm_eps, tolerance=RELATIVE_TOLERANCE,
    )


def _group_index(
    group_ids: Tensor, batch_size: int, device: torch.device, single_sample_groups: str = "raise"
) -> tuple[_Groups, Tensor | None]:
    """The groups of `group_ids`, and the permutation that orders the batch group by group
    when all groups have the same size (None when that is not needed or not possible).
    Everything is on `device` (the rewards'): group ids are metadata and follow them."""
    group_ids = torch.as_tensor(group_ids, device=device)
    if group_ids.dim() != 1 or group_ids.shape[0] != batch_size:
        raise ValueError(f"group_ids has shape {tuple(group_ids.shape)}; expected Tensor[B] with B = {batch_size}")
    if group_ids.is_floating_point() or group_ids.is_complex() or group_ids.dtype == torch.bool:
        raise ValueError(f"group_ids has dtype {group_ids.dtype}; expected an integer tensor of prompt group ids")
    unique, index, sizes = torch.unique(group_ids, return_inverse=True, return_counts=True)
    small = sizes < 2
    if single_sample_groups == "raise" and bool(small.any()):
        bad = unique[small][:5].tolist()
        raise ValueError(
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
        return _Groups(index=contiguous, num_groups=num_groups, size=size), order
    return _Groups(index=index, num_groups=num_groups), None


def _weight_vector(names: list[str], reward_weights: Mapping[str, float] | None, device: torch.device) -> Tensor:
    weights = torch.ones(len(names), dtype=torch.float64, device=device)
    if reward_weights is None:
        return weights
    if not isinstance(reward_weights, Mapping):
        raise ValueError(
            f"reward_weights must map component names to weights, e.g. {{'{names[0]}': 1.0}}; got {reward_weights!r}"
        )
    unknown = sorted(set(reward_weights) - set(names))
    if unknown:
        raise ValueError(f"reward_weights names unknown component(s) {unknown}; the components are {names}")
    for name, weight in reward_weights.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise ValueError(f"reward_weights[{name!r}] = {weight!r}; expected a finite number")
        weights[names.index(name)] = float(weight)
    return weights


def resolve_options(preset: str | None = None, **overrides) -> AdvantageOptions:
    """The options of `preset` (None = NeMo RL's defaults) with `overrides` (None = keep)."""
    options = AdvantageOptions()
    if preset is not None:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; expected one of {sorted(PRESETS)} or None")
        options = replace(options, **PRESETS[preset])
    options = replace(options, **{k: v for k, v in overrides.items() if v is not None})
    if options.std_ddof not in (0, 1) or isinstance(options.std_ddof, bool):
        raise ValueError(f"std_ddof = {options.std_ddof!r}; expected 0 or 1")
    for key, accepted in (("scale_rewards", SCALE_REWARDS), ("single_sample_groups", ("raise", "zero"))):
        if getattr(options, key) not in accepted:
            raise ValueError(f"{key} = {getattr(options, key)!r}; expected one of {list(accepted)}")
    if not isinstance(options.strict, bool):
        raise ValueError(f"strict = {options.strict!r}; expected True or False")
    if options.strict and preset is None:
        raise ValueError(f"strict=True reproduces a peer exactly and needs preset= one of {sorted(PRESETS)}")
    for key in ("eps", "batch_norm_eps"):
        value = getattr(options, key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{key} = {value!r}; expected a finite number >= 0")
    return options


def compute_advantages(
    rewards: Mapping[str, Tensor] | Tensor,
    group_ids: Tensor,
    estimator: str = "gdpo",
    *,
    component_names: Sequence[str] | None = None,
    preset: str | None = None,
    reward_weights: Mapping[str, float] | None = None,
    leave_one_out: bool | None = None,
    std_ddof: int | None = None,
    eps: float | None = None,
    batch_norm_eps: float | None = None,
    scale_rewards: str | None = None,
    single_sample_groups: str | None = None,
    strict: bool | None = None,
    token_mask: Tensor | None = None,
) -> Tensor:
    """Advantages of a batch of rollouts from named reward components.

    Args:
        rewards: ``dict[name, Tensor[B]]`` of reward components, or ``Tensor[B, K]`` together
            with ``component_names`` (K names). NaN marks a component a sample has no value
            for; +-inf is rejected.
        group_ids: ``Tensor[B]`` integer prompt-group id of each sample; groups may be of any
            size >= 2 and in any order.
        estimator: a registered name (``ESTIMATORS``; the paper's are ``grpo``, ``grpo_no_std``,
            ``gdpo_no_bn`` and ``gdpo``).
        preset: ``nemo_rl`` | ``trl`` | ``verl`` | None: numerical defaults of that peer
            (see ``PRESETS``); the explicit options below override it.
        reward_weights: ``{name: w_k}``; components not named get 1 (paper: all 1).
        leave_one_out: baseline and std from the other samples of the group (NeMo RL).
        std_ddof: 0 or 1 (default 1, Bessel).
        eps: added to a non-zero group std (default 1e-6).
        batch_norm_eps: see ``AdvantageOptions.batch_norm_eps`` (default 0).
        scale_rewards: ``"group"`` (default) | ``"none"`` | ``"batch"`` (grpo only): what the
            group-centred reward is divided by (TRL's option; NeMo RL normalize_rewards:
            false is "none").
        single_sample_groups: ``"raise"`` (default) | ``"zero"`` (preset ``nemo_rl``):
            what a group of one sample gets.
        strict: with a preset, reproduce that peer exactly (float32, its formulas, float
            residue of constant groups kept; docs/estimators.md) instead of the robust default.
        token_mask: ``Tensor[B, T]`` of response tokens; with it GDPO's batch norm is per
            token (verl), weighting each sample by its response length.

    Device: the computation runs on the rewards' device (CPU, CUDA, any device with float64)
    and the result is returned there; `group_ids` and `token_mask` are moved to it.

    Returns:
        ``Tensor[B]`` float32 on the rewards' device: one advantage per sample (constant
        over its tokens). Finite; 0 for samples whose components are all NaN.
    """
    info = estimator_info(estimator)
    columns, names = _as_columns(rewards, component_names)
    if info.multi_component and len(names) < 2:
        raise ValueError(
            f"estimator {estimator!r} normalizes each reward component separately and needs at least 2;"
            f" got {names}. Use estimator='grpo' for a single reward"
        )
    batch_size = columns[0].shape[0]
    if batch_size == 0:
        raise ValueError("rewards has no samples (B = 0)")
    device = columns[0].device
    options = resolve_options(
        preset,
        leave_one_out=leave_one_out,
        std_ddof=std_ddof,
        eps=eps,
        batch_norm_eps=batch_norm_eps,
        scale_rewards=scale_rewards,
        single_sample_groups=single_sample_groups,
        strict=strict,
    )
    if options.scale_rewards not in info.scale_rewards:
        raise ValueError(
            f"scale_rewards={options.scale_rewards!r} does not apply to estimator {estimator!r};"
            f" it takes {' or '.join(repr(s) for s in info.scale_rewards)}"
        )
    if token_mask is not None:
        token_mask = torch.as_tensor(token_mask, device=device)
        if token_mask.dim() != 2 or token_mask.shape[0] != batch_size:
            raise ValueError(
                f"token_mask has shape {tuple(token_mask.shape)}; expected Tensor[B, T] with B = {batch_size}"
            )
    weights = _weight_vector(names, reward_weights, device)
    dense = info.dense is not None and token_mask is None
    dense = dense and not (options.strict or options.leave_one_out or options.scale_rewards == "batch")
    kernel = dense and device.type == "cpu" and dense_kernel.available()
    size = _dense_group_size(group_ids, batch_size, device, verify=not kernel) if dense else None
    if size is not None:  # the common layout, in few passes (None: the general path decides)
        if kernel:  # one pass over the rewards and ids, which it checks (numba)
            advantages = _kernel_advantages(columns, torch.as_tensor(group_ids, device=device), size, info, weights, options)
        else:  # torch ops, on any device
            advantages = _dense_advantages(columns, size, info.dense, info.multi_component, weights, options)
            advantages = None if advantages is None else _checked(advantages, estimator)
        if advantages is not None:
            return advantages
    matrix = torch.stack(columns, dim=1)
    infinite = torch.isinf(matrix)
    if bool(infinite.any()):
        column = int(infinite.any(dim=0).nonzero()[0])
        raise ValueError(f"rewards[{names[column]!r}] contains an infinite value; rewards must be finite or NaN")
    if options.strict:
        from gdpo_nemo.advantages_strict import strict_advantages

        return strict_advantages(preset, estimator, matrix, group_ids, weights, options, token_mask, names)
    groups, order = _group_index(group_ids, batch_size, matrix.device, options.single_sample_groups)
    if order is not None:  # equal-size groups out of order: compute group by group, then undo
        matrix = matrix[order]
        token_mask = None if token_mask is None else token_mask[order]
    valid = ~torch.isnan(matrix)
    values = torch.where(valid, matrix, torch.zeros_like(matrix))
    try:
        advantages = info(values, valid, groups, weights, options, token_mask)
    except RewardOverflow as error:
        largest = values.abs().amax(dim=0)
        column = int(largest.argmax())
        raise RewardOverflow(
            f"rewards[{names[column]!r}] reach {float(largest[column]):.3g}: {error}, so no std (and no"
            " advantage) can be computed; rescale the reward (|r| up to ~1e150 works)"
        ) from None
    if order is not None:
        advantages = torch.empty_like(advantages).index_copy_(0, order, advantages)
    return _checked(advantages, estimator)


def _checked(advantages: Tensor, estimator: str) -> Tensor:
    """float32 advantages; a non-finite one is a bug, never a property of the input."""
    out = advantages.to(torch.float32)
    # A sum is non-finite when any term is (inf, -inf and NaN all propagate), and costs a
    # tenth of isfinite's mask; only an overflowing sum of finite values needs the mask.
    if not math.isfinite(float(out.sum())) and not bool(torch.isfinite(out).all()):
        raise RuntimeError(f"estimator {estimator!r} produced a non-finite advantage")
    return out
