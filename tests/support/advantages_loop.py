"""A straightforward per-group Python loop computing the same advantages as `gdpo_nemo/advantages.py`.

Written independently from the vectorized code, in plain float64 Python, to be the oracle
of the property tests and the peer of `benchmarks/bench_advantages.py`. Slow on purpose:
one pass over groups, one over components, one over samples. Not for training.
"""

from __future__ import annotations

import math
from collections import defaultdict

from gdpo_nemo.estimators import PRESETS, RESIDUE_EPSILONS, AdvantageOptions

# The rule of a constant group, written again from its definition (docs/estimators.md): a
# reward as given is exact (equal or not); a sum of K weighted rewards is one value within
# RESIDUE_EPSILONS * K float64 epsilons of the largest sum of |terms| in the group.
EPS64 = 2.0**-52


def _tolerance(options: AdvantageOptions, terms: int) -> float:
    if options.residue_tolerance is not None:
        return options.residue_tolerance
    return 0.0 if terms <= 1 else RESIDUE_EPSILONS * terms * EPS64


def _all_equal(values: list[float], tolerance: float, sizes: list[float] | None = None) -> bool:
    hi, lo = max(values), min(values)
    size = max(sizes) if sizes is not None else max(abs(hi), abs(lo))
    return hi - lo <= tolerance * size


def _std(values: list[float], ddof: int, tolerance: float, sizes: list[float] | None = None) -> float:
    if len(values) - ddof <= 0 or _all_equal(values, tolerance, sizes):
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - ddof))


def _normalize(values: list[float | None], options: AdvantageOptions, divide: bool,
               sizes: list[float] | None = None, terms: int = 1) -> list[float]:
    """One group, one component: centred (and scaled) value per sample; None = missing.
    `sizes`: each value's sum of |terms| when the values are sums of `terms` terms."""
    present = [i for i, v in enumerate(values) if v is not None]
    out = [0.0] * len(values)
    if len(present) < 2:
        return out
    tolerance = _tolerance(options, terms)
    for i in present:
        if options.leave_one_out:
            mates = [j for j in present if j != i]
        else:
            mates = present
        pool = [values[j] for j in mates]
        pool_sizes = None if sizes is None else [sizes[j] for j in mates]
        baseline = sum(pool) / len(pool)
        std = _std(pool, options.std_ddof, tolerance, pool_sizes)
        centred = values[i] - baseline
        if not options.leave_one_out and _all_equal(pool, tolerance, pool_sizes):
            centred = 0.0
        out[i] = centred / (std + options.eps) if (divide and std > 0) else centred
    return out


def loop_advantages(
    rewards: dict[str, list[float]],
    group_ids: list[int],
    estimator: str = "gdpo",
    *,
    preset: str | None = None,
    reward_weights: dict[str, float] | None = None,
    leave_one_out: bool = False,
    token_lengths: list[int] | None = None,
    **overrides,
) -> list[float]:
    """Advantages [B] as Python floats; NaN marks a missing component. Same spec as
    `compute_advantages` (token_lengths: response tokens per sample, for per-token BN)."""
    options = AdvantageOptions(**{**(PRESETS[preset] if preset else {}), **overrides, "leave_one_out": leave_one_out})
    names = list(rewards)
    weights = {name: 1.0 for name in names} | dict(reward_weights or {})
    batch = len(group_ids)
    cell = {(name, b): (None if math.isnan(rewards[name][b]) else float(rewards[name][b])) for name in names for b in range(batch)}
    row_valid = [any(cell[(n, b)] is not None for n in names) for b in range(batch)]
    members: dict[int, list[int]] = defaultdict(list)
    for b, g in enumerate(group_ids):
        members[int(g)].append(b)

    advantage = [0.0] * batch
    magnitude = {name: 0.0 for name in names}  # max |w_k A_k| per component: the scale before cancelling
    scale = "none" if estimator == "grpo_no_std" else options.scale_rewards
    all_sums, all_sizes = [], []
    for rows in members.values():
        if estimator in ("grpo", "grpo_no_std"):
            sums = [
                sum(weights[n] * cell[(n, b)] for n in names if cell[(n, b)] is not None) if row_valid[b] else None
                for b in rows
            ]
            sizes = [sum(abs(weights[n] * cell[(n, b)]) for n in names if cell[(n, b)] is not None) for b in rows]
            all_sums += [v for v in sums if v is not None]
            all_sizes += [z for v, z in zip(sums, sizes) if v is not None]
            for b, a in zip(rows, _normalize(sums, options, scale == "group", sizes, len(names))):
                advantage[b] = a
        else:
            for name in names:
                parts = _normalize([cell[(name, b)] for b in rows], options, divide=scale == "group")
                for b, a in zip(rows, parts):
                    advantage[b] += weights[name] * a
                    magnitude[name] = max(magnitude[name], abs(weights[name] * a))
    if scale == "batch":  # TRL: the group-centred sums over the std of all sums
        std = _std(all_sums, options.std_ddof, _tolerance(options, len(names)), all_sizes) if len(all_sums) > 1 else 0.0
        return [a / (std + options.eps) if std > 0 else a for a in advantage]
    if estimator != "gdpo":
        return advantage

    weight = [(token_lengths[b] if token_lengths is not None else 1) if row_valid[b] else 0 for b in range(batch)]
    total = sum(weight)
    if total == 0:
        return [0.0] * batch
    mean = sum(w * a for w, a in zip(weight, advantage)) / total
    centred = [a - mean if w > 0 else 0.0 for w, a in zip(weight, advantage)]
    if total - options.std_ddof <= 0:
        return [0.0] * batch
    var = sum(w * c * c for w, c in zip(weight, centred)) / (total - options.std_ddof)
    if math.sqrt(var) <= _tolerance(options, len(names)) * sum(magnitude.values()):
        return [0.0] * batch
    if token_lengths is None:
        return [c / (math.sqrt(var) + options.batch_norm_eps) for c in centred]
    return [c / math.sqrt(var + options.batch_norm_eps) for c in centred]
