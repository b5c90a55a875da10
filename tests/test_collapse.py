"""Specification of advantage-collapse counting (gdpo_nemo.estimators.collapse) and its commands."""

import json
import math

import pytest
import torch

from gdpo_nemo.estimators import compute_advantages
from gdpo_nemo.cli import main
from gdpo_nemo.estimators.collapse import (
    DEFAULT_MAX_ENUMERATE,
    count_advantage_groups,
    distinct_advantage_groups,
    num_multisets,
    zero_std_fraction,
)


def count(estimator, n, g, **kw):
    return count_advantage_groups(estimator, n, g, **kw)["distinct_groups"]


def test_paper_toy_n2_g2_grpo_has_2_groups_gdpo_has_3():
    assert count("grpo", 2, 2) == 2
    assert count("gdpo", 2, 2) == 3
    assert count("grpo_no_std", 2, 2) == 3


def test_grpo_has_121_groups_at_n2_g16():
    # Exact enumeration gives 121 (the paper's blog post says "about 120").
    assert count("grpo", 2, 16) == 121


def test_one_reward_gdpo_equals_grpo():
    for g in (2, 3, 4, 6):
        assert count("gdpo", 1, g) == count("grpo", 1, g)


def test_gdpo_keeps_more_groups_than_grpo_and_the_gap_grows():
    gaps = [count("gdpo", 2, g) - count("grpo", 2, g) for g in (3, 4, 8, 12)]
    assert all(gap > 0 for gap in gaps) and gaps == sorted(gaps)


def test_grpo_count_at_n2_g3_by_hand():
    # Sums take values 0..2 with multiplicities; G=3 groups of sums, normalized: the distinct
    # sorted patterns are constant, (a,a,b) with a<b, (a,b,b), and (0,1,2) -> 4 shapes.
    assert count("grpo", 2, 3) == 4


@pytest.mark.parametrize("n, g", [(2, 4), (3, 5)])
def test_exact_count_matches_a_float_enumeration_for_gdpo_and_gdpo_no_bn(n, g):
    # Independent check through the real estimator: enumerate groups, compute GDPO w/o BN's
    # advantages with compute_advantages (eps=0), round, count. GDPO's batch norm maps every
    # group by one affine map, so it has the same count. n=3, G=5 has squared norms
    # G s (G - s) of 20 and 30: keys with several square-free parts.
    import itertools

    seen = set()
    for group in itertools.combinations_with_replacement(range(2**n), g):
        rewards = {f"r{k}": torch.tensor([(v >> k) & 1 for v in group], dtype=torch.float64) for k in range(n)}
        adv = compute_advantages(rewards, torch.zeros(g, dtype=torch.long), "gdpo_no_bn", eps=0.0)
        seen.add(tuple(sorted(round(float(a), 6) + 0.0 for a in adv)))
    assert count("gdpo_no_bn", n, g) == len(seen)
    assert count("gdpo", n, g) == len(seen)


def test_every_fig3_setting_is_enumerated_exactly_by_default():
    # Fig. 3 panels: n=2 with G up to 16, and G=4 with n up to 6 (766,480 multisets).
    assert num_multisets(6, 4) == 766_480 <= DEFAULT_MAX_ENUMERATE
    assert num_multisets(2, 16) <= DEFAULT_MAX_ENUMERATE
    assert count_advantage_groups("grpo", 5, 4)["method"] == "exact"


def test_sampling_mode_is_a_lower_bound_and_says_so():
    exact = count_advantage_groups("gdpo", 3, 4)
    sampled = count_advantage_groups("gdpo", 3, 4, max_enumerate=10, samples=300, seed=1)
    assert exact["method"] == "exact" and sampled["method"] == "sampled"
    assert sampled["groups_examined"] == 300
    assert 0 < sampled["distinct_groups"] <= exact["distinct_groups"]


def test_num_multisets():
    assert num_multisets(2, 2) == 10 and num_multisets(2, 16) == 969


@pytest.mark.parametrize("args, message", [
    (("ppo", 2, 4), "unknown estimator"),
    (("gdpo", 0, 4), "num_rewards"),
    (("gdpo", 2, 1), "group_size"),
])
def test_bad_settings_raise_value_error(args, message):
    with pytest.raises(ValueError, match=message):
        count_advantage_groups(*args)


def test_distinct_advantage_groups_of_a_batch():
    # Three groups: two identical patterns (+-0.5) and one constant group.
    adv = torch.tensor([0.5, -0.5, -0.5, 0.5, 0.0, 0.0])
    assert distinct_advantage_groups(adv, torch.tensor([0, 0, 1, 1, 2, 2])) == 2
    # Token-level [B, T] advantages use the first column.
    assert distinct_advantage_groups(adv.unsqueeze(1).expand(6, 3), torch.tensor([0, 0, 1, 1, 2, 2])) == 2


def test_zero_std_fraction_per_component():
    rewards = {"format": torch.tensor([1.0, 1.0, 0.0, 1.0]), "correctness": torch.tensor([0.0, 0.0, 0.0, 0.0])}
    out = zero_std_fraction(rewards, torch.tensor([0, 0, 1, 1]))
    assert out == {"format": 0.5, "correctness": 1.0}


def test_advantage_groups_command_prints_json(capsys):
    assert main(["advantage-groups", "--num-rewards", "2", "--group-size", "2", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["estimator"]: r["distinct_groups"] for r in rows} == {"grpo": 2, "grpo_no_std": 3, "gdpo": 3}


def test_advantage_groups_command_table(capsys):
    assert main(["advantage-groups", "-n", "2", "-G", "16", "--estimator", "grpo"]) == 0
    out = capsys.readouterr().out
    assert "grpo" in out and "121" in out and "exact" in out


def test_advantage_groups_command_rejects_unknown_estimator(capsys):
    assert main(["advantage-groups", "-n", "2", "-G", "4", "--estimator", "ppo"]) == 2
    assert "unknown estimator 'ppo'" in capsys.readouterr().err


def test_collapse_figures_command_writes_fig2_table_and_fig3(tmp_path, monkeypatch):
    import gdpo_nemo.analysis.fig3 as figures

    # Smaller panels for the test's time: the same code path as the full figure.
    original = figures.fig3_counts
    monkeypatch.setattr(figures, "fig3_counts", lambda **kw: original(
        group_sizes=range(2, 5), num_rewards_range=range(1, 4), max_enumerate=100, samples=50, progress=False))
    assert main(["collapse-figures", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "fig2_toy.md").read_text().splitlines()[2:] == ["| GRPO | 2 |", "| GRPO w/o std | 3 |", "| GDPO | 3 |"]
    data = json.loads((tmp_path / "fig3_advantage_groups.json").read_text())
    assert {r["method"] for r in data["vs_num_rewards"]} == {"exact", "sampled"}
    for suffix in (".png", ".pdf"):
        assert (tmp_path / f"fig3_advantage_groups{suffix}").stat().st_size > 10_000


def test_a_group_that_is_one_value_has_no_signal_everywhere_and_one_unit_apart_is_signal():
    """The estimators, zero_std_fraction and NeMo RL's dynamic-sampling spread read groups
    through one rule (gdpo_nemo.estimators.groups.constant_within): they agree on what a
    constant group is. Rewards as given are exact (one unit in the last place apart is a
    difference, in any dtype); GRPO's float64 sum of several is one value within its residue."""
    from gdpo_nemo.config.settings import EstimatorSettings
    from gdpo_nemo.engines.nemo.sampling import group_range, group_signal_spread

    near = math.nextafter(1.2, 2.0)
    values = torch.tensor([1.2, 1.2, 1.2, near, 5.0, float("nan")], dtype=torch.float64)
    ids = torch.tensor([0, 0, 1, 1, 2, 2])
    assert zero_std_fraction({"r": values[:4]}, ids[:4]) == {"r": 0.5}
    spread = group_range(values, ids)
    assert spread[:2].tolist() == [0.0, 0.0] and spread[2] > 0 and math.isinf(spread[4])
    advantages = compute_advantages({"r": values[:4]}, ids[:4], "grpo")
    assert advantages[:2].tolist() == [0.0, 0.0] and advantages[2] < 0 < advantages[3]
    bf16 = torch.tensor([3.0, 3.03125, 3.0, 3.0], dtype=torch.bfloat16)  # 2 units of bfloat16 apart
    assert zero_std_fraction({"r": bf16}, ids[:4]) == {"r": 0.5}
    assert compute_advantages({"r": bf16}, ids[:4], "grpo").abs()[:2].min() > 0.7
    # 0.1 + 0.2 and 0.3 + 0.0 as GRPO's sum: residue of the sum, one value everywhere
    parts = {"a": torch.tensor([0.1, 0.3, 0.0, 1.0], dtype=torch.float64),
             "b": torch.tensor([0.2, 0.0, 0.0, 0.0], dtype=torch.float64)}
    batch = {"reward/a": parts["a"], "reward/b": parts["b"], "idx": ids[:4]}
    grpo = EstimatorSettings.from_gdpo({"estimator": "grpo", "reward_components": ["a", "b"]})
    gdpo = EstimatorSettings.from_gdpo({"estimator": "gdpo", "reward_components": ["a", "b"]})
    signal = group_signal_spread(batch, grpo)
    assert signal[:2].tolist() == [0.0, 0.0] and signal[2] > 0
    assert compute_advantages(parts, ids[:4], "grpo")[:2].tolist() == [0.0, 0.0]
    assert group_signal_spread(batch, gdpo)[:2].min() > 0  # each component varies: GDPO's signal


# ---- per-batch mechanism diagnostics: what GRPO merges, what each component earns ----------

def test_collapsed_fraction_counts_groups_where_distinct_reward_vectors_share_a_sum():
    from gdpo_nemo.estimators.collapse import collapsed_group_fraction

    # group 0: (1,0) and (0,1) both sum to 1 -> merged by GRPO; group 1: only (1,1) and (0,0).
    rewards = {"correctness": torch.tensor([1.0, 0, 1, 0, 1, 1, 0, 0]),
               "length": torch.tensor([0.0, 1, 1, 0, 1, 1, 0, 0])}
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    assert collapsed_group_fraction(rewards, groups) == 0.5
    # With w_length = 0.5 the sums are 1 and 0.5: nothing is merged.
    assert collapsed_group_fraction(rewards, groups, {"correctness": 1.0, "length": 0.5}) == 0.0
    # A NaN component leaves its sample out (group 0 then holds (1,0), (1,1), (0,0) only).
    rewards["length"][1] = float("nan")
    assert collapsed_group_fraction(rewards, groups) == 0.0


def test_component_gaps_are_each_components_within_group_advantage_difference_over_all_groups():
    from gdpo_nemo.estimators.collapse import component_advantage_gaps

    # Group 0: GRPO's advantages of sums [1, 1, 2, 0] (Bessel std sqrt(2/3)): [0, 0, a, -a], a = 1.2247.
    a = (3 / 2) ** 0.5
    advantages = torch.tensor([0.0, 0.0, a, -a, 0.5, -0.5, 0.5, -0.5])
    rewards = {"correctness": torch.tensor([1.0, 0, 1, 0, 1, 1, 1, 1]),   # constant in group 1: counts 0
               "length": torch.tensor([0.0, 1, 1, 0, 1, 0, 1, 0])}
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    gaps = component_advantage_gaps(advantages, rewards, groups)
    # correctness: group 0: mean(0, a) - mean(0, -a) = a; group 1: 0 -> a / 2.
    assert gaps["correctness"] == pytest.approx(a / 2)
    # length: group 0: mean(0, a) - mean(0, -a) = a; group 1: 0.5 - (-0.5) = 1 -> (a + 1) / 2.
    assert gaps["length"] == pytest.approx((a + 1) / 2)
