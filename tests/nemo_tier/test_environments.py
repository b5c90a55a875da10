"""Our environments, data and processors inside NeMo RL's own rollout, on a real local Ray.

register() puts our environments and processors in NeMo RL's registries; NeMo RL's
setup_response_data then loads our TaskDataset by dotted path, applies our processors and
starts our environment actor with create_env; NeMo RL's run_multi_turn_rollout generates
(with the scripted stand-in for vLLM) and scores through calculate_rewards. For every task,
the batch must carry each named component exactly as our scorer computes it, with
total_reward their sum.
"""

from __future__ import annotations

import sys

import pytest
import torch

from gdpo_nemo import config as cc
from support import TASK_RUNS, demonstrations, scripted_generation, small_config

WRONG = "I do not know."


def _rollout(config, tokenizer, answers, plugin_state=None, prepare=None):
    """NeMo RL's data setup and one rollout of every train row: (batch, metrics); the
    environment actors are ended afterwards."""
    import ray

    from nemo_rl.data.collate_fn import rl_collate_fn
    from nemo_rl.data.utils import setup_response_data
    from nemo_rl.experience.rollouts import run_multi_turn_rollout

    dataset, _, task_to_env, _ = setup_response_data(tokenizer, config["data"], config["env"])
    batch = rl_collate_fn([dataset[i] for i in range(len(dataset))])
    if prepare is not None:
        prepare(batch)
    rollout = run_multi_turn_rollout
    if plugin_state is not None:
        from gdpo_nemo.engines.nemo.plugin import wrap_rollout

        rollout = wrap_rollout(run_multi_turn_rollout, plugin_state)
    try:
        return rollout(
            policy_generation=scripted_generation(tokenizer, answers),
            input_batch=batch,
            tokenizer=tokenizer,
            task_to_env=task_to_env,
            max_seq_len=config["policy"]["max_total_sequence_length"],
            max_rollout_turns=config["grpo"]["max_rollout_turns"],
        )
    finally:
        for actor in {id(a): a for a in task_to_env.values()}.values():
            ray.kill(actor)


@pytest.fixture(scope="module")
def tokenizer(tiny_tokenizer_dir):
    if tiny_tokenizer_dir is None:
        return None  # outside .venv-nemo: the test runs there (conftest.py)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_tokenizer_dir)


def test_register_adds_our_environments_processors_and_actor_to_nemo_rl(registered):
    from nemo_rl.data.processors import PROCESSOR_REGISTRY
    from nemo_rl.distributed.ray_actor_environment_registry import get_actor_python_env
    from nemo_rl.environments.utils import ENV_REGISTRY

    from gdpo_nemo.engines.nemo.environment import ACTOR_FQN

    for task in cc.TASKS:
        assert ENV_REGISTRY[cc.ENV_NAMES[task]]["actor_class_fqn"] == ACTOR_FQN
        assert PROCESSOR_REGISTRY[cc.PROCESSOR_NAMES[task]].__module__ == "gdpo_nemo.engines.nemo.data"
    assert get_actor_python_env(ACTOR_FQN) == sys.executable  # PY_EXECUTABLES.SYSTEM: the driver's Python, no uv venv


@pytest.fixture(scope="module")
def task_rollouts(local_ray, registered, tokenizer, tiny_tokenizer_dir, tmp_path_factory):
    """{task: (config, answers, batch, metrics)}: one rollout of a demonstration and a
    non-answer per task, made when a test first asks for the task (each starts an environment
    actor: a Ray process of its own)."""
    made = {}

    def rollout(task):
        if task not in made:
            config = small_config(task, tiny_tokenizer_dir, tmp_path_factory.mktemp(task) / "run")
            answers = [demonstrations(task, config, 1)[0], WRONG]
            made[task] = (config, answers, *_rollout(config, tokenizer, answers))
        return made[task]

    return rollout


@pytest.mark.parametrize("task", list(TASK_RUNS))
def test_nemo_rl_rollout_carries_each_reward_component_of_our_environment(task, task_rollouts):
    from gdpo_nemo.engines.nemo.scoring import EnvSettings, RewardScorer, load_token_counter

    config, answers, batch, _ = task_rollouts(task)
    env_block = config["env"][cc.ENV_NAMES[task]]
    settings = EnvSettings.from_config(env_block)
    scored = RewardScorer(settings, load_token_counter(settings.tokenizer)).score(
        [[{"role": "assistant", "content": a}] for a in answers], list(batch["extra_env_info"])
    )
    for key, values in scored.rewards.items():
        assert batch[key].tolist() == pytest.approx(values), key
    assert sorted(k for k in batch if k.startswith("reward/")) == sorted(f"reward/{c}" for c in config["gdpo"]["reward_components"])
    summed = sum(batch[key] for key in scored.rewards)
    assert torch.allclose(batch["total_reward"], summed)
    assert batch["total_reward"][0] > batch["total_reward"][1]  # the demonstration beats the non-answer


def test_our_environment_adds_no_observation_tokens_to_the_training_sequence(task_rollouts):
    _, _, batch, metrics = task_rollouts("gsm8k")  # the same rollout as the component test's
    environment_messages = [m for log in batch["message_log"] for m in log if m["role"] == "environment"]
    assert environment_messages and all(m["token_ids"].numel() == 0 for m in environment_messages)
    assert metrics["mean_env_tokens_per_sample"] == 0.0


def test_rows_with_a_broken_ground_truth_are_counted_in_the_rollout_metrics(local_ray, registered, tokenizer,
                                                                           tiny_tokenizer_dir, tmp_path):
    from gdpo_nemo.config.settings import EstimatorSettings
    from gdpo_nemo.engines.nemo.plugin import HookState

    config = small_config("gsm8k", tiny_tokenizer_dir, tmp_path / "run", rows=3)
    state = HookState(settings=EstimatorSettings.from_gdpo(config["gdpo"], nemo_engine=True))

    def break_row_one(batch):  # a ground truth the gsm8k rewards cannot judge (not a string)
        batch["extra_env_info"][1] = {**batch["extra_env_info"][1], "ground_truth": None}

    batch, metrics = _rollout(config, tokenizer, [WRONG], plugin_state=state, prepare=break_row_one)
    # counted for the step; the step's metrics carry it once the trained batch is complete
    # (the dynamic-sampling hook: tests/test_nemo_plugin.py, test_grpo_train_cpu.py)
    assert state.step_data_errors == 1 and "data_errors" not in metrics
    assert batch["reward/correctness"][1].item() == 0.0  # the lowest value, not an error
