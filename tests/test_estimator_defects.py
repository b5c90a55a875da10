"""The three estimator defects an independent check against the peers found (issue 25), each
with its reproducer: leave-one-out dividing by float residue, strict verl GRPO dropping
reward_weights, and the dense path's torch form (CUDA, or CPU without numba) failing on
rewards of extreme scale; plus rewards whose squares overflow, which must never give zero
advantages without a word."""

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gdpo_nemo.estimators import compute_advantages
from gdpo_nemo.estimators.options import AdvantageOptions

REPO = Path(__file__).resolve().parents[1]


def test_leave_one_out_treats_group_mates_whose_sums_are_equal_up_to_residue_as_constant():
    # The sums 0.3 + 0.0 and 0.1 + 0.2 differ in float64's last bit: residue of the sum this
    # package forms, so the first sample's group-mates are one value: no std, its advantage
    # is its sum minus theirs, 1.0, as with exact values.
    rewards = {"a": torch.tensor([1.3, 0.3, 0.3, 0.1], dtype=torch.float64),
               "b": torch.tensor([0.0, 0.0, 0.0, 0.2], dtype=torch.float64)}
    ids = torch.zeros(4, dtype=torch.long)
    assert 0.1 + 0.2 != 0.3
    default = compute_advantages(rewards, ids, "grpo", preset="nemo_rl", leave_one_out=True)
    exact = compute_advantages({"r": torch.tensor([1.3, 0.3, 0.3, 0.3], dtype=torch.float64)}, ids, "grpo",
                               preset="nemo_rl", leave_one_out=True)
    assert default[0].item() == pytest.approx(1.0, abs=1e-6)
    assert exact[0].item() == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_leave_one_out_keeps_rewards_given_one_unit_apart_as_nemo_rl_does(dtype):
    # A reward as given is exact: group-mates 1.2, 1.2 and the next number after 1.2 differ
    # (in float64), and the first sample is divided by their tiny std + 1e-6, as NeMo RL's
    # own formula does in float64; in float32 the three are one value.
    near = math.nextafter(1.2, 2.0)
    rewards = {"r": torch.tensor([2.2, 1.2, 1.2, near], dtype=dtype)}
    ids = torch.zeros(4, dtype=torch.long)
    got = compute_advantages(rewards, ids, "grpo", preset="nemo_rl", leave_one_out=True)
    mates = torch.tensor([1.2, 1.2, near], dtype=torch.float64)
    if dtype == torch.float32:
        assert got[0].item() == pytest.approx(1.0, abs=1e-6)
    else:
        value = (2.2 - float(mates.mean())) / (float(mates.std()) + 1e-6)
        assert value > 1e5 and got[0].item() == pytest.approx(value, rel=1e-4)


def test_leave_one_out_with_float32_weighted_sums_that_differ_by_residue():
    rewards = {name: torch.tensor(values, dtype=torch.float32) for name, values in
               (("a", [1, 1, 0, 0]), ("b", [1, 1, 0, 0]), ("c", [1, 0, 1, 1]))}
    weights = {"a": 0.1, "b": 0.2, "c": 0.3}
    ids = torch.zeros(4, dtype=torch.long)
    default = compute_advantages(rewards, ids, "grpo", preset="nemo_rl", leave_one_out=True, reward_weights=weights)
    strict = compute_advantages(rewards, ids, "grpo", preset="nemo_rl", leave_one_out=True, reward_weights=weights,
                                strict=True)
    # Sums 0.6, 0.3, 0.3, 0.3 (0.1 + 0.2 != 0.3 in float): the first sample is 0.3 above the others.
    assert strict[0].item() == pytest.approx(0.3, abs=1e-6)
    assert default[0].item() == pytest.approx(0.3, abs=1e-6)


def test_strict_verl_grpo_applies_the_reward_weights():
    rewards = {"a": torch.tensor([1.0, 0, 1, 1]), "b": torch.tensor([0.0, 1, 1, 0])}
    ids = torch.tensor([0, 0, 1, 1])
    for estimator in ("grpo", "grpo_no_std"):
        default = compute_advantages(rewards, ids, estimator, preset="verl", reward_weights={"a": 2.0})
        strict = compute_advantages(rewards, ids, estimator, preset="verl", reward_weights={"a": 2.0}, strict=True)
        unweighted = compute_advantages(rewards, ids, estimator, preset="verl", strict=True)
        assert torch.allclose(strict, default, atol=1e-5), (estimator, strict, default)
        assert not torch.allclose(strict, unweighted), estimator  # weight 2 on a breaks group 0's tie


def _extreme_batch(scale: float, seed: int = 0, groups: int = 64, size: int = 8) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return {name: scale * torch.randn(groups * size, dtype=torch.float64, generator=generator)
            for name in ("a", "b", "c")}


# (scale, options): each made the torch form raise "produced a non-finite advantage" where the
# numba kernel and the general path return finite advantages.
EXTREME = [(1e-160, {}), (1e150, {"scale_rewards": "none"}), (1e39, {"scale_rewards": "none"})]


def _torch_form_in_a_subprocess(scale, options, tmp_path):
    """compute_advantages with GDPO_NEMO_NUMBA=0 (the dense path's torch form, as on CUDA)
    in a fresh interpreter; returns the advantages, saved by torch."""
    out = tmp_path / "advantages.pt"
    code = (
        "import sys, torch\n"
        "from tests.test_estimator_defects import _extreme_batch\n"
        "from gdpo_nemo.estimators import compute_advantages\n"
        f"a = compute_advantages(_extreme_batch({scale!r}), torch.arange(64).repeat_interleave(8), 'gdpo',"
        f" preset='nemo_rl', **{options!r})\n"
        f"torch.save(a, {str(out)!r})\n"
    )
    env = dict(os.environ, GDPO_NEMO_NUMBA="0",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(out)


@pytest.mark.parametrize("scale, options", EXTREME)
def test_the_torch_form_of_the_dense_path_agrees_with_the_general_path_at_extreme_scales(scale, options, tmp_path):
    rewards = _extreme_batch(scale)
    ids = torch.arange(64).repeat_interleave(8)
    # Groups out of order take the general path: the reference.
    order = torch.randperm(ids.shape[0], generator=torch.Generator().manual_seed(1))
    general = torch.empty(ids.shape[0])
    general[order] = compute_advantages({k: v[order] for k, v in rewards.items()}, ids[order], "gdpo",
                                        preset="nemo_rl", **options)
    on_the_default_path = compute_advantages(rewards, ids, "gdpo", preset="nemo_rl", **options)
    torch_form = _torch_form_in_a_subprocess(scale, options, tmp_path)
    assert bool(torch.isfinite(general).all()) and float(general.abs().max()) > 0.5
    for actual in (on_the_default_path, torch_form):
        assert torch.allclose(actual, general, rtol=1e-4, atol=1e-4), (actual - general).abs().max()


@pytest.mark.parametrize("estimator", ["grpo", "grpo_no_std", "gdpo", "gdpo_no_bn"])
@pytest.mark.parametrize("layout", ["dense", "shuffled"])
def test_rewards_whose_squares_overflow_are_refused_never_zeroed(estimator, layout):
    ids = torch.arange(16).repeat_interleave(4)
    rewards = _extreme_batch(1e200, groups=16, size=4)
    if layout == "shuffled":
        order = torch.randperm(64, generator=torch.Generator().manual_seed(2))
        rewards, ids = {k: v[order] for k, v in rewards.items()}, ids[order]
    with pytest.raises(ValueError, match=r"rewards\['a'\].*overflow"):
        compute_advantages(rewards, ids, estimator, preset="nemo_rl")


@pytest.mark.parametrize("weight", [np.int64(2), np.float32(2.0), np.float64(2.0), torch.tensor(2.0), torch.tensor(2),
                                    np.array(2.0)], ids=lambda w: f"{type(w).__module__}.{type(w).__name__}")
def test_a_weight_given_as_a_numpy_or_torch_scalar_is_the_number_it_holds(weight):
    """Issue 48: np.int64(2), np.float32(2.0) and torch.tensor(2.0) were refused as "not
    finite numbers"; any real scalar is a weight, and trains exactly as the Python number."""
    rewards = {"a": torch.tensor([0.0, 1.0, 0.0, 1.0, 1.0, 1.0]), "b": torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 1.0])}
    ids = torch.tensor([0, 0, 1, 1, 2, 2])
    for estimator in ("gdpo", "grpo"):
        expected = compute_advantages(rewards, ids, estimator, reward_weights={"a": 2.0})
        assert torch.equal(compute_advantages(rewards, ids, estimator, reward_weights={"a": weight}), expected)
    options = AdvantageOptions.resolve(None, reward_weights={"a": weight})
    assert options.reward_weights == {"a": 2.0} and type(options.reward_weights["a"]) is float


@pytest.mark.parametrize("weight", [True, np.bool_(True), torch.tensor(True), torch.tensor([2.0, 1.0]), float("nan"),
                                    np.float32("inf"), complex(2, 0), "2"], ids=repr)
def test_a_weight_that_is_no_finite_real_scalar_is_refused_naming_the_option(weight):
    rewards = {"a": torch.tensor([0.0, 1.0]), "b": torch.tensor([1.0, 1.0])}
    with pytest.raises(ValueError, match=r"reward_weights: .*expected finite numbers as weights"):
        compute_advantages(rewards, torch.tensor([0, 0]), "gdpo", reward_weights={"a": weight})
