"""Specification of the advantage estimators (gdpo_nemo.estimators).

Hand-worked numbers: a group of three samples with binary rewards has Bessel std
sqrt(1/3) = 0.57735 for one 1 and two 0s (deviations 2/3, -1/3, -1/3).
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gdpo_nemo.estimators import ESTIMATORS, PRESETS, compute_advantages

from tests.support.advantages_loop import loop_advantages

NAN = float("nan")
S3 = math.sqrt(1 / 3)  # Bessel std of [1, 0, 0]


def t(*values):
    return torch.tensor(values, dtype=torch.float64)


def close(actual, expected, tol=1e-5):
    assert torch.allclose(actual.double(), torch.tensor(expected, dtype=torch.float64), atol=tol, rtol=0), actual


# Two groups of 3: group 0 format [1,1,0], correctness [1,0,0]; group 1 format constant, correctness [0,1,0].
TWO_GROUPS = {"format": t(1, 1, 0, 1, 1, 1), "correctness": t(1, 0, 0, 0, 1, 0)}
GROUPS = torch.tensor([0, 0, 0, 1, 1, 1])
# Per-component group advantages (eps aside): format group 0 = [1/3, 1/3, -2/3] / S3, correctness
# group 0 = [2/3, -1/3, -1/3] / S3, group 1 = [-1/3, 2/3, -1/3] / S3; format group 1 = 0.
A_SUM = [math.sqrt(3), 0.0, -math.sqrt(3), -S3, 2 * S3, -S3]  # mean 0, sum of squares 8
BN_STD = math.sqrt(8 / 5)


def test_registry_has_the_four_paper_estimators():
    assert set(ESTIMATORS) == {"grpo", "grpo_no_std", "gdpo", "gdpo_no_bn"}


def test_paper_toy_grpo_collapses_what_gdpo_separates():
    # Fig. 2: rewards (1,0),(0,0) and (1,1),(0,0): sums (1,0) and (2,0).
    rewards = {"r1": t(1, 0, 1, 0), "r2": t(0, 0, 1, 0)}
    groups = torch.tensor([0, 0, 1, 1])
    grpo = compute_advantages(rewards, groups, "grpo")
    close(grpo, [0.70711, -0.70711, 0.70711, -0.70711])
    gdpo = compute_advantages(rewards, groups, "gdpo_no_bn")
    close(gdpo, [0.70711, -0.70711, 1.41421, -1.41421])


def test_grpo_normalizes_the_sum_within_each_group():
    # sums: group 0 = [2, 1, 0] -> ([1, 0, -1]) / 1; group 1 = [1, 2, 1] -> [-1/3, 2/3, -1/3] / S3
    close(compute_advantages(TWO_GROUPS, GROUPS, "grpo"), [1, 0, -1, -S3, 2 * S3, -S3])


def test_grpo_no_std_only_subtracts_the_group_mean():
    close(compute_advantages(TWO_GROUPS, GROUPS, "grpo_no_std"), [1, 0, -1, -1 / 3, 2 / 3, -1 / 3])


def test_gdpo_no_bn_sums_per_component_group_advantages():
    close(compute_advantages(TWO_GROUPS, GROUPS, "gdpo_no_bn"), A_SUM)


def test_gdpo_nemo_rl_preset_batch_normalizes_with_bessel_std_and_no_eps():
    expected = [a / BN_STD for a in A_SUM]
    close(compute_advantages(TWO_GROUPS, GROUPS, "gdpo", preset="nemo_rl"), expected)
    close(compute_advantages(TWO_GROUPS, GROUPS, "gdpo"), expected)  # the default is NeMo RL's


def test_gdpo_trl_preset_adds_1e_4_to_group_and_batch_std():
    shrink = S3 / (S3 + 1e-4)  # every component std here is S3
    expected = [a * shrink / (BN_STD * shrink + 1e-4) for a in A_SUM]
    close(compute_advantages(TWO_GROUPS, GROUPS, "gdpo", preset="trl"), expected, tol=1e-6)


def test_gdpo_verl_preset_normalizes_per_token():
    # Response lengths 1..6 tokens: token-weighted mean and Bessel variance over 21 tokens.
    lengths = [1, 2, 3, 4, 5, 6]
    mask = torch.tensor([[1] * n + [0] * (6 - n) for n in lengths])
    total = sum(lengths)
    mean = sum(n * a for n, a in zip(lengths, A_SUM)) / total
    var = sum(n * (a - mean) ** 2 for n, a in zip(lengths, A_SUM)) / (total - 1)
    expected = [(a - mean) / math.sqrt(var + 1e-8) for a in A_SUM]
    close(compute_advantages(TWO_GROUPS, GROUPS, "gdpo", preset="verl", token_mask=mask), expected, tol=1e-5)


def test_presets_are_the_documented_peer_constants():
    assert PRESETS["nemo_rl"] == {"std_ddof": 1, "eps": 1e-6, "batch_norm_eps": 0.0, "single_sample_groups": "zero"}
    assert PRESETS["trl"]["eps"] == 1e-4 and PRESETS["trl"]["batch_norm_eps"] == 1e-4
    assert PRESETS["verl"]["batch_norm_eps"] == 1e-8


def test_trl_scale_rewards_batch_divides_group_centred_sums_by_the_batch_std():
    # Sums [2, 1, 0 | 1, 2, 1]: mean 7/6, Bessel variance (102/36) / 5, std 0.75277.
    # Group-centred: [1, 0, -1 | -1/3, 2/3, -1/3]; TRL adds 1e-4 to the std.
    std = math.sqrt(102 / 36 / 5)
    expected = [c / (std + 1e-4) for c in (1, 0, -1, -1 / 3, 2 / 3, -1 / 3)]
    close(compute_advantages(TWO_GROUPS, GROUPS, "grpo", preset="trl", scale_rewards="batch"), expected, tol=1e-6)


def test_scale_rewards_none_is_grpo_no_std():
    none = compute_advantages(TWO_GROUPS, GROUPS, "grpo", scale_rewards="none")
    assert torch.equal(none, compute_advantages(TWO_GROUPS, GROUPS, "grpo_no_std"))
    close(none, [1, 0, -1, -1 / 3, 2 / 3, -1 / 3])


def test_gdpo_without_group_std_centres_each_component_then_batch_normalizes():
    # NeMo RL GDPO with normalize_rewards: false. format centred [1/3, 1/3, -2/3 | 0, 0, 0],
    # correctness [2/3, -1/3, -1/3 | -1/3, 2/3, -1/3]: sum [1, 0, -1, -1/3, 2/3, -1/3], mean 0,
    # Bessel variance (2 + 6/9) / 5 = 8/15.
    std = math.sqrt(8 / 15)
    expected = [a / std for a in (1, 0, -1, -1 / 3, 2 / 3, -1 / 3)]
    close(compute_advantages(TWO_GROUPS, GROUPS, "gdpo", preset="nemo_rl", scale_rewards="none"), expected)


def test_nemo_rl_preset_gives_a_single_sample_group_zero_and_keeps_it_in_batch_norm():
    # Group 0 = a [1, 0, 0], b [0, 0, 1]; group 1 a single sample. GDPO sum in group 0:
    # [2/3 - 1/3, -1/3 - 1/3, -1/3 + 2/3] / S3 = [1, -2, 1] * S3; the single sample 0. BN over
    # all 4: mean 0, Bessel variance (1/3 + 4/3 + 1/3 + 0) / 3 = 2/3 -> [0.70711, -1.41421, 0.70711, 0].
    rewards = {"a": t(1, 0, 0, 1), "b": t(0, 0, 1, 0)}
    groups = torch.tensor([0, 0, 0, 1])
    close(compute_advantages(rewards, groups, "gdpo", preset="nemo_rl"), [0.70711, -1.41421, 0.70711, 0.0])
    close(compute_advantages({"a": t(1, 0, 0, 1)}, groups, "grpo", preset="nemo_rl"), [2 / 3 / S3, -1 / 3 / S3, -1 / 3 / S3, 0])
    with pytest.raises(ValueError, match="single_sample_groups='zero'"):
        compute_advantages(rewards, groups, "gdpo")


def test_strict_nemo_rl_keeps_the_leave_one_out_residue_that_the_default_gives_exactly():
    # Pass rates [1/3, 1/3, 1/3, 1]: sample 3's group-mates have no variation, so the default
    # leaves 1 - 1/3 = 2/3 undivided. NeMo RL's float32 E[x^2] - E[x]^2 of three 1/3s is
    # about 1e-8, not 0, and 2/3 divided by its square root is 6247.
    rewards = {"pass_rate": t(1 / 3, 1 / 3, 1 / 3, 1)}
    groups = torch.tensor([0, 0, 0, 0])
    robust = compute_advantages(rewards, groups, "grpo", preset="nemo_rl", leave_one_out=True)
    close(robust, [-1 / 3 / S3, -1 / 3 / S3, -1 / 3 / S3, 2 / 3])
    strict = compute_advantages(rewards, groups, "grpo", preset="nemo_rl", leave_one_out=True, strict=True)
    assert 6000 < float(strict[3]) < 6500


def test_dense_fast_path_equals_the_general_path():
    # Consecutive equal-size groups take _dense_advantages; the same batch shuffled takes the
    # general path. Constant groups, cancelling components and weights included.
    generator = torch.Generator().manual_seed(0)
    size, prompts = 4, 50
    rewards = {
        "a": torch.randint(0, 2, (size * prompts,), generator=generator).double(),
        "b": torch.rand(size * prompts, generator=generator).double(),
        "c": torch.tensor([0.1, 0.1, 0.1, 0.1] * prompts, dtype=torch.float64),
    }
    rewards["b"][:40] = 1 / 3
    groups = torch.arange(prompts).repeat_interleave(size)
    shuffle = torch.randperm(size * prompts, generator=generator)
    for estimator in ESTIMATORS:
        for options in ({}, {"preset": "trl"}, {"scale_rewards": "none"}, {"reward_weights": {"a": 2.0, "b": 0.5}}):
            if estimator == "grpo_no_std" and "scale_rewards" in options:
                continue
            dense = compute_advantages(rewards, groups, estimator, **options)
            general = compute_advantages({k: v[shuffle] for k, v in rewards.items()}, groups[shuffle], estimator, **options)
            close(dense[shuffle], general.tolist(), tol=1e-6)
    cancel = {"x": rewards["a"], "y": 1 - rewards["a"]}
    assert torch.equal(compute_advantages(cancel, groups, "gdpo"), torch.zeros(size * prompts))


def test_leave_one_out_uses_the_other_samples_and_skips_division_by_zero_std():
    # [1, 0, 0]: sample 0 sees others [0, 0] (baseline 0, std 0: left undivided = 1);
    # samples 1, 2 see [1, 0] (baseline 0.5, std 0.70711): -0.5 / 0.70711.
    close(compute_advantages({"r": t(1, 0, 0)}, torch.tensor([7, 7, 7]), "grpo", leave_one_out=True),
          [1.0, -0.70711, -0.70711])
    # [1, 1, 0, 0]: sample 0 sees [1, 0, 0]: (1 - 1/3) / S3.
    close(compute_advantages({"r": t(1, 1, 0, 0)}, torch.tensor([0, 0, 0, 0]), "grpo", leave_one_out=True),
          [2 / 3 / S3, 2 / 3 / S3, -2 / 3 / S3, -2 / 3 / S3])


def test_population_std_with_std_ddof_0():
    # [1, 0]: population std 0.5 -> advantages +-1
    close(compute_advantages({"r": t(1, 0)}, torch.tensor([0, 0]), "grpo", std_ddof=0, eps=0.0), [1, -1])


def test_zero_variance_groups_give_exactly_zero():
    rewards = {"a": t(1, 1, 0.1, 0.1, 0.1), "b": t(0, 0, 0.3, 0.3, 0.3)}
    groups = torch.tensor([0, 0, 1, 1, 1])
    for estimator in ESTIMATORS:
        out = compute_advantages(rewards, groups, estimator)
        assert torch.equal(out, torch.zeros(5)), (estimator, out)


def test_nan_component_is_left_out_of_its_group_statistics():
    # group 0 format [1, NaN, 0] -> stats over [1, 0]; the NaN sample gets 0 from format.
    rewards = {"format": t(1, NAN, 0), "correctness": t(1, 0, 0)}
    out = compute_advantages(rewards, torch.tensor([0, 0, 0]), "gdpo_no_bn")
    close(out, [0.70711 + 2 / 3 / S3, -1 / 3 / S3, -0.70711 - 1 / 3 / S3])


def test_all_nan_sample_gets_zero_and_stays_out_of_batch_norm():
    rewards = {"a": t(1, 0, NAN, 1, 0), "b": t(0, 1, NAN, 1, 0)}
    groups = torch.tensor([0, 0, 0, 1, 1])
    out = compute_advantages(rewards, groups, "gdpo")
    assert out[2] == 0
    kept = torch.cat([out[:2], out[3:]])
    # Without the NaN row: A_sum = [0, 0, 1.41421, -1.41421], BN over these 4.
    expected_sum = [0.0, 0.0, 2 * 0.70711, -2 * 0.70711]
    std = math.sqrt(sum(a * a for a in expected_sum) / 3)
    close(kept, [a / std for a in expected_sum], tol=1e-4)


def test_reward_weights_scale_each_component_advantage():
    out = compute_advantages(TWO_GROUPS, GROUPS, "gdpo_no_bn", reward_weights={"format": 0.5})
    fmt = [1 / 3 / S3, 1 / 3 / S3, -2 / 3 / S3, 0, 0, 0]
    cor = [2 / 3 / S3, -1 / 3 / S3, -1 / 3 / S3, -1 / 3 / S3, 2 / 3 / S3, -1 / 3 / S3]
    close(out, [0.5 * f + c for f, c in zip(fmt, cor)])


def test_weights_enter_the_grpo_sum():
    out = compute_advantages(TWO_GROUPS, GROUPS, "grpo_no_std", reward_weights={"correctness": 2.0})
    # sums group 0 = [3, 1, 0] (mean 4/3), group 1 = [1, 3, 1] (mean 5/3)
    close(out, [5 / 3, -1 / 3, -4 / 3, -2 / 3, 4 / 3, -2 / 3])


def test_unequal_non_contiguous_groups_match_the_per_group_loop():
    rewards = {"a": t(1, 0, 1, 1, 0, 0, 1), "b": t(0, 0, 1, 1, 1, 0, 0)}
    groups = torch.tensor([3, 9, 3, 9, 3, 9, 9])  # sizes 3 and 4, interleaved
    for estimator in ESTIMATORS:
        expected = loop_advantages({k: v.tolist() for k, v in rewards.items()}, groups.tolist(), estimator)
        close(compute_advantages(rewards, groups, estimator), expected)


def test_tensor_input_with_component_names_equals_dict_input():
    matrix = torch.stack([TWO_GROUPS["format"], TWO_GROUPS["correctness"]], dim=1)
    a = compute_advantages(matrix, GROUPS, "gdpo", component_names=["format", "correctness"])
    assert torch.equal(a, compute_advantages(TWO_GROUPS, GROUPS, "gdpo"))


def test_output_is_float32_per_sample():
    out = compute_advantages(TWO_GROUPS, GROUPS)
    assert out.dtype == torch.float32 and out.shape == (6,)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(rewards={"a": t(1, 0)}, group_ids=torch.tensor([0, 0]), estimator="gdpo"), "at least 2"),
        (dict(rewards={"a": t(1, 0), "b": t(1, 0, 1)}, group_ids=torch.tensor([0, 0])), "differ in length"),
        (dict(rewards={"a": t(1, 0), "b": t(0, 1)}, group_ids=torch.tensor([0, 0, 0])), "group_ids has shape"),
        (dict(rewards={"a": t(1, 0, 1), "b": t(0, 1, 1)}, group_ids=torch.tensor([0, 0, 1])), "single sample"),
        (dict(rewards=TWO_GROUPS, group_ids=GROUPS, scale_rewards="batch"), "scale_rewards: 'batch' is TRL's GRPO option"),
        (dict(rewards=TWO_GROUPS, group_ids=GROUPS, estimator="grpo", scale_rewards="std"), "scale_rewards"),
        (dict(rewards=TWO_GROUPS, group_ids=GROUPS, single_sample_groups="drop"), "single_sample_groups"),
        (dict(rewards=TWO_GROUPS, group_ids=GROUPS, strict=True), "needs preset"),
        (dict(rewards=TWO_GROUPS, group_ids=GROUPS, reward_weights={"lenght": 1.0}), "unknown component"),
        (dict(rewards=TWO_GROUPS, group_ids=GROUPS, reward_weights={"format": float("inf")}), "finite number"),
        (dict(rewards=TWO_GROUPS, group_ids=GROUPS, estimator="ppo"), "unknown estimator"),
        (dict(rewards=TWO_GROUPS, group_ids=GROUPS, preset="openrlhf"), r"preset: .openrlhf.; expected one of \[.nemo_rl., .trl., .verl., None\]"),
        (dict(rewards=TWO_GROUPS, group_ids=GROUPS, std_ddof=2), "std_ddof"),
        (dict(rewards=TWO_GROUPS, group_ids=GROUPS, eps=-1.0), "eps"),
        (dict(rewards=TWO_GROUPS, group_ids=GROUPS.float()), "integer tensor"),
        (dict(rewards=TWO_GROUPS, group_ids=GROUPS, token_mask=torch.ones(5, 3)), "token_mask"),
        (dict(rewards={"a": t(1, math.inf), "b": t(0, 1)}, group_ids=torch.tensor([0, 0])), r"rewards\['a'\] contains an infinite"),
        (dict(rewards={}, group_ids=torch.tensor([0, 0])), "empty"),
        (dict(rewards=torch.zeros(4, 2), group_ids=torch.tensor([0, 0, 1, 1])), "component_names"),
    ],
)
def test_bad_input_raises_value_error_naming_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        compute_advantages(**kwargs)


# ---------------------------------------------------------------------------------------
# Properties.
# ---------------------------------------------------------------------------------------

REWARD_VALUES = st.sampled_from([0.0, 1.0, 0.5, -3.0, 3.0, 2.0, NAN])


@st.composite
def batches(draw, allow_nan=True, min_components=2):
    num_components = draw(st.integers(min_components, 4))
    sizes = draw(st.lists(st.integers(2, 5), min_size=1, max_size=5))
    group_ids = [g for g, n in enumerate(sizes) for _ in range(n)]
    order = draw(st.permutations(range(len(group_ids))))
    group_ids = [group_ids[i] * 7 for i in order]  # non-contiguous, non-consecutive ids
    values = REWARD_VALUES if allow_nan else REWARD_VALUES.filter(lambda v: not math.isnan(v))
    rewards = {f"r{k}": [draw(values) for _ in group_ids] for k in range(num_components)}
    return rewards, group_ids


@settings(max_examples=300, deadline=None)
@given(batches(), st.sampled_from(sorted(ESTIMATORS)), st.booleans(), st.sampled_from([None, "nemo_rl", "trl"]),
       st.sampled_from(["group", "none", "batch"]))
def test_vectorized_estimators_equal_the_per_group_loop(batch, estimator, leave_one_out, preset, scale):
    rewards, group_ids = batch
    if estimator == "grpo_no_std" or (scale == "batch" and estimator != "grpo"):
        scale = "group"
    got = compute_advantages({k: torch.tensor(v) for k, v in rewards.items()}, torch.tensor(group_ids),
                             estimator, leave_one_out=leave_one_out, preset=preset, scale_rewards=scale)
    expected = loop_advantages(rewards, group_ids, estimator, leave_one_out=leave_one_out, preset=preset,
                               scale_rewards=scale)
    assert torch.isfinite(got).all()
    close(got, expected, tol=2e-4)


@settings(max_examples=400, deadline=None)
@given(batches(allow_nan=False), st.data())
def test_gdpo_is_invariant_to_per_component_affine_rescaling(batch, data):
    rewards, group_ids = batch
    scaled = {}
    for name, values in rewards.items():
        scale = data.draw(st.floats(0.1, 10.0), label=f"scale {name}")
        shift = data.draw(st.floats(-5.0, 5.0), label=f"shift {name}")
        scaled[name] = [scale * v + shift for v in values]
    ids = torch.tensor(group_ids)
    for estimator in ("gdpo", "gdpo_no_bn"):
        a = compute_advantages({k: torch.tensor(v, dtype=torch.float64) for k, v in rewards.items()}, ids, estimator, eps=0.0)
        b = compute_advantages({k: torch.tensor(v, dtype=torch.float64) for k, v in scaled.items()}, ids, estimator, eps=0.0)
        close(a, b.tolist(), tol=1e-4)
        # In float32 the rescaled rewards are rounded: they are other rewards (components that
        # cancel exactly in float64 may not in float32, and GDPO's batch norm then scales what
        # is left, as NeMo RL's does). What holds: the container never changes the result of
        # the values it holds (issue 48).
        as32 = {k: torch.tensor(v, dtype=torch.float32) for k, v in scaled.items()}
        c = compute_advantages(as32, ids, estimator, eps=0.0)
        d = compute_advantages({k: v.double() for k, v in as32.items()}, ids, estimator, eps=0.0)
        assert torch.equal(c, d), (c, d)


@settings(max_examples=200, deadline=None)
@given(batches(allow_nan=False))
def test_batch_norm_output_has_mean_0_and_std_1(batch):
    rewards, group_ids = batch
    out = compute_advantages({k: torch.tensor(v) for k, v in rewards.items()}, torch.tensor(group_ids), "gdpo")
    assert abs(float(out.double().mean())) < 1e-5
    if bool((out != 0).any()):
        assert abs(float(out.double().std()) - 1.0) < 1e-5


def test_gdpo_keeps_a_sum_that_only_nearly_cancels_on_the_fast_path_too():
    # One group of two: r0 = (1, 0.5) and r1 = (0.5, 2) normalize to +-0.25 / (0.3536 + eps)
    # and -+0.75 / (1.0607 + eps), whose sum is +-1.3e-6: eps makes it real, not float residue
    # (the batch std, 1.9e-6, is above 1e-6 x the components' 1.414). Batch-normalized that is
    # -+1/sqrt(2). Consecutive ids take the dense path, whose cheap bound on the scale (2.0)
    # would call it cancellation; it must hand such a batch to the exact decision.
    rewards = {"r0": torch.tensor([1.0, 0.5]), "r1": torch.tensor([0.5, 2.0])}
    expected = [-1 / math.sqrt(2), 1 / math.sqrt(2)]
    close(compute_advantages(rewards, torch.tensor([0, 0]), "gdpo"), expected, tol=1e-5)
    close(compute_advantages(rewards, torch.tensor([9, 9]), "gdpo"), expected, tol=1e-5)
