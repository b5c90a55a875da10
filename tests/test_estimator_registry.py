"""Specification of the estimator registry (gdpo_nemo.estimators.register_estimator): an
estimator declared in one place, with its metadata, works everywhere that reads estimators
(advantages, collapse counting, Fig. 2/3, figure labels and styles, table labels) and is
refused cleanly where it cannot go (strict peer reproduction, TRL's batch scaling, a single
reward for a multi-component estimator, counting without a collapse key)."""

from __future__ import annotations

import pytest
import torch

from gdpo_nemo.estimators import (
    COLLAPSE_KINDS,
    ESTIMATORS,
    PlotStyle,
    compute_advantages,
    estimator_info,
    register_estimator,
    unregister_estimator,
)
from gdpo_nemo.analysis.figures import _algo_order, algo_label, algo_style
from gdpo_nemo.analysis.tables import runs_of
from gdpo_nemo.estimators.collapse import KEYS_BY_KIND, count_advantage_groups, countable_estimators
from gdpo_nemo.analysis.fig3 import fig2_table, fig3_counts, fig3_estimators

BUILT_IN = ["grpo", "grpo_no_std", "gdpo_no_bn", "gdpo"]
TOY_STYLE = PlotStyle("tab:red", "x", ":")


def _sign_key(group: tuple[int, ...], num_rewards: int) -> tuple:
    """Canonical key of the toy: the sorted signs of (reward sum - group mean), exactly."""
    sums = [bin(vector).count("1") for vector in group]
    total = sum(sums)
    return tuple(sorted((len(sums) * s > total) - (len(sums) * s < total) for s in sums))


@pytest.fixture
def toy():
    """The one place the toy is declared: "sign_grpo", the sign of the group-centred reward
    sum (+1 above its group's mean, -1 below, 0 at it). Removed again after the test."""

    @register_estimator("sign_grpo", label="Sign-GRPO", collapse_key=_sign_key, style=TOY_STYLE, in_fig3=True)
    def sign_grpo(rewards, valid, groups, weights, options, token_mask):
        """sign(sum_k w_k r_k - its group mean) [B] float64; 0 for samples with no valid reward."""
        row_valid = valid.any(dim=1, keepdim=True).to(rewards.dtype)
        total = (rewards * weights).sum(dim=1, keepdim=True)
        mean = groups.sum(total * row_valid) / groups.sum(row_valid).clamp(min=1)
        return (torch.sign(total - mean[groups.index]) * row_valid).squeeze(1)

    yield "sign_grpo"
    unregister_estimator("sign_grpo")


@pytest.fixture
def per_reward_toy():
    """A multi-component toy without a collapse key or style: the sum of each reward's sign."""

    @register_estimator("sign_gdpo", multi_component=True)
    def sign_gdpo(rewards, valid, groups, weights, options, token_mask):
        """sum_k w_k sign(r_k - its group mean) [B] float64."""
        valid_f = valid.to(rewards.dtype)
        mean = groups.sum(rewards * valid_f) / groups.sum(valid_f).clamp(min=1)
        return (torch.sign(rewards - mean[groups.index]) * valid_f * weights).sum(dim=1)

    yield "sign_gdpo"
    unregister_estimator("sign_gdpo")


def test_the_built_in_estimators_are_registered_in_the_papers_order():
    assert list(ESTIMATORS) == BUILT_IN
    assert [estimator_info(name).label for name in BUILT_IN] == ["GRPO", "GRPO w/o std", "GDPO w/o BN", "GDPO"]
    assert [name for name in BUILT_IN if estimator_info(name).multi_component] == ["gdpo_no_bn", "gdpo"]
    assert [name for name in BUILT_IN if estimator_info(name).token_batch_norm] == ["gdpo"]
    assert [name for name in BUILT_IN if "batch" in estimator_info(name).scale_rewards] == ["grpo"]


def test_the_nemo_rl_equivalents_are_declared_with_the_estimators():
    native = {name: estimator_info(name).nemo_rl for name in BUILT_IN}
    assert {name: (n.name, n.normalize_rewards) for name, n in native.items() if n is not None} == {
        "grpo": ("grpo", True), "grpo_no_std": ("grpo", False), "gdpo": ("gdpo", True)}
    assert native["gdpo_no_bn"] is None  # NeMo RL has no GDPO without batch norm


def test_the_registry_is_read_only():
    with pytest.raises(TypeError):
        ESTIMATORS["mine"] = ESTIMATORS["grpo"]  # type: ignore[index]


def test_an_unknown_name_is_refused_naming_the_accepted_ones():
    accepted = r"\['grpo', 'grpo_no_std', 'gdpo_no_bn', 'gdpo'\]"
    with pytest.raises(ValueError, match=rf"unknown estimator 'ppo'; expected one of {accepted}"):
        estimator_info("ppo")


def test_every_collapse_kind_has_a_counting_key():
    assert set(KEYS_BY_KIND) == set(COLLAPSE_KINDS)


@pytest.mark.parametrize("kwargs, message", [
    ({}, "already registered"),
    ({"collapse_key": "median"}, "collapse_key 'median'"),
    ({"in_fig3": True}, "in_fig3 needs a collapse_key"),
    ({"scale_rewards": ("group", "rank")}, "scale_rewards"),
])
def test_bad_registrations_are_refused(kwargs, message):
    name = "grpo" if not kwargs else "bad_toy"
    with pytest.raises(ValueError, match=message):
        register_estimator(name, **kwargs)(lambda *args: None)
    assert list(ESTIMATORS) == BUILT_IN


def test_a_registered_estimator_computes_advantages(toy):
    # Group 0: sums 2, 0 -> mean 1 -> signs +1, -1. Group 1: sums 1, 1 -> 0, 0.
    rewards = {"format": torch.tensor([1.0, 0.0, 1.0, 0.0]), "correctness": torch.tensor([1.0, 0.0, 0.0, 1.0])}
    out = compute_advantages(rewards, torch.tensor([0, 0, 1, 1]), estimator=toy)
    assert out.tolist() == [1.0, -1.0, 0.0, 0.0]
    assert out.dtype == torch.float32


def test_a_registered_estimator_goes_away_when_unregistered(toy):
    assert toy in ESTIMATORS
    info = unregister_estimator(toy)
    assert toy not in ESTIMATORS and info.label == "Sign-GRPO"
    register_estimator(toy, label=info.label, collapse_key=info.collapse_key, style=info.style, in_fig3=True)(info.fn)


def test_strict_peer_reproduction_refuses_an_estimator_no_peer_has(toy):
    rewards = {"format": torch.tensor([1.0, 0.0]), "correctness": torch.tensor([1.0, 0.0])}
    with pytest.raises(ValueError, match="no peer computes estimator 'sign_grpo'"):
        compute_advantages(rewards, torch.tensor([0, 0]), estimator=toy, preset="nemo_rl", strict=True)


def test_trl_batch_scaling_is_refused_unless_declared(toy):
    rewards = {"format": torch.tensor([1.0, 0.0]), "correctness": torch.tensor([1.0, 0.0])}
    with pytest.raises(ValueError, match="scale_rewards: 'batch' is TRL's GRPO option; estimator 'sign_grpo' takes 'group' or 'none'"):
        compute_advantages(rewards, torch.tensor([0, 0]), estimator=toy, scale_rewards="batch")


def test_a_multi_component_estimator_needs_two_rewards(per_reward_toy):
    two = {"format": torch.tensor([1.0, 0.0]), "correctness": torch.tensor([0.0, 1.0])}
    assert compute_advantages(two, torch.tensor([0, 0]), estimator=per_reward_toy).tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="'sign_gdpo' normalizes each reward component separately"):
        compute_advantages({"format": torch.tensor([1.0, 0.0])}, torch.tensor([0, 0]), estimator=per_reward_toy)


def test_collapse_counts_a_registered_estimator_with_its_own_key(toy):
    # n = 1, G = 3: groups 000, 001, 011, 111 give signs (0,0,0), (-1,-1,1), (-1,1,1), (0,0,0).
    assert count_advantage_groups(toy, 1, 3)["distinct_groups"] == 3
    # n = 2, G = 2: two sums are equal (0, 0) or not (-1, 1).
    assert count_advantage_groups(toy, 2, 2)["distinct_groups"] == 2
    assert countable_estimators() == [*BUILT_IN, toy]


def test_collapse_refuses_an_estimator_without_a_collapse_key(per_reward_toy):
    with pytest.raises(ValueError, match="'sign_gdpo' declares no collapse_key"):
        count_advantage_groups(per_reward_toy, 2, 2)
    assert per_reward_toy not in countable_estimators()


def test_fig2_and_fig3_include_an_estimator_registered_for_them(toy):
    assert fig3_estimators() == ["grpo", "grpo_no_std", "gdpo", toy]
    rows = ["| GRPO | 2 |", "| GRPO w/o std | 3 |", "| GDPO | 3 |", "| Sign-GRPO | 2 |"]
    assert fig2_table().splitlines()[2:] == rows
    counts = fig3_counts(group_sizes=range(2, 4), num_rewards_range=range(1, 2), progress=False)
    # n = 2, G = 3: sums in 0..2 give (0,0,0), (-1,-1,1), (-1,1,1) and, for sums 0, 1, 2, (-1,0,1).
    toy_rows = [r for r in counts["vs_group_size"] if r["estimator"] == toy]
    assert [(r["group_size"], r["distinct_groups"]) for r in toy_rows] == [(2, 2), (3, 4)]


def test_figures_label_style_and_order_a_registered_estimator(toy):
    assert algo_label(toy) == "Sign-GRPO" and algo_style(toy, 7) == TOY_STYLE
    assert algo_label("gdpo_no_bn") == "GDPO w/o BN" and algo_style("gdpo", 0) == PlotStyle("tab:green", "^", "-")
    # Registered estimators in registration order, then other algos (e.g. weighted arms) sorted.
    assert _algo_order({"grpo_wlen0.5", toy, "gdpo", "grpo"}) == ["grpo", "gdpo", toy, "grpo_wlen0.5"]
    assert algo_label("grpo_wlen0.5") == "grpo_wlen0.5" and algo_style("grpo_wlen0.5", 1).linestyle == "-."


def test_tables_label_a_registered_estimator_from_the_registry(toy):
    method = runs_of(toy, " 2-obj", "sign_2obj", num_rewards=2)
    assert (method.key, method.label) == ("sign_2obj", "Sign-GRPO 2-obj")
    assert method.where == (("estimator", toy), ("num_rewards", 2))
    with pytest.raises(ValueError, match="unknown estimator 'sign'"):
        runs_of("sign")
