"""Whose estimator computes a NeMo RL run's advantages is decided once, when the config is
composed (config.derive.estimator_decision), and written into gdpo.computed_by: validation
checks a hand-set value against it and the plugin's hook reads it instead of deciding again."""

import pytest

from gdpo_nemo import config as cc
from gdpo_nemo.engines.nemo.estimators import AdvantageEstimator, create_estimator

MODEL = "qwen2.5-1.5b-instruct"


def _native(master):
    return "nemo-rl's own estimator"


@pytest.mark.parametrize(
    "algo, overrides, decided",
    [
        ("grpo", [], "nemo_rl"),
        ("gdpo", [], "nemo_rl"),
        ("gdpo_no_bn", [], "gdpo_nemo"),                       # NeMo RL has no GDPO without batch norm
        ("grpo", ["gdpo.reward_weights={format: 0.5}"], "gdpo_nemo"),  # NeMo RL's GRPO sums unweighted
        ("gdpo", ["gdpo.preset=trl"], "gdpo_nemo"),
        ("grpo", ["gdpo.leave_one_out=true"], "gdpo_nemo"),   # NeMo RL's float32 residue std
    ],
)
def test_the_composer_writes_the_decision_and_the_hook_follows_it(algo, overrides, decided):
    config = cc.compose("gsm8k", MODEL, algo, cluster="nemo_1n1g", overrides=overrides)
    assert config["gdpo"]["computed_by"] == decided
    built = create_estimator(config, _native)
    assert isinstance(built, AdvantageEstimator) if decided == "gdpo_nemo" else built == "nemo-rl's own estimator"


def test_the_hook_reads_the_written_decision_rather_than_deciding_again():
    # Plain GRPO is NeMo RL's to compute; a config that says gdpo_nemo gets ours, and the
    # written nemo_rl is kept even where leave-one-out would make the composer choose ours.
    forced = cc.compose("gsm8k", MODEL, "grpo", cluster="nemo_1n1g", overrides=["gdpo.computed_by=gdpo_nemo"])
    assert isinstance(create_estimator(forced, _native), AdvantageEstimator)
    loo = cc.compose("gsm8k", MODEL, "grpo", cluster="nemo_1n1g",
                     overrides=["gdpo.leave_one_out=true", "gdpo.computed_by=nemo_rl"])
    assert create_estimator(loo, _native) == "nemo-rl's own estimator"


def test_a_config_without_the_decision_gets_the_same_one_at_run_time():
    config = cc.compose("gsm8k", MODEL, "grpo", cluster="nemo_1n1g", overrides=["gdpo.reward_weights={format: 0.5}"])
    config["gdpo"]["computed_by"] = None  # written by hand, not by the composer
    assert isinstance(create_estimator(config, _native), AdvantageEstimator)


def test_nemo_rl_for_a_block_it_cannot_compute_is_refused_naming_the_key():
    with pytest.raises(cc.ConfigError, match=r"gdpo.computed_by: 'nemo_rl', but NeMo RL's own estimators cannot"):
        cc.compose("gsm8k", MODEL, "grpo", cluster="nemo_1n1g",
                   overrides=["gdpo.reward_weights={format: 0.5}", "gdpo.computed_by=nemo_rl"])
