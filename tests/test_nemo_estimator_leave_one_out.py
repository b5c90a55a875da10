"""NeMo RL runs with leave-one-out get gdpo_nemo's estimator (docs/estimators.md, section 3).

NeMo RL's float32 E[x^2] - E[x]^2 std gives a sample whose group-mates all share a
non-dyadic reward a std of float residue, and dividing by it turns the difference into
advantages of hundreds to millions; ours gives that std exactly 0 (the difference stays
undivided). The plugin's estimator factory therefore routes every leave-one-out run through
ours, and says why in the run's log.
"""

import pytest
import torch

from gdpo_nemo import config as cc
from gdpo_nemo.engines.nemo.estimators import AdvantageEstimator, create_estimator


@pytest.mark.parametrize("algo", ["grpo", "gdpo"])
def test_leave_one_out_runs_use_our_estimator_and_log_why(algo, capsys):
    config = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", algo, overrides=["gdpo.leave_one_out=true"])
    ours = create_estimator(config, lambda master: pytest.fail("NeMo RL's estimator must not be built"))
    assert isinstance(ours, AdvantageEstimator) and ours.settings.options.leave_one_out
    assert "leave-one-out" in capsys.readouterr().out


def test_runs_without_leave_one_out_keep_nemo_rls_estimator():
    native = object()
    config = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "gdpo")
    assert create_estimator(config, lambda master: native) is native


def test_routed_estimator_leaves_the_residue_case_undivided():
    # The last sample's three group-mates all pass 1 of 3 tests (float32 1/3): ours gives
    # 1 - 1/3 = 2/3, undivided; NeMo RL divides it by a residue std (6247, tests/test_advantages.py).
    config = cc.compose("gsm8k", "qwen2.5-1.5b-instruct", "grpo", overrides=["gdpo.leave_one_out=true"])
    estimator = create_estimator(config, lambda master: None)
    names = estimator.settings.components
    rewards = {f"reward/{name}": torch.tensor([1 / 3, 1 / 3, 1 / 3, 1.0], dtype=torch.float32) * (k == 0)
               for k, name in enumerate(names)}
    advantages = estimator.compute_advantage(torch.zeros(4, 1), None, torch.ones(4, 1), repeated_batch=rewards)
    assert abs(float(advantages[3, 0]) - 2 / 3) < 1e-6
