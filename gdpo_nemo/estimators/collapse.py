"""Advantage collapse: how many distinct advantage groups an estimator can produce.

Paper Fig. 2-3: with n binary rewards and G rollouts, a group's outcome is a multiset of G
reward vectors from {0,1}^n. GRPO sees only the sums, so distinct outcomes collapse onto the
same advantages; GDPO normalizes each reward separately and keeps more of them apart.

Definition used here (stated in the README too): the number of distinct advantage groups of
an estimator for (n, G) is the number of distinct *sorted* advantage tuples
``sorted(A_1..A_G)`` over all multisets of G reward vectors, computed within one group and
before GDPO's batch normalization (a batch-wide affine map, which Fig. 2 also skips:
NVlabs/GDPO issue #3). So ``gdpo`` and ``gdpo_no_bn`` count the same.

The count is exact: no epsilon, no rounding. Each advantage tuple is mapped to an exact
canonical key, chosen by the ``collapse_key`` an estimator declares in the registry
(gdpo_nemo.estimators.registry; a function of its own, or one of these kinds):

- ``"centred_sum"`` (grpo_no_std): A_i = (G s_i - S) / G with integer sums, so the integer
  vector d = G s - S is the key.
- ``"normalized_sum"`` (grpo): A = d / std(d) depends only on the direction of d; the
  gcd-reduced integer vector is the key (0 for a constant group).
- ``"normalized_components"`` (gdpo, gdpo_no_bn): A_i = sqrt(G-1) * sum_k d_ki / ||d_k||.
  Write ||d_k||^2 = c_k m_k^2 with c_k square-free; then A_i / sqrt(G-1) = sum_c (1/sqrt(c)) * sum_{k: c_k=c} d_ki / m_k. Square
  roots of distinct square-free integers are linearly independent over the rationals, so
  the map c -> rational coefficient is a unique representation; it is the key. A binary
  column with s ones has ||d||^2 = G s (G - s), so every m_k divides L(G) = lcm over s of
  m(G s (G - s)); the coefficients are kept as integers times L(G) (same key, no fractions).

Every setting of the paper's Fig. 3 enumerates (the largest, n = 6 and G = 4, has 766,480
multisets and takes well under a minute). Settings with more than ``max_enumerate``
multisets are estimated by sampling random groups; a sampled count is a lower bound (the
distinct tuples seen).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Iterator
from functools import lru_cache

import torch
from torch import Tensor

from gdpo_nemo.errors import UserError
from gdpo_nemo.estimators import builtin  # noqa: F401  (the built-in estimators, registered)
from gdpo_nemo.estimators.groups import group_extremes, group_rows
from gdpo_nemo.estimators.registry import ESTIMATORS, estimator_info

__all__ = [
    "collapsed_group_fraction",
    "component_advantage_gaps",
    "count_advantage_groups",
    "countable_estimators",
    "distinct_advantage_groups",
    "num_multisets",
    "zero_std_fraction",
]

# Enumeration holds only the distinct keys in memory; this bounds its time (~1 minute for
# the largest Fig. 3 setting, n = 6, G = 4: 766,480 multisets).
DEFAULT_MAX_ENUMERATE = 1_000_000


def num_multisets(num_rewards: int, group_size: int) -> int:
    """Number of multisets of `group_size` binary reward vectors of length `num_rewards`."""
    kinds = 2**num_rewards
    return math.comb(kinds + group_size - 1, group_size)


@lru_cache(maxsize=None)
def _square_free(value: int) -> tuple[int, int]:
    """value = c * m**2 with c square-free; returns (c, m)."""
    c, m, p = value, 1, 2
    while p * p <= c:
        while c % (p * p) == 0:
            c //= p * p
            m *= p
        p += 1
    return c, m


def _centred(values: list[int]) -> list[int]:
    """d_i = G * v_i - sum(v): G times the deviation from the group mean, an integer."""
    total, size = sum(values), len(values)
    return [size * v - total for v in values]


def _key_centred_sum(group: tuple[int, ...], num_rewards: int) -> tuple:
    sums = [bin(vector).count("1") for vector in group]
    return tuple(sorted(_centred(sums)))


def _key_normalized_sum(group: tuple[int, ...], num_rewards: int) -> tuple:
    d = _centred([bin(vector).count("1") for vector in group])
    divisor = math.gcd(*d)
    if divisor == 0:
        return tuple(d)
    return tuple(sorted(x // divisor for x in d))


@lru_cache(maxsize=None)
def _common_denominator(group_size: int) -> int:
    """L(G): the lcm of m over the squared norms G s (G - s), s = 1..G-1, of binary columns."""
    return math.lcm(*(_square_free(group_size * s * (group_size - s))[1] for s in range(1, group_size)))


@lru_cache(maxsize=None)
def _gdpo_column_terms(column: tuple[int, ...]) -> tuple[int, tuple[int, ...]] | None:
    """(c, L(G) * d_i / m per sample) of one binary column; None for a constant column
    (it contributes 0: the zero-variance rule)."""
    size, ones = len(column), sum(column)
    if ones in (0, size):
        return None
    c, m = _square_free(size * ones * (size - ones))
    scale = _common_denominator(size) // m
    return c, tuple((size * v - ones) * scale for v in column)


def _key_normalized_components(group: tuple[int, ...], num_rewards: int) -> tuple:
    per_sample: list[dict[int, int]] = [{} for _ in group]
    for k in range(num_rewards):
        terms = _gdpo_column_terms(tuple((vector >> k) & 1 for vector in group))
        if terms is None:
            continue
        c, coefficients = terms
        for i, x in enumerate(coefficients):
            per_sample[i][c] = per_sample[i].get(c, 0) + x
    keys = [tuple(sorted((c, q) for c, q in terms.items() if q != 0)) for terms in per_sample]
    return tuple(sorted(keys))


# One per gdpo_nemo.estimators.registry.COLLAPSE_KINDS (a test keeps the two equal).
KEYS_BY_KIND = {
    "centred_sum": _key_centred_sum,
    "normalized_sum": _key_normalized_sum,
    "normalized_components": _key_normalized_components,
}


def countable_estimators() -> list[str]:
    """The registered estimators whose distinct advantage groups can be counted (those that
    declare a ``collapse_key``), in registration order."""
    return [name for name, info in ESTIMATORS.items() if info.collapse_key is not None]


def _key_of(estimator: str):
    """The canonical-key function of `estimator`: (group, num_rewards) -> hashable."""
    countable = countable_estimators()
    if not isinstance(estimator, str) or estimator not in ESTIMATORS:
        raise UserError(f"unknown estimator {estimator!r}; expected one of {countable}")
    if estimator not in countable:
        raise UserError(
            f"estimator {estimator!r} declares no collapse_key, so it cannot be counted; countable: {countable}"
        )
    key = estimator_info(estimator).collapse_key
    return KEYS_BY_KIND[key] if isinstance(key, str) else key


def _all_groups(num_rewards: int, group_size: int) -> Iterator[tuple[int, ...]]:
    return itertools.combinations_with_replacement(range(2**num_rewards), group_size)


def _sampled_groups(num_rewards: int, group_size: int, samples: int, seed: int) -> Iterator[tuple[int, ...]]:
    rng = random.Random(seed)
    kinds = 2**num_rewards
    for _ in range(samples):
        yield tuple(sorted(rng.randrange(kinds) for _ in range(group_size)))


def _check_setting(estimator: str, num_rewards: int, group_size: int) -> None:
    _key_of(estimator)
    if isinstance(num_rewards, bool) or not isinstance(num_rewards, int) or not 1 <= num_rewards <= 16:
        raise UserError(f"num_rewards = {num_rewards!r}; expected an int from 1 to 16")
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise UserError(f"group_size = {group_size!r}; expected an int >= 2 (a group of 1 has no baseline)")


def count_advantage_groups(
    estimator: str,
    num_rewards: int,
    group_size: int,
    *,
    max_enumerate: int = DEFAULT_MAX_ENUMERATE,
    samples: int = 200_000,
    seed: int = 0,
    groups: Iterable[tuple[int, ...]] | None = None,
) -> dict:
    """Distinct advantage groups of `estimator` for binary rewards (see module docstring).

    Enumerates all ``num_multisets(num_rewards, group_size)`` groups when that is at most
    `max_enumerate`, else draws `samples` random groups (seeded) and counts a lower bound.

    Returns ``{"estimator", "num_rewards", "group_size", "distinct_groups", "method"
    ("exact" | "sampled"), "groups_examined", "num_multisets"}``.
    """
    _check_setting(estimator, num_rewards, group_size)
    total = num_multisets(num_rewards, group_size)
    if groups is None:
        if total <= max_enumerate:
            groups, method = _all_groups(num_rewards, group_size), "exact"
        else:
            groups, method = _sampled_groups(num_rewards, group_size, samples, seed), "sampled"
    else:
        method = "given"
    key = _key_of(estimator)
    seen = set()
    examined = 0
    for group in groups:
        seen.add(key(tuple(group), num_rewards))
        examined += 1
    return {
        "estimator": estimator,
        "num_rewards": num_rewards,
        "group_size": group_size,
        "distinct_groups": len(seen),
        "method": method,
        "groups_examined": examined,
        "num_multisets": total,
    }


# ---------------------------------------------------------------------------------------
# Per-batch diagnostics logged by both engines.
# ---------------------------------------------------------------------------------------

DIAGNOSTIC_DECIMALS = 5


def _group_rows(group_ids: Tensor, device: torch.device | None = None) -> tuple[Tensor, Tensor]:
    """(group index [B] in 0..N-1, the permutation that sorts the batch by group), on
    `device` (the values'; default: the ids' own)."""
    index, _ = group_rows(group_ids, device)
    return index, torch.argsort(index, stable=True)


def distinct_advantage_groups(advantages: Tensor, group_ids: Tensor) -> int:
    """Number of distinct sorted advantage tuples among the groups of one batch.

    Args:
        advantages: ``Tensor[B]`` (or ``[B, T]`` constant over tokens: column 0 is used).
        group_ids: ``Tensor[B]`` prompt-group id of each sample (moved to the advantages'
            device, on which the grouping runs).

    Advantages are rounded to ``DIAGNOSTIC_DECIMALS`` decimals first: in a real batch equal
    advantages differ by float noise. Logged as ``train/adv/distinct_groups``.
    """
    advantages = torch.as_tensor(advantages)
    if advantages.dim() == 2:
        advantages = advantages[:, 0]
    index, order = _group_rows(group_ids, advantages.device)
    if advantages.shape[0] != index.shape[0]:
        raise UserError(f"advantages has {advantages.shape[0]} samples but group_ids has {index.shape[0]}")
    values = torch.round(advantages.double(), decimals=DIAGNOSTIC_DECIMALS)[order].tolist()
    members = index[order].tolist()
    tuples = set()
    for _, run in itertools.groupby(zip(members, values), key=lambda pair: pair[0]):
        tuples.add(tuple(sorted(v + 0.0 for _, v in run)))  # + 0.0 folds -0.0 into 0.0
    return len(tuples)


def zero_std_fraction(rewards: dict[str, Tensor], group_ids: Tensor, tolerance: float = 0.0) -> dict[str, float]:
    """Share of groups in which each component is constant (no learning signal from it): one
    value, as the estimators decide (gdpo_nemo.estimators.groups.constant_within: equal
    rewards whatever their dtype; `tolerance`: an options' `residue_tolerance`).

    Args:
        rewards: ``{name: Tensor[B]}``; NaN entries are ignored. Each component is reduced
            on its own device.
        group_ids: ``Tensor[B]`` (moved to each component's device).

    Returns ``{name: fraction in [0, 1]}``, logged as ``train/adv/zero_std_frac/<name>``.
    """
    out = {}
    index_on: dict[torch.device, Tensor] = {}
    for name, values in rewards.items():
        values = torch.as_tensor(values).to(torch.float64)
        if values.device not in index_on:
            index_on[values.device] = group_rows(group_ids, values.device)[0]
        extremes = group_extremes(values, group_ids, index=index_on[values.device], tolerance=tolerance)
        constant = extremes.constant()
        out[name] = float(constant.double().mean()) if constant.numel() else 0.0
    return out


def _groups_of(values: list, members: list) -> dict:
    grouped: dict = {}
    for member, value in zip(members, values):
        grouped.setdefault(member, []).append(value)
    return grouped


def collapsed_group_fraction(rewards: dict[str, Tensor], group_ids: Tensor,
                             weights: dict[str, float] | None = None) -> float:
    """Share of groups in which GRPO gives one advantage to distinct reward combinations:
    two samples whose reward vectors differ but whose (weighted) sums are equal, so that
    normalizing the sum cannot tell them apart (paper Fig. 2-3, counted on one batch).
    Whatever estimator trained the batch, this is what GRPO would have merged in it.

    Args:
        rewards: ``{name: Tensor[B]}``; a sample with a NaN component is left out.
        group_ids: ``Tensor[B]``.
        weights: ``{name: w}`` of the sum (default 1 each).

    Sums are compared after rounding to ``DIAGNOSTIC_DECIMALS`` decimals. Logged as
    ``train/adv/collapsed_frac``; 0.0 for a batch without groups.
    """
    names = sorted(rewards)
    columns = [torch.as_tensor(rewards[name], dtype=torch.float64).cpu().tolist() for name in names]
    vectors = list(zip(*columns))
    members = torch.as_tensor(group_ids).cpu().tolist()
    if len(vectors) != len(members):
        raise UserError(f"rewards have {len(vectors)} samples but group_ids has {len(members)}")
    weight = [float((weights or {}).get(name, 1.0)) for name in names]
    groups = _groups_of(vectors, members)
    collapsed = 0
    for vectors_of_group in groups.values():
        by_sum: dict[float, set] = {}
        for vector in vectors_of_group:
            if any(math.isnan(v) for v in vector):
                continue
            total = round(sum(w * v for w, v in zip(weight, vector)), DIAGNOSTIC_DECIMALS) + 0.0
            by_sum.setdefault(total, set()).add(vector)
        collapsed += any(len(distinct) > 1 for distinct in by_sum.values())
    return collapsed / len(groups) if groups else 0.0


def component_advantage_gaps(advantages: Tensor, rewards: dict[str, Tensor], group_ids: Tensor) -> dict[str, float]:
    """Each component's advantage spread in one trained batch: per group, the mean advantage of
    the samples at the group's highest value of component k minus that of the samples at its
    lowest (0 where k is constant in the group), averaged over all groups. How much advantage
    a sample gains within its group for doing better on k: the estimators' different use of
    the same rewards (GRPO's sum can cancel a component; GDPO weighs each one).

    Args:
        advantages: ``Tensor[B]`` (or ``[B, T]`` constant over tokens: column 0 is used).
        rewards: ``{name: Tensor[B]}``; NaN entries are left out of their component.
        group_ids: ``Tensor[B]``.

    Returns ``{name: gap}``, logged as ``train/adv/gap/<name>``.
    """
    advantages = torch.as_tensor(advantages)
    if advantages.dim() == 2:
        advantages = advantages[:, 0]
    values_of_advantage = advantages.double().cpu().tolist()
    members = torch.as_tensor(group_ids).cpu().tolist()
    if len(values_of_advantage) != len(members):
        raise UserError(f"advantages has {len(values_of_advantage)} samples but group_ids has {len(members)}")
    gaps = {}
    for name, values in rewards.items():
        column = torch.as_tensor(values, dtype=torch.float64).cpu().tolist()
        groups = _groups_of(list(zip(column, values_of_advantage)), members)
        total = 0.0
        for pairs in groups.values():
            pairs = [(r, a) for r, a in pairs if not math.isnan(r)]
            if not pairs:
                continue
            high, low = max(r for r, _ in pairs), min(r for r, _ in pairs)
            if high == low:
                continue
            top = [a for r, a in pairs if r == high]
            bottom = [a for r, a in pairs if r == low]
            total += sum(top) / len(top) - sum(bottom) / len(bottom)
        gaps[name] = total / len(groups) if groups else 0.0
    return gaps
