"""A straightforward per-group Python loop computing the same advantages as `gdpo_nemo/advantages.py`.

Written independently from the vectorized code, in plain float64 Python, to be the oracle
of the property tests and the peer of `benchmarks/bench_advantages.py`. Slow on purpose:
one pass over groups, one over components, one over samples. Not for training.
"""

from __future__ import annotations

import math
from collections import defaultdict

from gdpo_nemo.estimators import PRESETS, RESIDUE_EPSILONS, AdvantageOptions

# The residue tolerance of the rewards' dtype before they became Python floats: float32's (what
# torch.tensor makes of a list of floats, as the tests do) unless residue_tolerance is given.
FLOAT32_TOLERANCE = RESIDUE_EPSILONS * 2.0**-23


def _all_equal(values: list[float], tolerance: float) -> bool:
    hi, lo = max(values), min(values)
    return hi - lo <= tolerance * max(abs(hi), abs(lo))


def _std(values: list[float], ddof: int, tolerance: float) -> float:
    if len(values) - ddof <= 0 or _all_equal(values, tolerance):
        return 0.0
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - ddof))


def _normalize(values: list[float | None], options: AdvantageOptions, divide: bool) -> list[float]:
    """One group, one component: centred (and scaled) value per sample; None = missing."""
    present = [i for i, v in enumerate(values) if v is not None]
    out = [0.0] * len(values)
    if len(present) < 2:
        return out
    for i in present:
        if options.leave_one_out:
            pool = [values[j] for j in present if j != i]
        else:
            pool = [values[j] for j in present]
        baseline = sum(pool) / len(pool)
        std = _std(pool, options.std_ddof, options.residue_tolerance)
        centred = values[i] - baseline
        if not options.leave_one_out and _all_equal(pool, options.residue_tolerance):
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
    options = AdvantageOptions(**{**(PRESETS[preset] if preset else {}), "residue_tolerance": FLOAT32_TOLERANCE,
                                  **overrides, "leave_one_out": leave_one_out})
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
    all_sums = []
    for rows in members.values():
        if estimator in ("grpo", "grpo_no_std"):
            sums = [
                sum(weights[n] * cell[(n, b)] for n in names if cell[(n, b)] is not None) if row_valid[b] else None
                for b in rows
            ]
            all_sums += [v for v in sums if v is not None]
            for b, a in zip(rows, _normalize(sums, options, divide=scale == "group")):
                advantage[b] = a
        else:
            for name in names:
                parts = _normalize([cell[(name, b)] for b in rows], options, divide=scale == "group")
                for b, a in zip(rows, parts):
                    advantage[b] += weights[name] * a
                    magnitude[name] = max(magnitude[name], abs(weights[name] * a))
    if scale == "batch":  # TRL: the group-centred sums over the std of all sums
        std = _std(all_sums, options.std_ddof, options.residue_tolerance) if len(all_sums) > 1 else 0.0
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
    if math.sqrt(var) <= options.residue_tolerance * sum(magnitude.values()):
        return [0.0] * batch
    if token_lengths is None:
        return [c / (math.sqrt(var) + options.batch_norm_eps) for c in centred]
    return [c / math.sqrt(var + options.batch_norm_eps) for c in centred]
