"""Issue 36: a constant added to a reward never changes an advantage.

A reward as given is exact (issue 48: no tolerance tied to its dtype), and only GRPO's own
float64 sum carries residue, relative to the spread within the group, never to an offset or
a fixed fraction of the rewards' magnitude: 1e6 and 1e6 + 1 in float64 differ, so do 1000 and
1000.0005 in float32. Checked on every path (dense torch form, numba kernel, general path, leave-one-out,
batch scaling) against the same rewards without the offset, against the loop oracle, and
against verl's own code, which is invariant.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gdpo_nemo.estimators import ESTIMATORS, compute_advantages
from gdpo_nemo.estimators import kernel as dense_kernel
from gdpo_nemo.estimators.collapse import zero_std_fraction
from tests.support.advantages_loop import loop_advantages

GROUPS4 = torch.tensor([0, 0, 0, 0])


def t(values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype)


def test_the_issues_examples_are_invariant_to_the_offset():
    spread = [0.0, 1.0, 0.0, 1.0]
    expected = compute_advantages({"a": t(spread)}, GROUPS4, "grpo", preset="verl")
    assert expected.abs().min() > 0.8  # +-0.866, as verl, TRL and NeMo RL give
    shifted = compute_advantages({"a": t([1e6 + v for v in spread])}, GROUPS4, "grpo", preset="verl")
    assert torch.allclose(shifted, expected, atol=1e-6)
    # float32: 1000 and 1000.0005 are 8 units in the last place apart (verl: 0.863)
    close32 = compute_advantages({"a": t([1000.0, 1000.0005, 1000.0, 1000.0005], torch.float32)}, GROUPS4, "grpo")
    assert close32.abs().min() > 0.8
    for estimator in ("grpo_no_std", "gdpo", "gdpo_no_bn"):
        for loo in (False, True):
            base = {"a": t(spread), "b": t([1.0, 0.0, 0.0, 1.0])}
            moved = {"a": t([1e6 + v for v in spread]), "b": base["b"]}
            a = compute_advantages(base, GROUPS4, estimator, leave_one_out=loo)
            b = compute_advantages(moved, GROUPS4, estimator, leave_one_out=loo)
            assert a.abs().max() > 0.1 and torch.allclose(a, b, atol=1e-6), (estimator, loo, a, b)


def test_a_large_constant_component_or_weight_does_not_swamp_grpos_sum():
    # The peers give [-0.5, -0.5, -0.5, 1.5]; the last release gave all zeros.
    want = t([-0.5, -0.5, -0.5, 1.5])
    for dtype in (torch.float64, torch.float32):
        lengths = compute_advantages({"len": t([2e6] * 4, dtype), "correct": t([0, 0, 0, 1], dtype)}, GROUPS4, "grpo")
        weighted = compute_advantages({"fmt": t([1.0] * 4, dtype), "correct": t([0, 0, 0, 1], dtype)}, GROUPS4, "grpo",
                                      reward_weights={"fmt": 1e6})
        assert torch.allclose(lengths.double(), want, atol=1e-5), (dtype, lengths)
        assert torch.allclose(weighted.double(), want, atol=1e-5), (dtype, weighted)


def test_batch_scaling_divides_at_an_offset():
    groups = torch.tensor([0, 0, 1, 1])
    base = compute_advantages({"a": t([0.0, 1.0, 0.0, 0.25])}, groups, "grpo", scale_rewards="batch")
    moved = compute_advantages({"a": t([1e6, 1e6 + 1, 1e6, 1e6 + 0.25])}, groups, "grpo", scale_rewards="batch")
    assert torch.allclose(base, moved, atol=1e-6) and base.abs().max() > 0.6


def test_leave_one_out_beside_near_equal_mates_is_exact():
    # The group-mates' variance was taken by subtraction: an outlier of 1 beside [0, 0, d]
    # got 1.0 where the exact value (and NeMo RL's, float32 and float64) is about 1e6 / 1.7.
    for d in (1e-8, 1e-9):
        rewards = [1.0, 0.0, 0.0, d]
        got = compute_advantages({"a": t(rewards)}, GROUPS4, "grpo", leave_one_out=True, preset="nemo_rl")
        exact = loop_advantages({"a": rewards}, [0, 0, 0, 0], "grpo", leave_one_out=True, preset="nemo_rl")
        assert got[0] > 1e5 and math.isclose(float(got[0]), exact[0], rel_tol=1e-4), (d, got, exact)


def test_residue_of_the_sum_of_equal_rewards_still_gives_exactly_zero():
    # GRPO's weighted sum is this package's float64 arithmetic: equal rewards in another
    # order, or combinations whose sums are equal, differ there by residue only.
    third = 1.0 / 3
    cases = [
        ({"a": t([0.1, 0.3, 0.3, 0.2]), "b": t([0.2, 0.0, 0.0, 0.1])}, None),
        ({"a": t([third, 0.0, 2 * third, third]), "b": t([2 * third, 1.0, third, 2 * third])}, None),
        ({"a": t([1.0, 0.0, 1.0, 0.0]), "b": t([0.0, 1.0, 0.0, 1.0])}, {"a": 0.1, "b": 0.1}),
        ({"a": t([1.0, 0.0, 1.0, 0.0]), "b": t([0.0, 1.0, 0.0, 1.0]), "c": t([1.0, 1.0, 1.0, 1.0])},
         {"a": 0.7, "b": 0.7, "c": 1e6}),
    ]
    for kernel_on in (True, False):
        dense_kernel._available = kernel_on
        for rewards, weights in cases:
            for estimator in ("grpo", "grpo_no_std"):
                for ids in (GROUPS4, torch.tensor([0, 0, 0, 1, 1, 1, 1, 1])[:4]):
                    got = compute_advantages(rewards, GROUPS4, estimator, reward_weights=weights)
                    assert torch.equal(got, torch.zeros(4)), (rewards, weights, estimator, got)
    dense_kernel._available = None


def test_rewards_given_a_unit_apart_are_a_difference_bounded_as_the_peers_bound_it():
    # A reward as given is exact in any dtype: a user's own rounding is a difference, and
    # (x - mean) / (std + eps) keeps it at most spread / eps, as verl's and NeMo RL's do.
    for dtype in (torch.float64, torch.float32):
        third = torch.tensor(1.0, dtype=dtype) / 3
        residue = torch.stack([third, third * 3 / 3, (third + third + third) / 3, third])
        spread = float(residue.max()) - float(residue.min())
        got = compute_advantages({"a": residue}, GROUPS4, "grpo", preset="verl")
        assert got.abs().max() <= spread / 1e-6 + 1e-6, (dtype, got)
        assert torch.equal(compute_advantages({"a": residue}, GROUPS4, "grpo", preset="verl",
                                              residue_tolerance=4 * torch.finfo(dtype).eps), torch.zeros(4))


def test_zero_std_fraction_sees_an_offset_group_as_varying():
    groups = torch.tensor([0, 0, 1, 1])
    fractions = zero_std_fraction({"a": t([1e6, 1e6 + 1, 5.0, 5.0])}, groups)
    assert fractions["a"] == 0.5  # the second group only


GRADED = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0])


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 6), st.integers(1, 5), st.lists(GRADED, min_size=60, max_size=60),
       st.lists(GRADED, min_size=60, max_size=60), st.sampled_from(sorted(ESTIMATORS)), st.booleans(),
       st.sampled_from(["group", "none", "batch"]), st.booleans(), st.sampled_from(["float64", "float32"]))
def test_an_exact_offset_never_changes_an_advantage_on_any_path(size, prompts, first, second, estimator, loo, scale,
                                                                 shuffle, dtype_name):
    # Quarters plus these offsets are exact in the dtype, and a quarter stays at least 32 units
    # in the last place of the shifted rewards (the rule merges only differences of a few: at
    # 2**20 in float32 a quarter is 2 units, as residue is), so A(r + c) must equal A(r) up to
    # the rounding of the statistics: on the dense form and kernel (groups in order) and on
    # the general path (shuffled), with leave-one-out and every scaling.
    dtype = getattr(torch, dtype_name)
    if estimator == "grpo_no_std" or (scale == "batch" and estimator != "grpo"):
        scale = "group"
    n = size * prompts
    groups = torch.arange(prompts).repeat_interleave(size)
    if shuffle:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(n))
        groups = groups[order]
    base = {"a": t(first[:n], dtype), "b": t(second[:n], dtype)}
    offsets = (1e3, -1e3, 2.0**16) if dtype == torch.float32 else (1e3, 1e6, -1e6, 2.0**40)
    want = compute_advantages(base, groups, estimator, leave_one_out=loo, scale_rewards=scale)
    for offset in offsets:
        moved = {"a": base["a"] + offset, "b": base["b"]}
        assert torch.equal(moved["a"] - offset, base["a"])  # exact in the dtype
        got = compute_advantages(moved, groups, estimator, leave_one_out=loo, scale_rewards=scale)
        # the statistics are float64: a group mean near c carries up to half a unit of c's
        # last place, which is 2e-16 |c| / 0.25 of the smallest spread
        tolerance = 1e-5 + 8 * torch.finfo(torch.float64).eps * abs(offset) / 0.25
        assert torch.allclose(got, want, atol=tolerance), (offset, got, want)


def test_verl_itself_is_invariant_and_agrees_at_the_offset():
    from tests.test_peer_conformance import first_token, run_peer

    rows = [[1e6, 1.0], [1e6 + 1, 0.0], [1e6, 0.0], [1e6 + 1, 1.0]]
    case = {"id": "offset", "peer": "verl", "estimator": "gdpo", "scale": "group", "loo": False, "names": ["a", "b"],
            "rewards": rows, "group_ids": [0, 0, 0, 0], "weights": [1.0, 1.0], "token_lengths": [3, 3, 3, 3]}
    base = dict(case, id="base", rewards=[[r[0] - 1e6, r[1]] for r in rows])
    grpo = dict(case, id="grpo", estimator="grpo")
    results = run_peer("verl", [case, base, grpo])
    theirs = first_token(results["offset"]["float64"])
    assert torch.allclose(theirs, first_token(results["base"]["float64"]), atol=1e-6)  # the peer: invariant
    ours = compute_advantages({"a": t([r[0] for r in rows]), "b": t([r[1] for r in rows])}, GROUPS4, "gdpo",
                              preset="verl", token_mask=torch.ones(4, 3))  # verl whitens per token
    assert torch.allclose(ours.double(), theirs, atol=1e-4), (ours, theirs)
    ours_grpo = compute_advantages({"a": t([r[0] for r in rows]), "b": t([r[1] for r in rows])}, GROUPS4, "grpo",
                                   preset="verl")
    assert torch.allclose(ours_grpo.double(), first_token(results["grpo"]["float64"]), atol=1e-4)
