"""The environment actor on a real local Ray, created the way NeMo RL's create_env does.

NeMo RL (pinned commit) starts an environment with
``actor_class.options(runtime_env={"py_executable": ..., "env_vars": {...}}).remote(env_config)``
and calls ``step.remote(message_logs, metadata)``; the result is unpacked positionally as
(observations, metadata, next_stop_strings, rewards, terminateds, answers). Without NeMo RL
installed, the actor's base class and return type are the stand-ins of
gdpo_nemo.engines.nemo.environment, which keep the same methods and field order.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import ray
import torch

from gdpo_nemo import config as cc
from gdpo_nemo.engines.nemo.environment import ACTOR_FQN

REPO = Path(__file__).resolve().parents[1]
TOOL_GT = '<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>'
TOOL_RIGHT = '<think>w</think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n</tool_call>'


@pytest.fixture(scope="session")
def local_ray():
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    yield
    ray.shutdown()


def _create_env(env_config: dict):
    """What nemo_rl.environments.utils.create_env does for a PY_EXECUTABLES.SYSTEM actor."""
    module, name = ACTOR_FQN.rsplit(".", 1)
    actor_class = getattr(__import__(module, fromlist=[name]), name)
    env_vars = {**os.environ, "PYTHONPATH": str(REPO)}
    return actor_class.options(runtime_env={"py_executable": sys.executable, "env_vars": env_vars}).remote(env_config)


def _log(answer):
    return [{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}]


def test_toolcall_environment_actor_returns_named_reward_tensors(local_ray):
    env_config = cc.compose("toolcall", "qwen2.5-1.5b-instruct", "gdpo", overrides=["env.gdpo_toolcall.tokenizer=null"])["env"]["gdpo_toolcall"]
    actor = _create_env(env_config)
    result = ray.get(actor.step.remote([_log(TOOL_RIGHT), _log("plain text")], [{"ground_truth": TOOL_GT}] * 2), timeout=120)
    observations, metadata, next_stop_strings, rewards, terminateds, answers = result
    assert set(rewards) == {"reward/format", "reward/correctness"}
    assert torch.equal(rewards["reward/format"], torch.tensor([1.0, 0.0]))
    assert torch.equal(rewards["reward/correctness"], torch.tensor([3.0, -3.0]))
    assert rewards["reward/format"].dtype == torch.float32
    assert terminateds.tolist() == [True, True] and next_stop_strings == [None, None] and answers is None
    assert observations == [{"role": "environment", "content": ""}] * 2  # no tokens added to the sequence
    assert metadata == [{"ground_truth": TOOL_GT}] * 2
    batch = {"reward/format": rewards["reward/format"], "reward/correctness": rewards["reward/correctness"]}
    _, summary = ray.get(actor.global_post_process_and_metrics.remote(batch), timeout=60)
    assert summary == {"reward/format": 0.5, "reward/correctness": 0.0, "data_errors": 0}
    assert ray.get(actor.take_data_errors.remote(), timeout=60) == 0
    ray.kill(actor)


def test_code_environment_actor_runs_programs_in_parallel_workers(local_ray):
    env_config = cc.compose("code_3obj", "r1-distill-qwen-7b", "gdpo", overrides=["env.gdpo_code.tokenizer=null", "env.gdpo_code.num_workers=3"])["env"]["gdpo_code"]
    tests = {"inputs": ["2 3\n", "10 -4\n"], "outputs": ["5\n", "6\n"]}
    right = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    half = "```python\na, b = map(int, input().split())\nprint(5)\n```"
    crash = "```python\nraise SystemExit(1 / 0)\n```"
    actor = _create_env(env_config)
    _, _, _, rewards, _, _ = ray.get(
        actor.step.remote([_log(right), _log(half), _log(crash)], [{"ground_truth": tests, "tests": tests}] * 3), timeout=300
    )
    assert list(rewards) == ["reward/pass", "reward/length", "reward/bug"]
    assert rewards["reward/pass"].tolist() == [1.0, 0.5, 0.0]
    assert rewards["reward/length"].tolist() == [1.0, 0.0, 0.0]  # conditioned on passing every test
    assert rewards["reward/bug"].tolist() == [1.0, 1.0, 0.0]
    ray.kill(actor)
