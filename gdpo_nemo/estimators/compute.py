"""`compute_advantages`, the one entry of the estimators: input checking, then the dense
path (gdpo_nemo.estimators.dense) where the layout allows, else the registered estimator on
the general path (gdpo_nemo.estimators.general), or a peer's own arithmetic with `strict`
(gdpo_nemo.estimators.strict).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor

from gdpo_nemo.errors import UserError
from gdpo_nemo.estimators import builtin  # noqa: F401  (the built-in estimators, registered)
from gdpo_nemo.estimators import kernel
from gdpo_nemo.estimators.dense import dense_advantages, dense_group_size, kernel_advantages
from gdpo_nemo.estimators.general import RewardOverflow
from gdpo_nemo.estimators.groups import group_index
from gdpo_nemo.estimators.options import AdvantageOptions
from gdpo_nemo.estimators.registry import estimator_info
from gdpo_nemo.estimators.strict import strict_advantages

__all__ = ["compute_advantages"]


_DEFAULT_OPTIONS = AdvantageOptions.resolve()


def _options(options: AdvantageOptions | None, given: Mapping[str, Any]) -> AdvantageOptions:
    """`options` (None: the defaults, or the given preset's) with `given` (names of
    AdvantageOptions' fields) applied, checked."""
    if options is None:
        if not given:
            return _DEFAULT_OPTIONS
        given = dict(given)
        return AdvantageOptions.resolve(given.pop("preset", None), **given)
    if not isinstance(options, AdvantageOptions):
        raise TypeError(f"options must be an AdvantageOptions, got {type(options).__name__}")
    return options.updated(**given).checked()


def _as_columns(
    rewards: Mapping[str, Tensor] | Tensor, component_names: Sequence[str] | None
) -> tuple[list[Tensor], list[str]]:
    """The reward components as float64 Tensor[B] each (views where the input allows; every
    dtype converts exactly) and their names."""
    if isinstance(rewards, Mapping):
        if component_names is not None:
            raise UserError("component_names is only for a Tensor[B, K] of rewards; a dict names its own")
        if not rewards:
            raise UserError("rewards is empty: give at least one named reward component")
        names = list(rewards)
        columns = []
        for name in names:
            column = torch.as_tensor(rewards[name])
            if column.dim() != 1:
                raise UserError(f"rewards[{name!r}] has shape {tuple(column.shape)}; expected a 1-D Tensor[B]")
            columns.append(column)
        devices = {name: str(c.device) for name, c in zip(names, columns)}
        if len(set(devices.values())) != 1:
            raise UserError(f"reward components are on different devices: {devices}; put them on one device")
        lengths = {name: int(c.shape[0]) for name, c in zip(names, columns)}
        if len(set(lengths.values())) != 1:
            raise UserError(f"reward components differ in length: {lengths}; all must be Tensor[B]")
        return [c.to(torch.float64) for c in columns], names
    matrix = torch.as_tensor(rewards)
    if matrix.dim() != 2:
        raise UserError(f"rewards has shape {tuple(matrix.shape)}; expected dict[str, Tensor[B]] or Tensor[B, K]")
    if component_names is None:
        raise UserError("a Tensor[B, K] of rewards needs component_names=[...] (K names)")
    names = list(component_names)
    if len(names) != matrix.shape[1] or len(set(names)) != len(names):
        raise UserError(
            f"component_names {names} must be {matrix.shape[1]} distinct names, one per column of rewards"
        )
    matrix = matrix.to(torch.float64)
    return [matrix[:, k] for k in range(matrix.shape[1])], names


def _weight_vector(names: list[str], reward_weights: Mapping[str, float] | None, device: torch.device) -> Tensor:
    """w_k per component [K] float64 (1 where not named); the names must be components'
    (the weights' form is AdvantageOptions' to check)."""
    weights = torch.ones(len(names), dtype=torch.float64, device=device)
    if reward_weights is None:
        return weights
    unknown = sorted(set(reward_weights) - set(names))
    if unknown:
        raise UserError(f"reward_weights names unknown component(s) {unknown}; the components are {names}")
    for name, weight in reward_weights.items():
        weights[names.index(name)] = float(weight)
    return weights


def compute_advantages(
    rewards: Mapping[str, Tensor] | Tensor,
    group_ids: Tensor,
    estimator: str = "gdpo",
    *,
    options: AdvantageOptions | None = None,
    component_names: Sequence[str] | None = None,
    token_mask: Tensor | None = None,
    **given: Any,
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
        options: an ``AdvantageOptions`` (e.g. ``AdvantageOptions.from_gdpo(config["gdpo"])``);
            None: the defaults, or those of ``given``.
        **given: options by name, the fields of ``AdvantageOptions`` (``preset`` = ``nemo_rl``
            | ``trl`` | ``verl`` first applies that peer's numerics, ``PRESETS``; then
            ``reward_weights``, ``leave_one_out``, ``std_ddof``, ``eps``, ``batch_norm_eps``,
            ``scale_rewards``, ``single_sample_groups``, ``strict``; None keeps the preset's).
            With ``options``, they replace its values.
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
        raise UserError(
            f"estimator {estimator!r} normalizes each reward component separately and needs at least 2;"
            f" got {names}. Use estimator='grpo' for a single reward"
        )
    batch_size = columns[0].shape[0]
    if batch_size == 0:
        raise UserError("rewards has no samples (B = 0)")
    device = columns[0].device
    options = _options(options, given)
    contradictions = options.problems_with(info)
    if contradictions:
        raise UserError("; ".join(contradictions))
    if token_mask is not None:
        token_mask = torch.as_tensor(token_mask, device=device)
        if token_mask.dim() != 2 or token_mask.shape[0] != batch_size:
            raise UserError(
                f"token_mask has shape {tuple(token_mask.shape)}; expected Tensor[B, T] with B = {batch_size}"
            )
    weights = _weight_vector(names, options.reward_weights, device)
    dense = info.dense is not None and token_mask is None
    dense = dense and not (options.strict or options.leave_one_out or options.scale_rewards == "batch")
    on_kernel = dense and device.type == "cpu" and kernel.available()
    size = dense_group_size(group_ids, batch_size, device, verify=not on_kernel) if dense else None
    if size is not None:  # the common layout, in few passes (None: the general path decides)
        if on_kernel:  # one pass over the rewards and ids, which it checks (numba)
            advantages = kernel_advantages(columns, torch.as_tensor(group_ids, device=device), size, info, weights, options)
        else:  # torch ops, on any device
            advantages = dense_advantages(columns, size, info.dense, info.multi_component, weights, options)
            advantages = None if advantages is None else _checked(advantages, estimator, None)
        if advantages is not None:
            return advantages
    matrix = torch.stack(columns, dim=1)
    infinite = torch.isinf(matrix)
    if bool(infinite.any()):
        column = int(infinite.any(dim=0).nonzero()[0])
        raise UserError(f"rewards[{names[column]!r}] contains an infinite value; rewards must be finite or NaN")
    if options.strict:
        return strict_advantages(options.preset, estimator, matrix, group_ids, weights, options, token_mask, names)
    groups, order = group_index(group_ids, batch_size, matrix.device, options.single_sample_groups)
    if order is not None:  # equal-size groups out of order: compute group by group, then undo
        matrix = matrix[order]
        token_mask = None if token_mask is None else token_mask[order]
    valid = ~torch.isnan(matrix)
    values = torch.where(valid, matrix, torch.zeros_like(matrix))
    try:
        advantages = info(values, valid, groups, weights, options, token_mask)
        if order is not None:
            advantages = torch.empty_like(advantages).index_copy_(0, order, advantages)
        return _checked(advantages, estimator, lambda: overflow_message(info, values, weights, names))
    except RewardOverflow as error:
        raise RewardOverflow(f"{overflow_message(info, values, weights, names)}: {error}") from None


# Rewards (and weights) up to about this size have squares and sums within float64's range.
_FLOAT64_SAFE = 1e150


def overflow_message(info, values: Tensor, weights: Tensor, names: list[str]) -> str:
    """What made a statistic or an advantage overflow, by name: the reward component that
    reaches ~1e150 or more, else (the rewards are in range) the largest reward weight (GDPO
    normalizes each component first, so there only a weight can be the cause)."""
    largest = values.abs().amax(dim=0)
    column = int(largest.argmax())
    if float(largest[column]) >= _FLOAT64_SAFE or (not info.multi_component and float(weights.abs().max()) <= 1):
        return (f"rewards[{names[column]!r}] reach {float(largest[column]):.3g}, too large for the statistics in"
                " float64 and the advantages in float32; rescale the reward (|r| up to ~1e30 works on every estimator)")
    reach = weights.abs() if info.multi_component else weights.abs() * largest
    column = int(reach.argmax())
    return (f"reward_weights[{names[column]!r}] = {float(weights[column]):.3g} makes the weighted advantages too large"
            f" for the statistics in float64 and the advantages in float32; use smaller weights (only their ratios"
            " matter to GRPO and GDPO: divide all by the largest)")


def _checked(advantages: Tensor, estimator: str, overflow) -> Tensor:
    """float32 advantages. Finite float64 values beyond float32's range raise RewardOverflow
    (`overflow()` names the cause); any other non-finite value is a bug, never a property
    of the input. With `overflow` None (the dense path) a non-finite value gives None: the
    general path decides."""
    out = advantages.to(torch.float32)
    # A sum is non-finite when any term is (inf, -inf and NaN all propagate), and costs a
    # tenth of isfinite's mask; only an overflowing sum of finite values needs the mask.
    if not math.isfinite(float(out.sum())) and not bool(torch.isfinite(out).all()):
        if overflow is None:
            return None  # the general path decides, and says which
        if bool(torch.isfinite(advantages).all()):
            raise RewardOverflow(f"{overflow()}: an advantage overflows float32")
        raise RuntimeError(f"estimator {estimator!r} produced a non-finite advantage")
    return out
