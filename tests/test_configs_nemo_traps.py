"""Settings NeMo RL accepts at load time and fails on only once the run is going (its first
checkpoint, its first step, its logger): `validate` refuses them before anything starts,
naming the key. Each was met running NeMo RL's grpo_train on a CPU (docs/nemo_rl.md, section 7)."""

from __future__ import annotations

import pytest

from gdpo_nemo import config as cc


@pytest.fixture(scope="module")
def math_run():
    return cc.compose("math", "r1-distill-qwen-1.5b", "gdpo", cluster="nemo_1n8g", seed=0)


def _problems(config, *overrides) -> str:
    changed = cc.apply_overrides(config, list(overrides))
    with pytest.raises(cc.ConfigError) as caught:
        cc.validate(changed)
    return str(caught.value)


def test_the_composed_math_run_is_valid_as_it_is(math_run):
    cc.validate(math_run)
    assert math_run["grpo"]["use_dynamic_sampling"] is True
    assert math_run["checkpointing"]["model_save_format"] == "safetensors"
    assert math_run["policy"]["dtensor_cfg"]["_v2"] is True


def test_a_checkpoint_format_with_the_v1_dtensor_worker_is_refused_naming_both_keys(math_run):
    message = _problems(math_run, "policy.dtensor_cfg._v2=false")
    assert "checkpointing.model_save_format: 'safetensors' with policy.dtensor_cfg._v2: false" in message
    cc.validate(cc.apply_overrides(math_run, ["policy.dtensor_cfg._v2=false", "checkpointing.model_save_format=null"]))


def test_dynamic_sampling_needs_at_least_one_generation_batch(math_run):
    assert "grpo.dynamic_sampling_max_gen_batches: must be at least 1" in _problems(math_run, "grpo.dynamic_sampling_max_gen_batches=0")
    cc.validate(cc.apply_overrides(math_run, ["grpo.dynamic_sampling_max_gen_batches=0", "grpo.use_dynamic_sampling=false"]))


def test_a_batch_multiplier_needs_dynamic_sampling(math_run):
    message = _problems(math_run, "grpo.use_dynamic_sampling=false", "grpo.batch_multiplier=2")
    assert "grpo.batch_multiplier: 2 needs grpo.use_dynamic_sampling: true" in message
    cc.validate(cc.apply_overrides(math_run, ["grpo.batch_multiplier=2"]))


def test_an_enabled_logger_needs_its_block(math_run):
    message = _problems(math_run, "logger.tensorboard_enabled=true", "~logger.tensorboard")
    assert "logger.tensorboard: missing; NeMo RL's Logger reads it when logger.tensorboard_enabled is true" in message
    cc.validate(cc.apply_overrides(math_run, ["logger.tensorboard_enabled=true"]))  # base.yaml has tensorboard: {}
